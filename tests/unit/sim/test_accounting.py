from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from nodeops.sim.server.accounting import RequestStats, agent_prefix, stats_routes
from nodeops.sim.server.faults import COUNT_KEYS, FaultInjector

KUBECTL = "kubectl/v1.30.1 (linux/amd64) kubernetes/9a1b2c3"
NODEOPS = "nodeops/0.1.0 (linux; python 3.11)"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("user_agent", "prefix"),
    [
        (KUBECTL, "kubectl"),
        (NODEOPS, "nodeops"),
        ("Python/3.11 aiohttp/3.9.5", "Python"),
        ("curl 8.0", "curl"),
        ("  ", "unknown"),
        ("", "unknown"),
    ],
)
def test_agent_prefix(user_agent: str, prefix: str) -> None:
    assert agent_prefix(user_agent) == prefix


def test_empty_snapshot() -> None:
    stats = RequestStats(clock=FakeClock())
    assert stats.snapshot() == {
        "elapsed_seconds": 0.0,
        "total": {"requests": 0, "seconds": 0.0},
        "by_verb": {},
        "by_resource": {},
        "by_verb_resource": {},
        "by_code": {},
        "by_agent": {},
    }


def test_snapshot_groups_every_way() -> None:
    clock = FakeClock()
    stats = RequestStats(clock=clock)
    stats.record("list", "pods", 200, KUBECTL, 0.5)
    stats.record("create", "pods/eviction", 201, KUBECTL, 0.25)
    stats.record("create", "pods/eviction", 429, KUBECTL, 0.125)
    stats.record("list", "pods", 200, NODEOPS, 1.0)
    stats.record("patch", "nodes", 200, "nodeops/0.2.0", 2.0)
    clock.now += 7.5
    snap = stats.snapshot()
    assert snap["elapsed_seconds"] == 7.5
    assert snap["total"] == {"requests": 5, "seconds": 3.875}
    assert snap["by_verb"] == {
        "create": {"requests": 2, "seconds": 0.375},
        "list": {"requests": 2, "seconds": 1.5},
        "patch": {"requests": 1, "seconds": 2.0},
    }
    assert snap["by_resource"] == {
        "nodes": {"requests": 1, "seconds": 2.0},
        "pods": {"requests": 2, "seconds": 1.5},
        "pods/eviction": {"requests": 2, "seconds": 0.375},
    }
    assert snap["by_verb_resource"] == {
        "create/pods/eviction": {"requests": 2, "seconds": 0.375},
        "list/pods": {"requests": 2, "seconds": 1.5},
        "patch/nodes": {"requests": 1, "seconds": 2.0},
    }
    assert snap["by_code"] == {
        "200": {"requests": 3, "seconds": 3.5},
        "201": {"requests": 1, "seconds": 0.25},
        "429": {"requests": 1, "seconds": 0.125},
    }
    assert snap["by_agent"] == {
        "kubectl": {
            "requests": 3,
            "seconds": 0.875,
            "by_verb_resource": {
                "create/pods/eviction": {"requests": 2, "seconds": 0.375},
                "list/pods": {"requests": 1, "seconds": 0.5},
            },
        },
        "nodeops": {
            "requests": 2,
            "seconds": 3.0,
            "by_verb_resource": {
                "list/pods": {"requests": 1, "seconds": 1.0},
                "patch/nodes": {"requests": 1, "seconds": 2.0},
            },
        },
    }


def test_requests_stay_integers() -> None:
    stats = RequestStats()
    for _ in range(3):
        stats.record("get", "pods", 200, KUBECTL, 0.1)
    assert type(stats.snapshot()["total"]["requests"]) is int


def test_reset_clears_counters_and_restarts_the_clock() -> None:
    clock = FakeClock()
    stats = RequestStats(clock=clock)
    stats.record("get", "pods", 200, KUBECTL, 0.1)
    clock.now += 3
    stats.reset()
    clock.now += 1
    snap = stats.snapshot()
    assert snap["total"] == {"requests": 0, "seconds": 0.0}
    assert snap["by_agent"] == {}
    assert snap["elapsed_seconds"] == 1
    stats.record("get", "pods", 200, KUBECTL, 0.1)
    assert stats.snapshot()["by_verb_resource"] == {"get/pods": {"requests": 1, "seconds": 0.1}}


# --- routes over loopback HTTP -------------------------------------------------------------


@dataclass
class Sim:
    client: TestClient[web.Request, web.Application]
    stats: RequestStats
    faults: FaultInjector


@pytest.fixture
async def sim() -> AsyncIterator[Sim]:
    stats = RequestStats()
    faults = FaultInjector(seed=4)
    app = web.Application()
    app.add_routes(stats_routes(stats, faults))
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        yield Sim(client, stats, faults)


async def _json(resp: Any, status: int = 200) -> Any:
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/json"
    return await resp.json()


async def test_routes_live_under_sim(sim: Sim) -> None:
    paths = {r.path for r in stats_routes(sim.stats, sim.faults)}
    assert paths == {"/sim/requests", "/sim/faults"}
    resp = await sim.client.get("/api/v1/pods")
    assert resp.status == 404


