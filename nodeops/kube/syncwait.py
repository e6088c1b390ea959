"""Waiting for informers to sync, and the conditions read-your-writes waits on.

Kept apart from the factory so that the controller and the manager, which wait for their
informers' first sync, do not need the factory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    from nodeops.kube.listwatch import Informer


async def wait_all_synced(informers: Iterable[Informer], timeout: float | None) -> bool:
    """Whether every informer synced within `timeout`.

    Not `wait_for(gather(...))`: cancelled from outside (a SIGTERM before the caches synced),
    gather leaves a CancelledError set on its own future that wait_for never retrieves, and
    asyncio prints it as "exception was never retrieved" on the way out. Tasks cancelled here
    end as cancelled, which asks nothing of anyone.
    """
    tasks = [asyncio.ensure_future(inf.wait_synced()) for inf in informers if not inf.has_synced]
    if not tasks:
        return True
    try:
        _, pending = await asyncio.wait(tasks, timeout=timeout)
    finally:
        for task in tasks:
            task.cancel()
    return not pending


def _reached(inf: Informer, wanted: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return int(inf.resource_version or 0) >= wanted
        except ValueError:
            return True

    return check


def _gone(inf: Informer, key: str, uid: str | None) -> Callable[[], bool]:
    def check() -> bool:
        raw = inf._items.get(key)
        if raw is None:
            return True
        return bool(uid) and (orjson.loads(raw).get("metadata") or {}).get("uid") != uid

    return check
