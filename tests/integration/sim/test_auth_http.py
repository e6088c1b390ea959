"""Authentication and RBAC over HTTP: 401s, 403s with kube's wording, grants that work."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from nodeops.sim.server.app import SimServer

from .conftest import Api


@pytest.fixture
async def rbac_api() -> AsyncIterator[tuple[SimServer, Api]]:
    srv = SimServer(rbac=True)
    await srv.start()
    try:
        async with aiohttp.ClientSession() as session:
            yield srv, Api(session, srv.url, srv.admin_token)
    finally:
        await srv.stop()


async def _sa_token(api: Api, name: str) -> str:
    await api.post("/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": name}})
    status, tr = await api.post(
        f"/api/v1/namespaces/default/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    assert status == 201, tr
    return str(tr["status"]["token"])


async def test_tokens_and_rbac(rbac_api: tuple[SimServer, Api]) -> None:
    _, api = rbac_api
    status, body = await api.get("/api/v1/pods", token="not-a-token")
    assert status == 401 and body["reason"] == "Unauthorized"

    token = await _sa_token(api, "drainer")
    user = "system:serviceaccount:default:drainer"
    status, body = await api.get("/api/v1/nodes", token=token)
    assert status == 403 and body["reason"] == "Forbidden"
    assert body["message"] == (
        f'nodes is forbidden: User "{user}" cannot list resource "nodes" in API group "" '
        "at the cluster scope"
    )
    status, body = await api.post(
        "/api/v1/namespaces/default/pods/x/eviction", {"metadata": {"name": "x"}}, token=token
    )
    assert status == 403
    assert body["message"] == (
        f'pods "x" is forbidden: User "{user}" cannot create resource "pods/eviction" in API '
        'group "" in the namespace "default"'
    )
    # Discovery stays open to any authenticated user, as with kube's bootstrap policy.
    status, _ = await api.get("/api", token=token)
    assert status == 200

    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "node-reader"},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "drainer-reads-nodes"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "node-reader",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "drainer", "namespace": "default"}],
    }
    assert (await api.post("/apis/rbac.authorization.k8s.io/v1/clusterroles", role))[0] == 201
    assert (await api.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding))[
        0
    ] == 201
    status, nodes = await api.get("/api/v1/nodes", token=token)
    assert status == 200 and nodes["kind"] == "NodeList"
    status, _ = await api.call("DELETE", "/api/v1/nodes/any", token=token)
    assert status == 403

    # Deleting the service account invalidates its tokens.
    await api.delete("/api/v1/namespaces/default/serviceaccounts/drainer")
    status, _ = await api.get("/api/v1/nodes", token=token)
    assert status == 401


async def test_resource_names_apply_to_a_list_or_watch_selecting_one_name(
    rbac_api: tuple[SimServer, Api],
) -> None:
    """kube's RequestInfo names a list or watch by its `metadata.name` field selector."""
    _, api = rbac_api
    token = await _sa_token(api, "elector")
    rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/default"
    role = {
        "metadata": {"name": "one-lease"},
        "rules": [
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": ["mine"],
                "verbs": ["list", "watch"],
            }
        ],
    }
    binding = {
        "metadata": {"name": "one-lease"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "one-lease"},
        "subjects": [{"kind": "ServiceAccount", "name": "elector", "namespace": "default"}],
    }
    assert (await api.post(f"{rbac}/roles", role))[0] == 201
    assert (await api.post(f"{rbac}/rolebindings", binding))[0] == 201
    leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
    status, _ = await api.get(leases, params={"fieldSelector": "metadata.name=mine"}, token=token)
    assert status == 200
    watch = {"watch": "true", "fieldSelector": "metadata.name=mine", "timeoutSeconds": "1"}
    status, _ = await api.get(leases, params=watch, token=token)
    assert status == 200
    for params in ({}, {"fieldSelector": "metadata.name=other"}, {"watch": "true"}):
        status, body = await api.get(leases, params=params, token=token)
        assert status == 403, params
        assert body["reason"] == "Forbidden"
