"""The kinds an install of nodeops creates, served as kube-apiserver serves them: NetworkPolicy
discovery, defaults and table, and server-side dry runs of every kind in `manifests/` that
answer with the defaulted object and store nothing."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Api

NP_PATH = "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def network_policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


async def test_network_policies_are_discovered(api: Api) -> None:
    status, groups = await api.get("/apis")
    assert status == 200
    (networking,) = [g for g in groups["groups"] if g["name"] == "networking.k8s.io"]
    assert networking["preferredVersion"] == {
        "groupVersion": "networking.k8s.io/v1",
        "version": "v1",
    }
    status, resources = await api.get("/apis/networking.k8s.io/v1")
    assert status == 200
    (entry,) = [r for r in resources["resources"] if r["name"] == "networkpolicies"]
    assert entry["kind"] == "NetworkPolicy" and entry["namespaced"] is True
    assert entry["shortNames"] == ["netpol"] and entry["singularName"] == "networkpolicy"
    assert set(entry["verbs"]) >= {"create", "get", "list", "watch", "patch", "delete"}
    # NetworkPolicy has had no status since 1.28, so no subresource is advertised.
    assert [r["name"] for r in resources["resources"]] == ["networkpolicies"]


@pytest.mark.parametrize(
    ("spec", "defaulted"),
    [
        pytest.param(
            {"podSelector": {"matchLabels": {"app": "a"}}},
            {"podSelector": {"matchLabels": {"app": "a"}}, "policyTypes": ["Ingress"]},
            id="ingress implied",
        ),
        pytest.param(
            {"egress": [{"ports": [{"port": 53, "protocol": "UDP"}, {"port": 443}]}]},
            {
                "podSelector": {},
                "egress": [
                    {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 443, "protocol": "TCP"}]}
                ],
                "policyTypes": ["Ingress", "Egress"],
            },
            id="egress rules add Egress; port protocol TCP; empty pod selector",
        ),
        pytest.param(
            {
                "podSelector": {},
                "policyTypes": ["Egress"],
                "ingress": [{"ports": [{"port": "metrics"}]}],
            },
            {
                "podSelector": {},
                "policyTypes": ["Egress"],
                "ingress": [{"ports": [{"port": "metrics", "protocol": "TCP"}]}],
            },
            id="given policy types kept",
        ),
    ],
)
async def test_network_policy_defaults(
    api: Api, spec: dict[str, Any], defaulted: dict[str, Any]
) -> None:
    status, created = await api.post(NP_PATH, network_policy("p", spec))
    assert status == 201, created
    assert created["spec"] == defaulted
    assert created["metadata"]["generation"] == 1
    status, read = await api.get(f"{NP_PATH}/p")
    assert status == 200 and read["spec"] == defaulted


async def test_network_policy_generation_follows_spec(api: Api) -> None:
    await api.post(NP_PATH, network_policy("p", {"podSelector": {}}))
    status, labelled = await api.patch(f"{NP_PATH}/p", {"metadata": {"labels": {"a": "b"}}})
    assert status == 200 and labelled["metadata"]["generation"] == 1
    status, changed = await api.patch(f"{NP_PATH}/p", {"spec": {"policyTypes": ["Egress"]}})
    assert status == 200 and changed["metadata"]["generation"] == 2


async def test_network_policy_table(api: Api) -> None:
    await api.post(NP_PATH, network_policy("all", {}))
    await api.post(NP_PATH, network_policy("web", {"podSelector": {"matchLabels": {"app": "web"}}}))
    status, table = await api.get(NP_PATH, headers={"Accept": TABLE})
    assert status == 200 and table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Pod-Selector", "Age"]
    assert [r["cells"][:2] for r in table["rows"]] == [["all", "<none>"], ["web", "app=web"]]


RBAC = "/apis/rbac.authorization.k8s.io/v1"
ROLE_REF = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"}
SUBJECTS = [{"kind": "ServiceAccount", "name": "sa", "namespace": "default"}]
SELECTOR = {"matchLabels": {"app": "a"}}
TEMPLATE = {
    "metadata": {"labels": {"app": "a"}},
    "spec": {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "c",
                "image": "nodeops:0.1.0",
                "securityContext": {
                    "readOnlyRootFilesystem": True,
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    },
}
INSTALL_KINDS = [
    ("/api/v1/namespaces", {"metadata": {"name": "n"}}, None),
    ("/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "sa"}}, None),
    (
        "/api/v1/namespaces/default/services",
        {"metadata": {"name": "s"}, "spec": {"selector": {"app": "a"}, "ports": [{"port": 80}]}},
        {"type": "ClusterIP", "sessionAffinity": "None"},
    ),
    (
        "/apis/apps/v1/namespaces/default/deployments",
        {"metadata": {"name": "d"}, "spec": {"selector": SELECTOR, "template": TEMPLATE}},
        {"replicas": 1, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600},
    ),
    (
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
        {
            "metadata": {"name": "b"},
            "spec": {
                "maxUnavailable": 1,
                "selector": SELECTOR,
                "unhealthyPodEvictionPolicy": "AlwaysAllow",
            },
        },
        None,
    ),
    (NP_PATH, network_policy("p", {}), {"policyTypes": ["Ingress"]}),
    (
        f"{RBAC}/namespaces/default/roles",
        {
            "metadata": {"name": "r"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        },
        None,
    ),
    (
        f"{RBAC}/clusterroles",
        {
            "metadata": {"name": "r"},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}],
        },
        None,
    ),
    (
        f"{RBAC}/namespaces/default/rolebindings",
        {"metadata": {"name": "b"}, "roleRef": ROLE_REF, "subjects": SUBJECTS},
        None,
    ),
    (
        f"{RBAC}/clusterrolebindings",
        {"metadata": {"name": "b"}, "roleRef": ROLE_REF, "subjects": SUBJECTS},
        None,
    ),
]


@pytest.mark.parametrize(
    ("path", "body", "spec_defaults"),
    INSTALL_KINDS,
    ids=[p.rsplit("/", 1)[-1] for p, _, _ in INSTALL_KINDS],
)
async def test_dry_run_create_answers_and_stores_nothing(
    api: Api, path: str, body: dict[str, Any], spec_defaults: dict[str, Any] | None
) -> None:
    status, answered = await api.post(path, body, params={"dryRun": "All"})
    assert status == 201, answered
    meta = answered["metadata"]
    assert meta["name"] == body["metadata"]["name"] and meta["uid"] and meta["creationTimestamp"]
    assert "resourceVersion" not in meta  # nothing was stored, so there is no version
    for key, value in (spec_defaults or {}).items():
        assert answered["spec"][key] == value
    status, missing = await api.get(f"{path}/{body['metadata']['name']}")
    assert status == 404 and missing["reason"] == "NotFound"
    status, created = await api.post(path, body)
    assert status == 201, created
    status, again = await api.post(path, body, params={"dryRun": "All"})
    assert status == 409 and again["reason"] == "AlreadyExists"
