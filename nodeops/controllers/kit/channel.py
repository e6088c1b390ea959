"""Events that do not come from the cluster, as requests: controller-runtime's channel source.

A cloud poller seeing a node group change, a new API server version, a reloaded configuration:
each must make the controller look at some objects again. They send what happened to a
`Channel`, which maps it to requests and enqueues them, so nothing outside the controller reaches
into its work queue, and a mapping that reads a cache not yet synced drops the event instead of
failing (the first sync enqueues every object anyway).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from nodeops.kube.controller import Controller, Request
from nodeops.kube.errors import NotSynced
from nodeops.kube.informer import Informer

__all__ = ["Channel", "every_object", "to_request"]

T = TypeVar("T")


class Channel(Generic[T]):
    """A source of `controller`: `send(item)` enqueues the requests `to_requests(item)` gives."""

    def __init__(
        self, controller: Controller, to_requests: Callable[[T], Iterable[Request]]
    ) -> None:
        self.controller = controller
        self.to_requests = to_requests

    def send(self, item: T) -> None:
        try:
            requests = list(self.to_requests(item))
        except NotSynced:
            return
        for request in requests:
            self.controller.queue.add(request)


def to_request(request: Request) -> list[Request]:
    """For a channel whose items are requests already."""
    return [request]


def every_object(informer: Informer) -> Callable[[object], list[Request]]:
    """A mapping to every object of `informer`: "look at everything again". Before the
    informer's first sync it maps to nothing (that sync enqueues every object itself)."""

    def mapped(_: object) -> list[Request]:
        if not informer.has_synced:
            return []
        return [_request(key) for key in informer.keys()]

    return mapped


def _request(key: str) -> Request:
    """The request for a cache key (`name`, or `namespace/name`): no object is decoded."""
    namespace, _, name = key.rpartition("/")
    return Request(name, namespace or None)
