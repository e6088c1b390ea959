"""The controllers nodeops can run, by name, for `nodeops run --controllers`.

Each entry builds a controller from the manager (its client and shared informers). Controllers
never import each other; shared logic lives in `nodeops.kube`, `nodeops.drain` and
`nodeops.providers`.
"""

from __future__ import annotations

from collections.abc import Callable

from nodeops.kube.controller import Controller
from nodeops.kube.manager import Manager

ControllerFactory = Callable[[Manager], Controller]

REGISTRY: dict[str, ControllerFactory] = {}


def available() -> list[str]:
    return sorted(REGISTRY)
