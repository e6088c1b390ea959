"""`nodeops run --controllers detacher` as users run it, killed with SIGKILL between two
deregistrations and started again: the second process finishes what the first began."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import aiohttp

from nodeops.api import all_crds
from nodeops.controllers.detacher.reconciler import ATTACHMENTS
from nodeops.kube import Client
from nodeops.kube.resources import CRDS, NAMESPACES, NODES
from tests.e2e.conftest import free_port, nodeops, stop
from tests.waiting import until

SCENARIO = """
seed: 4
timeScale: 10
nodeGroups:
  - name: web
    size: 2
    zone: eu-west-1a
    bootSeconds: 5
loadBalancers:
  - name: web-tg
    type: target-group
    port: 30080
    nodeGroups: [web]
  - name: web-clb
    type: classic
    port: 80
    nodeGroups: [web]
"""


async def _serve(tmp_path: Path) -> tuple[Any, str, Path]:
    scenario = tmp_path / "cluster.yaml"
    scenario.write_text(SCENARIO)
    kubeconfig = tmp_path / "kubeconfig"
    # Every deregistration takes two seconds: time enough to kill the operator in between.
    proc = nodeops(
        "sim",
        "serve",
        "--scenario",
        str(scenario),
        "--kubeconfig-out",
        str(kubeconfig),
        "--faults",
        "latency=2s@delete/cloud/targets",
    )
    assert proc.stdout is not None
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, proc.stdout.readline)
        if "serving at " in line:
            return proc, line.rsplit("serving at ", 1)[1].strip(), kubeconfig
        assert line, "nodeops sim serve ended before serving"


def _operator(kubeconfig: Path, config: Path) -> Any:
    return nodeops(
        "run",
        "--kubeconfig",
        str(kubeconfig),
        "--controllers",
        "detacher",
        "--provider",
        "sim",
        "--provider-config",
        str(config),
        "--metrics-addr",
        "0",
        "--health-addr",
        f"127.0.0.1:{free_port()}",
        "--detacher-draining-poll-seconds",
        "0.1",
    )


async def test_a_killed_operator_is_finished_by_the_next(tmp_path: Path) -> None:
    sim, url, kubeconfig = await _serve(tmp_path)
    config = tmp_path / "providers.yaml"
    config.write_text(f"providers:\n  sim:\n    url: {url}\n    poll_interval: 0.1\n")
    operators = []
    try:
        async with Client(url, qps=0, timeout=10) as client, aiohttp.ClientSession() as http:
            for crd in all_crds():
                await client.create(CRDS, crd)
            await client.create(NAMESPACES, {"metadata": {"name": "nodeops-system"}})
            for lb in ("web-tg", "web-clb"):
                async with http.patch(
                    f"{url}/sim/cloud/loadbalancers/{lb}", json={"deregistrationDelaySeconds": 10}
                ) as resp:
                    assert resp.status == 200

            async def registrations(instance: str) -> list[str]:
                async with http.get(
                    f"{url}/sim/cloud/loadbalancers", params={"instanceId": instance}
                ) as resp:
                    lbs = (await resp.json())["loadBalancers"]
                return sorted(
                    lb["name"] for lb in lbs if any(t["state"] != "draining" for t in lb["targets"])
                )

            async def record() -> dict[str, Any]:
                return await client.get(ATTACHMENTS, name, "nodeops-system")

            nodes, _ = await client.list(NODES)
            node = sorted(nodes, key=lambda n: n["metadata"]["name"])[0]
            name = node["metadata"]["name"]
            instance = node["spec"]["providerID"].rsplit("/", 1)[1]
            assert await registrations(instance) == ["web-clb", "web-tg"]

            operators.append(_operator(kubeconfig, config))
            await client.patch(NODES, name, {"spec": {"unschedulable": True}})

            async def halfway() -> bool:
                try:
                    states = [t["state"] for t in (await record())["status"]["targets"]]
                except Exception:
                    return False
                return states == ["Draining", "Deregistering"]

            await until(halfway, timeout=60, what="one target left, the other being left")
            assert stop(operators[0], signal.SIGKILL) == -signal.SIGKILL

            operators.append(_operator(kubeconfig, config))

            async def detached() -> bool:
                status = (await record()).get("status") or {}
                return status.get("phase") == "Detached"

            await until(detached, timeout=60, what="the next operator to finish")
            assert await registrations(instance) == []
            targets = (await record())["status"]["targets"]
            assert [t["state"] for t in targets] == ["Deregistered", "Deregistered"]

            await client.patch(NODES, name, {"spec": {"unschedulable": None}})

            async def attached() -> bool:
                return ((await record()).get("status") or {}).get("phase") == "Attached"

            await until(attached, timeout=60, what="the node back")
            assert await registrations(instance) == ["web-clb", "web-tg"]
    finally:
        for proc in operators:
            stop(proc)
        stop(sim)
