"""`nodeops run` stops on SIGTERM with nothing left open: exit 0 and no complaint on stderr
about HTTP sessions the process forgot to close (the cloud provider's among them)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.kubectl import kubectl_ok as kubectl

from .conftest import free_port, nodeops, stop

REQUEST = """\
apiVersion: nodeops.dev/v1alpha1
kind: CycleNodeRequest
metadata: {name: web-roll, namespace: nodeops-system}
spec:
  nodeGroupName: group-0
  selector: {matchLabels: {eks.amazonaws.com/nodegroup: group-0}}
  cycleSettings: {method: Drain, concurrency: 1}
"""

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]


def test_sigterm_during_a_roll_closes_every_session(tmp_path: Path) -> None:
    config = tmp_path / "sim.kubeconfig"
    port = free_port()
    sim = nodeops(
        "sim", "serve", "--node-groups", "1", "--nodes", "2", "--instant",
        "--port", str(port), "--kubeconfig-out", str(config),
    )  # fmt: skip
    manager: subprocess.Popen[str] | None = None
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
        providers.write_text(f"providers:\n  sim:\n    url: http://127.0.0.1:{port}\n")
        manager = subprocess.Popen(
            [
                sys.executable, "-m", "nodeops.cli", "run", "--kubeconfig", str(config),
                "--controllers", "cycling", "--provider", "sim",
                "--provider-config", str(providers), "--metrics-addr", "0", "--health-addr", "0",
                "--log-level", "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )  # fmt: skip
        kubectl(config, "apply", "-f", "-", stdin=REQUEST)
        phase = ""
        deadline = time.monotonic() + 60
        while phase in ("", "Pending", "Initialised") and time.monotonic() < deadline:
            # Past these phases the provider has described and detached: its session is open.
            phase = kubectl(
                config, "get", "cnr", "web-roll", "-n", "nodeops-system",
                "-o", "jsonpath={.status.phase}",
            )  # fmt: skip
            time.sleep(0.2)
        assert phase not in ("", "Pending", "Initialised"), f"the roll did not start: {phase!r}"
        manager.send_signal(signal.SIGTERM)
        _, err = manager.communicate(timeout=60)
        assert manager.returncode == 0, err
        assert "Unclosed" not in err, err
    finally:
        if manager is not None and manager.poll() is None:
            manager.kill()
            manager.communicate()
        stop(sim)


def test_sigterm_before_the_caches_synced_ends_quietly(tmp_path: Path) -> None:
    """A manager stopped while its caches still wait (here: the CRDs are not installed, so
    every list of a custom resource is a 404) exits 0 without asyncio's "exception was never
    retrieved" complaint about the wait it abandoned."""
    config = tmp_path / "sim.kubeconfig"
    sim = nodeops(
        "sim", "serve", "--nodes", "0", "--no-controllers", "--kubeconfig-out", str(config)
    )
    manager: subprocess.Popen[str] | None = None
    try:
        deadline = time.monotonic() + 60
        while not config.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert config.exists(), "the simulator did not start"
        manager = subprocess.Popen(
            [
                sys.executable, "-m", "nodeops.cli", "run", "--kubeconfig", str(config),
                "--controllers", "cycling", "--namespace", "nodeops-system",
                "--metrics-addr", "0", "--health-addr", "0",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )  # fmt: skip
        assert manager.stderr is not None
        seen = []
        for line in manager.stderr:
            seen.append(line)
            if "list/watch failed" in line:
                break
        assert any("list/watch failed" in line for line in seen), "".join(seen)
        manager.send_signal(signal.SIGTERM)
        _, err = manager.communicate(timeout=60)
        err = "".join(seen) + err
        assert manager.returncode == 0, err
        assert "never retrieved" not in err, err
        assert "Traceback" not in err, err
    finally:
        if manager is not None and manager.poll() is None:
            manager.kill()
            manager.communicate()
        stop(sim)
