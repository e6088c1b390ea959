"""Requests lost draining a node behind a load balancer, with and without the detacher.

    python -m bench.detach --json [--time-scale 20] [--rate 50] ...

A simulated cluster (`nodeops sim serve`, its own process) runs an ingress DaemonSet on three
nodes behind a NodePort Service with `externalTrafficPolicy: Local`, and a simulated AWS-like
target group sends it requests (`/sim/cloud/traffic`): health checks every `--health-interval`
seconds, a node unhealthy after `--unhealthy-threshold` failed checks, a
`--deregistration-delay` for requests in flight. One node is then drained completely, its
DaemonSet pods last, as before a scale-down:

- `with_detacher`: `nodeops run --controllers detacher --detacher-stop-pods
  --detacher-stop-daemonset-pods` (its own process) and `kubectl cordon`; the detacher takes the
  node out of the target group, waits out the delay, then stops the pods.
- `without_detacher`: the drain engine of `nodeops drain --evict-daemonsets` (cordon, then the
  same order of pod stops), started at once, with nothing telling the load balancer.

Both run in the same invocation, each on a fresh cluster. For each: requests sent, requests
failed (all from the drained node), and the time from the cordon to the last request the load
balancer sent to the node ("no traffic"), in simulated seconds (the clock of the load balancer
and the pods; the operator's own reaction time is scaled up by `--time-scale` with it, so a
faster clock only makes the detacher look slower).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

NODE_GROUP = "web"
LB = "ingress-lb"
NAMESPACE = "nodeops-system"


def _scenario(args: argparse.Namespace) -> str:
    return f"""
seed: 21
timeScale: {args.time_scale}
nodeGroups:
  - name: {NODE_GROUP}
    size: 3
    zone: eu-west-1a
    bootSeconds: 30
namespaces: [edge]
workloads:
  - kind: DaemonSet
    name: ingress
    namespace: edge
    containers: 1
    terminationGracePeriodSeconds: {args.grace}
    service: {{port: 80, type: NodePort}}
