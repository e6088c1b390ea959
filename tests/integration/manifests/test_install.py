"""Every install in `manifests/` is accepted by the simulated API server: a server-side dry run
of each rendered object, then a real `kubectl apply -k` that rolls the operator out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeops.sim.serve import SimCluster, SimOptions
from tests.kustomize import (
    component_dirs,
    name_of,
    needs_kubectl,
    overlay_dirs,
    render_text,
    with_components,
)

pytestmark = needs_kubectl


@pytest.fixture
async def kubeconfig(tmp_path: Path) -> AsyncIterator[Path]:
    sim = SimCluster(SimOptions(nodes=2, instant=True, time_scale=1.0))
    await sim.start()
    try:
        yield sim.server.write_kubeconfig(tmp_path / "kubeconfig")
    finally:
        await sim.stop()


async def kubectl(kubeconfig: Path, *args: str, timeout: float = 90) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=timeout)
    return proc.returncode or 0, out.decode()


def rendered(tmp_path: Path, overlay: Path) -> tuple[Path, list[dict[str, Any]]]:
    """The overlay with every controller component, written to a file for `kubectl apply -f`."""
    text = render_text(with_components(tmp_path / "install", overlay, component_dirs()))
    path = tmp_path / "install.yaml"
    path.write_text(text)
    return path, [d for d in yaml.safe_load_all(text) if d]


@pytest.mark.parametrize("overlay", overlay_dirs(), ids=name_of)
async def test_server_side_dry_run_accepts_every_object(
    kubeconfig: Path, tmp_path: Path, overlay: Path
) -> None:
    manifest, objects = rendered(tmp_path, overlay)
    # As on a real cluster, a dry run cannot create the namespace the other objects go into.
    code, out = await kubectl(kubeconfig, "create", "namespace", "nodeops-system")
    assert code == 0, out
    code, out = await kubectl(
        kubeconfig, "apply", "--server-side", "--dry-run=server", "-f", str(manifest)
    )
    assert code == 0, out
    lines = out.strip().splitlines()
    assert len(lines) == len(objects), out
    assert all(line.endswith("serverside-applied (server dry run)") for line in lines), out
    # Client-side apply takes other paths through the server (a GET, then POST or PATCH).
    code, out = await kubectl(kubeconfig, "apply", "--dry-run=server", "-f", str(manifest))
    assert code == 0, out
    code, out = await kubectl(kubeconfig, "get", "deployments,serviceaccounts", "-A", "-o", "name")
    assert code == 0 and "nodeops" not in out, out


async def test_apply_rolls_the_operator_out(kubeconfig: Path, tmp_path: Path) -> None:
    manifest, objects = rendered(tmp_path, overlay_dirs()[0])
    code, out = await kubectl(kubeconfig, "apply", "--server-side", "-f", str(manifest))
    assert code == 0, out
    code, out = await kubectl(
        kubeconfig, "-n", "nodeops-system", "rollout", "status", "deployment/nodeops",
        "--timeout=60s",
    )  # fmt: skip
    assert code == 0 and "successfully rolled out" in out, out
    code, out = await kubectl(
        kubeconfig,
        "-n",
        "nodeops-system",
        "get",
        "pods",
        "-o",
        "jsonpath={.items[*].spec.nodeName}",
    )
    assert code == 0, out
    assert len(out.split()) == 2
    # Applying the same manifests again changes nothing.
    code, out = await kubectl(kubeconfig, "apply", "--server-side", "-f", str(manifest))
    assert code == 0, out
    assert len(out.strip().splitlines()) == len(objects)
    code, out = await kubectl(kubeconfig, "-n", "nodeops-system", "get", "pdb,netpol,svc")
    assert code == 0, out
    for shown in (
        "poddisruptionbudget.policy/nodeops",
        "networkpolicy.networking.k8s.io/nodeops   app.kubernetes.io/name=nodeops",
        "service/nodeops-metrics",
    ):
        assert shown in out, out
