"""The generated objects must look like a real cluster's, in size as well as in shape."""

from __future__ import annotations

import random
import re
from typing import Any

import orjson
import pytest

from nodeops.sim import objects as gen

REAL_POD_BYTES = 9_634
NODE = "ip-10-0-12-34.eu-west-1.compute.internal"


def _rs(rng: Any = None) -> dict[str, Any]:
    deployment = gen.make_deployment("web", "shop", replicas=6, rng=rng, with_server_fields=True)
    return gen.replicaset_for_deployment(deployment, rng=rng, with_server_fields=True)


def _pod(rng: Any = None, **kw: Any) -> dict[str, Any]:
    rs = _rs(rng)
    kw.setdefault("node_name", NODE)
    return gen.make_pod(
        f"{rs['metadata']['name']}-x2k9p",
        "shop",
        owner=rs,
        rng=rng,
        with_server_fields=True,
        **kw,
    )


def _size(obj: Any) -> int:
    return len(orjson.dumps(obj))


def _managers(obj: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    return [
        (e["manager"], e["operation"], e.get("subresource"))
        for e in obj["metadata"]["managedFields"]
    ]


# --- pods ------------------------------------------------------------------------------------


def test_pod_is_the_size_of_a_real_one_with_the_same_managed_fields_share() -> None:
    pod = _pod()
    size = _size(pod)
    share = _size(pod["metadata"]["managedFields"]) / size
    assert abs(size - REAL_POD_BYTES) <= REAL_POD_BYTES * 0.10, size
    assert 0.35 <= share <= 0.43, share


def test_pod_metadata_has_labels_annotations_and_a_controller_reference() -> None:
    rs = _rs()
    pod = gen.make_pod("web-x", "shop", node_name=NODE, owner=rs)
    meta = pod["metadata"]
    pth = rs["metadata"]["labels"]["pod-template-hash"]
    assert meta["labels"] == {"app": "web", "team": "shop", "pod-template-hash": pth}
    assert len(meta["annotations"]) == 2
    assert meta["generateName"] == f"{rs['metadata']['name']}-"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "apps/v1",
            "blockOwnerDeletion": True,
            "controller": True,
            "kind": "ReplicaSet",
            "name": rs["metadata"]["name"],
            "uid": rs["metadata"]["uid"],
        }
    ]


def test_pod_spec_carries_defaults_and_admission_additions() -> None:
    spec = _pod()["spec"]
    containers = spec["containers"]
    assert len(containers) == 2
    for c in containers:
        assert c["resources"]["requests"] and c["resources"]["limits"]
        assert c["env"] and c["ports"]
        assert any(m["mountPath"].endswith("serviceaccount") for m in c["volumeMounts"])
    assert "livenessProbe" in containers[0] and "readinessProbe" in containers[0]
    api_access = [v for v in spec["volumes"] if v["name"].startswith("kube-api-access-")]
    assert len(api_access) == 1 and "projected" in api_access[0]
    assert spec["tolerations"] == [
        {
            "effect": "NoExecute",
            "key": f"node.kubernetes.io/{key}",
            "operator": "Exists",
            "tolerationSeconds": 300,
        }
        for key in ("not-ready", "unreachable")
    ]
    assert spec["nodeName"] == NODE
    assert spec["serviceAccountName"] == "default"
    assert spec["terminationGracePeriodSeconds"] == 30


def test_running_pod_status_is_what_kubelet_reports() -> None:
    status = _pod()["status"]
    assert status["phase"] == "Running"
    assert [c["type"] for c in status["conditions"]] == [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]
    assert all(c["status"] == "True" for c in status["conditions"])
    for cs in status["containerStatuses"]:
        assert cs["ready"] and cs["started"]
        assert cs["containerID"].startswith("containerd://")
        assert "@sha256:" in cs["imageID"]
        assert "startedAt" in cs["state"]["running"]
    assert status["hostIP"] == "10.0.12.34"
    assert status["hostIPs"] == [{"ip": "10.0.12.34"}]
    assert status["podIPs"] == [{"ip": status["podIP"]}]
    assert status["qosClass"] == "Burstable"
    assert status["startTime"]


