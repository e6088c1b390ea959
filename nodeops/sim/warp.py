"""An event loop whose clock skips the time it would only spend waiting.

A rehearsal runs a simulated cluster and the manager that rolls it in one event loop: every
wait in it is a timer of that loop (a boot delay, a pod's start, a check interval, a requeue)
and every byte its parts exchange goes over loopback sockets of that same loop. When no
callback is ready, no socket has data and no executor job is out, nothing can happen before
the next timer, so sleeping until then spends wall time and changes nothing. `WarpLoop`
moves its clock forward to that timer instead: an hour of waits passes in the time the work
between them takes, and every timer still fires in order, at its own (loop) time.

The jump is sound only for a closed system. A loop that waits on a remote server, a
subprocess, or a thread that is not one of its executor jobs would see that wait time out
at once; such work belongs on an ordinary loop. Whatever must follow the jumps reads the
running loop's `time()` (for an ordinary loop that is `time.monotonic()`), never the
monotonic clock itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import selectors
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

__all__ = ["WarpLoop", "run", "run_apart"]

T = TypeVar("T")


class _Warp:
    """The loop's lead over the monotonic clock, and the executor jobs that forbid a jump."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.jumps = 0
        self.skipping = True
        """False once the loop keeps real time (`WarpLoop.keep_real_time`)."""
        self.busy = 0
        """Executor jobs submitted whose result the loop has not taken yet."""

    def release(self) -> None:
        self.busy -= 1


class _WarpSelector(selectors.BaseSelector):
    """The platform's selector, except that an idle wait for a timer becomes a jump."""

    def __init__(self, warp: _Warp) -> None:
        self._inner = selectors.DefaultSelector()
        self._warp = warp
        self.loop: WarpLoop | None = None

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.get_key(fileobj)

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._inner.get_map()

    def close(self) -> None:
        self._inner.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        # None: no timer at all, so nothing to jump to; <= 0: callbacks are ready. A thread at
        # work for the loop wakes it through the loop's self-pipe when done: wait for it.
        if timeout is None or timeout <= 0 or self._warp.busy or not self._warp.skipping:
            ready = self._inner.select(timeout)
        else:
            ready = self._inner.select(0)
            if not ready:
                # Loopback delivers a write to its reader's socket before the write returns,
                # so a socket with nothing to read now has nothing on its way from this loop.
                self._warp.offset += timeout
                self._warp.jumps += 1
        self._reach_due_timers()
        return ready

    def _reach_due_timers(self) -> None:
        """Move the clock over the sliver left to the timers the loop is about to run.

        Right after this select the loop runs every timer due within its clock's resolution
        (`_clock_resolution`, a nanosecond) as due now. A monotonic clock is past them a moment
        later anyway; a clock that only jumps is not, and a callback that reads `time()` finds
        its deadline not reached, waits for the sliver, and finds it again, for as long as a
        callback is ready and no jump can come (a simulated watch waiting for its bookmark spun
        so for minutes). A clock that moves a nanosecond further than asked changes nothing
        else.
        """
        loop = self.loop
        if loop is None or not loop._scheduled:  # type: ignore[attr-defined]
            return
        resolution: float = loop._clock_resolution  # type: ignore[attr-defined]
        now = loop.time()
        if now < loop._scheduled[0].when() < now + resolution:  # type: ignore[attr-defined]
            self._warp.offset += 2 * resolution


