"""The capacity check before a batch: what holding a batch to its pods' inter-pod rules costs.

    python -m bench.fit [--nodes 1000] [--pods-per-node 31] [--batch 5] [--repeats 20]

A cluster as the manager's caches hold it (each pod and node as JSON, decoded when read, pods
indexed by node and by label), the bench rehearsal's workloads among its pods: one spread over
zones (`DoNotSchedule`, maxSkew 1, a replica per four nodes) and one a node (required
anti-affinity on hostnames, a replica per ten nodes). The check of one batch of `--batch`
nodes is timed three ways in the same run: without the rules (as before they were checked),
with them on a cluster whose pods have none (the index lookups only), and with them on the
cluster as built. One JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson

from nodeops.controllers.cycling.fit import FitResult, check_fit, neighbours

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
Obj = dict[str, Any]


def _node(i: int) -> Obj:
    name = f"node-{i}"
    return {
        "metadata": {"name": name, "labels": {HOST: name, ZONE: "abc"[i % 3], "role": "worker"}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pod(name: str, node: int, labels: dict[str, str], **spec: Any) -> Obj:
    body = {
        "nodeName": f"node-{node}",
        "containers": [
            {"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
        ],
        **spec,
    }
    owner = {"kind": "ReplicaSet", "controller": True, "name": labels["app"], "uid": "1"}
    return {
        "metadata": {"name": name, "namespace": "shop", "labels": labels,
                     "ownerReferences": [owner]},
        "spec": body,
        "status": {"phase": "Running"},
    }  # fmt: skip


class Cluster:
    """Nodes and pods as JSON, with the indexes the manager's pod cache keeps."""

    def __init__(self, nodes: int, per_node: int, rules: bool) -> None:
        spread = [
            {
                "maxSkew": 1,
                "topologyKey": ZONE,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "spread"}},
            }
        ]
        apart = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "solo"}}, "topologyKey": HOST}]}}  # fmt: skip
        pods = [
            _pod(f"web-{i}-{j}", i, {"app": "web", "pod-template-hash": "5d4f"})
            for i in range(nodes)
            for j in range(per_node)
        ]
        spread_spec: dict[str, Any] = {"topologySpreadConstraints": spread} if rules else {}
        apart_spec: dict[str, Any] = {"affinity": apart} if rules else {}
        pods += [
            _pod(f"spread-{i}", i * 4, {"app": "spread"}, **spread_spec) for i in range(nodes // 4)
        ]
        pods += [_pod(f"solo-{i}", i * 10, {"app": "solo"}, **apart_spec) for i in range(nodes // 10)]  # fmt: skip
        self.nodes = {f"node-{i}": orjson.dumps(_node(i)) for i in range(nodes)}
        self.pods = [orjson.dumps(p) for p in pods]
        self.on_node: dict[str, list[bytes]] = {}
        self.by_label: dict[str, list[bytes]] = {}
        self.anti: list[bytes] = []
        for raw, pod in zip(self.pods, pods, strict=True):
            self.on_node.setdefault(pod["spec"]["nodeName"], []).append(raw)
            for k, v in pod["metadata"]["labels"].items():
                self.by_label.setdefault(f"{k}={v}", []).append(raw)
            if "affinity" in pod["spec"]:
                self.anti.append(raw)

    def node(self, name: str) -> Obj | None:
        raw = self.nodes.get(name)
        return orjson.loads(raw) if raw is not None else None

    def pods_on(self, name: str) -> list[Obj]:
        return [orjson.loads(r) for r in self.on_node.get(name, ())]

    def check(self, batch: set[str], *, with_rules: bool) -> FitResult:
        """One batch's check as `scaleup._fit` makes it."""
        pods = [p for name in sorted(batch) for p in self.pods_on(name)]
        around = None
        if with_rules:
            around = neighbours(
                pods,
                {n for n in self.nodes if n not in batch},
                self.node,
                lambda k, v: [orjson.loads(r) for r in self.by_label.get(f"{k}={v}", ())],
                lambda: [orjson.loads(r) for r in self.pods],
                [orjson.loads(r) for r in self.anti],
            )
        nodes = (self.node(n) for n in self.nodes if n not in batch)
        return check_fit(pods, nodes, self.pods_on, exclude=batch, neighbours=around)


def timed(fn: Callable[[], FitResult], repeats: int) -> tuple[list[float], FitResult]:
    seconds = []
    result = fn()
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        seconds.append(time.perf_counter() - start)
    return seconds, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fit", description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods-per-node", type=int, default=31)
    parser.add_argument("--batch", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    if args.batch < 1 or args.nodes < 10 * args.batch or args.repeats < 1:
        parser.error("--batch and --repeats must be at least 1, and --nodes at least 10 x --batch")
    # A batch that holds replicas of both workloads: nodes 0, 10, 20, ... carry a solo and a
    # spread replica each.
    batch = {f"node-{10 * i}" for i in range(args.batch)}
    plain = Cluster(args.nodes, args.pods_per_node, rules=False)
    ruled = Cluster(args.nodes, args.pods_per_node, rules=True)
    cases = {
        "without_rules": lambda: ruled.check(batch, with_rules=False),
        "rules_none_apply": lambda: plain.check(batch, with_rules=True),
        "with_rules": lambda: ruled.check(batch, with_rules=True),
    }
    out: dict[str, Any] = {
        "bench": "fit",
        "python": platform.python_version(),
        "nodes": args.nodes,
        "pods": len(ruled.pods),
        "batch_nodes": args.batch,
        "batch_pods": sum(len(ruled.on_node.get(n, ())) for n in batch),
        "repeats": args.repeats,
    }
    for name, fn in cases.items():
        print(f"timing {name}", file=sys.stderr)
        seconds, result = timed(fn, args.repeats)
        out[name] = {
            "median_ms": round(1000 * statistics.median(seconds), 2),
            "max_ms": round(1000 * max(seconds), 2),
            "fits": result.fits,
            "message": result.message,
        }
    out["with_rules_over_without"] = round(
        out["with_rules"]["median_ms"] / out["without_rules"]["median_ms"], 1
    )
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
