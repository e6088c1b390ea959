"""The cycling CRDs in a (simulated) API server, through kubectl: a Cyclops manifest applies
after changing its apiVersion, `kubectl get cnr` prints Cyclops's columns, and the API server
refuses what the schema can tell is wrong, naming the field."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nodeops.api import render_crds_yaml
from nodeops.sim.serve import SimCluster, SimOptions
from tests.kubectl import kubectl
from tests.unit.api.test_cycling import CYCLOPS_CNR, CYCLOPS_NODEGROUP

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]


@pytest.fixture
async def kubeconfig(tmp_path: Path) -> AsyncIterator[Path]:
    sim = SimCluster(SimOptions(nodes=1, instant=True, controllers=False))
    await sim.start()
    try:
        yield sim.server.write_kubeconfig(tmp_path / "kubeconfig")
    finally:
        await sim.stop()


async def test_cyclops_manifests_apply_and_print_like_cyclops(kubeconfig: Path) -> None:
    code, _, err = await kubectl(kubeconfig, "apply", "-f", "-", stdin=render_crds_yaml())
    assert code == 0, err
    code, out, err = await kubectl(
        kubeconfig,
        "apply",
        "-n",
        "default",
        "-f",
        "-",
        stdin=CYCLOPS_CNR + "---" + CYCLOPS_NODEGROUP,
    )
    assert code == 0, err
    assert "cyclenoderequest.nodeops.dev/example created" in out
    assert "nodegroup.nodeops.dev/system created" in out
    code, out, err = await kubectl(kubeconfig, "get", "cnr", "-n", "default")
    assert code == 0, err
    header = out.splitlines()[0].split()
    assert header[:6] == ["NAME", "NODE", "GROUP", "NAME", "METHOD", "CONCURRENCY"]
    assert "STATUS" in header and "AGE" in header
    assert out.splitlines()[1].split()[:4] == ["example", "nodes.my-site.com", "Wait", "5"]
    code, out, err = await kubectl(kubeconfig, "get", "ng")
    assert code == 0, err
    assert out.splitlines()[1].split()[:4] == ["system", "system.my-site.com", "Drain", "1"]


async def test_the_api_server_refuses_a_bad_method_naming_the_field(kubeconfig: Path) -> None:
    code, _, err = await kubectl(kubeconfig, "apply", "-f", "-", stdin=render_crds_yaml())
    assert code == 0, err
    bad = CYCLOPS_CNR.replace('method: "Wait"', 'method: "Evict"')
    code, _, err = await kubectl(kubeconfig, "apply", "-n", "default", "-f", "-", stdin=bad)
    assert code != 0
    assert "spec.cycleSettings.method" in err and "Evict" in err
