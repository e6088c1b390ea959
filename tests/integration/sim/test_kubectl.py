"""kubectl, unchanged, against the simulated cluster: the fidelity check a user would do first."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from nodeops.sim.serve import SimCluster, SimOptions
from tests.kubectl import kubectl

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[SimCluster, Path]]:
    sim = SimCluster(SimOptions(nodes=2, pods_per_node=0, instant=True, time_scale=1.0))
    await sim.start()
    kubeconfig = sim.server.write_kubeconfig(tmp_path / "kubeconfig")
    try:
        yield sim, kubeconfig
    finally:
        await sim.stop()


DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 4
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: nginx:1.27
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: web
  namespace: default
spec:
  minAvailable: {min_available}
  selector:
    matchLabels: {app: web}
"""


async def wait_for(predicate: object, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await predicate()  # type: ignore[operator]
        if result:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.1)


async def test_get_apply_delete(cluster: tuple[SimCluster, Path]) -> None:
    _, kc = cluster
    code, out, err = await kubectl(kc, "get", "nodes")
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert len(lines) == 3 and all(" Ready " in ln for ln in lines[1:])

    manifest = DEPLOYMENT.replace("{min_available}", "1")
    code, out, err = await kubectl(kc, "apply", "-f", "-", stdin=manifest)
    assert code == 0, err
    assert "deployment.apps/web created" in out
    assert "poddisruptionbudget.policy/web created" in out
    code, out, err = await kubectl(kc, "apply", "-f", "-", stdin=manifest)
    assert code == 0 and "unchanged" in out, out + err

    async def four_running() -> bool:
        _, out, _ = await kubectl(kc, "get", "pods", "-l", "app=web", "--no-headers")
        return out.count("Running") == 4

    await wait_for(four_running)
    code, out, err = await kubectl(
        kc, "get", "pdb", "web", "-o", "jsonpath={.status.currentHealthy}"
    )
    assert code == 0, err

    code, out, err = await kubectl(kc, "delete", "pdb", "web")
    assert code == 0 and 'poddisruptionbudget.policy "web" deleted' in out, err
    code, out, err = await kubectl(kc, "get", "pdb", "web")
    assert code != 0 and "NotFound" in err


async def test_apply_of_a_list_validates_its_items_and_applies_them(
    cluster: tuple[SimCluster, Path],
) -> None:
    """A file whose kind is List sends kubectl to `/openapi/v2` for its items' schemas; without
    the document, the whole apply fails ("the server could not find the requested resource")."""
    _, kc = cluster
    manifest = yaml.safe_load_all(DEPLOYMENT.replace("{min_available}", "1"))
    listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(manifest)})
    code, out, err = await kubectl(kc, "apply", "-f", "-", stdin=listed)
    assert code == 0, err
    assert "deployment.apps/web created" in out and "poddisruptionbudget.policy/web" in out
    code, out, err = await kubectl(
        kc, "apply", "-f", "-", stdin=listed.replace('"minAvailable": 1', '"minAvailable": 2')
    )
    assert code == 0, err
    assert "poddisruptionbudget.policy/web configured" in out, out
    code, out, err = await kubectl(kc, "get", "--raw", "/openapi/v2")
    assert code == 0 and json.loads(out)["swagger"] == "2.0", err


async def test_cordon_and_drain(cluster: tuple[SimCluster, Path]) -> None:
    _, kc = cluster
    code, _, err = await kubectl(
        kc, "apply", "-f", "-", stdin=DEPLOYMENT.replace("{min_available}", "1")
    )
    assert code == 0, err

    async def four_running() -> bool:
        _, out, _ = await kubectl(kc, "get", "pods", "-l", "app=web", "--no-headers")
        return out.count("Running") == 4

    await wait_for(four_running)
    code, out, err = await kubectl(kc, "cordon", "node-0")
    assert code == 0 and "node/node-0 cordoned" in out, err
    code, out, _ = await kubectl(kc, "get", "node", "node-0", "--no-headers")
    assert "Ready,SchedulingDisabled" in out
    code, out, err = await kubectl(kc, "uncordon", "node-0")
    assert code == 0 and "node/node-0 uncordoned" in out, err

    code, out, err = await kubectl(
        kc, "drain", "node-0", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s"
    )
    assert code == 0, out + err
    assert "node/node-0 drained" in out
    code, out, _ = await kubectl(
        kc, "get", "pods", "-A", "--field-selector", "spec.nodeName=node-0", "--no-headers"
    )
    assert out.strip() == "" or "No resources" in out


async def test_drain_blocked_by_pdb(cluster: tuple[SimCluster, Path]) -> None:
    _, kc = cluster
    manifest = DEPLOYMENT.replace("{min_available}", "4")
    code, _, err = await kubectl(kc, "apply", "-f", "-", stdin=manifest)
    assert code == 0, err

    async def pdb_current() -> bool:
        _, out, _ = await kubectl(
            kc, "get", "pdb", "web", "-o", "jsonpath={.status.currentHealthy}"
        )
        return out.strip() == "4"

    await wait_for(pdb_current)
    code, _, err = await kubectl(kc, "drain", "node-0", "--timeout=3s")
    assert code != 0
    assert "Cannot evict pod as it would violate the pod's disruption budget" in err
    assert "global timeout reached: 3s" in err or "timed out" in err


CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, shortNames: [gd]}
  versions:
  - name: v1
    served: true
    storage: true
    additionalPrinterColumns:
    - {name: Color, type: string, jsonPath: .spec.color}
    - {name: Count, type: integer, jsonPath: .spec.count}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              color: {type: string}
              count: {type: integer}
"""

GADGET = """
apiVersion: example.com/v1
kind: Gadget
metadata: {name: g1, namespace: default}
spec: {color: blue, count: 7}
"""


async def test_custom_resource_printer_columns(cluster: tuple[SimCluster, Path]) -> None:
    _, kc = cluster
    code, out, err = await kubectl(kc, "apply", "-f", "-", stdin=CRD)
    assert code == 0, err
    code, out, err = await kubectl(kc, "apply", "-f", "-", stdin=GADGET)
    assert code == 0, err
    code, out, err = await kubectl(kc, "get", "gd")
    assert code == 0, err
    header, row = out.strip().splitlines()
    assert header.split() == ["NAME", "COLOR", "COUNT"]
    assert row.split() == ["g1", "blue", "7"]


async def test_kubectl_authenticates_over_tls_and_rbac_applies(tmp_path: Path) -> None:
    """With --rbac the simulator serves HTTPS, so kubectl sends the kubeconfig's token."""
    sim = SimCluster(SimOptions(nodes=1, instant=True, rbac=True))
    await sim.start()
    try:
        assert sim.server.url.startswith("https://")
        admin = sim.server.write_kubeconfig(tmp_path / "admin")
        code, out, err = await kubectl(admin, "get", "nodes", "--no-headers")
        assert code == 0 and out.startswith("node-0"), err
        code, out, err = await kubectl(admin, "create", "serviceaccount", "viewer")
        assert code == 0, err
        code, token, err = await kubectl(admin, "create", "token", "viewer")
        assert code == 0, err
        viewer = sim.server.write_kubeconfig(tmp_path / "viewer", token=token.strip())
        code, out, err = await kubectl(viewer, "get", "nodes")
        assert code != 0
        assert 'User "system:serviceaccount:default:viewer" cannot list resource "nodes"' in err
    finally:
        await sim.stop()