def test_pod_managed_fields_are_the_controller_and_kubelet_entries() -> None:
    pod = _pod()
    assert _managers(pod) == [
        ("kube-controller-manager", "Update", None),
        ("kubelet", "Update", "status"),
    ]
    creator, kubelet = (e["fieldsV1"] for e in pod["metadata"]["managedFields"])
    containers = creator["f:spec"]["f:containers"]
    assert set(containers) == {'k:{"name":"web"}', 'k:{"name":"log-shipper"}'}
    web = containers['k:{"name":"web"}']
    assert web["."] == {}
    assert 'k:{"containerPort":8080,"protocol":"TCP"}' in web["f:ports"]
    owner_uid = pod["metadata"]["ownerReferences"][0]["uid"]
    assert creator["f:metadata"]["f:ownerReferences"] == {".": {}, f'k:{{"uid":"{owner_uid}"}}': {}}
    # Admission's additions are nobody's fields.
    assert "f:tolerations" not in creator["f:spec"]
    assert not any("kube-api-access" in k for k in creator["f:spec"]["f:volumes"])
    conditions = kubelet["f:status"]["f:conditions"]
    assert 'k:{"type":"Ready"}' in conditions
    assert 'k:{"type":"PodScheduled"}' not in conditions
    assert kubelet["f:status"]["f:containerStatuses"] == {}


def test_unready_and_pending_pods() -> None:
    unready = _pod(ready=False)["status"]
    ready_cond = next(c for c in unready["conditions"] if c["type"] == "Ready")
    assert ready_cond["status"] == "False" and ready_cond["reason"] == "ContainersNotReady"

    pending = gen.make_pod("lonely", "shop", node_name=None, phase="Pending")
    assert pending["status"]["phase"] == "Pending"
    assert pending["status"]["conditions"][0]["reason"] == "Unschedulable"
    assert "hostIP" not in pending["status"]
    assert _managers(pending)[-1] == ("kube-scheduler", "Update", "status")

    with pytest.raises(ValueError, match="bound to a node"):
        gen.make_pod("lost", "shop", node_name=None, phase="Running")


def test_pod_from_template_is_make_pod_without_status() -> None:
    rs = _rs()
    made = gen.make_pod("web-abcde", "shop", node_name=NODE, owner=rs, rng=3)
    created = gen.pod_from_template(
        rs["spec"]["template"],
        name="web-abcde",
        namespace="shop",
        owner=rs,
        node_name=NODE,
        rng=random.Random("3/Pod/shop/web-abcde"),
    )
    assert "status" not in created
    assert created["spec"] == made["spec"]
    assert created["metadata"]["labels"] == made["metadata"]["labels"]
    assert created["metadata"]["managedFields"] == made["metadata"]["managedFields"][:1]


def test_daemonset_and_statefulset_pods_carry_what_their_controllers_add() -> None:
    ds = gen.make_daemonset("agent", "kube-system", nodes=3, with_server_fields=True)
    pod = gen.pod_from_template(
        ds["spec"]["template"],
        name="agent-abcde",
        namespace="kube-system",
        owner=ds,
        node_name=NODE,
    )
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms[0]["matchFields"][0]["values"] == [NODE]
    keys = {t["key"] for t in pod["spec"]["tolerations"]}
    assert "node.kubernetes.io/unschedulable" in keys
    assert "controller-revision-hash" in pod["metadata"]["labels"]
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"

    sts = gen.make_statefulset("db", "shop", service_name="db-headless", with_server_fields=True)
    pod = gen.pod_from_template(
        sts["spec"]["template"], name="db-2", namespace="shop", owner=sts, node_name=None
    )
    assert pod["spec"]["hostname"] == "db-2"
    assert pod["spec"]["subdomain"] == "db-headless"
    assert pod["metadata"]["labels"]["apps.kubernetes.io/pod-index"] == "2"
    assert "generateName" not in pod["metadata"]


def test_an_owner_must_have_a_uid() -> None:
    rs = gen.make_replicaset("web-1", "shop")
    with pytest.raises(ValueError, match="uid"):
        gen.make_pod("web-1-abcde", "shop", node_name=NODE, owner=rs)


# --- determinism and server fields -----------------------------------------------------------


