"""Checks that ask other services, against real local servers: Prometheus and Kubernikus."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx

from nodeops.kube.resources import SECRETS
from tests.waiting import until

from .harness import harness
from .servers import kubernikus_server, prometheus_server

GATED = """\
instances:
  check:
  - {type: hasLabel, name: go, config: {key: go}}
  - type: prometheusInstant
    name: healthy
    config: {url: URL, query: 'sum(kube_node_status_condition{condition="Ready",status="false"})', expr: value == 0}
  - type: prometheusAlerts
    name: no_alerts
    config: {url: URL, ignore: Watchdog|InfoInhibitor, firingOnly: true}
profiles:
- name: p
  operational:
    transitions: [{check: go && healthy && no_alerts, next: maintenance-required}]
"""


async def test_prometheus_gates_maintenance(tmp_path: Path) -> None:
    async with prometheus_server() as prom, httpx.AsyncClient() as http:
        prom.state["value"] = "2"
        prom.state["alerts"] = [
            {"labels": {"alertname": "Watchdog"}, "state": "firing"},
            {"labels": {"alertname": "NodeDown"}, "state": "pending"},
        ]
        async with harness(tmp_path, GATED.replace("URL", prom.url), http=http) as h:
            await h.label("node-0", **{h.keys.profile: "p", "go": "1"})

            async def explained() -> list[str] | None:
                h.poke("node-0")
                info = h.reconciler.info.get("node-0")
                if not info or not info["profiles"][0]["applied"]["transitions"]:
                    return None
                return info["profiles"][0]["applied"]["transitions"][0]["reasons"]

            reasons = await until(explained, what="an explanation")
            assert "healthy failed (value == 0 is false for value 2)" in reasons[0]
            assert "no_alerts passed" in reasons[0]  # Watchdog ignored, NodeDown only pending
            queries = [
                r["query"].get("query") for r in prom.requests if r["path"].endswith("query")
            ]
            assert queries[0] == 'sum(kube_node_status_condition{condition="Ready",status="false"})'
            prom.state["value"] = "0"
            prom.state["alerts"].append({"labels": {"alertname": "KubeAPIDown"}, "state": "firing"})
            reasons = await until(
                lambda: _reason_with(h, "KubeAPIDown"), what="alert firing blocks"
            )
            assert "alerts active: KubeAPIDown" in reasons
            prom.state["alerts"].pop()
            await h.wait_state("node-0", "maintenance-required")


async def _reason_with(h: object, text: str) -> str | None:
    h.poke("node-0")  # type: ignore[attr-defined]
    info = h.reconciler.info.get("node-0")  # type: ignore[attr-defined]
    if not info or not info["profiles"][0]["applied"]["transitions"]:
        return None
    reasons = " ".join(info["profiles"][0]["applied"]["transitions"][0]["reasons"])
    return reasons if text in reasons else None


COUNT = """\
instances:
  check:
  - {type: hasLabel, name: go, config: {key: go}}
  - type: kubernikusCount
    name: complete
    config: {cluster: c1, url: URL, cloudProviderSecret: {name: cloud-config, namespace: kube-system}}
profiles:
- name: p
  operational:
    transitions: [{check: go && complete, next: maintenance-required}]
"""


async def test_kubernikus_count_with_credentials_from_a_secret(tmp_path: Path) -> None:
    async with kubernikus_server() as api, httpx.AsyncClient() as http:
        conf = (
            f'[Global]\nauth-url="{api.url}/v3"\nusername="u"\npassword="pw"\n'
            'region="qa-de-1"\ndomain-name="kubernikus"\ntenant-id="t1"\n'
        )
        async with harness(tmp_path, COUNT.replace("URL", api.url), http=http) as h:
            await h.client.create(
                SECRETS,
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "cloud-config", "namespace": "kube-system"},
                    "data": {"cloudprovider.conf": base64.b64encode(conf.encode()).decode()},
                },
                "kube-system",
            )
            api.state["pools"] = [3, 1]  # 4 wanted, the cluster has 3
            await h.label("node-0", **{h.keys.profile: "p", "go": "1"})
            reasons = await until(
                lambda: _reason_with(h, "node pools want 4"), what="blocked on node count"
            )
            assert "3 nodes" in reasons
            api.state["pools"] = [2, 1]
            await h.wait_state("node-0", "maintenance-required")
            token_calls = [r for r in api.requests if r["path"] == "/v3/auth/tokens"]
            assert len(token_calls) == 1
            auth = token_calls[0]["json"]["auth"]
            assert auth["scope"] == {"project": {"id": "t1"}}
            assert auth["identity"]["password"]["user"]["domain"] == {"name": "kubernikus"}


URL_ONLY = """\
instances:
  notify: null
  check:
  - {type: hasLabel, name: go, config: {key: go}}
  - type: prometheusInstant
    name: fail
    config: {url: URL}
profiles:
- name: broken
  operational:
    transitions: [{check: go && fail, next: maintenance-required}]
"""


async def test_prometheus_instant_with_only_a_url_loads_and_fails_when_run(
    tmp_path: Path,
) -> None:
    """The reference's own test suite loads such a check as one that always fails."""
    async with prometheus_server() as prom, httpx.AsyncClient() as http:
        async with harness(tmp_path, URL_ONLY.replace("URL", prom.url), http=http) as h:
            await h.label("node-0", **{h.keys.profile: "broken", "go": "1"})

            async def check_error() -> str | None:
                h.poke("node-0")
                info = h.reconciler.info.get("node-0")
                if not info or not info["profiles"][0]["applied"]["transitions"]:
                    return None
                [t] = info["profiles"][0]["applied"]["transitions"]
                return str(t["chain"]["info"]["fail"].get("error") or "") or None

            error = await until(check_error, what="the check's error")
            assert "config.query, config.expr not set" in error
            assert h.reconciler.info.get("node-0")["profiles"][0]["state"] == "operational"
            assert not [r for r in prom.requests if r["path"].endswith("query")]
