"""Notifications: Slack webhook, Slack threads (Slack API), mail (SMTP).

`send` raises on any failure (HTTP status, Slack's `ok: false`, SMTP error) so the controller's
sender can retry with backoff and count it; a template that cannot be rendered raises
`TemplateError`, which retrying cannot fix.
"""

from __future__ import annotations

import asyncio
import smtplib
import ssl
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any

import httpx
from pydantic import Field

from nodeops.controllers.maintenance.plugins.base import (
    ClusterView,
    Message,
    PluginConfig,
    PluginError,
    PluginType,
)
from nodeops.controllers.maintenance.plugins.fields import Duration
from nodeops.controllers.maintenance.plugins.stagger import lease_expiry, micro_time
from nodeops.controllers.maintenance.templating import Template
from nodeops.kube import errors
from nodeops.kube.resources import LEASES

TIMEOUT = 15.0


class SendError(PluginError):
    """A message was not delivered; `retry_after` is the server's hint, if any."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("Retry-After")
    try:
        return float(value) if value else None
    except ValueError:
        return None


# ---------------------------------------------------------------------- slack webhook


class SlackConfig(PluginConfig):
    hook: str = Field(min_length=1)
    channel: str = Field(min_length=1)  # required by the reference too
    message: str = Field(min_length=1)


class Slack:
    def __init__(self, config: SlackConfig) -> None:
        self.config = config
        self.message = Template(config.message, "message")

    def validate_templates(self) -> None:
        return None

    async def send(self, message: Message, cluster: ClusterView) -> None:
        text = self.message.render(message.data)
        body: dict[str, Any] = {"text": text, "channel": self.config.channel}
        try:
            resp = await cluster.http.post(self.config.hook, json=body, timeout=TIMEOUT)
        except httpx.HTTPError as exc:
            raise SendError(f"slack webhook: {type(exc).__name__}: {exc}") from exc
        if resp.status_code != 200 or resp.text.strip() != "ok":
            raise SendError(
                f"slack webhook: HTTP {resp.status_code}: {resp.text[:200]!r}", _retry_after(resp)
            )


# ---------------------------------------------------------------------- slack thread


class SlackThreadConfig(PluginConfig):
    token: str = Field(min_length=1)
    channel: str = Field(min_length=1)
    title: str = Field(min_length=1)
    message: str = Field(min_length=1)
    leaseName: str = Field(min_length=1)
    leaseNamespace: str = Field(min_length=1)
    period: Duration
    url: str = "https://slack.com/api/"


class SlackThread:
    """Messages of one `period` go into one thread; the Lease remembers the thread's parent."""

    def __init__(self, config: SlackThreadConfig) -> None:
        self.config = config
        self.title = Template(config.title, "title")
        self.message = Template(config.message, "message")
        self._lock = asyncio.Lock()

    def validate_templates(self) -> None:
        return None

    async def _post(self, http: httpx.AsyncClient, text: str, thread: str | None) -> str:
        body: dict[str, Any] = {"channel": self.config.channel, "text": text}
        if thread:
            body["thread_ts"] = thread
        url = self.config.url.rstrip("/") + "/chat.postMessage"
        try:
            resp = await http.post(
                url,
                json=body,
                headers={"Authorization": f"Bearer {self.config.token}"},
                timeout=TIMEOUT,
            )
        except httpx.HTTPError as exc:
            raise SendError(f"slack {url}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code != 200:
            raise SendError(f"slack {url}: HTTP {resp.status_code}", _retry_after(resp))
        try:
            answer = resp.json()
        except ValueError:
            raise SendError(f"slack {url}: not JSON: {resp.text[:200]!r}") from None
        if not answer.get("ok"):
            raise SendError(f"slack {url}: {answer.get('error', 'not ok')}")
        return str(answer.get("ts", ""))

    async def send(self, message: Message, cluster: ClusterView) -> None:
        text = self.message.render(message.data)
        c = self.config
        async with self._lock:  # one thread per period, also when several nodes report at once
            try:
                lease = await cluster.client.get_or_none(LEASES, c.leaseName, c.leaseNamespace)
            except errors.KubeError as exc:
                raise SendError(f"cannot read Lease {c.leaseName}: {exc}") from exc
            now = datetime.now(UTC)
            expiry = lease_expiry(lease)
            thread = (lease or {}).get("spec", {}).get("holderIdentity")
            if lease is not None and expiry is not None and expiry > now and thread:
                await self._post(cluster.http, text, str(thread))
                return
            parent = await self._post(cluster.http, self.title.render(message.data), None)
            spec = {
                "holderIdentity": parent,
                "leaseDurationSeconds": max(1, round(c.period)),
                "acquireTime": micro_time(now),
                "renewTime": micro_time(now),
            }
            try:
                if lease is None:
                    await cluster.client.create(
                        LEASES,
                        {
                            "apiVersion": "coordination.k8s.io/v1",
                            "kind": "Lease",
                            "metadata": {"name": c.leaseName, "namespace": c.leaseNamespace},
                            "spec": spec,
                        },
                        c.leaseNamespace,
                    )
                else:
                    await cluster.client.replace(LEASES, {**lease, "spec": spec})
            except errors.KubeError as exc:
                raise SendError(
                    f"thread started but Lease {c.leaseName} not updated: {exc}"
                ) from exc
            await self._post(cluster.http, text, parent)


# ---------------------------------------------------------------------- mail


class MailConfig(PluginConfig):
    auth: bool = False
    address: str = Field(min_length=1)
    from_: str = Field(alias="from", min_length=1)
    to: list[str] = Field(min_length=1)
    subject: str = ""
    message: str = Field(min_length=1)
    identity: str = ""
    user: str = ""
    password: str = ""
    startTLS: str = "auto"  # auto: when offered; always: refuse servers without it; never
    caFile: str = ""  # CA bundle to verify the server with (default: the system's)

    def host_port(self) -> tuple[str, int]:
        host, _, port = self.address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"address {self.address!r} must be host:port")
        return host.strip("[]"), int(port)


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


