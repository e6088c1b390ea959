"""httpx error handling of the Slack, Prometheus and Kubernikus clients (respx, no server)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import respx

from nodeops.controllers.maintenance.plugins import kubernikus, notifications, prometheus
from nodeops.controllers.maintenance.plugins.base import Message, PluginError

from .fakes import MemoryCluster, context, node

MESSAGE = Message("n", "node-1", "p", "operational", {"Node": {"Name": "node-1"}})


class HttpCluster(MemoryCluster):
    def __init__(self, client: httpx.AsyncClient) -> None:
        super().__init__([node("node-1")])
        self._http = client

    @property
    def http(self) -> httpx.AsyncClient:
        return self._http


@pytest.fixture
async def cluster() -> Any:
    async with httpx.AsyncClient() as client:
        yield HttpCluster(client)


def slack(**config: Any) -> notifications.Slack:
    base = {"hook": "https://hooks.example/x", "channel": "#c", "message": "{{ .Node.Name }}"}
    return notifications.Slack(notifications.SlackConfig.model_validate(base | config))


@respx.mock
async def test_slack_webhook_errors(cluster: HttpCluster) -> None:
    route = respx.post("https://hooks.example/x")
    route.mock(return_value=httpx.Response(200, text="ok"))
    await slack().send(MESSAGE, cluster)
    assert route.calls.last.request.content == b'{"text":"node-1","channel":"#c"}'
    route.mock(return_value=httpx.Response(200, text="invalid_payload"))
    with pytest.raises(notifications.SendError, match="invalid_payload"):
        await slack().send(MESSAGE, cluster)
    route.mock(return_value=httpx.Response(429, headers={"Retry-After": "7"}, text="slow down"))
    with pytest.raises(notifications.SendError) as err:
        await slack().send(MESSAGE, cluster)
    assert err.value.retry_after == 7
    route.mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(notifications.SendError, match="ConnectError"):
        await slack().send(MESSAGE, cluster)
    route.mock(side_effect=httpx.ReadTimeout("slow"))
    with pytest.raises(notifications.SendError, match="ReadTimeout"):
        await slack().send(MESSAGE, cluster)


@respx.mock
async def test_slack_api_errors(cluster: HttpCluster) -> None:
    thread = notifications.SlackThread(
        notifications.SlackThreadConfig.model_validate(
            {"token": "t", "channel": "#c", "title": "T", "message": "M", "leaseName": "l",
             "leaseNamespace": "ns", "period": "1h", "url": "https://slack.example/api/"}
        )
    )  # fmt: skip
    route = respx.post("https://slack.example/api/chat.postMessage")
    route.mock(return_value=httpx.Response(200, json={"ok": False, "error": "channel_not_found"}))
    with pytest.raises(notifications.SendError, match="channel_not_found"):
        await thread._post(cluster.http, "x", None)
    route.mock(return_value=httpx.Response(200, text="<html>"))
    with pytest.raises(notifications.SendError, match="not JSON"):
        await thread._post(cluster.http, "x", None)
    route.mock(return_value=httpx.Response(503))
    with pytest.raises(notifications.SendError, match="HTTP 503"):
        await thread._post(cluster.http, "x", None)
    route.mock(return_value=httpx.Response(200, json={"ok": True, "ts": "1.2"}))
    assert await thread._post(cluster.http, "x", "1.1") == "1.2"
    assert route.calls.last.request.headers["Authorization"] == "Bearer t"


def instant(expr: str = "value <= 1") -> prometheus.PrometheusInstant:
    return prometheus.PrometheusInstant(
        prometheus.InstantConfig.model_validate(
            {"url": "http://prom.example", "query": "up", "expr": expr}
        )
    )


@respx.mock
async def test_prometheus_errors(cluster: HttpCluster) -> None:
    route = respx.get("http://prom.example/api/v1/query")
    ctx = context(node("node-1"), cluster)

    def vector(*values: str) -> httpx.Response:
        result = [{"metric": {}, "value": [1, v]} for v in values]
        return httpx.Response(
            200, json={"status": "success", "data": {"resultType": "vector", "result": result}}
        )

    route.mock(return_value=vector("1"))
    assert (await instant().check(ctx)).passed
    route.mock(return_value=vector("2"))
    r = await instant().check(ctx)
    assert not r.passed and r.info["value"] == 2
    route.mock(return_value=vector("1", "2"))
    with pytest.raises(PluginError, match="2 samples"):
        await instant().check(ctx)
    route.mock(return_value=vector())
    with pytest.raises(PluginError, match="0 samples"):
        await instant().check(ctx)
    route.mock(
        return_value=httpx.Response(
            200, json={"status": "success", "data": {"resultType": "scalar", "result": [1, "0.5"]}}
        )
    )
    assert (await instant().check(ctx)).passed
    route.mock(return_value=httpx.Response(400, json={"status": "error", "error": "bad query"}))
    with pytest.raises(PluginError, match="bad query"):
        await instant().check(ctx)
    route.mock(return_value=httpx.Response(502, text="bad gateway"))
    with pytest.raises(PluginError, match="not JSON"):
        await instant().check(ctx)
    route.mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(PluginError, match="ConnectError"):
        await instant().check(ctx)


def test_prometheus_expr_language() -> None:
    from nodeops.controllers.maintenance.plugins import valueexpr

    e = valueexpr.parse("value > 0 && !(value == 3) || value * 2 >= 100")
    assert [e.evaluate(v) for v in (0, 1, 3, 50)] == [False, True, False, True]
    for bad in ("value >", "foo < 1", "value ** 2", "(value", ""):
        with pytest.raises(ValueError, match="expr"):
            valueexpr.parse(bad)


@respx.mock
async def test_kubernikus_errors(cluster: HttpCluster, tmp_path: Any) -> None:
    conf = tmp_path / "cloudprovider.conf"
    conf.write_text(
        '[Global]\nauth-url="https://keystone.example/v3"\nusername="u"\npassword="pw"\n'
        'region="qa-de-1"\ndomain-name="kubernikus"\ntenant-id="t1"\n'
    )
    check = kubernikus.KubernikusCount(
        kubernikus.KubernikusCountConfig.model_validate(
            {"cluster": "c1", "cloudProviderConfig": str(conf)}
        )
    )
    ctx = context(node("node-1"), cluster)
    auth = respx.post("https://keystone.example/v3/auth/tokens")
    api = respx.get("https://kubernikus.qa-de-1.cloud.sap/api/v1/clusters/c1")
    auth.mock(return_value=httpx.Response(401, json={"error": {}}))
    with pytest.raises(PluginError, match=r"keystone .* HTTP 401"):
        await check.check(ctx)
    auth.mock(return_value=httpx.Response(201, headers={"X-Subject-Token": "tok"}, json={}))
    api.mock(return_value=httpx.Response(500, text="boom"))
    with pytest.raises(PluginError, match="HTTP 500"):
        await check.check(ctx)
    api.mock(return_value=httpx.Response(200, json={"spec": {"nodePools": [{"size": 1}]}}))
    assert (await check.check(ctx)).passed
    assert api.calls.last.request.headers["x-auth-token"] == "tok"
    assert auth.call_count == 2  # the token is cached after the first success
    api.mock(return_value=httpx.Response(200, json={"spec": {"nodePools": [{"size": 3}]}}))
    r = await check.check(ctx)
    assert not r.passed and r.info == {"nodes": 1, "expected": 3, "reason": r.info["reason"]}
    conf.write_text("[Global]\nusername=u\n")
    check._token = None
    with pytest.raises(PluginError, match="auth-url is missing"):
        await check.check(ctx)
