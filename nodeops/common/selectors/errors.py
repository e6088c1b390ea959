"""The one error every selector parser raises, so callers catch a single type."""

from __future__ import annotations

__all__ = ["SelectorError"]


class SelectorError(ValueError):
    """A selector that apimachinery would refuse; the message is the one kube-apiserver returns."""