async def test_get_requests(sim: Sim) -> None:
    sim.stats.record("list", "pods", 200, KUBECTL, 0.5)
    sim.stats.record("create", "pods/eviction", 201, NODEOPS, 0.25)
    body = await _json(await sim.client.get("/sim/requests"))
    assert body["total"] == {"requests": 2, "seconds": 0.75}
    assert body["by_agent"]["kubectl"]["by_verb_resource"] == {
        "list/pods": {"requests": 1, "seconds": 0.5}
    }
    assert body["by_code"]["201"] == {"requests": 1, "seconds": 0.25}


async def test_reading_requests_does_not_count_itself(sim: Sim) -> None:
    for _ in range(3):
        body = await _json(await sim.client.get("/sim/requests"))
    assert body["total"]["requests"] == 0


async def test_delete_requests_returns_the_final_snapshot_and_resets(sim: Sim) -> None:
    sim.stats.record("list", "pods", 200, KUBECTL, 0.5)
    body = await _json(await sim.client.delete("/sim/requests"))
    assert body["total"]["requests"] == 1
    assert sim.stats.snapshot()["total"]["requests"] == 0
    body = await _json(await sim.client.get("/sim/requests"))
    assert body["by_verb"] == {}


async def test_get_faults(sim: Sim) -> None:
    sim.faults.update("error=500:0.5@patch/pods")
    fired = sum(sim.faults.maybe_error("patch", "pods") is not None for _ in range(100))
    body = await _json(await sim.client.get("/sim/faults"))
    assert body["spec"] == "error=500:0.5@patch/pods"
    assert body["clauses"] == [{"error": 500, "rate": 0.5, "at": "patch/pods"}]
    assert body["seed"] == 4
    assert body["enabled"] is True
    assert body["counts"]["error-500"] == fired > 0
    assert set(body["counts"]) == set(COUNT_KEYS)


async def test_put_faults_as_text(sim: Sim) -> None:
    resp = await sim.client.put(
        "/sim/faults",
        data="error=429:1@list/pods:retry-after=2; latency=5ms@get/*",
        headers={"Content-Type": "text/plain"},
    )
    body = await _json(resp)
    assert body["spec"] == "error=429@list/pods:retry-after=2; latency=5ms@get/*"
    assert body["enabled"] is True
    error = sim.faults.maybe_error("list", "pods")
    assert error is not None and error.headers["Retry-After"] == "2"
    assert sim.faults.latency("get", "nodes") == 0.005


async def test_put_faults_as_a_json_string(sim: Sim) -> None:
    body = await _json(await sim.client.put("/sim/faults", json="watch-cut=events:3@pods"))
    assert body["spec"] == "watch-cut=events:3@pods"
    assert sim.faults.watch_limits("pods") == (3, None)


async def test_put_faults_as_a_json_list(sim: Sim) -> None:
    clauses = [{"watch-expire": 1, "at": "pods"}, "error=409@update/leases"]
    body = await _json(await sim.client.put("/sim/faults", json=clauses))
    assert body["spec"] == "watch-expire=1@pods; error=409@update/leases"
    assert sim.faults.force_expired("pods") is True


async def test_put_faults_with_a_seed(sim: Sim) -> None:
    spec = "error=500:0.3@*"
    body = await _json(await sim.client.put("/sim/faults", json={"spec": spec, "seed": 99}))
    assert body["seed"] == 99
    reference = FaultInjector(spec, seed=99)
    for _ in range(200):
        assert (sim.faults.maybe_error("get", "pods") is None) == (
            reference.maybe_error("get", "pods") is None
        )


async def test_put_faults_resets_counts(sim: Sim) -> None:
    sim.faults.update("error=500@*")
    sim.faults.maybe_error("get", "pods")
    body = await _json(await sim.client.put("/sim/faults", data="error=500@*"))
    assert body["counts"]["error-500"] == 0


@pytest.mark.parametrize(
    "payload",
    [
        {"data": ""},
        {"data": "null", "headers": {"Content-Type": "application/json"}},
        {"json": ""},
        {"json": []},
        {"json": {"spec": None}},
    ],
)
async def test_put_empty_spec_switches_faults_off(sim: Sim, payload: dict[str, Any]) -> None:
    sim.faults.update("error=500@*")
    body = await _json(await sim.client.put("/sim/faults", **payload))
    assert body["enabled"] is False
    assert body["spec"] == ""
    assert sim.faults.maybe_error("get", "pods") is None


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"data": "error=503@get/pods"}, "bad fault clause `error=503@get/pods`: unsupported"),
        ({"json": "latency=5"}, "bad fault clause `latency=5`: duration '5' needs a unit"),
        ({"json": [{"error": 500, "at": "pods"}]}, "target 'pods' must be VERB/RESOURCE"),
        ({"json": {"spec": "error=500", "extra": 1}}, "unknown keys ['extra']"),
        ({"json": {"spec": "error=500", "seed": "x"}}, "seed must be an integer"),
        ({"json": 42}, "spec must be a string or a list of clauses"),
        (
            {"data": "{not json", "headers": {"Content-Type": "application/json"}},
            "invalid JSON",
        ),
    ],
)
async def test_put_bad_faults_is_a_400_and_keeps_the_old_spec(
    sim: Sim, payload: dict[str, Any], message: str
) -> None:
    sim.faults.update("error=500@get/pods")
    body = await _json(await sim.client.put("/sim/faults", **payload), status=400)
    assert message in body["message"]
    assert str(sim.faults.spec) == "error=500@get/pods"
    assert sim.faults.maybe_error("get", "pods") is not None