class Mail:
    def __init__(self, config: MailConfig) -> None:
        config.host_port()
        if config.startTLS not in ("auto", "always", "never"):
            raise ValueError("startTLS must be auto, always or never")
        self.config = config
        self.subject = Template(config.subject, "subject")
        self.message = Template(config.message, "message")

    def validate_templates(self) -> None:
        return None

    def build(self, message: Message) -> EmailMessage:
        mail = EmailMessage()
        mail["From"] = self.config.from_
        mail["To"] = ", ".join(self.config.to)
        mail["Subject"] = self.subject.render(message.data).replace("\n", " ").strip()
        mail["Date"] = formatdate(localtime=False)
        mail["Message-ID"] = make_msgid(domain="nodeops")
        mail.set_content(self.message.render(message.data))
        return mail

    def _deliver(self, mail: EmailMessage) -> None:
        c = self.config
        host, port = c.host_port()
        with smtplib.SMTP(host, port, timeout=TIMEOUT) as smtp:
            smtp.ehlo()
            secure = False
            if c.startTLS != "never" and smtp.has_extn("starttls"):
                smtp.starttls(context=ssl.create_default_context(cafile=c.caFile or None))
                smtp.ehlo()
                secure = True
            elif c.startTLS == "always":
                raise SendError(f"smtp {c.address}: server does not offer STARTTLS")
            if c.auth:
                if not secure and not _is_loopback(host):
                    raise SendError(f"smtp {c.address}: refusing to send credentials without TLS")
                if c.identity:
                    secret = f"{c.identity}\0{c.user}\0{c.password}"
                    smtp.auth("PLAIN", lambda challenge=None: secret)
                else:
                    smtp.login(c.user, c.password)
            smtp.send_message(mail)

    async def send(self, message: Message, cluster: ClusterView) -> None:
        mail = self.build(message)
        try:
            await asyncio.to_thread(self._deliver, mail)
        except SendError:
            raise
        except (smtplib.SMTPException, OSError) as exc:
            raise SendError(f"smtp {self.config.address}: {exc}") from exc


TYPES = [
    PluginType("notify", "slack", SlackConfig, Slack, "Slack incoming webhook"),
    PluginType("notify", "slackThread", SlackThreadConfig, SlackThread, "Slack thread per period"),
    PluginType("notify", "mail", MailConfig, Mail, "e-mail over SMTP"),
]
