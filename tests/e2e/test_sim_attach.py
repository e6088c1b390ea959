"""`nodeops demo --kubeconfig`: the demo's roll on another API server, with the simulator
attached to it, and nothing of the simulator's left there afterwards.

The other cluster is a bare simulated API server with no loops, standing in for a bare
kube-apiserver, so the attach runs every control-plane loop itself (`--sim-controllers all`).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from nodeops.sim.clock import Clock
from nodeops.sim.server.app import SimServer
from tests.integration.sim.test_attach import labelled_objects


async def test_the_demo_rolls_an_attached_cluster_and_detaches(tmp_path: Path) -> None:
    server = SimServer(clock=Clock(1.0))
    await server.start()
    try:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "nodeops.cli", "demo", "--json", "--nodes", "6",
            "--time-scale", "40", "--kubeconfig", str(kubeconfig), "--sim-controllers", "all",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 300)
        summary = json.loads(out.decode().strip().splitlines()[-1])
        assert summary["phase"] == "Successful", err.decode()[-3000:]
        assert proc.returncode == 0, err.decode()[-3000:]
        # The budgets held: the attached disruption controller judges the eviction API's
        # `disruptedPods` stamps by the server's clock, not by its own faster one.
        assert summary["pdb_violations"] == 0
        assert summary["api_requests"] > 0
        assert summary["nodes_before"] == summary["nodes_cycled"] == 6
        assert summary["nodes_lost"] == 0
        assert summary["instances_orphaned"] == 0
        assert summary["requests_failed"] == 0
        assert summary["cloud_requests"] > 0
        # The roll ran on the other server's nodes, and the attach took all of them away again
        # (its CRDs and namespaces too, which it installed there).
        assert labelled_objects(server) == []
        nodes = server.store.bucket(server.registry.lookup("", "v1", "nodes").storage_key)
        assert list(nodes.entries(None)) == []
    finally:
        await server.stop()
