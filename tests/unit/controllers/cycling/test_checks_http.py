"""Health and pre-termination checks: how each HTTP outcome is judged (respx stands in for the
endpoints; the integration tests use real HTTP(S) servers)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import respx

from nodeops.api.cycling import HealthCheck, PreTerminationCheck
from nodeops.controllers.cycling.checks import CheckRunner, CheckTarget, render_endpoint

TARGET = CheckTarget(
    node_name="ip-10-0-0-1.ec2.internal",
    node_ip="10.0.0.1",
    provider_id="aws:///eu-west-1a/i-0abc",
    instance_id="i-0abc",
    node_group="workers",
    labels={"topology.kubernetes.io/zone": "eu-west-1a"},
)


def check(**kw: Any) -> HealthCheck:
    return HealthCheck.model_validate(
        {"endpoint": "http://{{ .NodeIP }}:8080/healthz", "waitPeriod": "1m", **kw}
    )


@pytest.fixture
async def runner() -> Any:
    r = CheckRunner(client=None, timeout=0.5)  # type: ignore[arg-type]  # no TLS: no secrets read
    yield r
    await r.close()


def test_rendering() -> None:
    assert (
        render_endpoint(
            'https://{{.NodeIP}}/{{ .NodeName }}/{{ .InstanceID }}/{{ index .Labels "topology.kubernetes.io/zone" }}',
            TARGET,
        )
        == "https://10.0.0.1/ip-10-0-0-1.ec2.internal/i-0abc/eu-west-1a"
    )


@respx.mock
async def test_valid_status_and_body(runner: CheckRunner) -> None:
    respx.get("http://10.0.0.1:8080/healthz").respond(200, text="status: ok")
    outcome = await runner.health(check(regexMatch="ok$"), TARGET, "ns")
    assert outcome.ok, outcome.detail


@respx.mock
async def test_unexpected_status(runner: CheckRunner) -> None:
    respx.get("http://10.0.0.1:8080/healthz").respond(503)
    outcome = await runner.health(check(), TARGET, "ns")
    assert not outcome.ok
    assert "status 503, expected one of [200]" in outcome.detail
    respx.get("http://10.0.0.1:8080/healthz").respond(204)
    assert (await runner.health(check(validStatusCodes=[200, 204]), TARGET, "ns")).ok


@respx.mock
async def test_body_mismatch(runner: CheckRunner) -> None:
    respx.get("http://10.0.0.1:8080/healthz").respond(200, text="starting")
    outcome = await runner.health(check(regexMatch="^ready"), TARGET, "ns")
    assert not outcome.ok and "does not match" in outcome.detail


@respx.mock
async def test_timeouts_and_connection_errors_are_outcomes(runner: CheckRunner) -> None:
    route = respx.get("http://10.0.0.1:8080/healthz")
    route.side_effect = httpx.ConnectTimeout("slow")
    outcome = await runner.health(check(), TARGET, "ns")
    assert not outcome.ok and "no answer within 0.5s" in outcome.detail
    route.side_effect = httpx.ConnectError("refused")
    outcome = await runner.health(check(), TARGET, "ns")
    assert not outcome.ok and "ConnectError" in outcome.detail


@respx.mock
async def test_a_redirect_is_not_followed(runner: CheckRunner) -> None:
    respx.get("http://10.0.0.1:8080/healthz").respond(302, headers={"Location": "http://x/"})
    assert not (await runner.health(check(), TARGET, "ns")).ok


async def test_a_missing_template_value_fails_the_check(runner: CheckRunner) -> None:
    no_ip = CheckTarget(node_name="n", node_ip=None)
    outcome = await runner.health(check(), no_ip, "ns")
    assert not outcome.ok and "no value for .NodeIP" in outcome.detail


@respx.mock
async def test_trigger_is_a_post(runner: CheckRunner) -> None:
    route = respx.post("http://10.0.0.1:8080/drain").respond(202)
    pre = PreTerminationCheck.model_validate(
        {
            "triggerEndpoint": "http://{{ .NodeIP }}:8080/drain",
            "validStatusCodes": [202],
            "healthCheck": {"endpoint": "http://{{ .NodeIP }}:8080/drained", "waitPeriod": "1m"},
        }
    )
    assert (await runner.trigger(pre, TARGET, "ns")).ok
    assert route.call_count == 1


async def test_tls_from_missing_environment(
    runner: CheckRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_SUCH_CA", raising=False)
    outcome = await runner.health(
        check(endpoint="https://{{ .NodeIP }}/", tls={"rootCA": "NO_SUCH_CA"}), TARGET, "ns"
    )
    assert not outcome.ok and "environment variable NO_SUCH_CA is not set" in outcome.detail
