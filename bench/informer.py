"""Informer sync time, CPU and memory per object, beside the floors of reading the same objects.

    python -m bench.informer --json [--nodes 5000 --pods 150000] [--repeats 3]
    python -m bench.informer --json --kubeconfig ~/.kube/config [--context C] [--repeats 3]

Without `--kubeconfig` a simulated API server with the given cluster preloaded runs in its own
process; with it, the benchmark reads whatever nodes and pods that cluster has (a real
kube-apiserver, say) and starts nothing. Every client runs in a fresh process, so its CPU time and
resident memory are its own, and the clients take turns, so all see the same machine load.
Per repeat, over nodes and then pods:

- `watch_list_read`, a floor: one streaming watch-list per resource (`sendInitialEvents=true`,
  `resourceVersionMatch=NotOlderThan`, bookmarks on), read as bytes until the bookmark that ends
  the initial events; nothing is decoded.
- `paged_list_read`, a floor: the paginated list (500 per page) read as bytes; only each page's
  head is decoded, for its continue token.
- `watch_list_decode`: the same watch-list with every event decoded into a dict (orjson, the
  collector paused per group of events, as the informer does) and dropped: the least CPU any
  informer that hands dicts to handlers spends, and so the floor for it in pure Python.
- `informer_watch_list`: `InformerFactory` informers for nodes and pods (default transform, pods
  indexed by node) from start until synced, syncing by watch-list (the default), with the CPU
  seconds the process spent and the resident memory the cache holds, per object. If the server
  refuses watch-list the informer falls back to paged lists, and `watch_list_refused` says so.
- `informer_paged`: the same informers made to sync by paginated lists (`watch_list=False`).
- `list_decode` (only with `--list-decode`): the paginated list, every page decoded whole and
  dropped, an older baseline.
- `baseline_informer` (only with `--baseline DIR`): the informers of the nodeops tree in DIR (a
  checkout of an older commit, say) with that tree's defaults, in the same run: the figure to
  compare CPU and memory per object with.

Figures are medians over the repeats. Targets (the watch-list informer against the streaming
floor): sync <= 1.3x; and the cache's resident memory <= 1.5x the JSON it holds; against a
baseline, CPU per object <= 2/3 of the baseline's and resident memory per object no more.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
from typing import Any

from bench.simproc import ClusterShape, ServerProcess

KINDS = (
    "watch_list_read",
    "paged_list_read",
    "watch_list_decode",
    "informer_watch_list",
    "informer_paged",
)
INFORMERS = {"informer_watch_list": True, "informer_paged": False}
END_MARKER = b"k8s.io/initial-events-end"
ADDED = b'{"type":"ADDED"'
ERROR = b'{"type":"ERROR"'
TARGET_SYNC_RATIO = 1.3
TARGET_RSS_RATIO = 1.5
# Against `--baseline`: CPU per object down by a third.
TARGET_CPU_TO_BASELINE = 2 / 3

Target = dict[str, Any]


def _rss() -> int:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


async def _client(target: Target) -> Any:
    from nodeops.kube.client import Client

    if "kubeconfig" in target:
        return await Client.from_kubeconfig(
            target["kubeconfig"], target.get("context"), qps=0, timeout=300
        )
    return Client(target["url"], qps=0, timeout=300)


def _resources() -> tuple[Any, ...]:
    from nodeops.kube.resources import NODES, PODS

    return (NODES, PODS)


async def _watch_list_read(target: Target) -> dict[str, Any]:
    """Bytes of one watch-list per resource, up to the end-of-initial-events bookmark."""
    import aiohttp

    client = await _client(target)
    try:
        session = client._get_session()  # the client's own connection pool, TLS and auth
        started = time.perf_counter()
        cpu = time.process_time()
        total = objects = 0
        for res in _resources():
            params = {
                "watch": "true",
                "sendInitialEvents": "true",
                "resourceVersionMatch": "NotOlderThan",
                "allowWatchBookmarks": "true",
                "timeoutSeconds": "3600",
            }
            async with session.get(
                client.base_url + res.path(),
                params=params,
                headers=await client._headers(),
                timeout=aiohttp.ClientTimeout(total=None, sock_read=300),
            ) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"watch-list refused: {resp.status} {await resp.text()}")
                tail = b""
                async for chunk in resp.content.iter_any():
                    total += len(chunk)
                    window = tail + chunk
                    objects += window.count(ADDED) - tail.count(ADDED)
                    if ERROR in window:
                        # A server that cannot serve watch-lists says so in the stream.
                        at = window.index(ERROR)
                        raise RuntimeError(
                            f"watch-list of {res.key} failed: {window[at : at + 600]!r}"
                        )
                    if END_MARKER in window:
                        break
                    tail = window[-len(END_MARKER) :]
        return {
            "seconds": time.perf_counter() - started,
            "cpu_seconds": time.process_time() - cpu,
            "bytes": total,
            "objects": objects,
        }
    finally:
        await client.close()


async def _watch_list_decode(target: Target) -> dict[str, Any]:
    """The watch-list again, every event decoded (collector paused per group) and dropped."""

    from nodeops.common.gcpause import paused_gc

    client = await _client(target)
    try:
        started = time.perf_counter()
        cpu = time.process_time()
        objects = 0
        for res in _resources():
            stream = client.watch_lines(res, timeout_seconds=3600, send_initial_events=True)
            try:
                async for batch in stream:
                    with paused_gc:
                        added, done = _decode_all(batch)
                    objects += added
                    if done:
                        break
            finally:
                await stream.aclose()
        return {
            "seconds": time.perf_counter() - started,
            "cpu_seconds": time.process_time() - cpu,
            "objects": objects,
        }
    finally:
        await client.close()


def _decode_all(batch: list[Any]) -> tuple[int, bool]:
    """Decode a group of event lines; how many were objects, and whether the state ended."""
    import orjson

    added = 0
    for line in batch:
        event = orjson.loads(line)
        if event["type"] == "BOOKMARK":
            return added, True
        if event["type"] == "ERROR":
            raise RuntimeError(f"watch-list failed: {event['object']}")
        added += 1
    return added, False


async def _paged(target: Target, decode: bool) -> dict[str, Any]:
    """The paginated list; each page decoded whole, or only its head for the continue token."""
    import orjson

    client = await _client(target)
    try:
        started = time.perf_counter()
        cpu = time.process_time()
        total = objects = 0
        for res in _resources():
            token = None
            while True:
                page = await client.list_page(res, limit=500, continue_token=token)
                total += len(page)
                if decode:
                    decoded = orjson.loads(page)
                    objects += len(decoded["items"])
                    meta = decoded["metadata"]
                    del decoded
                else:
                    head = page[: page.index(b',"items":')] + b"}"
                    meta = orjson.loads(head)["metadata"]
                del page
                token = meta.get("continue")
                if not token:
                    break
        result: dict[str, Any] = {
            "seconds": time.perf_counter() - started,
            "cpu_seconds": time.process_time() - cpu,
            "bytes": total,
        }
        if decode:
            result["objects"] = objects
        return result
    finally:
        await client.close()


async def _informer(target: Target, watch_list: bool | None) -> dict[str, Any]:
    """Informers for nodes and pods from start to synced; `watch_list=None` leaves the choice
    to the informer's defaults (a baseline tree may not have the setting at all)."""
    from nodeops.kube.informer import InformerFactory, index_pods_by_node

    nodes_res, pods_res = _resources()
    gc.collect()
    rss_before = _rss()
    client = await _client(target)
    try:
        options = {} if watch_list is None else {"watch_list": watch_list}
        factory = InformerFactory(client, **options)
        nodes = factory.informer(nodes_res)
        pods = factory.informer(pods_res, indexers={"node": index_pods_by_node})
        started = time.perf_counter()
        cpu = time.process_time()
        factory.start()
        await factory.wait_synced()
        seconds = time.perf_counter() - started
        cpu_seconds = time.process_time() - cpu
        await factory.stop()
        gc.collect()
        rss_after = _rss()
        objects = len(nodes) + len(pods)
        cache_rss = rss_after - rss_before
        result: dict[str, Any] = {
            "seconds": seconds,
            "cpu_seconds": cpu_seconds,
            "objects": objects,
            "cache_rss_bytes": cache_rss,
            "cached_json_bytes": nodes.cache_bytes() + pods.cache_bytes(),
            "rss_per_object_bytes": round(cache_rss / max(1, objects)),
            "cpu_us_per_object": round(cpu_seconds * 1e6 / max(1, objects), 1),
        }
        if watch_list:
            result["watch_list_refused"] = int(bool(client.watch_list_refused))
            # Informers that synced some other way (a paged list after a failed watch-list).
            result["watch_list_fallbacks"] = sum(
                1 for inf in (nodes, pods) if inf.synced_by != "watch-list"
            )
        return result
    finally:
        await client.close()


