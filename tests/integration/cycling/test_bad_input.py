"""Requests that can never be valid are refused by the API server, naming the field; the model
(the controller's and `nodeops cycle`'s check) refuses the same ones; requests that select
less than they name say so in their status."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from nodeops.api import CycleNodeRequest, InvalidResource, NodeGroup, all_crds
from nodeops.controllers.cycling.command import plan_requests
from nodeops.kube.resources import EVENTS
from nodeops.sim.clock import Clock
from nodeops.sim.server.app import SimServer

from .harness import NS, request, scenario, wait_phase, world

CRDS_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
REQUESTS_PATH = "/apis/nodeops.dev/v1alpha1/namespaces/default/cyclenoderequests"
NODEGROUPS_PATH = "/apis/nodeops.dev/v1alpha1/nodegroups"


@pytest.fixture
async def api() -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    srv = SimServer(clock=Clock(1.0))
    await srv.start()
    try:
        async with aiohttp.ClientSession() as session:
            for crd in all_crds():
                async with session.post(srv.url + CRDS_PATH, data=orjson.dumps(crd)) as resp:
                    assert resp.status == 201, await resp.text()
            yield session, srv.url
    finally:
        await srv.stop()


async def _create(api: tuple[aiohttp.ClientSession, str], path: str, body: Any) -> Any:
    session, base = api
    headers = {"Content-Type": "application/json"}
    async with session.post(base + path, data=orjson.dumps(body), headers=headers) as resp:
        return resp.status, orjson.loads(await resp.read())


def _in_default(body: dict[str, Any]) -> dict[str, Any]:
    body["metadata"]["namespace"] = "default"
    return body


def _nodegroup(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "NodeGroup",
        "metadata": {"name": "ng"},
        "spec": {
            "nodeGroupName": "workers-a",
            "nodeSelector": {"matchLabels": {"role": "worker"}},
            "cycleSettings": {"method": "Drain", "concurrency": 1},
            **spec,
        },
    }


def _without_group(body: dict[str, Any]) -> dict[str, Any]:
    del body["spec"]["nodeGroupName"]
    return body


BAD_REQUESTS = [
    (
        "no-group",
        lambda: _without_group(request("no-group", ["workers-a"])),
        "spec.nodeGroupName",
        "Required value",
    ),
    (
        "negative-timeout",
        lambda: request("negative-timeout", ["workers-a"], cycleSettings={"cyclingTimeout": "-5m"}),
        "spec.cycleSettings.cyclingTimeout",
        "must not be negative",
    ),
    (
        "negative-concurrency",
        lambda: request("negative-concurrency", ["workers-a"], cycleSettings={"concurrency": -1}),
        "spec.cycleSettings.concurrency",
        "greater than or equal to 0",
    ),
]


@pytest.mark.parametrize(("name", "make", "field", "says"), BAD_REQUESTS, ids=lambda v: v)
async def test_the_api_server_and_the_model_refuse_a_request_that_can_never_run(
    api: tuple[aiohttp.ClientSession, str], name: str, make: Any, field: str, says: str
) -> None:
    status, body = await _create(api, REQUESTS_PATH, _in_default(make()))
    assert status == 422, body
    assert {c["field"] for c in body["details"]["causes"]} >= {field}, body
    assert says in body["message"], body["message"]
    with pytest.raises(InvalidResource) as info:
        CycleNodeRequest.parse_spec(make())
    assert info.value.field == field


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"nodeGroupName": ""}, "spec.nodeGroupName"),
        (
            {"cycleSettings": {"method": "Drain", "concurrency": -1}},
            "spec.cycleSettings.concurrency",
        ),
        (
            {"cycleSettings": {"method": "Drain", "cyclingTimeout": "-1h"}},
            "spec.cycleSettings.cyclingTimeout",
        ),
    ],
)
async def test_a_nodegroup_that_can_never_make_a_request_is_refused(
    api: tuple[aiohttp.ClientSession, str], spec: dict[str, Any], field: str
) -> None:
    status, body = await _create(api, NODEGROUPS_PATH, _nodegroup(**spec))
    assert status == 422, body
    assert field in {c["field"] for c in body["details"]["causes"]}, body
    with pytest.raises(InvalidResource) as info:
        NodeGroup.parse_spec(_nodegroup(**spec))
    assert info.value.field == field


async def test_zero_concurrency_and_zero_timeout_stay_valid(
    api: tuple[aiohttp.ClientSession, str],
) -> None:
    """0 is Cyclops's "every selected node" (concurrency) and "the manager's default"
    (cyclingTimeout): refusing them would refuse Cyclops manifests."""
    body = request("zeros", ["workers-a"], cycleSettings={"concurrency": 0, "cyclingTimeout": "0s"})
    status, created = await _create(api, REQUESTS_PATH, _in_default(body))
    assert status == 201, created
    settings = CycleNodeRequest.parse_spec(created).spec.cycle_settings
    assert settings.concurrency_for(5) == 5
    assert settings.concurrency_for(0) == 1


def _cli_args(**kw: Any) -> argparse.Namespace:
    defaults: dict[str, Any] = dict(
        nodegroups=["ng"],
        selector=None,
        all=False,
        name=None,
        nodes=None,
        concurrency=None,
        method=None,
        cycling_timeout=None,
        skip_initial_health_checks=None,
        skip_pre_termination_checks=None,
        dry=False,
        output=None,
        watch=False,
        namespace=NS,
    )
    return argparse.Namespace(**{**defaults, **kw})


def test_the_cli_refuses_a_negative_timeout_as_the_model_does() -> None:
    node = {"metadata": {"name": "n1", "labels": {"role": "worker"}}}
    plan = plan_requests(_cli_args(cycling_timeout="-5m"), [_nodegroup()], [node])
    assert plan.requests == []
    assert any("spec.cycleSettings.cyclingTimeout" in p and "negative" in p for p in plan.problems)
    # A zero timeout means the manager's default, for the CLI as for the API server.
    plan = plan_requests(_cli_args(cycling_timeout="0s"), [_nodegroup()], [node])
    assert plan.problems == [] and len(plan.requests) == 1


def test_the_cli_refuses_a_selector_that_selects_no_node() -> None:
    node = {"metadata": {"name": "n1", "labels": {"role": "db"}}}
    plan = plan_requests(_cli_args(), [_nodegroup()], [node])
    assert plan.problems == ["NodeGroup ng: spec.nodeSelector: selects no node"]


async def test_a_selector_that_selects_no_node_says_so() -> None:
    async with world(scenario(2)) as w:
        assert w.client is not None
        await w.create_request(
            request("nothing", ["workers-a"], selector={"matchLabels": {"role": "database"}})
        )
        done = await wait_phase(w, "nothing", ("Successful", "Failed"))
        message = done["status"]["message"]
        assert message.startswith("spec.selector: role=database selects no node"), message
        events, _ = await w.client.list(EVENTS, NS)
        warnings = [
            e for e in events if e.get("reason") == "NoNodeSelected" and e.get("type") == "Warning"
        ]
        assert warnings and "role=database" in warnings[0]["note"]
