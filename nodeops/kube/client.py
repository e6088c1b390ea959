"""The Kubernetes API client of the runtime.

Configuration (kubeconfig, contexts, in-cluster service account, exec plugins and token refresh)
comes from kubernetes-asyncio, which already does it right. Requests go through one aiohttp
session on a raw JSON path decoded with orjson: objects stay plain dicts, lists are never turned
into generated models (10x slower, 8x the memory), and every call carries a deadline, so nothing
hangs silently. Failures become typed exceptions carrying the server's `Status`.
"""

from __future__ import annotations

import asyncio
import math
import os
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from nodeops import __version__
from nodeops.kube import errors
from nodeops.kube.metrics import REST_LATENCY, REST_RATE_LIMITER_WAIT, REST_REQUESTS
from nodeops.kube.ratelimit import TokenBucket
from nodeops.kube.resources import PODS, Resource

PATCH_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}
USER_AGENT = f"nodeops/{__version__}"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: dict[str, Any]


TokenSource = Callable[[], Awaitable[str | None]]


class Client:
    """Raw-JSON Kubernetes client; construct with `Client.from_kubeconfig` or directly."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        token_source: TokenSource | None = None,
        ssl_context: ssl.SSLContext | bool | None = None,
        qps: float = 50.0,
        burst: int = 100,
        timeout: float = 30.0,
        user_agent: str = USER_AGENT,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.host = urlsplit(self.base_url).netloc
        self._token = token
        self._token_source = token_source
        self._ssl = ssl_context
        self.timeout = timeout
        self.user_agent = user_agent
        self._bucket = TokenBucket(qps if qps > 0 else math.inf, burst)
        self._session: aiohttp.ClientSession | None = None
        self._eviction_version: str | None = None
        self._discovery_lock = asyncio.Lock()

    # ------------------------------------------------------------------ construction

    @classmethod
    async def from_kubeconfig(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        **kwargs: Any,
    ) -> Client:
        """In-cluster config when running in a pod and no kubeconfig is given, else kubeconfig."""
        from kubernetes_asyncio import config as kconfig
        from kubernetes_asyncio.client import Configuration

        cfg = Configuration()
        in_cluster = kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ
        if in_cluster:
            kconfig.load_incluster_config(client_configuration=cfg)
        else:
            await kconfig.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=cfg
            )
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

        return cls(host, token_source=token_source, ssl_context=ssl_context, **kwargs)

    async def __aenter__(self) -> Client:
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

    # ------------------------------------------------------------------ core request

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
        raw: bool = False,
    ) -> Any:
        """One API call with the client's deadline; returns decoded JSON (or bytes if raw)."""
        waited = await self._bucket.acquire()
        if waited:
            REST_RATE_LIMITER_WAIT.labels(method, self.host).observe(waited)
        headers = await self._headers()
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else orjson.dumps(body)
            headers["Content-Type"] = content_type
        url = self.base_url + path
        started = time.perf_counter()
        code = "<error>"
        try:
            async with self._get_session().request(
                method,
                url,
                params=params,
                data=data,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout or self.timeout),
            ) as resp:
                payload = await resp.read()
                code = str(resp.status)
                if resp.status >= 400:
                    raise errors.error_for(resp.status, _status_of(payload), method, url)
                if raw:
                    return payload
                return orjson.loads(payload) if payload else None
        except TimeoutError:
            raise errors.RequestTimeout(
                f"{method} {path}: no answer within {timeout or self.timeout}s"
            ) from None
        except aiohttp.ClientConnectionError as exc:
            raise errors.ConnectionFailed(f"{method} {path}: {exc}") from exc
        finally:
            REST_REQUESTS.labels(code, method, self.host).inc()
            REST_LATENCY.labels(method, self.host).observe(time.perf_counter() - started)

    # ------------------------------------------------------------------ verbs

    async def get(
        self, res: Resource, name: str, namespace: str | None = None, subresource: str | None = None
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("GET", res.path(namespace, name, subresource))
        return result

    async def get_or_none(
        self, res: Resource, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        try:
            return await self.get(res, name, namespace)
        except errors.NotFound:
            return None

    async def list_page(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
        timeout: float | None = None,
    ) -> bytes:
        """One page of a list, undecoded, for callers that decode it their own way."""
        params = _params(
            labelSelector=label_selector,
            fieldSelector=field_selector,
            limit=str(limit) if limit else None,
            resourceVersion=resource_version,
        )
        if continue_token:
            params["continue"] = continue_token
        payload: bytes = await self.request(
            "GET", res.path(namespace), params=params, raw=True, timeout=timeout
        )
        return payload

    async def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        resource_version: str | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """All matching objects, paginated, and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        rv = ""
        while True:
            payload = await self.list_page(
                res,
                namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=page_size,
                continue_token=token,
                resource_version=resource_version if token is None else None,
            )
            page = orjson.loads(payload)
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            rv = meta.get("resourceVersion", rv)
            token = meta.get("continue")
            if not token:
                return items, rv

    async def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        allow_bookmarks: bool = True,
        read_timeout: float | None = None,
        send_initial_events: bool = False,
    ) -> AsyncIterator[WatchEvent]:
        """Stream watch events until the server ends the watch.

        A watch `ERROR` event is raised as the ApiError it carries (410 Gone included). The read
        timeout (default: the server timeout plus a margin) turns a silent stall into an error.
        """
        params = _params(
            watch="true",
            resourceVersion=resource_version,
            labelSelector=label_selector,
            fieldSelector=field_selector,
            timeoutSeconds=str(timeout_seconds),
            allowWatchBookmarks="true" if allow_bookmarks else None,
        )
        if send_initial_events:
            params["sendInitialEvents"] = "true"
            params["resourceVersionMatch"] = "NotOlderThan"
        await self._bucket.acquire()
        headers = await self._headers()
        url = self.base_url + res.path(namespace)
        stall = read_timeout if read_timeout is not None else timeout_seconds + 30
        try:
            async with self._get_session().get(
                url,
                params=params,
                headers=headers,
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=self.timeout, sock_read=stall
                ),
            ) as resp:
                REST_REQUESTS.labels(str(resp.status), "WATCH", self.host).inc()
                if resp.status >= 400:
                    raise errors.error_for(resp.status, _status_of(await resp.read()), "GET", url)
                buf = b""
                async for chunk in resp.content.iter_any():
                    buf += chunk
                    if b"\n" not in chunk:
                        continue
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        if not line:
                            continue
                        event = orjson.loads(line)
                        etype = event.get("type")
                        if etype == "ERROR":
                            status = event.get("object") or {}
                            raise errors.error_for(
                                int(status.get("code") or 500), status, "WATCH", url
                            )
                        yield WatchEvent(etype, event.get("object") or {})
        except TimeoutError:
            raise errors.RequestTimeout(f"watch {res.key}: no data for {stall}s") from None
        except aiohttp.ClientPayloadError as exc:
            raise errors.ConnectionFailed(f"watch {res.key}: stream broken: {exc}") from exc
        except aiohttp.ClientConnectionError as exc:
            raise errors.ConnectionFailed(f"watch {res.key}: {exc}") from exc

    async def create(
        self,
        res: Resource,
        body: Mapping[str, Any],
        namespace: str | None = None,
        *,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        ns = namespace or (body.get("metadata") or {}).get("namespace")
        params = _params(dryRun="All" if dry_run else None, fieldManager=field_manager)
        result: dict[str, Any] = await self.request("POST", res.path(ns), params=params, body=body)
        return result

    async def replace(
        self,
        res: Resource,
        body: Mapping[str, Any],
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        """PUT: an update guarded by the body's resourceVersion (409 Conflict when stale)."""
        meta = body.get("metadata") or {}
        path = res.path(meta.get("namespace"), meta["name"], subresource)
        params = _params(fieldManager=field_manager)
        result: dict[str, Any] = await self.request("PUT", path, params=params, body=body)
        return result

    async def patch(
        self,
        res: Resource,
        name: str,
        body: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        params = _params(fieldManager=field_manager, dryRun="All" if dry_run else None)
        result: dict[str, Any] = await self.request(
            "PATCH",
            res.path(namespace, name, subresource),
            params=params,
            body=body,
            content_type=PATCH_CONTENT_TYPES[patch_type],
        )
        return result

    async def patch_status(
        self,
        res: Resource,
        name: str,
        status: Mapping[str, Any],
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """A merge patch of `status`, guarded by resourceVersion when one is given."""
        body: dict[str, Any] = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        return await self.patch(res, name, body, namespace, subresource="status")

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        *,
        grace_period: int | None = None,
        propagation: str | None = None,
        preconditions: Mapping[str, str] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any] | None:
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
        if propagation:
            body["propagationPolicy"] = propagation
        if preconditions:
            body["preconditions"] = dict(preconditions)
        if dry_run:
            body["dryRun"] = ["All"]
        result: dict[str, Any] | None = await self.request(
            "DELETE", res.path(namespace, name), body=body
        )
        return result

    async def eviction_version(self) -> str:
        """`policy/v1` when the server serves it, else `policy/v1beta1` (from discovery)."""
        async with self._discovery_lock:  # one discovery for many concurrent evictions
            if self._eviction_version is None:
                doc = await self.request("GET", "/api/v1")
                version = "v1"
                for r in doc.get("resources") or []:
                    if r.get("name") == "pods/eviction":
                        version = r.get("version") or "v1"
                self._eviction_version = version
            return self._eviction_version

    async def evict(
        self,
        name: str,
        namespace: str,
        *,
        grace_period: int | None = None,
        preconditions: Mapping[str, str] | None = None,
        dry_run: bool = False,
    ) -> None:
        version = await self.eviction_version()
        options: dict[str, Any] = {}
        if grace_period is not None:
            options["gracePeriodSeconds"] = grace_period
        if preconditions:
            options["preconditions"] = dict(preconditions)
        if dry_run:
            options["dryRun"] = ["All"]
        body: dict[str, Any] = {
            "apiVersion": f"policy/{version}",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if options:
            body["deleteOptions"] = options
        params = {"dryRun": "All"} if dry_run else None
        await self.request("POST", PODS.path(namespace, name, "eviction"), params=params, body=body)

    async def discover(self, group_version: str) -> dict[str, Any]:
        path = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
        result: dict[str, Any] = await self.request("GET", path)
        return result


def _params(**kwargs: str | None) -> dict[str, str]:
    return {k: v for k, v in kwargs.items() if v is not None and v != ""}


def _status_of(payload: bytes) -> dict[str, Any] | None:
    try:
        decoded = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return {"message": payload.decode(errors="replace")[:500]}
    return decoded if isinstance(decoded, dict) else None
