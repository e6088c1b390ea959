"""Informer sync time and cache memory against a bare paginated list + JSON decode.

    python -m bench.informer --json [--nodes 5000 --pods 150000]

Each client runs in a fresh process so its resident memory is its own. The baseline lists the
same pages and decodes them, keeping nothing; the informer lists, transforms, indexes and keeps
every object. Targets: sync <= 1.3x the baseline; cache RSS <= 1.5x the JSON of what it holds.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing as mp
import os
import platform
import sys
import time
from typing import Any

from bench.simproc import ClusterShape, ServerProcess


def _rss() -> int:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


async def _baseline(url: str) -> dict[str, Any]:
    import orjson

    from nodeops.kube.client import Client
    from nodeops.kube.resources import NODES, PODS

    async with Client(url, qps=0, timeout=120) as client:
        started = time.perf_counter()
        count = 0
        for res in (NODES, PODS):
            token = None
            while True:
                page = orjson.loads(await client.list_page(res, limit=500, continue_token=token))
                count += len(page["items"])
                token = page["metadata"].get("continue")
                del page
                if not token:
                    break
        return {"seconds": time.perf_counter() - started, "objects": count}


async def _informer(url: str) -> dict[str, Any]:
    from nodeops.kube.client import Client
    from nodeops.kube.informer import InformerFactory, index_pods_by_node
    from nodeops.kube.resources import NODES, PODS

    gc.collect()
    rss_before = _rss()
    async with Client(url, qps=0, timeout=120) as client:
        factory = InformerFactory(client)
        nodes = factory.informer(NODES)
        pods = factory.informer(PODS, indexers={"node": index_pods_by_node})
        started = time.perf_counter()
        factory.start()
        await factory.wait_synced()
        seconds = time.perf_counter() - started
        await factory.stop()
        gc.collect()
        rss_after = _rss()
        cached_json = nodes.cache_bytes() + pods.cache_bytes()
        return {
            "seconds": seconds,
            "objects": len(nodes) + len(pods),
            "cache_rss_bytes": rss_after - rss_before,
            "cached_json_bytes": cached_json,
            "probe_node_pods": len(pods.by_index("node", "node-00000")),
        }


def _child(kind: str, url: str, conn: Any) -> None:
    fn = _baseline if kind == "baseline" else _informer
    conn.send(asyncio.run(fn(url)))


def _in_process(kind: str, url: str) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(kind, url, child))
    proc.start()
    result: dict[str, Any] = parent.recv()
    proc.join()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="print JSON (the only output form)")
    args = parser.parse_args(argv)
    shape = ClusterShape(nodes=args.nodes, pods=args.pods)
    with ServerProcess(shape) as info:
        # Interleaved so both see the same machine load.
        baseline, informer = [], []
        for _ in range(args.repeats):
            baseline.append(_in_process("baseline", info["url"]))
            informer.append(_in_process("informer", info["url"]))
    base_s = min(r["seconds"] for r in baseline)
    inf = min(informer, key=lambda r: r["seconds"])
    ratio = inf["seconds"] / base_s
    mem_ratio = inf["cache_rss_bytes"] / inf["cached_json_bytes"]
    out = {
        "benchmark": "informer",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "cluster": {"nodes": args.nodes, "pods": args.pods, "json_bytes": info["json_bytes"]},
        "baseline_list_decode": {
            "seconds": round(base_s, 3),
            "objects_per_second": round(baseline[0]["objects"] / base_s),
        },
        "informer_sync": {
            "seconds": round(inf["seconds"], 3),
            "objects": inf["objects"],
            "cache_rss_bytes": inf["cache_rss_bytes"],
            "cached_json_bytes": inf["cached_json_bytes"],
        },
        "sync_ratio_to_baseline": round(ratio, 3),
        "cache_rss_to_json_ratio": round(mem_ratio, 3),
        "targets": {
            "sync_ratio_max": 1.3,
            "sync_ratio_met": ratio <= 1.3,
            "rss_ratio_max": 1.5,
            "rss_ratio_met": mem_ratio <= 1.5,
        },
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
