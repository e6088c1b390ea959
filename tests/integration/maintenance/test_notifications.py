"""Notifications to real local servers: Slack stand-in, aiosmtpd; retries never block."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiosmtpd.controller import Controller as SmtpController
from aiosmtpd.smtp import AuthResult, LoginPassword

from nodeops.controllers.maintenance.config import load_text
from nodeops.controllers.maintenance.plugins.base import Message
from nodeops.controllers.maintenance.plugins.notifications import SendError
from nodeops.controllers.maintenance.sender import NotificationSender
from nodeops.kube.client import Client
from nodeops.kube.resources import LEASES
from nodeops.sim.clock import Clock as SimClock
from nodeops.sim.server.app import SimServer
from nodeops.sim.server.tls import self_signed, server_context
from tests.waiting import until

from .harness import harness
from .servers import slack_server

MESSAGE = Message(
    "n", "node-1", "p", "in-maintenance", {"Node": {"Name": "node-1"}, "State": "in-maintenance"}
)


@dataclass
class View:
    """What notifications use of the cluster: the client (Leases) and HTTP."""

    client: Any = None
    http: Any = None
    events: Any = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Inbox:
    messages: list[Any] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(envelope)
        return "250 OK"


def mail_config(port: int, **extra: Any) -> str:
    lines = [
        "instances:",
        "  notify:",
        "  - type: mail",
        "    name: m",
        "    config:",
        f"      address: 127.0.0.1:{port}",
        "      from: nodeops@example.org",
        "      to: [ops@example.org, oncall@example.org]",
        "      subject: 'Node {{ .Node.Name }} is {{ .State }}'",
        "      message: |",
        "        {{ .Node.Name }} entered {{ .State }}.",
    ]
    lines += [f"      {k}: {v}" for k, v in extra.items()]
    lines += ["    schedule: {type: periodic}"]
    return "\n".join(lines) + "\n"


def mail_plugin(port: int, **extra: Any) -> Any:
    return load_text(mail_config(port, **extra), env={}).notifications["m"].plugin


async def test_mail_plain() -> None:
    inbox = Inbox()
    port = free_port()
    smtp = SmtpController(inbox, hostname="127.0.0.1", port=port)
    smtp.start()
    try:
        await mail_plugin(port).send(MESSAGE, View())
    finally:
        smtp.stop()
    [envelope] = inbox.messages
    assert envelope.rcpt_tos == ["ops@example.org", "oncall@example.org"]
    text = envelope.content.decode()
    assert "Subject: Node node-1 is in-maintenance" in text
    assert "node-1 entered in-maintenance." in text


async def test_mail_auth_and_starttls(tmp_path: Path) -> None:
    cert, key = self_signed("127.0.0.1")
    ca = tmp_path / "ca.pem"
    ca.write_bytes(cert)
    seen: list[tuple[str, str]] = []

    def authenticator(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> Any:
        if isinstance(data, LoginPassword):
            seen.append((data.login.decode(), data.password.decode()))
            return AuthResult(success=data.password == b"secret")
        return AuthResult(success=False)

    inbox = Inbox()
    port = free_port()
    smtp = SmtpController(
        inbox,
        hostname="127.0.0.1",
        port=port,
        tls_context=server_context(cert, key),
        require_starttls=True,
        authenticator=authenticator,
        auth_require_tls=True,
    )
    smtp.start()
    try:
        plugin = mail_plugin(port, auth="true", user="u", password="secret", caFile=str(ca))
        await plugin.send(MESSAGE, View())
        bad = mail_plugin(port, auth="true", user="u", password="wrong", caFile=str(ca))
        with pytest.raises(SendError, match="smtp"):
            await bad.send(MESSAGE, View())
        untrusted = mail_plugin(port, startTLS="always")
        with pytest.raises(SendError, match=r"CERTIFICATE_VERIFY_FAILED|certificate"):
            await untrusted.send(MESSAGE, View())
    finally:
        smtp.stop()
    assert len(inbox.messages) == 1
    assert seen == [("u", "secret"), ("u", "wrong")]

    plain = Inbox()
    port = free_port()
    smtp = SmtpController(plain, hostname="127.0.0.1", port=port)
    smtp.start()
    try:
        with pytest.raises(SendError, match="does not offer STARTTLS"):
            await mail_plugin(port, startTLS="always").send(MESSAGE, View())
    finally:
        smtp.stop()
    assert plain.messages == []


def slack_plugin(url: str) -> Any:
    text = (
        "instances:\n  notify:\n  - type: slack\n    name: s\n    config:\n"
        f"      hook: {url}/hook/x\n      channel: '#ops'\n"
        "      message: '{{ .Node.Name }} is {{ .State }}'\n    schedule: {type: periodic}\n"
    )
    return load_text(text, env={}).notifications["s"]


async def test_failed_notifications_are_retried_with_backoff_and_counted() -> None:
    async with slack_server() as slack, httpx.AsyncClient() as http:
        slack.scripted = [(500, "oops"), (200, "invalid_token")]
        sender = NotificationSender(View(http=http), initial_backoff=0.05, max_backoff=0.2)
        stop = asyncio.Event()
        task = asyncio.create_task(sender.run(stop))
        instance = slack_plugin(slack.url)
        sender.submit([(instance, MESSAGE)])
        await asyncio.wait_for(sender.wait_idle(), 20)
        assert sender.sent == 1 and sender.failed == 0
        assert slack.texts() == ["node-1 is in-maintenance"] * 3
        # A message that keeps failing is given up after max_attempts and counted.
        sender.max_attempts = 2
        slack.scripted = [(503, "down")] * 2
        sender.submit([(instance, MESSAGE)])
        await asyncio.wait_for(sender.wait_idle(), 20)
        assert sender.failed == 1
        stop.set()
        await task


async def test_a_failing_notification_never_blocks_a_transition(tmp_path: Path) -> None:
    config = """\
