"""The generated CRDs served by the simulated API server: accepted, enforced, and printed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from nodeops.api import InvalidResource, NodeDrainRule, all_crds, crd_for
from nodeops.sim.clock import Clock
from nodeops.sim.server.app import SimServer

CRDS_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
RULES_PATH = "/apis/nodeops.dev/v1alpha1/nodedrainrules"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


class Api:
    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        h = dict(headers or {})
        data = None
        if body is not None:
            data = orjson.dumps(body)
            h.setdefault("Content-Type", "application/json")
        async with self.session.request(method, self.base + path, data=data, headers=h) as resp:
            raw = await resp.read()
            return resp.status, orjson.loads(raw) if raw else None


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    srv = SimServer(clock=Clock(1.0))
    await srv.start()
    try:
        async with aiohttp.ClientSession() as session:
            yield Api(session, srv.url)
    finally:
        await srv.stop()


def rule(name: str, spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "NodeDrainRule",
        "metadata": {"name": name},
        "spec": spec,
    }


async def install_crds(api: Api) -> None:
    for crd in all_crds():
        status, body = await api.call("POST", CRDS_PATH, crd)
        assert status == 201, body


async def test_the_crds_are_established(api: Api) -> None:
    await install_crds(api)
    status, crd = await api.call("GET", f"{CRDS_PATH}/nodedrainrules.nodeops.dev")
    assert status == 200
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    # What was sent, with kube-apiserver's default conversion strategy.
    assert crd["spec"] == {**crd_for(NodeDrainRule)["spec"], "conversion": {"strategy": "None"}}
    status, group = await api.call("GET", "/apis/nodeops.dev/v1alpha1")
    assert status == 200
    resource = next(r for r in group["resources"] if r["name"] == "nodedrainrules")
    assert resource["name"] == "nodedrainrules"
    assert resource["namespaced"] is False
    assert resource["shortNames"] == ["ndr"]
    assert resource["categories"] == ["nodeops"]


async def test_a_valid_rule_is_stored_as_written(api: Api) -> None:
    await install_crds(api)
    spec = {
        "drain": {"behavior": "Drain", "order": 10},
        "nodes": [{"selector": {"matchLabels": {"pool": "db"}}}],
        "pods": [
            {
                "selector": {
                    "matchExpressions": [{"key": "app", "operator": "In", "values": ["pg"]}]
                },
                "namespaceSelector": {"matchLabels": {"team": "data"}},
            }
        ],
    }
    status, created = await api.call("POST", RULES_PATH, rule("databases-last", spec))
    assert status == 201, created
    # Nothing pruned or defaulted: the schema declares every field the model has.
    assert created["spec"] == spec
    assert "namespace" not in created["metadata"]
    parsed = NodeDrainRule.parse(created)
    assert parsed.order == 10
    assert parsed.applies_to_node({"pool": "db"})
    assert parsed.applies_to_pod({"app": "pg"}, {"team": "data"})


@pytest.mark.parametrize(
    ("spec", "field", "reason"),
    [
        ({"drain": {}}, "spec.drain.behavior", "FieldValueRequired"),
        ({"drain": {"behavior": "Evict"}}, "spec.drain.behavior", "FieldValueNotSupported"),
        (
            {"drain": {"behavior": "Drain", "order": "1"}},
            "spec.drain.order",
            "FieldValueTypeInvalid",
        ),
        (
            {
                "drain": {"behavior": "Drain"},
                "pods": [{"selector": {"matchExpressions": [{"key": "a"}]}}],
            },
            "spec.pods[0].selector.matchExpressions[0].operator",
            "FieldValueRequired",
        ),
    ],
)
async def test_an_invalid_rule_is_refused_naming_the_field(
    api: Api, spec: dict[str, Any], field: str, reason: str
) -> None:
    await install_crds(api)
    status, body = await api.call("POST", RULES_PATH, rule("bad", spec))
    assert status == 422, body
    assert body["reason"] == "Invalid"
    # The CRD's CEL rules did not run (kube adds a cause saying so), hence a list of two.
    assert body["message"].startswith('NodeDrainRule.nodeops.dev "bad" is invalid: [' + field)
    assert {"field": field, "reason": reason} in [
        {"field": c["field"], "reason": c["reason"]} for c in body["details"]["causes"]
    ]
    # The model refuses it too, at the same field.
    with pytest.raises(InvalidResource) as info:
        NodeDrainRule.parse(rule("bad", spec))
    assert info.value.field == field


async def test_kubectl_get_columns(api: Api) -> None:
    await install_crds(api)
    for name, drain in (
        ("a-skip-daemons", {"behavior": "Skip"}),
        ("b-databases-last", {"behavior": "Drain", "order": 10}),
    ):
        status, _ = await api.call("POST", RULES_PATH, rule(name, {"drain": drain}))
        assert status == 201
    status, table = await api.call("GET", RULES_PATH, headers={"Accept": TABLE})
    assert status == 200
    assert table["kind"] == "Table"
    columns = [(c["name"], c["type"]) for c in table["columnDefinitions"]]
    assert columns == [
        ("Name", "string"),
        ("Behavior", "string"),
        ("Order", "integer"),
        ("Age", "date"),
    ]
    rows = {row["cells"][0]: row["cells"][1:3] for row in table["rows"]}
    assert rows == {"a-skip-daemons": ["Skip", None], "b-databases-last": ["Drain", 10]}


ATTACHMENTS_PATH = "/apis/nodeops.dev/v1alpha1/namespaces/nodeops-system/loadbalancerattachments"


async def test_a_load_balancer_attachment_keeps_spec_and_status_apart(api: Api) -> None:
    await install_crds(api)
    status, _ = await api.call(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nodeops-system"}},
    )
    assert status == 201
    body = {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "LoadBalancerAttachment",
        "metadata": {"name": "node-a"},
        "spec": {"nodeName": "node-a", "targets": [{"type": "classic", "name": "web"}]},
        "status": {"phase": "Detached"},
    }
    status, created = await api.call("POST", ATTACHMENTS_PATH, body)
    assert status == 201, created
    # The status is a subresource: a create does not set it, and the default source is stored.
    assert "status" not in created
    assert created["spec"]["targets"] == [{"type": "classic", "name": "web", "source": "Static"}]
    status, patched = await api.call(
        "PATCH",
        f"{ATTACHMENTS_PATH}/node-a/status",
        {
            "status": {
                "phase": "Detached",
                "targets": [{"type": "classic", "name": "web", "state": "Deregistered"}],
            }
        },
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert status == 200, patched
    assert patched["status"]["targets"][0]["state"] == "Deregistered"
    status, refused = await api.call(
        "POST",
        ATTACHMENTS_PATH,
        {
            **body,
            "metadata": {"name": "node-b"},
            "spec": {
                "nodeName": "node-b",
                "targets": [{"type": "classic", "name": "w", "port": 0}],
            },
        },
    )
    assert status == 422, refused
    assert "spec.targets[0].port" in refused["message"]
