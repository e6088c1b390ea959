"""Health and pre-termination checks against real HTTP(S) servers on loopback, one with mTLS,
with TLS material from a Secret (and, as in Cyclops, from environment variables)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from nodeops.api.cycling import HealthCheck
from nodeops.controllers.cycling.checks import CheckRunner, CheckTarget
from nodeops.kube.resources import SECRETS
from tests.waiting import until

from .checkserver import make_pki, serve
from .harness import NS, nodes, request, scenario, wait_phase, world

GROUP = ["workers-a"]


def secret(name: str, **data: bytes) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS},
        "data": {k.replace("_", "."): base64.b64encode(v).decode() for k, v in data.items()},
    }


async def test_health_checks_gate_new_nodes_over_https() -> None:
    pki = make_pki()
    async with serve(pki) as server, world(scenario(2)) as w:
        assert w.client is not None
        await w.client.create(SECRETS, secret("checks-ca", ca_crt=pki.ca), NS)
        old = sorted(n["metadata"]["name"] for n in await nodes(w))
        server.default_healthy = False
        server.healthy.update(dict.fromkeys(old, True))
        check = {
            "endpoint": server.url + "/health/{{ .NodeName }}",
            "waitPeriod": "1h",
            "regexMatch": "ok$",
            "tls": {"secretRef": {"name": "checks-ca"}},
        }
        await w.create_request(
            request("checked", GROUP, cycleSettings={"concurrency": 1}, healthChecks=[check])
        )

        async def new_node_checked() -> Any:
            return [n for n in server.checks if n not in old]

        await until(new_node_checked, timeout=120, what="a new node's health check")
        blocked = await w.request("checked")
        assert blocked is not None
        # The replacements answer 503: the batch cannot go on.
        assert blocked["status"]["phase"] == "ScalingUp"
        await asyncio.sleep(0.5)
        blocked = await w.request("checked")
        assert blocked is not None and blocked["status"]["phase"] == "ScalingUp"
        # Every existing node was checked before cycling began.
        assert set(old) <= set(server.checks)
        server.default_healthy = True
        done = await wait_phase(w, "checked", "Successful")
        health = done["status"]["healthChecks"]
        new = [v for k, v in health.items() if k.rsplit("/", 1)[-1] not in old]
        assert new and all(v["checks"] == [True] and v["ready"] for v in new)
        assert all(health[k]["skip"] for k in health if k.rsplit("/", 1)[-1] in old)


async def test_a_health_check_failing_past_its_wait_period_heals() -> None:
    async with serve() as server, world(scenario(1)) as w:
        old = [n["metadata"]["name"] for n in await nodes(w)]
        server.default_healthy = False
        server.healthy.update(dict.fromkeys(old, True))
        check = {"endpoint": server.url + "/health/{{ .NodeName }}", "waitPeriod": "30s"}
        await w.create_request(
            request("unhealthy", GROUP, healthChecks=[check], skipInitialHealthChecks=True)
        )
        failed = await wait_phase(w, "unhealthy", "Failed", timeout=120)
        assert "failed for longer than 30s" in failed["status"]["message"]


async def test_pre_termination_checks_over_mtls_from_a_secret() -> None:
    pki = make_pki()
    async with serve(pki, mtls=True) as server, world(scenario(2)) as w:
        assert w.client is not None
        await w.client.create(
            SECRETS,
            secret("checks-mtls", ca_crt=pki.ca, tls_crt=pki.client_cert, tls_key=pki.client_key),
            NS,
        )
        old = sorted(n["metadata"]["name"] for n in await nodes(w))
        tls = {"secretRef": {"name": "checks-mtls"}}
        pre = {
            "triggerEndpoint": server.url + "/drain/{{ .NodeName }}",
            "validStatusCodes": [202],
            "tls": tls,
            "healthCheck": {
                "endpoint": server.url + "/health/{{ .NodeName }}",
                "waitPeriod": "5m",
                "tls": tls,
            },
        }
        await w.create_request(
            request("graceful", GROUP, cycleSettings={"concurrency": 2}, preTerminationChecks=[pre])
        )
        done = await wait_phase(w, "graceful", "Successful")
        assert sorted(server.triggers) == old  # each old node triggered exactly once
        assert set(server.clients) == {"nodeops"}  # every request presented the client cert
        checks = done["status"]["preTerminationChecks"]
        assert all(v["checks"][0]["check"] and v["checks"][0]["trigger"] for v in checks.values())


async def test_mtls_without_a_client_certificate_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    pki = make_pki()
    target = CheckTarget(node_name="n1", node_ip="127.0.0.1")
    async with serve(pki, mtls=True) as server:
        runner = CheckRunner(client=None, timeout=5)  # type: ignore[arg-type]  # env, no Secret
        try:
            monkeypatch.setenv("CHECKS_CA", pki.ca.decode())
            ca_only = HealthCheck.model_validate(
                {
                    "endpoint": server.url + "/health/{{ .NodeName }}",
                    "waitPeriod": "1m",
                    "tls": {"rootCA": "CHECKS_CA"},
                }
            )
            outcome = await runner.health(ca_only, target, NS)
            assert not outcome.ok
            # Cyclops's way: the PEM in environment variables named by rootCA, crt and key.
            monkeypatch.setenv("CHECKS_CRT", pki.client_cert.decode())
            monkeypatch.setenv("CHECKS_KEY", pki.client_key.decode())
            mtls = HealthCheck.model_validate(
                {
                    "endpoint": server.url + "/health/{{ .NodeName }}",
                    "waitPeriod": "1m",
                    "tls": {"rootCA": "CHECKS_CA", "crt": "CHECKS_CRT", "key": "CHECKS_KEY"},
                }
            )
            outcome = await runner.health(mtls, target, NS)
            assert outcome.ok, outcome.detail
        finally:
            await runner.close()
