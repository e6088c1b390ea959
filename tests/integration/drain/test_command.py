"""`nodeops drain` on several nodes at once (`--parallel`): one view of the budgets for all."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

from nodeops.drain import command
from nodeops.kube.resources import NODES, PDBS
from tests.waiting import until

from .workload import NS, create_on, deployment, pdb, pods_on, running, settle_pdb


async def test_parallel_drains_share_every_budget(cluster: Any, tmp_path: Path) -> None:
    sim, client, monitor = cluster
    await create_on(client, "node-0", deployment("a", 3, labels={"tier": "web"}))
    await create_on(client, "node-1", deployment("b", 3, labels={"tier": "web"}))
    web = pdb("web", "a", maxUnavailable=1)
    web["spec"]["selector"] = {"matchLabels": {"tier": "web"}}
    await client.create(PDBS, web, NS)
    await settle_pdb(client, "web", 6)
    for app in ("a", "b"):
        monitor.watch(app, min_available=2)
    kubeconfig = sim.server.write_kubeconfig(tmp_path / "kubeconfig")
    sim.server.stats.reset()
    out, err = io.StringIO(), io.StringIO()
    argv = ["drain", "node-0", "node-1", "--parallel", "2", "--timeout", "90s"]
    parsed = command.parse([*argv, "--kubeconfig", str(kubeconfig)])
    assert await command.execute(parsed, out, err) == 0, err.getvalue()
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["node/node-0 cordoned", "node/node-1 cordoned"]
    assert sorted(line for line in lines if line.endswith("drained")) == [
        "node/node-0 drained",
        "node/node-1 drained",
    ]
    assert sum(line.startswith("evicting pod ") for line in lines) == 6
    for name in ("node-0", "node-1"):
        assert await pods_on(client, name) == []
        assert (await client.get(NODES, name))["spec"]["unschedulable"] is True
    await running(client, "a", 3)
    await running(client, "b", 3)
    refused = (sim.server.stats.snapshot()["by_code"].get("429") or {}).get("requests", 0)
    assert refused == 0


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_passing_api_errors_are_retried_and_said_on_a_terminal_only(
    cluster: Any, tmp_path: Path
) -> None:
    """A 500 is retried with backoff; a person at a terminal is told, a script's log is not."""
    sim, client, _ = cluster
    kubeconfig = sim.server.write_kubeconfig(tmp_path / "kubeconfig")
    said: dict[bool, str] = {}

    async def refused() -> bool:
        return sim.server.faults.counts()["error-500"] >= 1

    for tty in (True, False):
        await client.patch(NODES, "node-0", {"spec": {"unschedulable": None}})
        sim.server.faults.update("error=500@get/nodes")
        out, err = io.StringIO(), _Terminal() if tty else io.StringIO()
        parsed = command.parse(["cordon", "node-0", "--kubeconfig", str(kubeconfig)])
        run = asyncio.create_task(command.execute(parsed, out, err))
        await until(refused, what="a refused read")
        sim.server.faults.update("")  # the server recovers
        assert await run == 0, err.getvalue()
        assert out.getvalue() == "node/node-0 cordoned\n"
        said[tty] = err.getvalue()
    assert said[True].startswith("Retrying: Error from server (InternalError): ")
    assert "retrying in " in said[True]
    assert said[False] == ""
