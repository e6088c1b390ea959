"""`nodeops cycle NODEGROUP --rehearse --kubeconfig K` on a real control plane: it reads the
cluster as the cluster's own authorizer lets it, changes nothing there or in the cloud, and names
the budget the roll would stall on; an identity that may not list something the rehearsal needs
is told which verb and resource, in one line, before anything is read.

(`bench.rehearse --kubeconfig K` then rolls such a cluster for real and compares.)"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.external.attached import ATTACH_LABEL, Attached
from tests.e2e.external.conftest import kubectl
from tests.e2e.external.workloads import apply_and_wait_ready, pinned_deployment

CLOUD_GROUP = "group-0"  # the first cloud group of `sim attach --node-groups 1`


def _nodegroup(name: str, attached: Attached) -> dict[str, Any]:
    return {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "NodeGroup",
        "metadata": {"name": name, "labels": {ATTACH_LABEL: attached.id}},
        "spec": {
            "nodeGroupName": CLOUD_GROUP,
            "nodeSelector": {"matchLabels": {ATTACH_LABEL: attached.id}},
            "cycleSettings": {
                "method": "Drain",
                "concurrency": 1,
                "drainDeadline": "2m",
                "onDrainDeadline": "Force",
            },
        },
    }


def _get_json(kubeconfig: Path, *args: str) -> Any:
    done = kubectl(kubeconfig, "get", *args, "-o", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _what_a_roll_would_change(kubeconfig: Path, attached: Attached, nodegroup: str) -> Any:
    """Everything a real roll writes first: the nodes' spec and labels (cordons, taints), the
    pods themselves (evictions), CycleNodeRequests and their statuses, the NodeGroup, Events
    about them, and the cloud group's size and instances."""
    nodes = _get_json(kubeconfig, "nodes", "-l", attached.selector)["items"]
    pods = _get_json(kubeconfig, "pods", "-A")["items"]
    requests = _get_json(
        kubeconfig, "cyclenoderequests.nodeops.dev,cyclenodestatuses.nodeops.dev", "-A"
    )
    group = _get_json(kubeconfig, "nodegroups.nodeops.dev", nodegroup)
    events = _get_json(kubeconfig, "events", "-A")["items"]
    about = (
        {n["metadata"]["name"] for n in nodes}
        | {nodegroup}
        | {p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") in attached.nodes}
    )
    return {
        "nodes": {
            n["metadata"]["name"]: (n.get("spec"), n["metadata"].get("labels")) for n in nodes
        },
        "pods": sorted(
            (
                p["metadata"]["uid"],
                p["spec"].get("nodeName"),
                p["metadata"].get("deletionTimestamp"),
            )
            for p in pods
        ),
        "requests": [o["metadata"]["name"] for o in requests["items"]],
        "nodegroup": group["metadata"]["resourceVersion"],
        # Events about the attach's nodes and pods or the NodeGroup, from whoever reported
        # them: a roll reports on each node it cordons and each pod it evicts. Not the node
        # controller's RegisteredNode, which notes a node it has not seen before at its next
        # check (every 5 s), whatever else happens: the attach's nodes may be that new.
        "events": sorted(
            e["metadata"]["name"]
            for e in events
            if (e.get("involvedObject") or {}).get("name") in about
            and e.get("reason") != "RegisteredNode"
        ),
        "cloud group": attached.cloud("GET", f"/sim/cloud/nodegroups/{CLOUD_GROUP}"),
    }


def _rehearse(kubeconfig: Path, nodegroup: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "nodeops.cli",
            "cycle",
            nodegroup,
            "--rehearse",
            "--kubeconfig",
            str(kubeconfig),
            "--boot-seconds",
            "30",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_rehearsal_reads_the_cluster_changes_nothing_and_names_the_stall(
    crds_installed: Path, namespace: str, sim_attach: Callable[..., Attached]
) -> None:
    kubeconfig = crds_installed
    attached = sim_attach("--node-groups", "1", "--nodes", "3", expect_nodes=3)
    # A budget that allows no disruption: every drain of its pods stalls to the deadline.
    apply_and_wait_ready(
        kubeconfig, pinned_deployment(attached, namespace, "web", 2, max_unavailable=0)
    )
    nodegroup = f"rehearse-{namespace}"
    # Not validated by the server: its validity is not this scenario's subject, and the strict
    # field validation of early 1.24 servers refused every custom resource's metadata.
    done = kubectl(
        kubeconfig, "create", "--validate=false", "-f", "-",
        stdin=yaml.safe_dump(_nodegroup(nodegroup, attached)),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    try:
        before = _what_a_roll_would_change(kubeconfig, attached, nodegroup)
        done = _rehearse(
            kubeconfig, nodegroup, "--json", "--provider", "sim",
            "--provider-config", str(attached.provider_config),
        )  # fmt: skip
        after = _what_a_roll_would_change(kubeconfig, attached, nodegroup)
    finally:
        kubectl(kubeconfig, "delete", "nodegroups.nodeops.dev", nodegroup, "--wait=false")
    assert done.returncode == 1, done.stderr[-3000:]  # it predicts a failure
    report = json.loads(done.stdout)
    assert after == before
    stalled = f"PodDisruptionBudget {namespace}/web would hold a drain"
    assert any(f.startswith(stalled) for f in report["failures"]), report["failures"]
    assert any(b["budget"] == f"{namespace}/web" for b in report["budgets"]), report["budgets"]
    assert report["inputs"]["nodes"] >= 3
    # The calls the real roll would make: the stalled pods deleted at the deadline (Force),
    # the replaced nodes deleted, their instances terminated in the cloud.
    assert report["api_calls"].get("delete/pods") == 2, report["api_calls"]
    assert report["api_calls"].get("delete/nodes") == 3, report["api_calls"]
    assert any(call.endswith("cloud/instances") for call in report["cloud_calls"]), report


def test_a_missing_read_permission_is_named_before_anything_is_read(
    crds_installed: Path, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = crds_installed
    account, role = "rehearser", f"rehearser-{namespace}"
    # Everything the rehearsal lists but Deployments.
    rules = [
        {"apiGroups": [""], "resources": ["nodes", "pods", "namespaces"], "verbs": ["list"]},
        {"apiGroups": ["nodeops.dev"], "resources": ["*"], "verbs": ["list"]},
        {
            "apiGroups": ["apps"],
            "resources": ["replicasets", "statefulsets", "daemonsets"],
            "verbs": ["list"],
        },
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list"]},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list"]},
        {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["list"]},
    ]
    docs = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role}, "rules": rules},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    ]  # fmt: skip
    done = kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    assert done.returncode == 0, done.stderr
    try:
        token = kubectl(kubeconfig, "create", "token", account, "-n", namespace)
        assert token.returncode == 0, token.stderr
        config = yaml.safe_load(kubeconfig.read_text())
        for user in config["users"]:
            user["user"] = {"token": token.stdout.strip()}
        restricted = tmp_path / "rehearser.kubeconfig"
        restricted.write_text(yaml.safe_dump(config))
        can = kubectl(restricted, "auth", "can-i", "list", "deployments.apps", "-A")
        if can.stdout.strip() == "yes":
            pytest.skip("the cluster lets the account list deployments: it enforces no RBAC")
        done = _rehearse(restricted, "workers")
    finally:
        kubectl(kubeconfig, "delete", "clusterrolebinding,clusterrole", role, "--wait=false")
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot list deployments.apps" in lines[0], lines