def test_same_seed_same_bytes_different_seed_different_uids() -> None:
    assert orjson.dumps(_pod(random.Random(7))) == orjson.dumps(_pod(random.Random(7)))
    assert orjson.dumps(_pod(7)) == orjson.dumps(_pod(7))
    assert _pod(7)["metadata"]["uid"] != _pod(8)["metadata"]["uid"]
    a = gen.make_node("a", rng=7, with_server_fields=True)
    b = gen.make_node("b", rng=7, with_server_fields=True)
    assert a["metadata"]["uid"] != b["metadata"]["uid"]
    stream = random.Random(1)
    uids = {
        gen.make_pod("p", "ns", node_name=NODE, rng=stream, with_server_fields=True)["metadata"][
            "uid"
        ]
        for _ in range(5)
    }
    assert len(uids) == 5


def test_server_fields_only_when_asked() -> None:
    server_set = {"uid", "resourceVersion", "creationTimestamp"}
    for build in (
        lambda **kw: gen.make_node("n", **kw),
        lambda **kw: gen.make_pod("p", "ns", node_name=NODE, **kw),
        lambda **kw: gen.make_deployment("d", "ns", **kw),
        lambda **kw: gen.make_namespace("ns", **kw),
        lambda **kw: gen.make_pdb("b", "ns", selector={"app": "x"}, min_available=1, **kw),
        lambda **kw: gen.make_service("s", "ns", selector={"app": "x"}, **kw),
    ):
        assert not server_set & set(build()["metadata"])
        assert server_set <= set(build(with_server_fields=True)["metadata"])


def test_for_create_strips_what_the_server_sets() -> None:
    deployment = gen.for_create(gen.make_deployment("d", "ns", with_server_fields=True))
    assert "status" not in deployment
    assert not {"uid", "resourceVersion", "generation"} & set(deployment["metadata"])
    assert _managers(deployment) == [("kubectl-create", "Update", None)]
    node = gen.for_create(gen.make_node("n", with_server_fields=True))
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.31.4"
    assert "uid" not in node["metadata"]


# --- nodes -----------------------------------------------------------------------------------


def test_node_looks_like_a_registered_eks_node() -> None:
    node = gen.make_node(
        NODE, group="workers", zone="eu-west-1b", roles=["worker"], kubelet_version="v1.30.8"
    )
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == NODE
    assert labels["topology.kubernetes.io/zone"] == "eu-west-1b"
    assert labels["topology.kubernetes.io/region"] == "eu-west-1"
    assert labels["node.kubernetes.io/instance-type"] == "m5.large"
    assert labels[gen.NODE_GROUP_LABEL] == "workers"
    assert labels["node-role.kubernetes.io/worker"] == ""
    assert re.fullmatch(r"aws:///eu-west-1b/i-[0-9a-f]{17}", node["spec"]["providerID"])
    assert node["spec"]["podCIDRs"] == [node["spec"]["podCIDR"]]
    status = node["status"]
    assert status["capacity"]["pods"] == status["allocatable"]["pods"] == "110"
    assert status["capacity"]["cpu"] == "2"
    assert {"cpu", "memory", "ephemeral-storage"} <= set(status["allocatable"])
    assert [c["type"] for c in status["conditions"]] == [
        "MemoryPressure",
        "DiskPressure",
        "PIDPressure",
        "Ready",
    ]
    assert status["conditions"][-1]["status"] == "True"
    assert {"address": "10.0.12.34", "type": "InternalIP"} in status["addresses"]
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}
    assert status["nodeInfo"]["kubeletVersion"] == "v1.30.8"
    assert len(status["images"]) >= 3
    assert ("kubelet", "Update", "status") in _managers(node)
    assert 4_000 <= _size(node) <= 12_000


def test_node_variants() -> None:
    node = gen.make_node("sim-1", group="batch", cloud="sim", ready=False)
    assert re.fullmatch(r"sim:///batch/i-[0-9a-f]{17}", node["spec"]["providerID"])
    assert node["status"]["conditions"][-1]["status"] == "False"
    taints = {(t["key"], t["effect"]) for t in node["spec"]["taints"]}
    assert taints == {
        ("node.kubernetes.io/not-ready", "NoSchedule"),
        ("node.kubernetes.io/not-ready", "NoExecute"),
    }
    arm = gen.make_node("arm-1", instance_type="m7g.large", provider_id="aws:///x/i-1")
    assert arm["status"]["nodeInfo"]["architecture"] == "arm64"
    assert arm["spec"]["providerID"] == "aws:///x/i-1"
    with pytest.raises(ValueError, match="unknown instance type"):
        gen.make_node("n", instance_type="m9.huge")


