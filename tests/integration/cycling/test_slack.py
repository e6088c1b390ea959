"""Slack notifications of a roll, into a Slack Web API look-alike on loopback: one parent
message per request, phases in its thread, the parent updated with progress and colour."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import respx
from aiohttp import web

from nodeops.controllers.cycling.notify import SlackNotifier, parse_secret_ref
from nodeops.controllers.cycling.status import View
from nodeops.kube.client import Client
from nodeops.kube.resources import SECRETS

from .harness import NS, request, scenario, wait_phase, world


class FakeSlack:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.url = ""

    def app(self) -> web.Application:
        async def method(req: web.Request) -> web.Response:
            body = await req.json()
            name = req.match_info["method"]
            self.calls.append((name, req.headers.get("Authorization", ""), body))
            if name == "chat.postMessage":
                return web.json_response({"ok": True, "ts": f"1700000000.{len(self.calls):06d}"})
            return web.json_response({"ok": True})

        app = web.Application()
        app.router.add_post("/api/{method}", method)
        return app


@asynccontextmanager
async def fake_slack() -> AsyncIterator[FakeSlack]:
    slack = FakeSlack()
    runner = web.AppRunner(slack.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    slack.url = f"http://127.0.0.1:{port}/api"
    try:
        yield slack
    finally:
        await runner.cleanup()


async def test_a_roll_is_one_thread() -> None:
    async with fake_slack() as slack:

        def notifier(client: Client) -> SlackNotifier:
            return SlackNotifier(
                client,
                channel="C123",
                token_secret=(NS, "slack", "token"),
                api_url=slack.url,
                cluster="sim",
            )

        async with world(scenario(2), notifier=notifier) as w:
            assert w.client is not None
            await w.client.create(
                SECRETS,
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "slack", "namespace": NS},
                    "data": {"token": base64.b64encode(b"xoxb-test").decode()},
                },
                NS,
            )
            await w.create_request(request("noisy", ["workers-a"]))
            done = await wait_phase(w, "noisy", "Successful")
        thread = done["status"]["threadTimestamp"]
        parents = [c for c in slack.calls if c[0] == "chat.postMessage" and "thread_ts" not in c[2]]
        assert len(parents) == 1
        assert all(auth == "Bearer xoxb-test" for _, auth, _ in slack.calls)
        replies = [c[2]["text"] for c in slack.calls if c[2].get("thread_ts") == thread]
        assert any("Selected 2 nodes" in r for r in replies)
        assert "Entered the *Successful* phase" in replies
        final = [c[2] for c in slack.calls if c[0] == "chat.update"][-1]
        assert final["ts"] == thread
        assert final["attachments"][0]["color"] == "good"
        fields = {f["title"]: f["value"] for f in final["attachments"][0]["fields"]}
        assert fields["Progress"] == "2/2 (100%)"
        assert fields["Cluster"] == "sim"


def test_secret_references() -> None:
    assert parse_secret_ref("ops/slack:bot", "x") == ("ops", "slack", "bot")
    assert parse_secret_ref("slack", "nodeops-system") == ("nodeops-system", "slack", "token")
    with pytest.raises(ValueError):
        parse_secret_ref("ops/", "x")


@respx.mock
async def test_a_failing_slack_never_fails_the_request() -> None:
    respx.post("https://slack.example/api/chat.postMessage").mock(
        side_effect=httpx.ConnectError("down")
    )
    notifier = SlackNotifier(
        client=None,  # type: ignore[arg-type]  # the token is cached below, no Secret is read
        channel="C1",
        token_secret=("ns", "s", "token"),
        api_url="https://slack.example/api",
    )
    notifier._token = "xoxb"
    view = View({"metadata": {"name": "r", "namespace": "ns"}, "spec": {}, "status": {}})
    assert await notifier.started(view) is None
    respx.post("https://slack.example/api/chat.postMessage").respond(
        200, json={"ok": False, "error": "not_in_channel"}
    )
    assert await notifier.started(view) is None
    await notifier.close()
