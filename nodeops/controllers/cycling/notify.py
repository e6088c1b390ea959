"""Slack notifications of a request: one parent message per request, updates in its thread.

The parent message shows the request and its progress and turns green or red when the request
ends; each phase change and each batch of selected nodes is a reply in its thread. The thread's
timestamp is kept in the request's status (`threadTimestamp`), so a restarted manager keeps
writing into the same thread. The bot token is read from a Secret. A notification that fails
is logged and never fails the request.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import httpx
import structlog

from nodeops.controllers.cycling.status import View
from nodeops.kube import errors
from nodeops.kube.client import Client
from nodeops.kube.resources import SECRETS

__all__ = ["Notifier", "SlackNotifier", "parse_secret_ref"]

log = structlog.get_logger(__name__)


def parse_secret_ref(text: str, default_namespace: str) -> tuple[str, str, str]:
    """`[namespace/]name[:key]` -> (namespace, name, key); the key defaults to `token`."""
    ref, _, key = text.partition(":")
    namespace, _, name = ref.rpartition("/")
    if not name:
        raise ValueError(f"{text!r} is not [namespace/]name[:key]")
    return namespace or default_namespace, name, key or "token"


class Notifier:
    """What the request reconciler tells the world; the base class tells nobody."""

    async def started(self, view: View) -> str | None:
        """The request started; returns the thread to keep in status (None: none)."""
        del view
        return None

    async def nodes_selected(self, view: View, nodes: list[str]) -> None:
        del view, nodes

    async def phase(self, view: View) -> None:
        del view

    async def close(self) -> None:
        return None


_COLORS = {"Successful": "good", "Failed": "danger", "Healing": "warning"}


class SlackNotifier(Notifier):
    def __init__(
        self,
        client: Client,
        *,
        channel: str,
        token_secret: tuple[str, str, str],
        api_url: str = "https://slack.com/api",
        cluster: str | None = None,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.client = client
        self.channel = channel
        self.token_secret = token_secret
        self.api_url = api_url.rstrip("/")
        self.cluster = cluster
        self._http = httpx.AsyncClient(timeout=timeout, transport=transport)
        self._token: str | None = None

    async def close(self) -> None:
        await self._http.aclose()

    async def _token_value(self) -> str:
        if self._token is None:
            namespace, name, key = self.token_secret
            secret = await self.client.get(SECRETS, name, namespace)
            raw = (secret.get("data") or {}).get(key)
            if raw is None:
                raise KeyError(f"secret {namespace}/{name} has no key {key!r}")
            self._token = base64.b64decode(raw).decode().strip()
        return self._token

    async def _call(self, method: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
        try:
            token = await self._token_value()
            resp = await self._http.post(
                f"{self.api_url}/{method}",
                json=dict(body),
                headers={"Authorization": f"Bearer {token}"},
            )
            data: dict[str, Any] = resp.json()
        except (httpx.HTTPError, ValueError, KeyError, errors.KubeError) as e:
            log.warning("slack notification failed", method=method, error=str(e))
            return None
        if resp.status_code >= 400 or not data.get("ok"):
            log.warning(
                "slack notification refused",
                method=method,
                status=resp.status_code,
                error=data.get("error"),
            )
            return None
        return data

    def _summary(self, view: View) -> dict[str, Any]:
        status = view.status
        progress = status.get("progress") or {}
        total, cycled = int(progress.get("total") or 0), int(progress.get("cycled") or 0)
        percent = f" ({cycled * 100 // total}%)" if total else ""
        spec = view.obj.get("spec") or {}
        groups = status.get("nodeGroups") or [spec.get("nodeGroupName")]
        fields = [
            {"title": "Name", "value": f"{view.namespace}/{view.name}", "short": True},
            {"title": "Progress", "value": f"{cycled}/{total}{percent}", "short": True},
            {
                "title": "Method",
                "value": (spec.get("cycleSettings") or {}).get("method", "Drain"),
                "short": True,
            },
            {"title": "Concurrency", "value": str(status.get("concurrency") or ""), "short": True},
            {"title": "Node groups", "value": ", ".join(g for g in groups if g), "short": False},
        ]
        cluster = view.obj.get("clusterName") or self.cluster
        if cluster:
            fields.insert(1, {"title": "Cluster", "value": cluster, "short": True})
        attachment: dict[str, Any] = {"fields": fields, "color": _COLORS.get(view.phase, "#439FE0")}
        if view.phase == "Failed" and status.get("message"):
            attachment["text"] = f"```{status['message']}```"
        return {
            "channel": self.channel,
            "text": f"Cycling nodes: {view.phase or 'started'}",
            "attachments": [attachment],
        }

    async def started(self, view: View) -> str | None:
        if view.status.get("threadTimestamp"):
            return str(view.status["threadTimestamp"])
        data = await self._call("chat.postMessage", self._summary(view))
        return None if data is None else str(data.get("ts"))

    async def nodes_selected(self, view: View, nodes: list[str]) -> None:
        thread = view.status.get("threadTimestamp")
        if not thread or not nodes:
            return
        shown = ", ".join(nodes[:50]) + (f" and {len(nodes) - 50} more" if len(nodes) > 50 else "")
        await self._call(
            "chat.postMessage",
            {
                "channel": self.channel,
                "thread_ts": thread,
                "text": f"Selected {len(nodes)} nodes: {shown}",
            },
        )

    async def phase(self, view: View) -> None:
        thread = view.status.get("threadTimestamp")
        if not thread:
            return
        await self._call(
            "chat.postMessage",
            {
                "channel": self.channel,
                "thread_ts": thread,
                "text": f"Entered the *{view.phase}* phase",
            },
        )
        await self._call("chat.update", {**self._summary(view), "ts": thread})