# --- workloads and the rest ------------------------------------------------------------------


def test_replicaset_for_deployment_is_named_and_labelled_by_template_hash() -> None:
    deployment = gen.make_deployment("web", "shop", with_server_fields=True)
    rs = gen.replicaset_for_deployment(deployment, with_server_fields=True)
    pth = gen.template_hash(deployment["spec"]["template"])
    assert re.fullmatch(r"[bcdfghjklmnpqrstvwxz2456789]+", pth)
    assert rs["metadata"]["name"] == f"web-{pth}"
    assert rs["spec"]["selector"]["matchLabels"] == {"app": "web", "pod-template-hash": pth}
    assert rs["spec"]["template"]["metadata"]["labels"]["pod-template-hash"] == pth
    assert rs["metadata"]["ownerReferences"][0]["uid"] == deployment["metadata"]["uid"]
    assert rs["metadata"]["name"] in deployment["status"]["conditions"][1]["message"]
    changed = gen.make_pod_template(app="web", team="shop", containers=3)
    assert gen.template_hash(changed) != pth


def test_workload_generators_produce_consistent_selectors() -> None:
    for obj in (
        gen.make_deployment("a", "ns", replicas=2),
        gen.make_replicaset("b", "ns", replicas=2),
        gen.make_statefulset("c", "ns", replicas=2),
        gen.make_daemonset("d", "ns", nodes=2),
    ):
        selector = obj["spec"]["selector"]["matchLabels"]
        labels = obj["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), obj["kind"]
        assert obj["apiVersion"] == "apps/v1"
        assert obj["status"]["observedGeneration"] == 1


def test_pdb_status_follows_the_budget() -> None:
    by_min = gen.make_pdb("a", "ns", selector={"app": "a"}, min_available=5, expected_pods=6)
    assert by_min["status"]["desiredHealthy"] == 5
    assert by_min["status"]["disruptionsAllowed"] == 1
    by_pct = gen.make_pdb(
        "b", "ns", selector={"app": "b"}, max_unavailable="10%", expected_pods=12, healthy_pods=10
    )
    # 10% of 12 rounds up to 2, so 10 must stay healthy and none may go.
    assert by_pct["status"]["desiredHealthy"] == 10
    assert by_pct["status"]["disruptionsAllowed"] == 0
    assert by_pct["status"]["conditions"][0]["reason"] == "InsufficientPods"
    with pytest.raises(ValueError, match="exactly one"):
        gen.make_pdb("c", "ns", selector={"app": "c"}, min_available=1, max_unavailable=1)


def test_namespace_and_service() -> None:
    ns = gen.make_namespace("shop")
    assert ns["metadata"]["labels"] == {"kubernetes.io/metadata.name": "shop"}
    assert ns["status"] == {"phase": "Active"}
    svc = gen.make_service("db", "shop", selector={"app": "db"}, ports=(5432,), headless=True)
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["ports"][0]["port"] == 5432
    plain = gen.make_service("web", "shop", selector={"app": "web"})
    assert "clusterIP" not in plain["spec"]
    allocated = gen.make_service("web", "shop", selector={"app": "web"}, with_server_fields=True)
    assert re.fullmatch(r"172\.20\.\d+\.\d+", allocated["spec"]["clusterIP"])


def test_fields_v1_shape() -> None:
    fields = gen.fields_v1(
        {
            "metadata": {"labels": {"a": "1"}},
            "spec": {
                "podCIDRs": ["10.0.0.0/24"],
                "tolerations": [{"key": "x"}],
                "containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}],
            },
        }
    )
    assert fields == {
        "f:metadata": {"f:labels": {".": {}, "f:a": {}}},
        "f:spec": {
            "f:containers": {
                'k:{"name":"c"}': {
                    ".": {},
                    "f:name": {},
                    "f:resources": {".": {}, "f:limits": {".": {}, "f:cpu": {}}},
                }
            },
            "f:podCIDRs": {".": {}, 'v:"10.0.0.0/24"': {}},
            "f:tolerations": {},
        },
    }
