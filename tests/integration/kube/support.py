"""Helpers shared by the manager tests: metric samples and a manager running in a task."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from nodeops.kube import Manager
from nodeops.kube.metrics import REGISTRY


def sample(metric: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(metric, labels) or 0.0


@contextlib.asynccontextmanager
async def running(manager: Manager) -> AsyncIterator[asyncio.Task[int]]:
    """`manager.run()` in a task; stopped (and awaited, bounded) when the block ends."""
    task = asyncio.create_task(manager.run())
    try:
        yield task
    finally:
        if not task.done():
            manager.stop()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, 30)
