"""Conformance of the simulated API server with kube-apiserver, over real HTTP.

Each table row is one request and the status code, reason and body fields a real
kube-apiserver answers with.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest

from nodeops.sim.clock import Clock
from nodeops.sim.server.app import SimServer
from nodeops.sim.server.subresources import STORAGE_WRITE_SECONDS
from tests.waiting import until

from .conftest import Api, node, pod

NS = "/api/v1/namespaces/default"


async def test_discovery_documents(api: Api) -> None:
    status, version = await api.get("/version")
    assert status == 200 and version["major"] == "1" and version["gitVersion"].startswith("v1.")
    status, apis = await api.get("/api")
    assert apis["kind"] == "APIVersions" and apis["versions"] == ["v1"]
    status, groups = await api.get("/apis")
    names = {g["name"]: g for g in groups["groups"]}
    assert {"apps", "policy", "coordination.k8s.io", "apiextensions.k8s.io"} <= set(names)
    assert names["policy"]["preferredVersion"]["version"] == "v1"
    status, core = await api.get("/api/v1")
    by_name = {r["name"]: r for r in core["resources"]}
    assert by_name["pods"]["shortNames"] == ["po"] and by_name["pods"]["namespaced"] is True
    assert by_name["nodes"]["namespaced"] is False
    assert by_name["pods/eviction"] == {
        "name": "pods/eviction",
        "singularName": "",
        "namespaced": True,
        "group": "policy",
        "version": "v1",
        "kind": "Eviction",
        "verbs": ["create"],
    }
    status, apps = await api.get("/apis/apps/v1")
    assert "deployments/scale" in {r["name"] for r in apps["resources"]}
    for probe in ("/healthz", "/readyz", "/livez"):
        status, body = await api.get(probe)
        assert (status, body) == (200, "ok")
    status, body = await api.get("/apis/nope.example.com/v1")
    assert status == 404 and body["reason"] == "NotFound"


@pytest.mark.parametrize(
    ("method", "path", "body", "code", "reason"),
    [
        ("GET", f"{NS}/pods/missing", None, 404, "NotFound"),
        ("DELETE", f"{NS}/pods/missing", None, 404, "NotFound"),
        ("GET", "/api/v1/namespaces/nope/pods/x", None, 404, "NotFound"),
        ("POST", "/api/v1/namespaces/nope/pods", pod("x"), 404, "NotFound"),
        ("POST", f"{NS}/pods", {"metadata": {}, "spec": {"containers": [{}]}}, 422, "Invalid"),
        ("POST", f"{NS}/pods", {"metadata": {"name": "Bad_Name"}, "spec": {}}, 422, "Invalid"),
        ("POST", f"{NS}/pods", {"metadata": {"name": "nocontainers"}, "spec": {}}, 422, "Invalid"),
        (
            "POST",
            f"{NS}/pods",
            {"apiVersion": "apps/v1", "kind": "Pod", "metadata": {"name": "a"}},
            400,
            "BadRequest",
        ),
        ("GET", "/api/v1/pods?labelSelector=a%20in%20(", None, 400, "BadRequest"),
        ("GET", "/api/v1/pods?fieldSelector=spec.bogus%3Dx", None, 400, "BadRequest"),
        ("GET", "/api/v1/widgets", None, 404, "NotFound"),
    ],
)
async def test_error_statuses(
    api: Api, method: str, path: str, body: Any, code: int, reason: str
) -> None:
    status, resp = await api.call(method, path, body)
    assert status == code
    assert resp["kind"] == "Status" and resp["status"] == "Failure"
    assert resp["reason"] == reason and resp["code"] == code


async def test_create_sets_server_fields_and_conflicts(api: Api) -> None:
    status, created = await api.post(f"{NS}/pods", pod("web-1"))
    assert status == 201
    meta = created["metadata"]
    assert meta["uid"] and meta["creationTimestamp"] and int(meta["resourceVersion"]) > 0
    assert created["status"]["phase"] == "Pending"
    assert created["spec"]["terminationGracePeriodSeconds"] == 30
    keys = {t["key"] for t in created["spec"]["tolerations"]}
    assert keys == {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
    status, dup = await api.post(f"{NS}/pods", pod("web-1"))
    assert status == 409 and dup["reason"] == "AlreadyExists"
    assert dup["message"] == 'pods "web-1" already exists'
    assert dup["details"] == {"name": "web-1", "kind": "pods"}

    body = {"metadata": {"generateName": "web-"}, "spec": pod("x")["spec"]}
    status, gen = await api.post(f"{NS}/pods", body)
    assert status == 201 and gen["metadata"]["name"].startswith("web-")
    assert len(gen["metadata"]["name"]) == len("web-") + 5

    stale = dict(created)
    stale["metadata"] = dict(meta, labels={"x": "1"})
    status, ok = await api.put(f"{NS}/pods/web-1", stale)
    assert status == 200 and ok["metadata"]["labels"] == {"x": "1"}
    status, conflict = await api.put(f"{NS}/pods/web-1", stale)
    assert status == 409 and conflict["reason"] == "Conflict"
    assert conflict["message"] == (
        'Operation cannot be fulfilled on pods "web-1": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )


async def test_noop_update_keeps_resource_version(api: Api) -> None:
    _, created = await api.post(f"{NS}/configmaps", {"metadata": {"name": "c"}, "data": {"a": "1"}})
    _, same = await api.patch(f"{NS}/configmaps/c", {"data": {"a": "1"}})
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    _, changed = await api.patch(f"{NS}/configmaps/c", {"data": {"a": "2"}})
    assert int(changed["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])


async def test_generation_and_status_subresource(api: Api) -> None:
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": pod("x")["spec"]},
        },
        "status": {"replicas": 99},
    }
    path = "/apis/apps/v1/namespaces/default/deployments"
    status, created = await api.post(path, dep)
    assert status == 201 and created["metadata"]["generation"] == 1
    assert "status" not in created or created["status"].get("replicas") != 99
    _, scaled = await api.patch(f"{path}/d", {"spec": {"replicas": 3}, "status": {"replicas": 7}})
    assert scaled["metadata"]["generation"] == 2
    assert (scaled.get("status") or {}).get("replicas") != 7  # status ignored on the main path
    _, st = await api.patch(
        f"{path}/d/status", {"status": {"replicas": 3}, "spec": {"replicas": 9}}
    )
    assert st["status"]["replicas"] == 3 and st["spec"]["replicas"] == 3
    assert st["metadata"]["generation"] == 2
    _, scale = await api.get(f"{path}/d/scale")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 3
    assert scale["status"]["selector"] == "app=d"
    status, _ = await api.put(f"{path}/d/scale", {"spec": {"replicas": 5}})
    assert status == 200
    _, after = await api.get(f"{path}/d")
    assert after["spec"]["replicas"] == 5


async def test_label_field_selectors_and_pagination(api: Api) -> None:
    for i in range(12):
        labels = {"app": "a" if i % 2 else "b", "tier": str(i % 3)}
        await api.post(f"{NS}/pods", pod(f"p{i:02d}", labels, node=f"n{i % 3}"))
    cases = {
        "app=a": 6,
        "app!=a": 6,
        "app in (a,b),tier=0": 4,
        "tier notin (0,1)": 4,
        "app": 12,
        "!app": 0,
    }
    for selector, expected in cases.items():
        _, lst = await api.get(f"{NS}/pods", params={"labelSelector": selector})
        assert len(lst["items"]) == expected, selector
    _, by_node = await api.get("/api/v1/pods", params={"fieldSelector": "spec.nodeName=n1"})
    assert {p["spec"]["nodeName"] for p in by_node["items"]} == {"n1"}
    assert len(by_node["items"]) == 4
    _, pending = await api.get(
        "/api/v1/pods", params={"fieldSelector": "status.phase!=Running,metadata.namespace=default"}
    )
    assert len(pending["items"]) == 12

    names: list[str] = []
    params = {"limit": "5"}
    pages = 0
    while True:
        _, page = await api.get(f"{NS}/pods", params=params)
        pages += 1
        names += [p["metadata"]["name"] for p in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
        assert page["metadata"]["remainingItemCount"] == 12 - len(names)
        params = {"limit": "5", "continue": token}
    assert pages == 3 and names == sorted(names) and len(names) == 12


async def test_watch_sequences(api: Api, server: SimServer) -> None:
    _, lst = await api.get(f"{NS}/pods")
    rv = lst["metadata"]["resourceVersion"]
    await api.post(f"{NS}/pods", pod("w1", {"app": "x"}))
    await api.patch(f"{NS}/pods/w1", {"metadata": {"labels": {"app": "y"}}})
    await api.patch(f"{NS}/pods/w1", {"metadata": {"labels": {"app": "x"}}})
    await api.delete(f"{NS}/pods/w1")  # unscheduled pods go at once
    events = await api.watch(f"{NS}/pods", {"resourceVersion": rv}, 4)
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > int(rv)

    # A selector turns label changes into ADDED/DELETED for that watcher, as kube does.
    filtered = await api.watch(f"{NS}/pods", {"resourceVersion": rv, "labelSelector": "app=x"}, 4)
    assert [e["type"] for e in filtered] == ["ADDED", "DELETED", "ADDED", "DELETED"]

    # Bookmarks carry only a resourceVersion.
    marks = await api.watch(
        f"{NS}/pods", {"resourceVersion": rvs[-1], "allowWatchBookmarks": "true"}, 1
    )
    assert marks[0]["type"] == "BOOKMARK"
    assert marks[0]["object"]["metadata"]["resourceVersion"] >= str(rvs[-1])
    assert set(marks[0]["object"]) == {"kind", "apiVersion", "metadata"}

    # Without a resourceVersion, the current state comes first as ADDED.
    await api.post(f"{NS}/pods", pod("w2"))
    initial = await api.watch(f"{NS}/pods", {}, 1)
    assert initial[0]["type"] == "ADDED" and initial[0]["object"]["metadata"]["name"] == "w2"

    # timeoutSeconds ends the stream.
    ended = await api.watch(
        f"{NS}/pods", {"resourceVersion": str(server.store.rv), "timeoutSeconds": "1"}, 10
    )
    assert ended == []


async def test_watch_too_old_resource_version_is_410(api: Api) -> None:
    srv = SimServer(history_size=5)
    await srv.start()
    try:
        other = Api(api.session, srv.url, None)
        _, lst = await other.get(f"{NS}/configmaps")
        rv = lst["metadata"]["resourceVersion"]
        for i in range(10):
            await other.post(f"{NS}/configmaps", {"metadata": {"name": f"c{i}"}})
        events = await other.watch(f"{NS}/configmaps", {"resourceVersion": rv}, 1)
        assert events[0]["type"] == "ERROR"
        status = events[0]["object"]
        assert status["code"] == 410 and status["reason"] == "Expired"
        assert status["message"].startswith(f"too old resource version: {rv} (")
    finally:
        await srv.stop()


async def test_watch_initial_events_end_bookmark(api: Api) -> None:
    await api.post(f"{NS}/configmaps", {"metadata": {"name": "a"}})
    events = await api.watch(
        f"{NS}/configmaps",
        {
            "sendInitialEvents": "true",
            "resourceVersionMatch": "NotOlderThan",
            "allowWatchBookmarks": "true",
        },
        2,
    )
    assert events[0]["type"] == "ADDED"
    assert events[1]["type"] == "BOOKMARK"
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_patch_strategies(api: Api) -> None:
    await api.post("/api/v1/nodes", node("n1"))
    taint = {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}
    await api.patch("/api/v1/nodes/n1", taint, "strategic")
    taint_b = {"spec": {"taints": [{"key": "b", "effect": "NoSchedule"}]}}
    _, n = await api.patch("/api/v1/nodes/n1", taint_b, "strategic")
    # NodeSpec.taints is an atomic list in core/v1: a strategic patch replaces it whole.
    assert [t["key"] for t in n["spec"]["taints"]] == ["b"]
    # Conditions merge by `type`.
    cond = {"type": "Ready", "status": "True"}
    await api.patch("/api/v1/nodes/n1/status", {"status": {"conditions": [cond]}}, "strategic")
    pressure = {"type": "DiskPressure", "status": "False"}
    _, n = await api.patch(
        "/api/v1/nodes/n1/status", {"status": {"conditions": [pressure]}}, "strategic"
    )
    assert sorted(c["type"] for c in n["status"]["conditions"]) == ["DiskPressure", "Ready"]
    _, n = await api.patch("/api/v1/nodes/n1", {"spec": {"unschedulable": True}}, "strategic")
    assert n["spec"]["unschedulable"] is True
    _, n = await api.patch("/api/v1/nodes/n1", {"spec": {"taints": None}}, "merge")
    assert "taints" not in n["spec"]

    rv = n["metadata"]["resourceVersion"]
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/metadata/labels/x", "value": "1"},
    ]
    status, ok = await api.patch("/api/v1/nodes/n1", ops, "json")
    assert status == 200 and ok["metadata"]["labels"]["x"] == "1"
    status, failed = await api.patch("/api/v1/nodes/n1", ops, "json")
    assert status == 422 and failed["reason"] == "Invalid"
    status, stale = await api.patch(
        "/api/v1/nodes/n1", {"metadata": {"resourceVersion": rv, "labels": {"y": "2"}}}
    )
    assert status == 409 and stale["reason"] == "Conflict"
    status, bad = await api.call(
        "PATCH", "/api/v1/nodes/n1", {"a": 1}, content_type="application/x-nope"
    )
    assert status == 415 and bad["reason"] == "UnsupportedMediaType"


async def test_graceful_pod_deletion_and_finalizers(api: Api) -> None:
    await api.post(f"{NS}/pods", pod("g", node="n1"))
    status, deleting = await api.delete(f"{NS}/pods/g")
    assert status == 200
    meta = deleting["metadata"]
    assert meta["deletionTimestamp"] and meta["deletionGracePeriodSeconds"] == 30
    status, shorter = await api.delete(f"{NS}/pods/g", {"gracePeriodSeconds": 5})
    assert shorter["metadata"]["deletionGracePeriodSeconds"] == 5
    status, _ = await api.delete(f"{NS}/pods/g", {"gracePeriodSeconds": 0})
    assert status == 200
    status, _ = await api.get(f"{NS}/pods/g")
    assert status == 404

    cm = {"metadata": {"name": "f", "finalizers": ["example.com/hold"]}}
    await api.post(f"{NS}/configmaps", cm)
    status, held = await api.delete(f"{NS}/configmaps/f")
    assert status == 200 and held["metadata"]["deletionTimestamp"]
    status, _ = await api.get(f"{NS}/configmaps/f")
    assert status == 200
    await api.patch(f"{NS}/configmaps/f", {"metadata": {"finalizers": None}})
    status, _ = await api.get(f"{NS}/configmaps/f")
    assert status == 404

    _, c = await api.post(f"{NS}/configmaps", {"metadata": {"name": "p"}})
    status, pre = await api.delete(f"{NS}/configmaps/p", {"preconditions": {"uid": "not-the-uid"}})
    assert status == 409 and "Precondition failed: UID in precondition" in pre["message"]
    status, done = await api.delete(
        f"{NS}/configmaps/p", {"preconditions": {"uid": c["metadata"]["uid"]}}
    )
    assert status == 200 and done["kind"] == "Status" and done["status"] == "Success"

    await api.post(f"{NS}/configmaps", {"metadata": {"name": "fg"}})
    _, fg = await api.delete(f"{NS}/configmaps/fg", {"propagationPolicy": "Foreground"})
    assert fg["metadata"]["finalizers"] == ["foregroundDeletion"]


async def test_deletecollection(api: Api) -> None:
    for i in range(4):
        await api.post(
            f"{NS}/configmaps", {"metadata": {"name": f"d{i}", "labels": {"k": str(i % 2)}}}
        )
    status, _ = await api.delete(f"{NS}/configmaps", params={"labelSelector": "k=1"})
    assert status == 200
    _, lst = await api.get(f"{NS}/configmaps")
    assert sorted(c["metadata"]["name"] for c in lst["items"]) == ["d0", "d2"]


async def test_namespace_lifecycle(api: Api) -> None:
    status, ns = await api.post("/api/v1/namespaces", {"metadata": {"name": "team"}})
    assert status == 201 and ns["status"]["phase"] == "Active"
    assert ns["spec"]["finalizers"] == ["kubernetes"]
    _, sa = await api.get("/api/v1/namespaces/team/serviceaccounts/default")
    assert sa["metadata"]["name"] == "default"
    await api.post("/api/v1/namespaces/team/pods", pod("p", node="n1"))
    status, term = await api.delete("/api/v1/namespaces/team")
    assert status == 200 and term["status"]["phase"] == "Terminating"
    status, refused = await api.post(
        "/api/v1/namespaces/team/configmaps", {"metadata": {"name": "c"}}
    )
    assert status == 403 and refused["reason"] == "Forbidden"
    assert "because it is being terminated" in refused["message"]
    # The pod is terminating gracefully; once it is gone the namespace goes too.
    await api.delete("/api/v1/namespaces/team/pods/p", {"gracePeriodSeconds": 0})
    status, _ = await api.get("/api/v1/namespaces/team")
    assert status == 404


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {
            "plural": "widgets",
            "singular": "widget",
            "kind": "Widget",
            "shortNames": ["wd"],
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                ],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1},
                                    "mode": {
                                        "type": "string",
                                        "default": "fast",
                                        "enum": ["fast", "slow"],
                                    },
                                },
                            },
                            "status": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                        },
                    }
                },
            }
        ],
    },
}


async def test_custom_resources(api: Api) -> None:
    status, crd = await api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)
    assert status == 201
    _, crd = await api.get(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com"
    )
    conds = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conds == {"NamesAccepted": "True", "Established": "True"}
    _, res = await api.get("/apis/example.com/v1")
    assert {r["name"] for r in res["resources"]} == {"widgets", "widgets/status"}

    base = "/apis/example.com/v1/namespaces/default/widgets"
    w = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 3, "junk": 1},
    }
    status, created = await api.post(base, w)
    assert status == 201
    assert created["spec"] == {"size": 3, "mode": "fast"}  # defaulted and pruned
    status, bad = await api.post(
        base,
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "b"},
            "spec": {"size": 0},
        },
    )
    assert status == 422 and bad["reason"] == "Invalid" and "spec.size" in bad["message"]
    status, bad = await api.post(
        base,
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "b"}, "spec": {}},
    )
    assert status == 422 and bad["details"]["causes"][0]["field"] == "spec.size"
    _, st = await api.patch(f"{base}/w/status", {"status": {"phase": "Ready"}})
    assert st["status"] == {"phase": "Ready"}
    status, _ = await api.patch(f"{base}/w", {"spec": {"size": 4}}, "strategic")
    assert status == 415

    table_accept = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
    _, table = await api.get(base, headers=table_accept)
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]][:3] == ["Name", "Size", "Phase"]
    assert table["rows"][0]["cells"][:3] == ["w", 3, "Ready"]

    status, _ = await api.delete(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com"
    )
    assert status == 200
    status, _ = await api.get(base)
    assert status == 404


def _pdb(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": spec,
    }


async def _running(api: Api, name: str, labels: dict[str, str]) -> None:
    await api.post(f"{NS}/pods", pod(name, labels, node="n1"))
    status_body = {
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        }
    }
    await api.patch(f"{NS}/pods/{name}/status", status_body)


async def test_eviction_outcomes(api: Api) -> None:
    for i in range(3):
        await _running(api, f"e{i}", {"app": "e"})
    evict = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "e0"}}
    path = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
    await api.post(
        path, _pdb("pdb", {"minAvailable": 3, "selector": {"matchLabels": {"app": "e"}}})
    )
    # The disruption controller has not written status yet: PDB still being processed.
    await api.patch(
        f"{path}/pdb/status",
        {
            "status": {
                "observedGeneration": 1,
                "disruptionsAllowed": 0,
                "currentHealthy": 3,
                "desiredHealthy": 3,
                "expectedPods": 3,
            }
        },
    )
    status, refused = await api.post(f"{NS}/pods/e0/eviction", evict)
    assert status == 429 and refused["reason"] == "TooManyRequests"
    assert refused["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert "needs 3 healthy pods and has 3 currently" in refused["details"]["causes"][0]["message"]

    await api.patch(f"{path}/pdb/status", {"status": {"disruptionsAllowed": 1}})
    status, ok = await api.post(f"{NS}/pods/e0/eviction", evict)
    assert status == 201 and ok["status"] == "Success"
    _, p = await api.get(f"{NS}/pods/e0")
    assert p["metadata"]["deletionTimestamp"]
    assert any(c["type"] == "DisruptionTarget" for c in p["status"]["conditions"])
    _, pdb = await api.get(f"{path}/pdb")
    assert pdb["status"]["disruptionsAllowed"] == 0 and "e0" in pdb["status"]["disruptedPods"]

    await api.post(
        path, _pdb("pdb2", {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "e"}}})
    )
    evict1 = dict(evict, metadata={"name": "e1"})
    status, multi = await api.post(f"{NS}/pods/e1/eviction", evict1)
    assert status == 500
    assert multi["message"] == (
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does "
        "not support."
    )

    await api.post(f"{NS}/pods", pod("pending", {"app": "e"}))
    status, _ = await api.post(
        f"{NS}/pods/pending/eviction", dict(evict, metadata={"name": "pending"})
    )
    assert status == 201  # pods that are not running skip the budget


async def test_eviction_budget_event_is_seen_before_the_answer(api: Api, server: SimServer) -> None:
    """kube-apiserver writes the budget's status (pod in `disruptedPods`, one disruption spent)
    and its cacher sends that event while the eviction goes on to update and delete the pod, so a
    watcher of the budget sees the change before the evicting client gets its 201, and before
    the pod is marked for deletion."""
    names = [f"o{i}" for i in range(4)]
    for name in names:
        await _running(api, name, {"app": "o"})
    path = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
    await api.post(
        path, _pdb("o", {"maxUnavailable": 4, "selector": {"matchLabels": {"app": "o"}}})
    )
    status, _ = await api.patch(
        f"{path}/o/status",
        {"status": {"observedGeneration": 1, "disruptionsAllowed": 4, "currentHealthy": 4}},
    )
    assert status == 200
    _, listed = await api.get(path)
    seen: list[tuple[str, str]] = []
    pod_seen: dict[str, int] = {}
    budget_seen: dict[str, int] = {}

    async def watch_budget() -> None:
        params = {"watch": "true", "resourceVersion": listed["metadata"]["resourceVersion"]}
        async with api.session.get(api.base + path, params=params, headers=api.headers) as resp:
            async for line in resp.content:
                event = orjson.loads(line)
                for name in (event["object"].get("status") or {}).get("disruptedPods") or {}:
                    if name not in budget_seen:
                        budget_seen[name] = len(seen)
                        seen.append(("budget", name))

    async def watch_pods() -> None:
        params = {"watch": "true", "resourceVersion": listed["metadata"]["resourceVersion"]}
        async with api.session.get(
            api.base + f"{NS}/pods", params=params, headers=api.headers
        ) as resp:
            async for line in resp.content:
                obj = orjson.loads(line)["object"]
                name = obj["metadata"]["name"]
                if obj["metadata"].get("deletionTimestamp") and name not in pod_seen:
                    pod_seen[name] = len(seen)
                    seen.append(("terminating", name))

    watchers = [asyncio.create_task(watch_budget()), asyncio.create_task(watch_pods())]
    try:
        store = server.store

        async def both_open() -> bool:
            keys = (("policy", "poddisruptionbudgets"), ("", "pods"))
            return all(store.bucket(k).watchers for k in keys)

        await until(both_open, what="both watches open")
        for name in names:
            evict = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
            status, _ = await api.post(f"{NS}/pods/{name}/eviction", evict)
            assert status == 201
            seen.append(("answer", name))
    finally:
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
    for name in names:
        answered = seen.index(("answer", name))
        assert budget_seen[name] < answered, seen
        assert budget_seen[name] < pod_seen.get(name, len(seen)), seen


class _RecordingClock(Clock):
    """Simulated time that runs fast and remembers what the server waited for."""

    def __init__(self) -> None:
        super().__init__(1000.0)
        self.slept: list[float] = []

    async def sleep(self, sim_seconds: float) -> None:
        self.slept.append(sim_seconds)
        await super().sleep(sim_seconds)


async def test_concurrent_evictions_under_one_budget_conflict_and_retry() -> None:
    """Evictions read the budget and write its status in separate steps, so those that race on
    one budget conflict, and the losers read it again after kube's `EvictionsRetry` (500 ms plus
    up to 10% jitter) instead of being judged atomically one after the other."""
    clock = _RecordingClock()
    srv = SimServer(clock=clock)
    await srv.start()
    try:
        async with aiohttp.ClientSession() as session:
            api = Api(session, srv.url, srv.admin_token)
            names = [f"c{i}" for i in range(3)]
            for name in names:
                await _running(api, name, {"app": "c"})
            path = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
            spec = {"maxUnavailable": 2, "selector": {"matchLabels": {"app": "c"}}}
            await api.post(path, _pdb("c", spec))
            status = {"observedGeneration": 1, "disruptionsAllowed": 2, "currentHealthy": 3}
            await api.patch(f"{path}/c/status", {"status": status})

            async def evict(name: str) -> int:
                body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
                code, _ = await api.post(f"{NS}/pods/{name}/eviction", body)
                return code

            codes = await asyncio.gather(*(evict(n) for n in names))
            _, budget = await api.get(f"{path}/c")
    finally:
        await srv.stop()
    assert sorted(codes) == [201, 201, 429]
    assert budget["status"]["disruptionsAllowed"] == 0
    assert len(budget["status"]["disruptedPods"]) == 2
    # Besides the storage time of each pod write (1 ms), the losers' waits before reading again.
    retries = [s for s in clock.slept if s != STORAGE_WRITE_SECONDS]
    assert retries and all(0.5 <= s <= 0.55 for s in retries), clock.slept


async def test_binding(api: Api) -> None:
    await api.post(f"{NS}/pods", pod("b"))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "b"},
        "target": {"kind": "Node", "name": "n1"},
    }
    status, _ = await api.post(f"{NS}/pods/b/binding", binding)
    assert status == 201
    _, p = await api.get(f"{NS}/pods/b")
    assert p["spec"]["nodeName"] == "n1"
    status, again = await api.post(f"{NS}/pods/b/binding", binding)
    assert status == 409 and "already assigned" in again["message"]


async def test_events_served_in_both_groups(api: Api) -> None:
    ev = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "e1"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "nodeops.dev/drain",
        "reportingInstance": "x",
        "action": "Drain",
        "reason": "Draining",
        "note": "draining node n1",
        "type": "Normal",
        "regarding": {"kind": "Node", "name": "n1"},
    }
    status, _ = await api.post("/apis/events.k8s.io/v1/namespaces/default/events", ev)
    assert status == 201
    _, core = await api.get(f"{NS}/events/e1")
    assert core["apiVersion"] == "v1" and core["message"] == "draining node n1"
    assert core["involvedObject"]["name"] == "n1"
    _, lst = await api.get(f"{NS}/events", params={"fieldSelector": "involvedObject.name=n1"})
    assert len(lst["items"]) == 1


async def test_request_accounting(api: Api) -> None:
    await api.call("DELETE", "/sim/requests")
    await api.get(f"{NS}/pods")
    await api.get(f"{NS}/pods/none")
    _, stats = await api.get("/sim/requests")
    assert stats["by_verb"]["list"]["requests"] == 1
    assert stats["by_verb"]["get"]["requests"] == 1
    assert stats["by_code"]["404"]["requests"] == 1


async def test_fault_injection_over_http(api: Api) -> None:
    status, _ = await api.put("/sim/faults", "error=500:1@list/configmaps")
    assert status == 200
    status, err = await api.get(f"{NS}/configmaps")
    assert status == 500 and err["reason"] == "InternalError"
    await api.put("/sim/faults", "error=429:1@get/configmaps:retry-after=2")
    status, err = await api.get(f"{NS}/configmaps/x")
    assert status == 429 and err["details"]["retryAfterSeconds"] == 2
    await api.put("/sim/faults", "")
    status, _ = await api.get(f"{NS}/configmaps")
    assert status == 200


async def test_watch_cut_after_events(api: Api) -> None:
    await api.put("/sim/faults", "watch-cut=events:2@configmaps")
    _, lst = await api.get(f"{NS}/configmaps")
    rv = lst["metadata"]["resourceVersion"]
    for i in range(5):
        await api.post(f"{NS}/configmaps", {"metadata": {"name": f"cut{i}"}})
    events = await api.watch(f"{NS}/configmaps", {"resourceVersion": rv}, 10)
    assert len(events) == 2


async def test_concurrent_writers_get_conflicts_not_lost_updates(api: Api) -> None:
    _, cm = await api.post(f"{NS}/configmaps", {"metadata": {"name": "race"}, "data": {"n": "0"}})
    rv = cm["metadata"]["resourceVersion"]

    async def bump(i: int) -> int:
        body = {"metadata": {"name": "race", "resourceVersion": rv}, "data": {"n": str(i + 1)}}
        status, _ = await api.put(f"{NS}/configmaps/race", body)
        return status

    results = await asyncio.gather(*(bump(i) for i in range(10)))
    assert sorted(results) == [200] + [409] * 9


async def test_secret_string_data_is_merged_into_data(api: Api) -> None:
    # kube-apiserver converts stringData into data on every write and never returns it.
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds"},
        "data": {"a": "b2xk", "keep": "eA=="},
        "stringData": {"a": "new", "b": "plain text"},
    }
    status, created = await api.post(f"{NS}/secrets", body)
    assert status == 201, created
    assert created["data"] == {"a": "bmV3", "keep": "eA==", "b": "cGxhaW4gdGV4dA=="}
    assert "stringData" not in created and created["type"] == "Opaque"
    status, patched = await api.patch(f"{NS}/secrets/creds", {"stringData": {"c": "3"}})
    assert status == 200 and patched["data"]["c"] == "Mw==" and "stringData" not in patched
    status, stored = await api.get(f"{NS}/secrets/creds")
    assert set(stored["data"]) == {"a", "b", "c", "keep"} and "stringData" not in stored
    status, refused = await api.post(
        f"{NS}/secrets", {**body, "metadata": {"name": "bad"}, "stringData": {"a": 1}}
    )
    assert status == 400 and refused["reason"] == "BadRequest"
