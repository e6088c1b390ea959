"""The loop that skips idle waits: it jumps only when nothing but a timer is left, and
everything that waits on it sees one consistent time."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from nodeops.kube.ratelimit import TokenBucket
from nodeops.sim import warp
from nodeops.sim.clock import Clock
from nodeops.sim.warp import WarpLoop

HOUR = 3600.0


def loop() -> WarpLoop:
    running = asyncio.get_running_loop()
    assert isinstance(running, WarpLoop)
    return running


def test_an_idle_hour_is_skipped_not_slept() -> None:
    async def main() -> tuple[float, float]:
        start_loop, start_wall = loop().time(), time.monotonic()
        await asyncio.sleep(HOUR)
        return loop().time() - start_loop, time.monotonic() - start_wall

    passed, wall = warp.run(main())
    assert passed >= HOUR
    # Far less than the hour: the loop jumped instead of waiting (the margin is for a
    # machine under load, not a speed requirement).
    assert wall < 60


def test_timers_fire_in_order_each_at_its_own_time() -> None:
    delays = [50.0, 0.5, 900.0, 3.0, 3.0, 120.0, 0.0, 7200.0, 10.0]

    async def main() -> list[tuple[float, float]]:
        start = loop().time()
        fired: list[tuple[float, float]] = []
        done = asyncio.Event()

        def fire(delay: float) -> None:
            fired.append((delay, loop().time() - start))
            if len(fired) == len(delays):
                done.set()

        for d in delays:
            loop().call_later(d, fire, d)
        await done.wait()
        return fired

    fired = warp.run(main())
    assert [d for d, _ in fired] == sorted(delays)
    for delay, at in fired:
        assert at >= delay
        # Never late by a later timer's jump: each fires before the next one's time.
        later = [d for d in delays if d > delay]
        assert not later or at < min(later)


def test_without_work_taking_time_only_the_jumps_move_the_clock() -> None:
    async def main() -> tuple[float, list[float]]:
        start = loop().time()
        busy_until = time.monotonic() + 0.05
        while time.monotonic() < busy_until:  # work: wall time passes, loop time does not
            pass
        worked = loop().time() - start
        marks = []
        for delay in (1.0, 60.0, HOUR):
            await asyncio.sleep(delay)
            marks.append(loop().time() - start)
        return worked, marks

    worked, marks = warp.run(main(), work_takes_time=False)
    assert worked == 0.0
    # Each sleep ends exactly when its timer is due (give or take float rounding).
    assert marks == pytest.approx([1.0, 61.0, 61.0 + HOUR], abs=1e-6)


def test_time_stands_still_while_a_socket_has_data_to_read() -> None:
    chunks = 200

    async def main() -> tuple[list[float], float]:
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        start = loop().time()
        seen: list[float] = []
        drained = asyncio.Event()

        def on_readable() -> None:
            # One byte per call: the rest stays pending in the socket for the next turn.
            if reader.recv(1):
                seen.append(loop().time() - start)
            if len(seen) == chunks:
                loop().remove_reader(reader)
                drained.set()

        sleeper = asyncio.ensure_future(asyncio.sleep(HOUR))
        loop().add_reader(reader, on_readable)
        writer.sendall(b"x" * chunks)
        await drained.wait()
        await sleeper
        after = loop().time() - start
        reader.close()
        writer.close()
        return seen, after

    seen, after = warp.run(main())
    assert len(seen) == chunks
    assert max(seen) < 60  # read while the hour-long timer was pending: no jump
    assert after >= HOUR  # and once drained, the hour was skipped


def test_time_stands_still_while_an_executor_job_runs() -> None:
    async def main() -> tuple[str, float, float]:
        release = threading.Event()
        threading.Timer(0.2, release.set).start()

        def job() -> str:
            release.wait(30)
            return "done"

        start = loop().time()
        sleeper = asyncio.ensure_future(asyncio.sleep(HOUR))
        # A jump to the timeout would time the job out: its result must come first.
        result = await asyncio.wait_for(loop().run_in_executor(None, job), timeout=600)
        answered = loop().time() - start
        await sleeper
        return result, answered, loop().time() - start

    result, answered, after = warp.run(main())
    assert result == "done"
    assert answered < 60
    assert after >= HOUR


def test_a_cancelled_executor_job_holds_time_until_it_ends() -> None:
    async def main() -> tuple[float, float]:
        release, started, ended = threading.Event(), threading.Event(), threading.Event()
        threading.Timer(0.2, release.set).start()

        def job() -> None:
            started.set()
            release.wait(30)
            ended.set()

        start = loop().time()
        future = loop().run_in_executor(None, job)
        await asyncio.to_thread(started.wait, 30)
        future.cancel()
        await asyncio.sleep(HOUR)
        assert ended.is_set()
        ended_by = loop().time() - start
        await asyncio.sleep(HOUR)
        return ended_by, loop().time() - start

    ended_by, after = warp.run(main())
    assert ended_by >= HOUR
    assert after >= 2 * HOUR  # the count came back down: jumps resumed


def test_a_loopback_exchange_survives_the_jumps() -> None:
    async def main() -> tuple[list[bytes], float]:
        async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while line := await r.readline():
                await asyncio.sleep(600)  # the server takes ten (loop) minutes to answer
                w.write(b"re: " + line)
                await w.drain()
            w.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        start = loop().time()
        r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
        answers = []
        for i in range(5):
            w.write(f"ping {i}\n".encode())
            await w.drain()
            # Longer than the server's pause, so only a lost answer can time out.
            answers.append(await asyncio.wait_for(r.readline(), 900))
            await asyncio.sleep(HOUR)
        w.close()
        await w.wait_closed()
        server.close()
        await server.wait_closed()
        return answers, loop().time() - start

    answers, passed = warp.run(main())
    assert answers == [f"re: ping {i}\n".encode() for i in range(5)]
    assert passed >= 5 * (600 + HOUR)


def test_the_simulated_clock_follows_the_jumps() -> None:
    async def main() -> float:
        clock = Clock(time_scale=10.0)
        start = clock.now()
        await clock.sleep(HOUR)
        return (clock.now() - start).total_seconds()

    assert warp.run(main()) >= HOUR


def test_a_token_bucket_refills_on_the_loop_s_time() -> None:
    async def main() -> tuple[float, int]:
        bucket = TokenBucket(10.0, 10)
        start = loop().time()
        jumps = loop().jumps
        for _ in range(110):
            await bucket.acquire()
        return loop().time() - start, loop().jumps - jumps

    passed, jumps = warp.run(main())
    assert passed >= 10  # 100 tokens beyond the burst at 10 per second
    assert jumps <= 110  # one wait per token at most: no spinning on a bucket refilling late


async def test_run_apart_warps_its_own_loop_only() -> None:
    outer = asyncio.get_running_loop()
    assert not isinstance(outer, WarpLoop)
    outer_start = outer.time()

    async def inner() -> float:
        start = loop().time()
        await asyncio.sleep(HOUR)
        return loop().time() - start

    assert await warp.run_apart(inner) >= HOUR
    assert outer.time() - outer_start < 60


async def test_cancelling_run_apart_cancels_the_warped_work() -> None:
    started, cancelled = threading.Event(), threading.Event()

    async def inner() -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # never set: only the cancellation ends it
        except asyncio.CancelledError:
            cancelled.set()
            raise

    task = asyncio.ensure_future(warp.run_apart(inner))
    await asyncio.to_thread(started.wait, 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.is_set()


async def test_run_apart_raises_what_the_warped_work_raised() -> None:
    async def inner() -> None:
        await asyncio.sleep(HOUR)
        raise LookupError("from the warped loop")

    with pytest.raises(LookupError, match="from the warped loop"):
        await warp.run_apart(inner)


@pytest.mark.parametrize("work_takes_time", [False, True])
def test_a_wait_for_the_last_nanosecond_reaches_its_deadline(work_takes_time: bool) -> None:
    """asyncio runs a timer due within its clock's resolution as due now. Code that waits
    until a deadline and then reads the clock must find the deadline reached, or it waits for
    the sliver left, and again, while a clock that only jumps never gets there (a simulated
    watch waiting for its bookmark spun like this for minutes)."""

    async def main() -> int:
        running = loop()
        wake = asyncio.Event()
        await asyncio.sleep(1234.5678)  # some jumps first, so the clock is not a round number
        deadline = running.time() + running._clock_resolution / 10  # type: ignore[attr-defined]
        waits = 0
        while running.time() < deadline:
            waits += 1
            assert waits < 100, "waiting for a deadline the clock never reaches"
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(wake.wait(), deadline - running.time())
        return waits

    assert warp.run(main(), work_takes_time=work_takes_time) < 100


def test_once_it_keeps_real_time_the_clock_runs_on_and_waits_are_slept() -> None:
    async def main() -> tuple[float, float, float, float]:
        await asyncio.sleep(HOUR)
        skipped = loop().time()
        loop().keep_real_time()
        switched = loop().time()
        wall = time.monotonic()
        await asyncio.sleep(0.2)
        return skipped, switched, loop().time() - switched, time.monotonic() - wall

    skipped, switched, passed, wall = warp.run(main(), work_takes_time=False)
    assert switched == pytest.approx(skipped, abs=1e-3)  # no step back, no step forward
    assert wall >= 0.2  # slept, not jumped
    assert passed == pytest.approx(wall, abs=0.05)  # the loop's clock runs with the wall's
