"""The simulator's kubelets and clouds attached to the external cluster, as a user attaches them:
`nodeops sim attach --kubeconfig K` as a process of its own, stopped with SIGTERM, after which
nothing labelled with its id may be left in the cluster.

What the cluster lacks of a control plane comes from `NODEOPS_E2E_SIM_CONTROLLERS` (`all` for a
bare kube-apiserver, empty for a cluster with kube-controller-manager and kube-scheduler), and
how fast simulated time runs from `NODEOPS_E2E_TIME_SCALE` (keep 1 beside a real
kube-controller-manager, which judges node leases by its own clock).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.external.conftest import kubectl

ATTACH_LABEL = "nodeops.dev/sim-attach"
CONTROLLERS_VARIABLE = "NODEOPS_E2E_SIM_CONTROLLERS"
TIME_SCALE_VARIABLE = "NODEOPS_E2E_TIME_SCALE"
STARTUP_SECONDS = 120.0

# Every kind an attach creates, for the check that it left none behind.
ATTACHED_KINDS = ",".join(
    (
        "nodes",
        "pods",
        "leases.coordination.k8s.io",
        "namespaces",
        "services",
        "deployments.apps",
        "replicasets.apps",
        "statefulsets.apps",
        "daemonsets.apps",
        "poddisruptionbudgets.policy",
    )
)


def sim_controllers() -> str:
    return os.environ.get(CONTROLLERS_VARIABLE, "").strip()


def time_scale() -> float:
    value = os.environ.get(TIME_SCALE_VARIABLE, "").strip() or "1"
    scale = float(value)
    assert scale > 0, f"{TIME_SCALE_VARIABLE}={value} must be positive"
    return scale


@dataclass
class Attached:
    """A running `nodeops sim attach` and what it printed about itself."""

    kubeconfig: Path
    id: str
    proc: subprocess.Popen[str]
    provider_config: Path
    cloud_url: str
    nodes: list[str]
    stderr: Path
    lines: list[str] = field(default_factory=list)

    @property
    def selector(self) -> str:
        return f"{ATTACH_LABEL}={self.id}"

    def providers(self) -> dict[str, Any]:
        loaded: dict[str, Any] = yaml.safe_load(self.provider_config.read_text())["providers"]
        return loaded

    def cloud(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """A request to the simulated cloud's API, with the token attach wrote for providers."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.cloud_url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.providers()['sim']['token']}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
        return json.loads(raw) if raw else None

    def stop(self) -> None:
        """SIGTERM, as Ctrl-C would: the attach removes everything it created, then exits 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError(f"sim attach {self.id} did not stop on SIGTERM") from None
        assert self.proc.returncode == 0, (
            f"sim attach {self.id} exited {self.proc.returncode}: {self.stderr.read_text()[-3000:]}"
        )
        left = kubectl(
            self.kubeconfig, "get", ATTACHED_KINDS, "-A", "-l", self.selector, "-o", "name"
        )
        assert left.returncode == 0, left.stderr
        assert left.stdout.strip() == "", f"left behind by sim attach {self.id}: {left.stdout}"


def _lines_of(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    """stdout read in a thread, so that a silent or hung attach ends the wait at its deadline."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put("")

    threading.Thread(target=read, daemon=True).start()
    return lines


def start_attach(kubeconfig: Path, workdir: Path, *options: str, expect_nodes: int) -> Attached:
    """`nodeops sim attach` with OPTIONS; returns once its `expect_nodes` nodes are Ready."""
    instance = f"e2e-{uuid.uuid4().hex[:8]}"
    provider_config = workdir / f"{instance}-providers.yaml"
    stderr = workdir / f"{instance}-attach.log"
    args = [
        sys.executable, "-m", "nodeops.cli", "sim", "attach", "--kubeconfig", str(kubeconfig),
        "--id", instance, "--provider-config-out", str(provider_config),
        "--time-scale", f"{time_scale():g}", *options,
    ]  # fmt: skip
    controllers = sim_controllers()
    if controllers:
        args += ["--controllers", controllers]
    with stderr.open("w") as err:
        proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
    lines = _lines_of(proc)
    seen: list[str] = []
    cloud_url = ""
    deadline = time.monotonic() + STARTUP_SECONDS
    while not any(line.startswith("provider config written") for line in seen):
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            proc.kill()
            raise AssertionError(f"sim attach did not start: {seen}") from None
        if not line:
            proc.wait(10)
            raise AssertionError(
                f"sim attach exited {proc.returncode}: {stderr.read_text()[-3000:]}"
            )
        seen.append(line)
        if line.startswith("simulated cloud serving at "):
            cloud_url = line.rsplit(" ", 1)[1].strip()
    attached = Attached(kubeconfig, instance, proc, provider_config, cloud_url, [], stderr, seen)
    try:
        selector = attached.selector
        ready = kubectl(
            kubeconfig, "wait", "--for=condition=Ready", "nodes", "-l", selector, "--timeout=90s"
        )
        assert ready.returncode == 0, ready.stderr
        names = kubectl(
            kubeconfig, "get", "nodes", "-l", selector, "-o", "jsonpath={.items[*].metadata.name}"
        )
        assert names.returncode == 0, names.stderr
        attached.nodes = sorted(names.stdout.split())
        assert len(attached.nodes) == expect_nodes, attached.nodes
    except BaseException:
        attached.stop()
        raise
    return attached
