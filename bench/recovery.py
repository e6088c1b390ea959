"""Stale time of an informer under API faults: after a failure, how soon is its cache current?

    python -m bench.recovery --json [--seconds 60] [--rate 20] [--faults SPEC]

A simulated API server runs in its own process and injects the faults (by default the API part
of the mix a roll must survive: 500s, 429s with `Retry-After: 1`, watches cut every 5 s and
resumes answered 410 Expired 30% of the time, 100 ms of latency on a fifth of the requests).
One informer with the default backoff caches configmaps; a second client patches them at a
steady rate (its failed writes retried by the client, as any write is). For every write that
succeeded, the time from its answer to the informer showing its resourceVersion is how long the
cache lagged behind it.

Figures:

- `write_lag_ms`: median, p99 and max of those lags; the max is the longest the cache was
  stale for any write;
- `stale_episodes`: the informer's own `nodeops_informer_stale_seconds`: how many failures and
  expired watches left the synced cache behind, how many it took more than 2 s to recover from
  (target: none but failure streaks, where the attempt after a failure failed too), and
  `within_2s_ratio`;
- `failures_by_error`: the failed list/watch attempts, by HTTP code or error type.
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
API_FAULTS = (
    "error=500:0.08@*/*; error=429:0.05@*/*; watch-cut=seconds:5@*; watch-expire=0.3@*; "
    "latency=100ms:0.2"
)
TARGET_RECOVERY_SECONDS = 2.0


def _histogram(name: str, resource: str) -> dict[str, float]:
    from nodeops.kube.metrics import REGISTRY

    out: dict[str, float] = {}
    for metric in REGISTRY.collect():
        if metric.name != name:
            continue
        for sample in metric.samples:
            if sample.labels.get("resource") != resource:
                continue
            if sample.name.endswith("_bucket"):
                out[sample.labels["le"]] = sample.value
            elif sample.name.endswith("_count"):
                out["count"] = sample.value
    return out


def _failures(resource: str) -> dict[str, int]:
    from nodeops.kube.metrics import REGISTRY

    out: dict[str, int] = {}
    for metric in REGISTRY.collect():
        if metric.name != "nodeops_informer_list_watch_failures":
            continue
        for sample in metric.samples:
            if sample.name.endswith("_total") and sample.labels.get("resource") == resource:
                out[sample.labels["error"]] = int(sample.value)
    return out


async def _set_faults(url: str, spec: str, seed: int) -> None:
    import aiohttp

    async with (
        aiohttp.ClientSession() as session,
        session.put(f"{url}/sim/faults", json={"spec": spec, "seed": seed}) as resp,
    ):
        if resp.status != 200:
            raise RuntimeError(f"the simulator refused the faults: {await resp.text()}")


async def _run(url: str, seconds: float, rate: float, names: int, faults: str) -> dict[str, Any]:
    from nodeops.kube import Client, errors
    from nodeops.kube.informer import Informer
    from nodeops.kube.resources import CONFIGMAPS

    async with Client(url, qps=0) as setup:
        for i in range(names):
            await setup.create_or_patch(CONFIGMAPS, {"metadata": {"name": f"cm-{i}"}}, NS)

    lags: list[float] = []
    unwritten = 0
    async with Client(url, qps=0) as watching, Client(url, qps=0) as writer:
        # Faults first: a watch is armed with its cut when it opens.
        await _set_faults(url, faults, seed=1)
        inf = Informer(watching, CONFIGMAPS)
        inf.start()
        await asyncio.wait_for(inf.wait_synced(), 60)
        loop = asyncio.get_running_loop()
        waits: set[asyncio.Task[None]] = set()

        async def seen(wanted: int, answered: float) -> None:
            def reached() -> bool:
                return int(inf.resource_version or 0) >= wanted

            await inf.wait_until(reached, None)
            lags.append(loop.time() - answered)

        end = loop.time() + seconds
        i = 0
        while loop.time() < end:
            i += 1
            try:
                written = await writer.patch(
                    CONFIGMAPS, f"cm-{i % names}", {"data": {"i": str(i)}}, NS
                )
            except errors.KubeError:
                unwritten += 1  # retries exhausted: no version to wait for
            else:
                rv = int(written["metadata"]["resourceVersion"])
                task = asyncio.create_task(seen(rv, loop.time()))
                waits.add(task)
                task.add_done_callback(waits.discard)
            await asyncio.sleep(1 / rate)
        await _set_faults(url, "", seed=1)
        await asyncio.wait_for(asyncio.gather(*waits), 120)
        await inf.stop()

    stale = _histogram("nodeops_informer_stale_seconds", CONFIGMAPS.key)
    episodes = int(stale.get("count", 0))
    within = int(stale.get(str(TARGET_RECOVERY_SECONDS), 0))
    ordered = sorted(lags)
    return {
        "writes": len(lags),
        "writes_failed": unwritten,
        "write_lag_ms": {
            "median": round(statistics.median(ordered) * 1000, 1),
            "p99": round(ordered[max(0, int(len(ordered) * 0.99) - 1)] * 1000, 1),
            "max": round(ordered[-1] * 1000, 1),
        },
        "stale_episodes": {
            "count": episodes,
            "over_2s": episodes - within,
            "within_2s_ratio": round(within / episodes, 4) if episodes else 1.0,
            "buckets": {k: int(v) for k, v in stale.items() if k != "count"},
        },
        "failures_by_error": _failures(CONFIGMAPS.key),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.recovery", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to write")
    parser.add_argument("--rate", type=float, default=20.0, help="writes per second")
    parser.add_argument("--names", type=int, default=50, help="configmaps written in turn")
    parser.add_argument("--faults", default=API_FAULTS, help="the simulator's fault spec")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    from nodeops.kube.logging import configure

    configure("error", "console")
    started = time.perf_counter()
    with ServerProcess(ClusterShape(nodes=1, pods=0)) as info:
        figures = asyncio.run(_run(info["url"], args.seconds, args.rate, args.names, args.faults))
    result = {
        "benchmark": "recovery",
        "python": platform.python_version(),
        "seconds": args.seconds,
        "rate": args.rate,
        "faults": args.faults,
        "target_recovery_seconds": TARGET_RECOVERY_SECONDS,
        "wall_seconds": round(time.perf_counter() - started, 1),
        **figures,
    }
    print(json.dumps(result, sort_keys=True, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
