"""The maintenance controller's full pass over a large cluster: time and writes.

    python -m bench.maintenance --json [--nodes 5000] [--transitioning 0.05]

A simulated API server (its own process) holds `--nodes` nodes, each labelled with two profiles
(`flatcar--kubelet`, the reference's Kubernikus example) and carrying a state record in which
both profiles are operational, as in a cluster the controller has run on for a while. The
controller (the real reconciler, informer and one worker, as `nodeops run` wires it) then makes:

1. `idle`: a full pass over every node with nothing to do. Target: <= 5 s, zero writes.
2. `transitioning`: `--transitioning` of the nodes get the Flatcar reboot-needed annotation first
   (by the harness, not counted), then a full pass. Target: exactly one write per such node
   (operational -> maintenance-required), none for the others.

Writes are counted twice: by the reconciler, and on the server by comparing every node's
resourceVersion before and after the pass. All traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import platform
import random
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import orjson

IDLE_TARGET_SECONDS = 5.0
NEEDED = "flatcar-linux-update.v1.flatcar-linux.net/reboot-needed"
EXAMPLE = Path(__file__).parents[1] / "examples" / "maintenance" / "kubernikus.yaml"
PROFILE_LABEL = "cloud.sap/maintenance-profile"
STATE_LABEL = "cloud.sap/maintenance-state"
DATA_ANNOTATION = "cloud.sap/maintenance-data"


def _record() -> str:
    profile = {
        "Current": "operational",
        "Previous": "operational",
        "Transition": "2026-01-01T00:00:00Z",
    }
    return orjson.dumps(
        {"Notifications": {}, "Profiles": {"flatcar": profile, "kubelet": profile}},
        option=orjson.OPT_SORT_KEYS,
    ).decode()


def _serve(nodes: int, conn: Connection) -> None:
    from nodeops.sim import objects
    from nodeops.sim.server.app import SimServer

    async def main() -> None:
        server = SimServer(history_size=20000)
        reg = server.registry
        rng = random.Random(1)
        record = _record()
        raws = []
        for i in range(nodes):
            node = objects.make_node(
                f"node-{i:05d}", group="workers", rng=rng, with_server_fields=True
            )
            meta = node["metadata"]
            meta.setdefault("labels", {}).update(
                {PROFILE_LABEL: "flatcar--kubelet", STATE_LABEL: "operational"}
            )
            meta.setdefault("annotations", {})[DATA_ANNOTATION] = record
            raws.append(orjson.dumps(node))
        rt = reg.lookup("", "v1", "nodes")
        server.store.load(rt.storage_key, raws, reg.storage_type(rt).field_set)
        await server.start()
        conn.send({"url": server.url})
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_reader(conn.fileno(), stop.set)
        await stop.wait()
        await server.stop()

    asyncio.run(main())


async def _pass(controller: Any, names: list[str], done: dict[str, Any]) -> float:
    """Reconcile every node once through the controller's queue; seconds until all are done."""
    from nodeops.kube.controller import Request

    done["count"] = 0
    done["target"] = len(names)
    done["event"] = asyncio.Event()
    started = time.perf_counter()
    for name in names:
        controller.queue.add(Request(name))
    await asyncio.wait_for(done["event"].wait(), 600)
    return time.perf_counter() - started


async def _versions(client: Any) -> dict[str, str]:
    from nodeops.kube.resources import NODES

    items, _ = await client.list(NODES)
    return {n["metadata"]["name"]: n["metadata"]["resourceVersion"] for n in items}


