"""What the API server answers a user of nodeops: the CRDs install, a misspelt field is refused,
a validation rule runs on the server, and `kubectl get -w` prints every change as a row.

Each of these was once accepted by the simulator and refused (or shown differently) by
kube-apiserver; on an external cluster they show which one a user would meet.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import yaml

from tests.e2e.external.conftest import kubectl


def node_group(name: str, **spec_fields: object) -> str:
    spec = {
        "nodeGroupsList": ["group-a"],
        "nodeSelector": {"matchLabels": {"group": "a"}},
        "cycleSettings": {"method": "Drain"},
        **spec_fields,
    }
    doc = {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "NodeGroup",
        "metadata": {"name": name},
        "spec": spec,
    }
    return yaml.safe_dump(doc)


def test_the_crds_install_and_are_established(crds_installed: Path) -> None:
    done = kubectl(crds_installed, "get", "crd", "-o", "name")
    assert done.returncode == 0, done.stderr
    for plural in ("cyclenoderequests", "cyclenodestatuses", "nodegroups", "nodedrainrules"):
        assert f"customresourcedefinition.apiextensions.k8s.io/{plural}.nodeops.dev" in done.stdout


def test_a_misspelt_field_is_refused_by_kubectl_apply(crds_installed: Path) -> None:
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    manifest = node_group(name, maxFailedCycleNodeRequets=1)
    done = kubectl(crds_installed, "apply", "-f", "-", stdin=manifest)
    assert done.returncode != 0
    assert 'strict decoding error: unknown field "spec.maxFailedCycleNodeRequets"' in done.stderr
    assert kubectl(crds_installed, "get", "nodegroup", name).returncode != 0


def test_a_validation_rule_runs_on_the_server(crds_installed: Path, namespace: str) -> None:
    request = {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "CycleNodeRequest",
        "metadata": {"name": "rule", "namespace": namespace},
        "spec": {
            "nodeGroupName": "group-a",
            "selector": {"matchLabels": {"group": "a"}},
            "cycleSettings": {"method": "Drain"},
            # A budget's window needs both (`has(self.schedule) == has(self.duration)`).
            "budgets": [{"nodes": 1, "schedule": "0 2 * * *"}],
        },
    }
    done = kubectl(crds_installed, "create", "-f", "-", stdin=yaml.safe_dump(request))
    assert done.returncode != 0, done.stdout
    assert "schedule and duration go together" in done.stderr


def test_watching_nodes_prints_every_change_as_a_row(kubeconfig: Path) -> None:
    nodes = kubectl(kubeconfig, "get", "nodes", "-o", "name")
    assert nodes.returncode == 0, nodes.stderr
    first = nodes.stdout.split()[0] if nodes.stdout.split() else None
    if first is None:
        return  # a bare API server without nodes: nothing to watch until `nodeops sim attach`
    watch = subprocess.Popen(
        ["kubectl", "--kubeconfig", str(kubeconfig), "get", "nodes", "-w"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    key = f"nodeops.dev/e2e-{uuid.uuid4().hex[:6]}"
    try:
        assert watch.stdout is not None
        header = watch.stdout.readline()
        assert header.split()[:3] == ["NAME", "STATUS", "ROLES"], header
        rows = [watch.stdout.readline() for _ in nodes.stdout.split()]
        done = kubectl(kubeconfig, "label", first, f"{key}=1")
        assert done.returncode == 0, done.stderr
        changed = watch.stdout.readline()
        for row in [*rows, changed]:
            assert "<invalid>" not in row and len(row.split()) >= 5, row
    finally:
        watch.kill()
        watch.wait()
        kubectl(kubeconfig, "label", first, f"{key}-")
