"""Work queue throughput: add/get/done against a bare asyncio.Queue's put/get/task_done.

The bare queue is the floor any asyncio work queue pays for waking consumers; measuring both in
the same process and run makes the ratio meaningful across machines. The work queue does more
per item (dedup and processing sets, metrics), so the target is a ratio, not an absolute rate.

    python -m bench.workqueue --json [--items N] [--repeats R]

Prints one JSON document on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

from nodeops.kube.workqueue import ShutDown, WorkQueue

TARGET_RATIO = 0.5
WORKER_COUNTS = (1, 16)
CHUNK = 256  # items the producer adds before yielding, like an informer delivering a batch
TIME_BUDGET = 45.0  # seconds; later repeats are skipped past it so the run stays bounded

Runner = Callable[[int, int], Awaitable[float]]


async def run_asyncio_queue(items: int, workers: int) -> float:
    queue: asyncio.Queue[int] = asyncio.Queue()
    finished = asyncio.Event()
    processed = 0

    async def worker() -> None:
        nonlocal processed
        while True:
            await queue.get()
            queue.task_done()
            processed += 1
            if processed == items:
                finished.set()

    tasks = [asyncio.create_task(worker()) for _ in range(workers)]
    start = time.perf_counter()
    for i in range(items):
        await queue.put(i)
        if i % CHUNK == CHUNK - 1:
            await asyncio.sleep(0)
    await finished.wait()
    elapsed = time.perf_counter() - start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return items / elapsed


def workqueue_runner(name: str) -> Runner:
    async def run(items: int, workers: int) -> float:
        queue: WorkQueue[int] = WorkQueue(name)
        finished = asyncio.Event()
        processed = 0

        async def worker() -> None:
            nonlocal processed
            while True:
                try:
                    item = await queue.get()
                except ShutDown:
                    return
                queue.done(item)
                processed += 1
                if processed == items:
                    finished.set()

        tasks = [asyncio.create_task(worker()) for _ in range(workers)]
        start = time.perf_counter()
        for i in range(items):
            queue.add(i)
            if i % CHUNK == CHUNK - 1:
                await asyncio.sleep(0)
        await finished.wait()
        elapsed = time.perf_counter() - start
        queue.shutdown()
        await asyncio.gather(*tasks)
        return items / elapsed

    return run


RUNNERS: dict[str, Runner] = {
    "asyncio_queue": run_asyncio_queue,
    "workqueue": workqueue_runner("bench_workqueue"),
    "workqueue_unmetered": workqueue_runner(""),
}


async def measure(items: int, repeats: int) -> dict[str, object]:
    deadline = time.monotonic() + TIME_BUDGET
    results = []
    labels = list(RUNNERS)
    for workers in WORKER_COUNTS:
        rates: dict[str, list[float]] = {label: [] for label in labels}
        for repeat in range(repeats):
            if repeat and time.monotonic() > deadline:
                print(f"time budget spent, stopping after {repeat} repeats", file=sys.stderr)
                break
            # Back to back and in rotating order, so load drift on the machine hits every
            # variant alike and each repeat yields a fair pairwise ratio.
            shift = repeat % len(labels)
            for label in labels[shift:] + labels[:shift]:
                rate = await RUNNERS[label](items, workers)
                rates[label].append(rate)
                print(
                    f"workers={workers} repeat={repeat + 1}/{repeats} {label}: {rate:,.0f} items/s",
                    file=sys.stderr,
                )
        base = rates["asyncio_queue"]
        results.append(
            {
                "workers": workers,
                "asyncio_queue_items_per_s": round(max(base)),
                "workqueue_items_per_s": round(max(rates["workqueue"])),
                "workqueue_unmetered_items_per_s": round(max(rates["workqueue_unmetered"])),
                "ratio": paired_ratio(rates["workqueue"], base),
                "ratio_unmetered": paired_ratio(rates["workqueue_unmetered"], base),
            }
        )
    return {
        "benchmark": "workqueue",
        "python": platform.python_version(),
        "items": items,
        "repeats": repeats,
        "method": (
            f"items/s are the best of the repeats; ratios are the median of per-repeat ratios; "
            f"producer yields every {CHUNK} adds; items are distinct; the metered work queue is "
            f"named, so it keeps the workqueue_* metrics"
        ),
        "results": results,
        "target_ratio": TARGET_RATIO,
        "target_met": all(r["ratio"] >= TARGET_RATIO for r in results),
    }


def paired_ratio(rates: list[float], base: list[float]) -> float:
    return round(statistics.median(rate / ref for rate, ref in zip(rates, base, strict=True)), 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000, help="items per run")
    parser.add_argument("--repeats", type=int, default=5, help="runs per variant and worker count")
    parser.add_argument("--json", action="store_true", help="print the JSON document (default)")
    args = parser.parse_args(argv)
    if args.items < 1 or args.repeats < 1:
        parser.error("--items and --repeats must be positive")
    report = asyncio.run(measure(args.items, args.repeats))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
