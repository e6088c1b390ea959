"""Tokens from a kubeconfig's exec plugin (`aws eks get-token`, `gke-gcloud-auth-plugin`, ...),
fetched again when they expire.

Such tokens are short-lived (15 minutes on EKS) while an operator or a watched roll runs for
hours: a token read once at start-up would turn every request into 401 Unauthorized after a
quarter of an hour. The plugin is run again before the expiry it announced
(`status.expirationTimestamp`), and at once after the server refused the token (a plugin that
announces no expiry, or a token revoked early). kubernetes_asyncio runs the plugin (the
ExecCredential protocol); this module decides when.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio.config.config_exception import ConfigException
from kubernetes_asyncio.config.exec_provider import ExecProvider
from kubernetes_asyncio.config.kube_config import ConfigNode

from nodeops.common import apierrors as errors

__all__ = ["EARLY_SECONDS", "ExecTokenSource"]

EARLY_SECONDS = 60.0
"""Run the plugin again this long before the token it gave expires, as client-go does for
clock skew and requests in flight."""


class ExecTokenSource:
    """An async callable giving the current token (the client's `token_source`)."""

    def __init__(
        self,
        exec_config: dict[str, Any],
        *,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._config = ConfigNode("exec", exec_config)
        self._wall = wall
        self._token: str | None = None
        self._expires: float | None = None
        self._lock = asyncio.Lock()
        self.runs = 0
        """How often the plugin ran: what a test or a log can check."""

    @property
    def command(self) -> str:
        return str(self._config.value.get("command", ""))

    def expire(self) -> None:
        """The server refused the token: the next call runs the plugin again."""
        self._token = None

    def _fresh(self) -> bool:
        if self._token is None:
            return False
        return self._expires is None or self._wall() < self._expires - EARLY_SECONDS

    async def __call__(self) -> str | None:
        if self._fresh():
            return self._token
        async with self._lock:
            if not self._fresh():
                await self._run()
        return self._token

    async def _run(self) -> None:
        try:
            status = await ExecProvider(self._config).run()
        except ConfigException as exc:
            raise errors.KubeError(f"kubeconfig exec plugin {self.command!r}: {exc}") from None
        self.runs += 1
        token = status.get("token") if isinstance(status, dict) else None
        if not token:
            raise errors.KubeError(
                f"kubeconfig exec plugin {self.command!r} gave no token (client certificates "
                "from exec plugins are not supported)"
            )
        self._token = str(token)
        self._expires = _timestamp(status.get("expirationTimestamp"))


def _timestamp(value: Any) -> float | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
