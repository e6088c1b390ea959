"""The optional parts of nodeops and the extras that install what they import.

`pip install nodeops` installs the operator's core: the runtime, drain, the controllers and the
`sim` provider (plain HTTP). The clouds' SDKs and the simulator's own dependencies come with
extras (`nodeops[aws]`, `nodeops[openstack]`, `nodeops[sim]`), so a program using `nodeops.kube`
as a library, or an image that never serves a simulated cluster, does not carry them.

Code that needs an extra imports its packages inside `optional_dependencies(extra)`, or checks
with `require(extra)` before it starts. A missing package then stops the command with one line
naming the extra to install, where a bare `ModuleNotFoundError` would print a traceback that
names a module the user never asked for.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["EXTRAS", "Extra", "MissingExtra", "optional_dependencies", "require"]


@dataclass(frozen=True)
class Extra:
    """An extra of the `nodeops` distribution, as its users meet it."""

    #: What needs the extra, as the error message names it.
    purpose: str
    #: The modules the extra's own requirements provide (one per requirement): all of them
    #: importable means the extra is installed.
    modules: tuple[str, ...]


EXTRAS: Final[Mapping[str, Extra]] = {
    "aws": Extra("the aws provider", ("aioboto3",)),
    "openstack": Extra("the openstack provider", ("openstack",)),
    "sim": Extra("the simulator", ("cryptography", "jwt", "google.protobuf", "celpy")),
    "vsphere": Extra("the vsphere provider", ("pyVmomi",)),
}


class MissingExtra(ModuleNotFoundError):
    """A package of an extra that is not installed; the message says what to install."""

    def __init__(self, extra: str, module: str | None) -> None:
        self.extra = extra
        purpose = EXTRAS[extra].purpose if extra in EXTRAS else f"nodeops[{extra}]"
        missing = f" (no module named {module!r})" if module else ""
        super().__init__(
            f"{purpose} needs the {extra!r} extra{missing}: pip install 'nodeops[{extra}]'",
            name=module,
        )

    def __reduce__(self) -> tuple[type[MissingExtra], tuple[str, str | None]]:
        return (MissingExtra, (self.extra, self.name))


@contextlib.contextmanager
def optional_dependencies(extra: str) -> Iterator[None]:
    """Imports in this block come with `extra`: a missing one raises `MissingExtra`."""
    try:
        yield
    except MissingExtra:
        raise
    except ModuleNotFoundError as exc:
        raise MissingExtra(extra, exc.name) from exc


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def require(extra: str) -> None:
    """Raise `MissingExtra` unless every package of `extra` can be imported (none is imported)."""
    for module in EXTRAS[extra].modules:
        if not _importable(module):
            raise MissingExtra(extra, module)
