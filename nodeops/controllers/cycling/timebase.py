"""The clock the cycling controllers measure their timeouts and wait periods with: the kit's
`Clock` (the manager's one clock), under the name cycling's modules know it by."""

from __future__ import annotations

from nodeops.controllers.kit.clock import Clock as TimeBase

__all__ = ["TimeBase"]
