"""`nodeops cycle` and `kubectl cycle` (kubectl itself running the kubectl-cycle plugin) against
a simulated cluster, with the cycling controllers running for `--watch`."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS, NODEGROUPS
from nodeops.demo.world import OPERATOR_NAMESPACE, World
from tests.integration.cycling.harness import nodes, scenario, world

NS = OPERATOR_NAMESPACE


def nodegroup(name: str, group: str, **spec: Any) -> dict[str, Any]:
    labels = spec.pop("labels", {})
    return {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "NodeGroup",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeGroupName": group,
            "nodeSelector": {"matchLabels": {"role": "worker"}},
            "cycleSettings": {"method": "Drain", "concurrency": 1},
            **spec,
        },
    }


async def run(*args: str, kubeconfig: Path, program: str = "nodeops") -> tuple[int, str, str]:
    bindir = os.path.dirname(sys.executable)
    env = dict(
        os.environ, PATH=f"{bindir}:{os.environ.get('PATH', '')}", KUBECONFIG=str(kubeconfig)
    )
    if program == "nodeops":
        cmd = [sys.executable, "-m", "nodeops.cli", "cycle", *args]
    else:
        cmd = ["kubectl", "cycle", *args]
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=300)
    return proc.returncode or 0, out.decode(), err.decode()


async def requests(w: World) -> list[dict[str, Any]]:
    assert w.client is not None
    items, _ = await w.client.list(CYCLENODEREQUESTS, NS)
    return items


async def test_everything_is_checked_before_anything_is_created(tmp_path: Path) -> None:
    async with world(scenario(2, groups=2), controllers=False) as w:
        assert w.client is not None
        config = w.sim.server.write_kubeconfig(tmp_path / "kubeconfig")
        await w.client.create(NODEGROUPS, nodegroup("a", "workers-a"))
        await w.client.create(
            NODEGROUPS,
            nodegroup("off", "workers-b", cycleSettings={"method": "Drain", "concurrency": 0}),
        )
        code, _, err = await run("a", "nope", "off", "--nodes", "ghost", kubeconfig=config)
        assert code == 2
        assert "NodeGroup 'nope' not found" in err
        assert "NodeGroup off: spec.cycleSettings.concurrency: 0 switches cycling" in err
        assert "--nodes: ghost is not a node of the selected NodeGroups" in err
        assert "nothing was created" in err
        code, _, err = await run("a", "--all", kubeconfig=config)
        assert code == 2 and "select NodeGroups one way" in err
        code, _, err = await run("a", "--cycling-timeout", "soon", kubeconfig=config)
        assert code == 2 and "--cycling-timeout" in err
        assert await requests(w) == []
        code, out, _ = await run("a", "-o", "yaml", "--concurrency", "2", kubeconfig=config)
        assert code == 0
        (doc,) = yaml.safe_load_all(out)
        assert doc["spec"]["cycleSettings"]["concurrency"] == 2
        assert doc["metadata"]["generateName"] == "a-"
        node = sorted(n["metadata"]["name"] for n in await nodes(w))[0]
        code, out, err = await run(
            "a", "-o", "json", "--method", "Wait", "--nodes", node, kubeconfig=config
        )
        assert code == 0, err
        made = json.loads(out)
        assert made["spec"]["cycleSettings"]["method"] == "Wait"
        assert made["spec"]["nodeNames"] == [node]
        code, out, _ = await run("a", "--dry", kubeconfig=config)
        assert code == 0 and "(server dry run)" in out
        assert await requests(w) == []


async def test_cycle_creates_and_watches(tmp_path: Path) -> None:
    async with world(scenario(2, groups=2)) as w:
        assert w.client is not None
        config = w.sim.server.write_kubeconfig(tmp_path / "kubeconfig")
        await w.client.create(NODEGROUPS, nodegroup("a", "workers-a", labels={"team": "x"}))
        await w.client.create(NODEGROUPS, nodegroup("b", "workers-b", labels={"team": "y"}))
        code, out, err = await run("-l", "team=x", "--name", "roll", "--watch", kubeconfig=config)
        assert code == 0, out + err
        assert "created" in out and "Successful" in out
        # A real cluster's roll: no simulated clock, no demo request counts shown as zeros.
        assert "pods moved" in err
        assert "simulated" not in err and "requests failed" not in err
        (made,) = await requests(w)
        assert made["metadata"]["name"].startswith("roll-")
        assert made["spec"]["nodeGroupName"] == "workers-a"
        assert made["metadata"]["annotations"]["nodeops.dev/reason"] == "cli"


async def test_cycle_all_makes_one_request_per_nodegroup(tmp_path: Path) -> None:
    async with world(scenario(2, groups=2), controllers=False) as w:
        assert w.client is not None
        config = w.sim.server.write_kubeconfig(tmp_path / "kubeconfig")
        await w.client.create(NODEGROUPS, nodegroup("a", "workers-a"))
        await w.client.create(NODEGROUPS, nodegroup("b", "workers-b"))
        code, out, err = await run("--all", "--concurrency", "2", kubeconfig=config)
        assert code == 0, out + err
        made = await requests(w)
        assert sorted(r["spec"]["nodeGroupName"] for r in made) == ["workers-a", "workers-b"]
        for r in made:
            source = r["metadata"]["labels"]["name"]
            assert r["spec"]["nodeGroupName"] == f"workers-{source}"
            assert r["metadata"]["name"].startswith(f"{source}-")
            assert r["metadata"]["annotations"]["nodeops.dev/reason"] == "cli"
            assert r["spec"]["cycleSettings"]["concurrency"] == 2
            assert f"cyclenoderequest.nodeops.dev/{r['metadata']['name']} created" in out
        # The command it prints to watch them selects both.
        assert f"kubectl -n {NS} get cnr -l 'name in (a,b)' -w" in out
        selected, _ = await w.client.list(CYCLENODEREQUESTS, NS, label_selector="name in (a,b)")
        assert len(selected) == 2


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_kubectl_cycle(tmp_path: Path) -> None:
    if shutil.which("kubectl-cycle", path=os.path.dirname(sys.executable)) is None:
        pytest.skip("kubectl-cycle is not installed next to this Python (pip install -e .)")
    async with world(scenario(2), controllers=False) as w:
        assert w.client is not None
        config = w.sim.server.write_kubeconfig(tmp_path / "kubeconfig")
        await w.client.create(NODEGROUPS, nodegroup("a", "workers-a"))
        code, out, err = await run("a", kubeconfig=config, program="kubectl")
        assert code == 0, err
        assert out.startswith("cyclenoderequest.nodeops.dev/a-")
        assert f"kubectl -n {NS} get cnr -l 'name=a' -w" in out
        (made,) = await requests(w)
        assert made["spec"]["nodeGroupName"] == "workers-a"