async def measure(url: str, nodes: int, fraction: float) -> dict[str, Any]:
    from nodeops.controllers.maintenance.cluster import CacheView
    from nodeops.controllers.maintenance.info import InfoStore
    from nodeops.controllers.maintenance.keys import Keys
    from nodeops.controllers.maintenance.reconciler import MaintenanceReconciler
    from nodeops.controllers.maintenance.sender import NotificationSender
    from nodeops.controllers.maintenance.source import ConfigSource
    from nodeops.kube.client import Client
    from nodeops.kube.controller import Controller, Request
    from nodeops.kube.informer import InformerFactory
    from nodeops.kube.resources import NODES

    keys = Keys.for_compat("sapcc")
    client = Client(url, qps=0, timeout=60)
    factory = InformerFactory(client)
    informer = factory.informer(NODES)
    view = CacheView(client, informer, keys)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "maintenance.yaml"
        path.write_text(EXAMPLE.read_text())
        source = ConfigSource(path)
        source.load()
    sender = NotificationSender(view)
    reconciler = MaintenanceReconciler(source, keys, view, sender, InfoStore())
    done: dict[str, Any] = {}

    class Counting:
        async def reconcile(self, request: Request, ctx: Any = None) -> Any:
            result = await reconciler.reconcile(request, ctx)
            done["count"] += 1
            if done["count"] == done["target"]:
                done["event"].set()
            return result

    controller = Controller("maintenance", Counting())
    factory.start()
    await factory.wait_synced(600)
    names = sorted(k for k in informer.keys())
    controller.start()
    try:
        before = await _versions(client)
        idle_seconds = await _pass(controller, names, done)
        idle_writes = reconciler.writes
        after = await _versions(client)
        idle_changed = sum(1 for k in before if before[k] != after.get(k))

        rng = random.Random(2)
        chosen = sorted(rng.sample(names, max(1, int(len(names) * fraction))))
        pending = set(chosen)
        seen = asyncio.Event()

        def on_update(_old: Any, new: Any) -> None:
            if NEEDED in (new.get("metadata", {}).get("annotations") or {}):
                pending.discard(new["metadata"]["name"])
                if not pending:
                    seen.set()

        informer.add_handler(on_update=on_update)
        for name in chosen:
            await client.patch(NODES, name, {"metadata": {"annotations": {NEEDED: "true"}}})
        await asyncio.wait_for(seen.wait(), 120)
        before = await _versions(client)
        writes_before = reconciler.writes
        busy_seconds = await _pass(controller, names, done)
        busy_writes = reconciler.writes - writes_before
        after = await _versions(client)
        changed = {k for k in before if before[k] != after.get(k)}
        states = {
            n: (informer.get(n) or {}).get("metadata", {}).get("labels", {}).get(STATE_LABEL)
            for n in chosen
        }
    finally:
        await controller.stop(5)
        await factory.stop()
        await view.close()
        await client.close()
    return {
        "idle": {
            "nodes": len(names),
            "seconds": round(idle_seconds, 3),
            "per_node_ms": round(idle_seconds / len(names) * 1000, 3),
            "writes": idle_writes,
            "nodes_changed_on_server": idle_changed,
            "target_seconds": IDLE_TARGET_SECONDS,
            "ok": idle_seconds <= IDLE_TARGET_SECONDS and idle_writes == 0 and idle_changed == 0,
        },
        "transitioning": {
            "nodes": len(chosen),
            "seconds": round(busy_seconds, 3),
            "writes": busy_writes,
            "nodes_changed_on_server": len(changed),
            "changed_exactly_the_transitioning": changed == set(chosen),
            "now_maintenance_required": sum(
                1 for s in states.values() if s == "maintenance-required"
            ),
            "ok": busy_writes == len(chosen)
            and changed == set(chosen)
            and all(s == "maintenance-required" for s in states.values()),
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--transitioning", type=float, default=0.05)
    args = parser.parse_args()
    from nodeops.kube.logging import configure

    configure("error", "console")
    parent, child = mp.get_context("spawn").Pipe()
    proc = mp.get_context("spawn").Process(target=_serve, args=(args.nodes, child), daemon=True)
    proc.start()
    try:
        if not parent.poll(600):
            raise RuntimeError("the simulated server did not start")
        url = parent.recv()["url"]
        result = asyncio.run(measure(url, args.nodes, args.transitioning))
    finally:
        parent.send("stop")
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    report = {
        "benchmark": "maintenance",
        "python": platform.python_version(),
        "config": "examples/maintenance/kubernikus.yaml (profiles flatcar, kubelet)",
        **result,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for key in ("idle", "transitioning"):
            print(key, json.dumps(report[key]))
    return 0 if report["idle"]["ok"] and report["transitioning"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
