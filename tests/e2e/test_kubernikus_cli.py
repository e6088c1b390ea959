"""`nodeops run --controllers kubernikus` as users run it, against `nodeops sim serve` with a
simulated OpenStack: kubectl creates the credentials Secret and sets the delete label, the
process is killed with SIGKILL in the middle of a node's deletion and a new one finishes it."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kubectl import kubectl_ok as kubectl

from .conftest import nodeops, stop

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

CONFIG = """\
intervals:
  requeue: 2s
  podDeletion: {period: 250ms, timeout: 5m}
  podEviction: {period: 250ms, timeout: 5m, force: false}
cloudProviderSecret: {name: cloud-config, namespace: kube-system}
"""


@pytest.fixture
def kubernikus_cluster(tmp_path: Path) -> Iterator[Path]:
    """`nodeops sim serve` with a node pool of three v1.31.4 nodes and a v1.32.1 API server."""
    kubeconfig = tmp_path / "sim.kubeconfig"
    proc = nodeops(
        "sim", "serve", "--nodes", "0", "--instant", "--time-scale", "20",
        "--kube-version", "v1.32.1", "--openstack-pool", "workers:3:v1.31.4",
        "--kubeconfig-out", str(kubeconfig),
    )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    lines = []
    while time.monotonic() < deadline:
        lines.append(proc.stdout.readline())
        if "cloudprovider.conf written" in lines[-1]:
            break
        if proc.poll() is not None:
            raise AssertionError(f"sim serve exited: {''.join(lines)}{proc.stdout.read()}")
    else:
        raise AssertionError("sim serve did not start")
    try:
        yield kubeconfig
    finally:
        stop(proc)


def api(kubeconfig: Path, path: str, method: str = "GET", body: bytes | None = None) -> Any:
    server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    req = urllib.request.Request(server + path, data=body, method=method)
    with urllib.request.urlopen(req, timeout=10) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


def nodes(kubeconfig: Path) -> dict[str, dict[str, Any]]:
    return {n["metadata"]["name"]: n for n in api(kubeconfig, "/api/v1/nodes")["items"]}


def wait(
    check: Callable[[], Any], what: str, proc: subprocess.Popen[str], timeout: float = 90
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if proc.poll() is not None:
            raise AssertionError(
                f"nodeops exited while waiting for {what}: {proc.stdout.read() if proc.stdout else ''}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {found!r}")
        time.sleep(0.1)


def run_controller(kubeconfig: Path, config: Path) -> subprocess.Popen[str]:
    return nodeops(
        "run", "--kubeconfig", str(kubeconfig), "--controllers", "kubernikus",
        "--kubernikus-config", str(config), "--metrics-addr", "0", "--health-addr", "0",
    )  # fmt: skip


def test_a_bad_config_stops_startup_with_its_line(kubernikus_cluster: Path, tmp_path: Path) -> None:
    config = tmp_path / "kubernikus.yaml"
    config.write_text(CONFIG.replace("requeue: 2s", "requeue: soon"))
    proc = run_controller(kubernikus_cluster, config)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert (
        out.strip()
        .splitlines()[-1]
        .startswith(f'nodeops run: {config}:2: intervals.requeue: invalid duration "soon": ')
    )


def test_killed_mid_deletion_a_new_process_finishes_it(
    kubernikus_cluster: Path, tmp_path: Path
) -> None:
    conf = kubernikus_cluster.with_name("sim-cloudprovider.conf")
    secret = kubectl(
        kubernikus_cluster, "create", "secret", "generic", "cloud-config", "-n", "kube-system",
        f"--from-file=cloudprovider.conf={conf}", "--dry-run=client", "-o", "yaml",
    )  # fmt: skip
    kubectl(kubernikus_cluster, "apply", "-f", "-", stdin=secret)
    config = tmp_path / "kubernikus.yaml"
    config.write_text(CONFIG)
    original = nodes(kubernikus_cluster)
    victim = sorted(original)[0]
    # Nova refuses every deletion for now, so the process is caught between recording the
    # deletion and carrying it out.
    api(kubernikus_cluster, "/sim/faults", "PUT", b"error=500:1@delete/openstack/servers")

    first = run_controller(kubernikus_cluster, config)
    try:
        wait(
            lambda: all(
                n["metadata"].get("labels", {}).get("nodeops.dev/kubelet-needs-update") == "true"
                for n in nodes(kubernikus_cluster).values()
            ),
            "every node labelled as outdated",
            first,
        )
        kubectl(kubernikus_cluster, "label", "node", victim, "nodeops.dev/delete-node=true")

        def recorded() -> bool:
            node = nodes(kubernikus_cluster)[victim]
            text = node["metadata"].get("annotations", {}).get("nodeops.dev/delete-node-progress")
            return bool(text) and json.loads(text)["step"] == "DeletingServer"

        wait(recorded, "the server deletion recorded", first)
    finally:
        assert stop(first, signal.SIGKILL) == -signal.SIGKILL

    api(kubernikus_cluster, "/sim/faults", "PUT", b"")
    second = run_controller(kubernikus_cluster, config)
    try:

        def replaced() -> dict[str, str] | None:
            current = nodes(kubernikus_cluster)
            versions = {k: n["status"]["nodeInfo"]["kubeletVersion"] for k, n in current.items()}
            fresh = [k for k in current if k not in original]
            return (
                versions
                if victim not in current and len(fresh) == 1 and len(current) == 3
                else None
            )

        versions = wait(replaced, "the node replaced", second)
        fresh = next(k for k in versions if k not in original)
        assert versions[fresh] == "v1.32.1"
        labels = nodes(kubernikus_cluster)[fresh]["metadata"].get("labels", {})
        assert "nodeops.dev/kubelet-needs-update" not in labels
    finally:
        assert stop(second) == 0
