"""How a client reaches its API server: address, credentials, TLS, limits and the hooks it tells.

Configuration (kubeconfig, contexts, in-cluster service account, exec plugins and token refresh)
comes from kubernetes-asyncio, which already does it right; this is kept apart from the request
code so that authentication can be read and changed without touching retries or watches.
"""

from __future__ import annotations

import asyncio
import math
import os
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, Self
from urllib.parse import urlsplit

import aiohttp
import orjson

from nodeops import __version__
from nodeops.kube import errors
from nodeops.kube.ratelimit import TokenBucket
from nodeops.kube.resources import Resource

USER_AGENT = f"nodeops/{__version__}"


TokenSource = Callable[[], Awaitable[str | None]]


CLIENT_QPS = 50.0
CLIENT_BURST = 100
"""The requests per second a client sends, and how many it may send at once, by default: what
`nodeops run` talks to the API server at."""


@dataclass(frozen=True, slots=True)
class RetryNotice:
    """A request about to be sent again: what it was, why it failed, when it goes again."""

    method: str
    path: str
    error: errors.KubeError
    attempt: int  # 1 before the first retry
    delay: float  # seconds until it is sent again


RetryHook = Callable[[RetryNotice], None]


class WriteObserver(Protocol):
    """Told of every write the client made, after the server accepted it.

    The manager's informer factory is one: it holds the write back until its caches show it
    (read-your-writes). `result` is what the server answered: the object, or a `Status` for a
    delete that removed it at once.
    """

    async def written(self, resource: Resource, namespace: str | None, result: Any) -> None: ...


def exec_plugin_of(loader: Any) -> dict[str, Any] | None:
    """The `exec` section of the kubeconfig user a kubernetes_asyncio loader chose, if any
    (the loader keeps the user it resolved, merged kubeconfigs included, as `_user`)."""
    user = getattr(loader, "_user", None)
    value = getattr(user, "value", user)
    if isinstance(value, dict) and isinstance(value.get("exec"), dict):
        return dict(value["exec"])
    return None


class ClientConnection:
    """The connection state of a client: one aiohttp session, its TLS context and credentials.

    The base of `nodeops.kube.client.Client`; requests, watches and verbs build on it.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        token_source: TokenSource | None = None,
        ssl_context: ssl.SSLContext | bool | None = None,
        qps: float = CLIENT_QPS,
        burst: int = CLIENT_BURST,
        timeout: float = 30.0,
        user_agent: str = USER_AGENT,
        max_retries: int = 5,
        max_retry_after: float = 60.0,
        on_retry: RetryHook | None = None,
    ) -> None:
        """`on_retry` is called before each retry of a request, for whoever must hear of it
        (a command telling the person waiting that the server is struggling); the client
        logs and counts retries (`rest_client_request_retries_total`) either way."""
        self.base_url = base_url.rstrip("/")
        self.host = urlsplit(self.base_url).netloc
        self._token = token
        self._token_source = token_source
        self._ssl = ssl_context
        self.timeout = timeout
        self.user_agent = user_agent
        # What this client sent, watches included: the count a caller can read where the
        # server's own accounting is out of reach (a real API server).
        self.requests = 0
        self._bucket = TokenBucket(qps if qps > 0 else math.inf, burst)
        self._session: aiohttp.ClientSession | None = None
        self._eviction_version: str | None = None
        self._discovery_lock = asyncio.Lock()
        # Retries of idempotent requests: how many, and the longest Retry-After still waited
        # for here (a longer one is the caller's to handle, with its own backoff).
        self.max_retries = max_retries
        self.max_retry_after = max_retry_after
        self.on_retry = on_retry
        self.write_observers: list[WriteObserver] = []
        # Resources (by key) whose server refused to stream their initial state as a
        # watch-list, with its answer: informers of these sync by paginated lists instead.
        self.watch_list_refused: dict[str, str] = {}

    # ------------------------------------------------------------------ construction

    @classmethod
    async def from_kubeconfig(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        **kwargs: Any,
    ) -> Self:
        """In-cluster config when running in a pod and no kubeconfig is given, else kubeconfig."""
        from kubernetes_asyncio import config as kconfig
        from kubernetes_asyncio.client import Configuration

        from nodeops.common.exectoken import ExecTokenSource

        cfg = Configuration()
        in_cluster = kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ
        if in_cluster:
            kconfig.load_incluster_config(client_configuration=cfg)
        else:
            loader = await kconfig.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=cfg
            )
            # The loader ran an exec plugin once; its token expires (15 minutes on EKS) long
            # before a manager or a watched roll ends, so the plugin is the token's source.
            exec_config = exec_plugin_of(loader)
            if exec_config is not None:
                kwargs.setdefault("token_source", ExecTokenSource(exec_config))
        host = str(cfg.host or "")
        if not host:
            raise errors.KubeError("the kubeconfig names no API server")
        ssl_context: ssl.SSLContext | bool | None = None
        if host.startswith("https"):
            ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
            if cfg.cert_file:
                ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
            if not cfg.verify_ssl:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            ssl_context = ctx

        async def token_source() -> str | None:
            value: str | None = await cfg.get_api_key_with_prefix("BearerToken")
            if value is None:
                value = await cfg.get_api_key_with_prefix("authorization")
            return value

        kwargs.setdefault("token_source", token_source)
        return cls(host, ssl_context=ssl_context, **kwargs)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=0, ssl=self._ssl if self._ssl is not None else True
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                json_serialize=lambda o: orjson.dumps(o).decode(),
                headers={"User-Agent": self.user_agent},
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self._token_source is not None:
            value = await self._token_source()
            if value:
                headers["Authorization"] = value if " " in value else f"Bearer {value}"
        elif self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        if extra:
            headers.update(extra)
        return headers
