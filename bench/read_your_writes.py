"""What read-your-writes costs a write, and what it saves a reconcile.

    python -m bench.read_your_writes --json [--writes 1000]

One informer caches configmaps from a simulated API server in its own process. The same
sequence of patches is sent twice in the same run: through a plain client (the baseline), and
through a manager's client, whose writes return only once the informer shows them. For each
write the benchmark reads the informer right after the write returns and counts the reads that
still saw the older version: the hazard the wait removes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from typing import Any

from bench.simproc import ClusterShape, ServerProcess

NS = "default"


def _summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p95_ms": round(ordered[int(len(ordered) * 0.95) - 1] * 1000, 3),
        "writes_per_second": round(len(ordered) / sum(ordered), 1),
    }


async def _run(url: str, writes: int, names: int) -> dict[str, Any]:
    from nodeops.kube import Client, Manager
    from nodeops.kube.resources import CONFIGMAPS

    async with Client(url, qps=0) as setup:
        for i in range(names):
            await setup.create_or_patch(CONFIGMAPS, {"metadata": {"name": f"cm-{i}"}}, NS)

    async def series(client: Client, cache: Any) -> tuple[list[float], int]:
        latencies: list[float] = []
        stale = 0
        for i in range(writes):
            name = f"cm-{i % names}"
            started = time.perf_counter()
            written = await client.patch(CONFIGMAPS, name, {"data": {"i": str(i)}}, NS)
            latencies.append(time.perf_counter() - started)
            cached = cache.get(name, NS) or {}
            if (cached.get("metadata") or {}).get("resourceVersion") != (
                written["metadata"]["resourceVersion"]
            ):
                stale += 1
        return latencies, stale

    async with Client(url, qps=0) as managed, Client(url, qps=0) as plain:
        manager = Manager(managed, metrics_addr="0", health_addr="0")
        cache = manager.informers.informer(CONFIGMAPS)
        manager.informers.start()
        await manager.informers.wait_synced(60)
        try:
            base, base_stale = await series(plain, cache)
            ryw, ryw_stale = await series(managed, cache)
        finally:
            await manager.informers.stop()
    return {
        "baseline_plain_client": {**_summary(base), "stale_reads_after_write": base_stale},
        "read_your_writes": {**_summary(ryw), "stale_reads_after_write": ryw_stale},
        "median_latency_ratio": round(statistics.median(ryw) / statistics.median(base), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--writes", type=int, default=1000)
    parser.add_argument("--names", type=int, default=50, help="distinct configmaps written")
    parser.add_argument("--json", action="store_true", help="print JSON (the only output form)")
    args = parser.parse_args()
    from nodeops.kube.logging import configure

    configure("warning", "json")  # logs to stderr: stdout is the JSON document
    with ServerProcess(ClusterShape(nodes=10, pods=0)) as info:
        result = asyncio.run(_run(info["url"], args.writes, args.names))
    out = {
        "benchmark": "read_your_writes",
        "machine": {"cpus": _cpus(), "python": platform.python_version()},
        "writes": args.writes,
        **result,
    }
    json.dump(out, sys.stdout, indent=2)
    print()


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    main()