instances:
  check:
  - {type: hasLabel, name: go, config: {key: go}}
  notify:
  - type: slack
    name: s
    config: {hook: HOOK, channel: c, message: '{{ .Node.Name }}'}
    schedule: {type: periodic, config: {interval: 1h}}
profiles:
- name: p
  operational:
    notify: s
    transitions:
    - {check: go, next: maintenance-required}
  maintenance-required:
    notify: s
    transitions:
    - {check: go, next: in-maintenance}
"""
    async with slack_server() as slack:
        slack.scripted = [(500, "down")] * 100
        config = config.replace("HOOK", f"{slack.url}/hook/x")
        async with harness(tmp_path, config) as h:
            await h.label("node-0", **{h.keys.profile: "p", "go": "1"})
            await h.wait_state("node-0", "in-maintenance")
            await until(lambda: _gt(len(slack.requests), 2), what="retries going on")


async def _gt(a: int, b: int) -> bool:
    return a > b


async def test_slack_thread_per_lease_period() -> None:
    server = SimServer(clock=SimClock(1.0))
    await server.start()
    try:
        async with (
            Client(server.url, token=server.admin_token, qps=0) as client,
            slack_server() as slack,
            httpx.AsyncClient() as http,
        ):
            text = (
                "instances:\n  notify:\n  - type: slackThread\n    name: t\n    config:\n"
                "      token: token\n      channel: '#ops'\n      period: 1h\n"
                "      leaseName: thread\n      leaseNamespace: default\n"
                f"      url: {slack.url}/api/\n"
                "      title: 'Maintenance of {{ .State }} nodes'\n"
                "      message: '{{ .Node.Name }}'\n    schedule: {type: periodic}\n"
            )
            plugin = load_text(text, env={}).notifications["t"].plugin
            view = View(client=client, http=http)
            await plugin.send(MESSAGE, view)
            await plugin.send(MESSAGE, view)
            posts = [r["json"] for r in slack.requests]
            assert posts[0] == {"channel": "#ops", "text": "Maintenance of in-maintenance nodes"}
            parent = slack.requests[0]["ts"]
            assert posts[1] == {"channel": "#ops", "text": "node-1", "thread_ts": parent}
            assert posts[2] == {"channel": "#ops", "text": "node-1", "thread_ts": parent}
            lease = await client.get(LEASES, "thread", "default")
            assert lease["spec"]["holderIdentity"] == parent
            assert lease["spec"]["leaseDurationSeconds"] == 3600
            # The period ran out: the next message starts a new thread.
            lease["spec"]["renewTime"] = "2020-01-01T00:00:00.000000Z"
            await client.replace(LEASES, lease)
            await plugin.send(MESSAGE, view)
            assert "thread_ts" not in slack.requests[3]["json"]
            assert slack.requests[4]["json"]["thread_ts"] == slack.requests[3]["ts"]
    finally:
        await server.stop()