loadBalancers:
  - name: {LB}
    type: target-group
    port: 30080
    nodeGroups: [{NODE_GROUP}]
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _process(*argv: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nodeops.cli",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


async def _until(check: Any, what: str, timeout: float = 180.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


class Sim:
    """One `nodeops sim serve` process and a client for its APIs."""

    def __init__(self, proc: asyncio.subprocess.Process, url: str, kubeconfig: Path) -> None:
        self.proc = proc
        self.url = url
        self.kubeconfig = kubeconfig
        self.session = aiohttp.ClientSession()

    @classmethod
    async def start(cls, workdir: Path, args: argparse.Namespace) -> Sim:
        scenario = workdir / "cluster.yaml"
        scenario.write_text(_scenario(args))
        kubeconfig = workdir / "kubeconfig"
        proc = await _process(
            "sim", "serve", "--scenario", str(scenario), "--kubeconfig-out", str(kubeconfig)
        )
        assert proc.stdout is not None
        while True:
            line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
            if not line:
                raise RuntimeError("nodeops sim serve ended before serving")
            if "serving at " in line:
                return cls(proc, line.rsplit("serving at ", 1)[1].strip(), kubeconfig)

    async def stop(self) -> None:
        await self.session.close()
        with contextlib.suppress(ProcessLookupError):
            self.proc.terminate()
        await self.proc.wait()

    async def call(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        headers = kw.pop("headers", None)
        async with self.session.request(
            method, self.url + path, json=body, headers=headers, **kw
        ) as resp:
            data = await resp.json() if resp.content_type == "application/json" else None
            if resp.status >= 300:
                raise RuntimeError(f"{method} {path}: {resp.status} {data}")
            return data

    async def merge(self, path: str, body: Any) -> Any:
        return await self.call(
            "PATCH", path, body, headers={"Content-Type": "application/merge-patch+json"}
        )

    async def flow(self) -> dict[str, Any]:
        return dict(await self.call("GET", f"/sim/cloud/traffic/{LB}"))

    async def prepare(self, args: argparse.Namespace) -> str:
        """Ingress ready everywhere, the Service Local, traffic flowing; the node to drain."""
        from nodeops.api import all_crds

        for crd in all_crds():
            await self.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        await self.call("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        await self.merge(
            "/api/v1/namespaces/edge/services/ingress",
            {"spec": {"externalTrafficPolicy": "Local"}},
        )
        await self.merge(
            f"/sim/cloud/loadbalancers/{LB}",
            {"deregistrationDelaySeconds": args.deregistration_delay},
        )

        async def ingress_ready() -> bool:
            pods = await self.call("GET", "/api/v1/namespaces/edge/pods")
            return sum(_ready(p) for p in pods["items"]) == 3

        await _until(ingress_ready, "ingress pods ready")
        await self.call(
            "POST",
            "/sim/cloud/traffic",
            {
                "loadBalancer": LB,
                "service": "edge/ingress",
                "requestsPerSecond": args.rate,
                "requestSeconds": args.request_seconds,
                "healthCheck": {
                    "intervalSeconds": args.health_interval,
                    "healthyThreshold": 3,
                    "unhealthyThreshold": args.unhealthy_threshold,
                },
            },
        )

        async def flowing() -> bool:
            flow = await self.flow()
            return len(flow["nodes"]) == 3 and flow["succeeded"] >= args.rate * 5

        await _until(flowing, "traffic through every node")
        nodes = await self.call("GET", "/api/v1/nodes")
        return str(sorted(n["metadata"]["name"] for n in nodes["items"])[0])

    async def finish(self, node: str, t0: float, args: argparse.Namespace) -> dict[str, Any]:
        """Run on until the load balancer has surely stopped sending to the node, then count."""

        async def quiet() -> bool:
            flow = await self.flow()
            last = (flow["nodes"].get(node) or {}).get("lastSentAt") or t0
            # Long enough for the health checks to have given up on the node, twice over.
            settle = 2 * args.health_interval * (args.unhealthy_threshold + 1)
            return flow["now"] - max(last, t0) > settle

        await _until(quiet, "no more traffic to the drained node", timeout=600)
        await self.call("DELETE", f"/sim/cloud/traffic/{LB}")

        async def settled() -> dict[str, Any] | None:
            flow = await self.flow()
            return flow if flow["inFlight"] == 0 else None

        flow = await _until(settled, "requests in flight to finish")
        mine = flow["nodes"].get(node) or {}
        requests = await self.call(
            "GET", f"/sim/cloud/traffic/{LB}/requests", params={"node": node, "since": str(t0)}
        )
        after = [r for r in requests["requests"]]
        last = max((r["sentAt"] for r in after), default=t0)
        return {
            "requests_sent": flow["sent"],
            "requests_failed": flow["failed"],
            "requests_sent_to_node_after_cordon": len(after),
            "requests_failed_on_node": mine.get("failed", 0),
            "cordon_to_no_traffic_seconds": round(last - t0, 2),
        }


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


async def with_detacher(workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    sim = await Sim.start(workdir, args)
    operator: asyncio.subprocess.Process | None = None
    try:
        node = await sim.prepare(args)
        config = workdir / "providers.yaml"
        config.write_text(f"providers:\n  sim:\n    url: {sim.url}\n    poll_interval: 0.2\n")
        health = _free_port()
        operator = await _process(
            "run",
            "--kubeconfig",
            str(sim.kubeconfig),
            "--controllers",
            "detacher",
            "--provider",
            "sim",
            "--provider-config",
            str(config),
            "--metrics-addr",
            "0",
            "--health-addr",
            f"127.0.0.1:{health}",
            "--detacher-stop-pods",
            "--detacher-stop-daemonset-pods",
            "--detacher-drain-delete-emptydir-data",
            "--detacher-draining-poll-seconds",
            "0.2",
        )

        async def ready() -> bool:
            with contextlib.suppress(aiohttp.ClientError):
                async with sim.session.get(f"http://127.0.0.1:{health}/readyz") as resp:
                    return resp.status == 200
            return False

        await _until(ready, "the operator ready")
        t0 = (await sim.flow())["now"]
        started = time.monotonic()
        await sim.merge(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}})

        path = f"/apis/nodeops.dev/v1alpha1/namespaces/{NAMESPACE}/loadbalancerattachments"

        async def drained() -> bool:
            records = await sim.call("GET", path)
            return any(
                r["metadata"]["name"] == node and (r.get("status") or {}).get("podsStoppedAt")
                for r in records["items"]
            )

        await _until(drained, "the detacher to drain the node")
        wall = time.monotonic() - started
        result = await sim.finish(node, t0, args)
        result["drain_wall_seconds"] = round(wall, 2)
        return result
    finally:
        if operator is not None:
            with contextlib.suppress(ProcessLookupError):
                operator.terminate()
            await operator.wait()
        await sim.stop()


async def without_detacher(workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    from nodeops.drain.engine import Drainer
    from nodeops.drain.options import DrainOptions
    from nodeops.kube import Client

    sim = await Sim.start(workdir, args)
    try:
        node = await sim.prepare(args)
        async with Client(sim.url, qps=0, timeout=30) as client:
            options = DrainOptions(evict_daemonsets=True, delete_emptydir_data=True)
            t0 = (await sim.flow())["now"]
            started = time.monotonic()
            # `nodeops drain --evict-daemonsets`, run here so that it starts at the cordon
            # rather than a process start-up (times the clock's scale) later.
            await Drainer(client, options).drain(node)
            wall = time.monotonic() - started
        result = await sim.finish(node, t0, args)
        result["drain_wall_seconds"] = round(wall, 2)
        return result
    finally:
        await sim.stop()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="detach-bench-") as tmp:
        root = Path(tmp)
        (root / "with").mkdir()
        (root / "without").mkdir()
        on = await with_detacher(root / "with", args)
        off = await without_detacher(root / "without", args)
    return {
        "benchmark": "detach",
        "parameters": {
            "time_scale": args.time_scale,
            "requests_per_second": args.rate,
            "request_seconds": args.request_seconds,
            "deregistration_delay_seconds": args.deregistration_delay,
            "health_check_interval_seconds": args.health_interval,
            "unhealthy_threshold": args.unhealthy_threshold,
            "ingress_grace_seconds": args.grace,
        },
        "with_detacher": on,
        "without_detacher": off,
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.detach", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--time-scale", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second")
    parser.add_argument("--request-seconds", type=float, default=1.0)
    parser.add_argument("--deregistration-delay", type=float, default=30.0)
    parser.add_argument("--health-interval", type=float, default=10.0)
    parser.add_argument("--unhealthy-threshold", type=int, default=3)
    parser.add_argument("--grace", type=int, default=15, help="the ingress pods' grace period")
    args = parser.parse_args(argv)
    result = asyncio.run(run(args))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for case in ("with_detacher", "without_detacher"):
            r = result[case]
            print(
                f"{case}: {r['requests_failed']} of {r['requests_sent']} requests failed; "
                f"no traffic {r['cordon_to_no_traffic_seconds']}s after the cordon"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
