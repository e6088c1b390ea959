"""Scenarios on a control plane that is not the simulator's own API server.

Set `NODEOPS_E2E_KUBECONFIG` to a kubeconfig of a cluster you may write to (a kind or k3s
cluster, a test area of a real one, a bare kube-apiserver): these tests install nodeops's CRDs
there, write and remove their own objects, and, for the controllers' scenarios, attach the
simulator's kubelets and clouds with `nodeops sim attach`. Without the variable they are
skipped: CI stands on the simulator, and the same scenarios judge it on a real control plane.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.e2e.external.attached import Attached

KUBECONFIG_VARIABLE = "NODEOPS_E2E_KUBECONFIG"


@pytest.fixture(scope="session")
def kubeconfig() -> Path:
    value = os.environ.get(KUBECONFIG_VARIABLE)
    if not value:
        pytest.skip(f"no external cluster: set {KUBECONFIG_VARIABLE} to run these scenarios")
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    path = Path(value)
    assert path.is_file(), f"{KUBECONFIG_VARIABLE}={value} is not a file"
    return path


def kubectl(config: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(config), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="session")
def crds_installed(kubeconfig: Path) -> Path:
    """nodeops's CRDs, applied as a user applies them."""
    from nodeops.api import all_crds, render_crds_yaml

    manifest = render_crds_yaml()
    if _server_minor(kubeconfig) < 28:
        # Older servers refuse the validation rules' fieldPath and reason (1.28).
        import yaml

        from bench.attached_world import strip_new_crd_fields

        manifest = yaml.safe_dump_all([strip_new_crd_fields(crd) for crd in all_crds()])
    done = kubectl(kubeconfig, "apply", "--server-side", "-f", "-", stdin=manifest)
    assert done.returncode == 0, done.stderr
    names = [f"crd/{crd['metadata']['name']}" for crd in all_crds()]
    done = kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", *names)
    assert done.returncode == 0, done.stderr
    return kubeconfig


def _server_minor(kubeconfig: Path) -> int:
    done = kubectl(kubeconfig, "version", "-o", "json")
    assert done.returncode == 0, done.stderr
    minor = json.loads(done.stdout)["serverVersion"]["minor"]
    return int("".join(ch for ch in minor if ch.isdigit()) or 0)


@pytest.fixture
def namespace(kubeconfig: Path) -> Iterator[str]:
    """A namespace of the test's own, removed afterwards with what it holds."""
    name = f"nodeops-e2e-{uuid.uuid4().hex[:8]}"
    done = kubectl(kubeconfig, "create", "namespace", name)
    assert done.returncode == 0, done.stderr
    try:
        yield name
    finally:
        kubectl(kubeconfig, "delete", "namespace", name, "--wait=false")


@pytest.fixture
def sim_attach(kubeconfig: Path, tmp_path: Path) -> Iterator[Callable[..., Attached]]:
    """Starts `nodeops sim attach OPTIONS` (see `attached`); each is stopped with SIGTERM at the
    end, and nothing labelled with its id may be left in the cluster."""
    from tests.e2e.external.attached import start_attach

    started: list[Attached] = []

    def attach(*options: str, expect_nodes: int) -> Attached:
        started.append(start_attach(kubeconfig, tmp_path, *options, expect_nodes=expect_nodes))
        return started[-1]

    yield attach
    for attached in reversed(started):
        attached.stop()