class _Job:
    """One executor job: the loop may not jump until the job's caller has its result (or, if
    the caller gave up on a job that had already started, until the job ends)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, warp: _Warp) -> None:
        self._loop = loop
        self._warp = warp
        self._lock = threading.Lock()
        self._state = "queued"  # -> running -> ended
        self._abandoned = False
        self._released = False

    def call(self, func: Callable[..., T], *args: Any) -> T:
        with self._lock:
            self._state = "running"
        try:
            return func(*args)
        finally:
            with self._lock:
                self._state = "ended"
                orphan = self._abandoned and not self._released
                self._released = self._released or orphan
            if orphan:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    self._loop.call_soon_threadsafe(self._warp.release)

    def on_done(self, future: asyncio.Future[Any]) -> None:
        with self._lock:
            if future.cancelled() and self._state == "running":
                self._abandoned = True  # the job releases when it ends
                return
            if self._released:
                return
            self._released = True
        # Not cancelled: the result was handed over in this loop. Cancelled while queued:
        # the executor drops it. Cancelled after it ended: nothing is left to wait for.
        self._warp.release()


class WarpLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose `time()` jumps over idle waits for its next timer.

    With `work_takes_time` (the default) its time is the monotonic clock plus the jumps, so
    the work between waits takes the time it takes. Without, only the jumps move it: work
    takes no time at all, as in a discrete-event simulation, and a run's timeline no longer
    depends on how fast or how busy the machine is; but anything that waits for time to pass
    without a timer of this loop (a busy loop on `time()`) then waits forever.
    """

    def __init__(self, *, work_takes_time: bool = True) -> None:
        self._warp = _Warp()
        self._work_takes_time = work_takes_time
        self._origin = time.monotonic()
        selector = _WarpSelector(self._warp)
        super().__init__(selector)
        selector.loop = self

    def time(self) -> float:
        if self._work_takes_time:
            return time.monotonic() + self._warp.offset
        return self._origin + self._warp.offset

    @property
    def work_takes_time(self) -> bool:
        return self._work_takes_time

    def keep_real_time(self) -> None:
        """From now on wait as an ordinary loop does, the clock running on with the monotonic
        clock from where the jumps left it: for a closed system that, once built, is opened to
        the world outside (a simulated cluster built in skipped time, then read by another
        process, whose requests the loop cannot foresee and a jump would time out)."""
        now = self.time()
        self._warp.skipping = False
        self._work_takes_time = True
        self._warp.offset = now - time.monotonic()

    @property
    def skipped_seconds(self) -> float:
        """Loop seconds passed by jumping rather than waiting."""
        return self._warp.offset

    @property
    def jumps(self) -> int:
        return self._warp.jumps

    def run_in_executor(  # type: ignore[override]
        self, executor: concurrent.futures.Executor | None, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        job = _Job(self, self._warp)
        self._warp.busy += 1
        try:
            future = super().run_in_executor(executor, job.call, func, *args)
        except BaseException:
            self._warp.release()
            raise
        future.add_done_callback(job.on_done)
        return future


def run(main: Awaitable[T], *, work_takes_time: bool = True) -> T:
    """`asyncio.run`, on a `WarpLoop`."""

    async def wrapped() -> T:
        return await main

    with asyncio.Runner(loop_factory=lambda: WarpLoop(work_takes_time=work_takes_time)) as r:
        return r.run(wrapped())


async def run_apart(start: Callable[[], Awaitable[T]], *, work_takes_time: bool = True) -> T:
    """Await `start()` run on a `WarpLoop` in a thread of its own.

    For a closed system (a simulated cluster and what talks only to it) started from a loop
    that must keep real time, because it also talks to the world outside. Cancelling the
    caller cancels the warped work and waits for it to unwind.
    """
    outer = asyncio.get_running_loop()
    done: asyncio.Future[T] = outer.create_future()
    handle: dict[str, Any] = {}
    ready = threading.Event()

    def deliver(result: T | None, error: BaseException | None) -> None:
        if done.done():
            return
        if isinstance(error, asyncio.CancelledError):
            done.cancel()
        elif error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    async def inner() -> T:
        handle["loop"] = asyncio.get_running_loop()
        handle["task"] = asyncio.current_task()
        ready.set()
        return await start()

    def thread() -> None:
        try:
            result = run(inner(), work_takes_time=work_takes_time)
        except BaseException as e:  # handed to the caller's loop, raised there
            ready.set()
            outer.call_soon_threadsafe(deliver, None, e)
        else:
            outer.call_soon_threadsafe(deliver, result, None)

    worker = threading.Thread(target=thread, name="warp-loop", daemon=True)
    worker.start()
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        await asyncio.to_thread(ready.wait)
        loop, task = handle.get("loop"), handle.get("task")
        if loop is not None and task is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile: it ended on its own
                loop.call_soon_threadsafe(task.cancel)
        await asyncio.to_thread(worker.join)
        await asyncio.sleep(0)  # what the thread handed over, taken so nothing is left unread
        if done.done() and not done.cancelled():
            done.exception()
        raise