def _child(kind: str, target: Target, conn: Any) -> None:
    if kind == "baseline_informer":
        # The other tree's nodeops, imported before anything imports this one's.
        sys.path.insert(0, target["baseline"])
        import nodeops

        where = os.path.realpath(nodeops.__file__)
        if not where.startswith(os.path.realpath(target["baseline"]) + os.sep):
            raise RuntimeError(f"the baseline's nodeops was not the one imported: {where}")
    from nodeops.kube.logging import configure

    configure("warning", "console")  # stdout carries nothing but the result
    if kind == "watch_list_read":
        result = asyncio.run(_watch_list_read(target))
    elif kind == "paged_list_read":
        result = asyncio.run(_paged(target, decode=False))
    elif kind == "watch_list_decode":
        result = asyncio.run(_watch_list_decode(target))
    elif kind == "list_decode":
        result = asyncio.run(_paged(target, decode=True))
    elif kind == "baseline_informer":
        result = asyncio.run(_informer(target, None))
    else:
        result = asyncio.run(_informer(target, INFORMERS[kind]))
    conn.send(result)


def _in_process(kind: str, target: Target) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(kind, target, child))
    proc.start()
    result: dict[str, Any] = parent.recv()
    proc.join()
    return result


def _commit(tree: str) -> str:
    import subprocess

    done = subprocess.run(
        ["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() or "unknown"


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each numeric figure's median over the runs, and the runs' times."""
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        if isinstance(value, int | float):
            med = statistics.median(r[key] for r in runs)
            out[key] = round(med, 3) if isinstance(med, float) else med
    out["runs_seconds"] = [round(r["seconds"], 3) for r in runs]
    return out


def measure(target: Target, repeats: int, kinds: tuple[str, ...] = KINDS) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for i in range(repeats):
        for kind in kinds:
            runs[kind].append(_in_process(kind, target))
            print(
                f"repeat {i + 1}/{repeats} {kind}: {runs[kind][-1]['seconds']:.2f}s",
                file=sys.stderr,
            )
    return {kind: _median(r) for kind, r in runs.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.informer", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--kubeconfig", help="measure this cluster instead of a simulated one")
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument("--nodes", type=int, default=5000, help="simulated cluster only")
    parser.add_argument("--pods", type=int, default=150_000, help="simulated cluster only")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--list-decode", action="store_true", help="also decode the paged list whole (slow)"
    )
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="also sync with the informer of the nodeops tree in DIR (another checkout, an "
        "older commit), in the same run, taking turns with the others",
    )
    parser.add_argument("--json", action="store_true", help="print JSON (the only output form)")
    args = parser.parse_args(argv)
    kinds = (*KINDS, "list_decode") if args.list_decode else KINDS
    if args.baseline and not os.path.isfile(os.path.join(args.baseline, "nodeops", "__init__.py")):
        parser.error(f"--baseline {args.baseline}: no nodeops package there (nodeops/__init__.py)")
    if args.baseline:
        kinds = (*kinds, "baseline_informer")
    load_before = os.getloadavg()
    cluster: dict[str, Any]
    extra: Target = {"baseline": os.path.abspath(args.baseline)} if args.baseline else {}
    if args.kubeconfig:
        target: Target = {"kubeconfig": args.kubeconfig, "context": args.context, **extra}
        figures = measure(target, args.repeats, kinds)
        cluster = {"kubeconfig": True, "objects": figures["informer_watch_list"]["objects"]}
    else:
        shape = ClusterShape(nodes=args.nodes, pods=args.pods)
        with ServerProcess(shape) as info:
            load_before = os.getloadavg()
            figures = measure({"url": info["url"], **extra}, args.repeats, kinds)
        cluster = {
            "simulated": True,
            "nodes": args.nodes,
            "pods": args.pods,
            "json_bytes": info["json_bytes"],
        }
    streaming, paged = figures["informer_watch_list"], figures["informer_paged"]
    sync_ratio = streaming["seconds"] / figures["watch_list_read"]["seconds"]
    rss_ratio = streaming["cache_rss_bytes"] / max(1, streaming["cached_json_bytes"])
    ratios = {
        "informer_watch_list_to_watch_list_read": round(sync_ratio, 3),
        "informer_watch_list_cpu_to_watch_list_read_cpu": round(
            streaming["cpu_seconds"] / figures["watch_list_read"]["cpu_seconds"], 3
        ),
        # How far the decoding alone is from the streaming floor, and the informer from it.
        "watch_list_decode_to_watch_list_read": round(
            figures["watch_list_decode"]["seconds"] / figures["watch_list_read"]["seconds"], 3
        ),
        "informer_watch_list_to_watch_list_decode": round(
            streaming["seconds"] / figures["watch_list_decode"]["seconds"], 3
        ),
        "informer_paged_to_paged_list_read": round(
            paged["seconds"] / figures["paged_list_read"]["seconds"], 3
        ),
        "informer_paged_to_informer_watch_list": round(paged["seconds"] / streaming["seconds"], 3),
        "cache_rss_to_json": round(rss_ratio, 3),
    }
    targets: dict[str, Any] = {
        "sync_to_watch_list_read_max": TARGET_SYNC_RATIO,
        "sync_met": sync_ratio <= TARGET_SYNC_RATIO,
        "rss_to_json_max": TARGET_RSS_RATIO,
        "rss_met": rss_ratio <= TARGET_RSS_RATIO,
    }
    if "baseline_informer" in figures:
        base = figures["baseline_informer"]
        cpu_ratio = streaming["cpu_us_per_object"] / base["cpu_us_per_object"]
        rss_base = streaming["rss_per_object_bytes"] / base["rss_per_object_bytes"]
        ratios["informer_watch_list_to_baseline"] = round(streaming["seconds"] / base["seconds"], 3)
        ratios["informer_watch_list_cpu_per_object_to_baseline"] = round(cpu_ratio, 3)
        ratios["informer_watch_list_rss_per_object_to_baseline"] = round(rss_base, 3)
        targets["cpu_per_object_to_baseline_max"] = TARGET_CPU_TO_BASELINE
        targets["cpu_met"] = cpu_ratio <= TARGET_CPU_TO_BASELINE
        targets["rss_per_object_to_baseline_max"] = 1.0
        targets["rss_not_worse"] = rss_base <= 1.0
    if "list_decode" in figures:
        ratios["informer_watch_list_to_list_decode"] = round(
            streaming["seconds"] / figures["list_decode"]["seconds"], 3
        )
    out = {
        "benchmark": "informer",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            # The 1/5/15-minute load averages when measuring began and ended: a shared machine
            # slows every figure, wall-clock time more than CPU time.
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
        },
        "cluster": cluster,
        **({"baseline_commit": _commit(args.baseline)} if args.baseline else {}),
        "repeats": args.repeats,
        **figures,
        "ratios": ratios,
        "targets": targets,
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
