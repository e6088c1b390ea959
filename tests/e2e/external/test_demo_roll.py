"""The demo's roll on the external cluster: the simulator's nodes, cloud and load balancer
attached to it (`nodeops demo --kubeconfig`), the cycling controllers replacing every node,
and nothing of the simulator's left behind.

`NODEOPS_E2E_SIM_CONTROLLERS` says which of the simulator's control-plane loops the cluster
lacks (`all` for a bare kube-apiserver, `scheduler` for one without kube-scheduler; empty, the
default, for a cluster running kube-controller-manager and kube-scheduler).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.e2e.external.conftest import kubectl


def test_the_demo_rolls_the_cluster_and_leaves_nothing_behind(kubeconfig: Path) -> None:
    controllers = os.environ.get("NODEOPS_E2E_SIM_CONTROLLERS", "")
    args = [sys.executable, "-m", "nodeops.cli", "demo", "--json", "--kubeconfig", str(kubeconfig)]
    if controllers:
        args += ["--sim-controllers", controllers]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-3000:]
    summary = json.loads(lines[-1])
    assert summary["phase"] == "Successful", done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]
    assert summary["pdb_violations"] == 0
    assert summary["requests_failed"] == 0
    assert summary["nodes_lost"] == 0
    assert summary["nodes_cycled"] == summary["nodes_before"]
    # A namespace goes when the cluster's namespace controller has emptied it: wait for that.
    gone = kubectl(
        kubeconfig,
        "wait",
        "--for=delete",
        "nodes,pods,namespaces",
        "-A",
        "-l",
        "nodeops.dev/sim-attach",
        "--timeout=120s",
    )
    assert gone.returncode == 0 or "no matching resources" in gone.stderr, gone.stderr
    left = kubectl(
        kubeconfig,
        "get",
        "nodes,pods,namespaces",
        "-A",
        "-l",
        "nodeops.dev/sim-attach",
        "-o",
        "name",
    )
    assert left.returncode == 0, left.stderr
    assert left.stdout.strip() == ""
