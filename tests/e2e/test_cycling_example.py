"""The walk-through of docs/cycling.md, command by command: a simulated cluster served by
`nodeops sim serve`, the CRDs applied with kubectl, `nodeops run --controllers cycling` against
it, the example request applied with kubectl and watched to Successful."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.kubectl import kubectl_ok as kubectl
from tests.unit.docs.test_cycling_walkthrough import kubectl_age, least_roll_seconds

from .conftest import free_port, nodeops, stop

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]


def test_the_documented_walk_through(tmp_path: Path) -> None:
    config = tmp_path / "sim.kubeconfig"
    port = free_port()
    sim = nodeops(
        "sim", "serve",
        "--scenario", str(EXAMPLES / "scenarios" / "node-groups.yaml"),
        "--port", str(port),
        "--time-scale", "30",
        "--kubeconfig-out", str(config),
    )  # fmt: skip
    manager = None
    try:
        deadline = time.monotonic() + 60
        while not config.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert config.exists(), "the simulator did not start"
        crds = subprocess.run(
            [sys.executable, "-m", "nodeops.cli", "crds"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        kubectl(config, "apply", "-f", "-", stdin=crds)
        kubectl(config, "create", "namespace", "nodeops-system")
        providers = tmp_path / "providers.yaml"
        providers.write_text(
            (EXAMPLES / "cycling" / "providers.yaml")
            .read_text()
            .replace("http://127.0.0.1:8001", f"http://127.0.0.1:{port}")
        )
        manager = nodeops(
            "run",
            "--kubeconfig", str(config),
            "--controllers", "cycling",
            "--provider", "sim",
            "--provider-config", str(providers),
            "--cycling-time-scale", "30",
            "--metrics-addr", "0",
            "--health-addr", "0",
        )  # fmt: skip
        before = set(kubectl(config, "get", "nodes", "-l", "workload=web", "-o", "name").split())
        kubectl(config, "apply", "-f", str(EXAMPLES / "cycling" / "cyclenoderequest.yaml"))
        phase = ""
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            phase = kubectl(
                config, "get", "cnr", "web-roll", "-n", "nodeops-system",
                "-o", "jsonpath={.status.phase}",
            )  # fmt: skip
            if phase in ("Successful", "Failed"):
                break
            time.sleep(0.5)
        assert phase == "Successful"
        table = kubectl(config, "get", "cnr", "-n", "nodeops-system")
        assert "web-roll" in table and "Successful" in table
        # The page's ages are the simulator's: at least a boot of each of the two batches.
        [age] = re.findall(r"web-roll .* (\S+)\n", table)
        assert kubectl_age(age) >= least_roll_seconds(), table
        after = set(kubectl(config, "get", "nodes", "-l", "workload=web", "-o", "name").split())
        assert len(after) == len(before) == 4 and not before & after
        kubectl(config, "apply", "-f", str(EXAMPLES / "cycling" / "nodegroup.yaml"))
        dry = subprocess.run(
            [
                sys.executable,
                "-m",
                "nodeops.cli",
                "cycle",
                "web",
                "--dry",
                "--kubeconfig",
                str(config),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ),
        )
        assert dry.returncode == 0, dry.stderr
        assert "(server dry run)" in dry.stdout
    finally:
        if manager is not None:
            stop(manager)
        stop(sim)
