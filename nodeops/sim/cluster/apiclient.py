"""A small asynchronous Kubernetes API client for the simulated cluster's control loops.

The loops must talk to the API server exactly as kubelet, scheduler and controller-manager do
(same paths, verbs, subresources, resourceVersion preconditions), so that everything the operator
observes was produced over the real protocol. This client is deliberately independent of the
operator's own runtime: the simulator must not test the operator with the operator's code.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import orjson

from nodeops.common import watchlines
from nodeops.common.apierrors import (
    AlreadyExists,
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    MethodNotAllowed,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
    error_for,
    retry_after_header,
    status_of,
)
from nodeops.common.gcpause import paused_gc
from nodeops.common.resources import (
    CRDS,
    DAEMONSETS,
    DEPLOYMENTS,
    LEASES,
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
    REPLICASETS,
    STATEFULSETS,
    Resource,
)

__all__ = [
    "CRDS",
    "DAEMONSETS",
    "DEPLOYMENTS",
    "KNOWN_RESOURCES",
    "LEASES",
    "NAMESPACES",
    "NODES",
    "PDBS",
    "PODS",
    "REPLICASETS",
    "STATEFULSETS",
    "AlreadyExists",
    "ApiClient",
    "ApiError",
    "BadRequest",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "MethodNotAllowed",
    "NotFound",
    "Resource",
    "ServerError",
    "TooManyRequests",
    "Unauthorized",
    "Watch",
    "WatchEvent",
    "paused_gc",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
TokenSource = Callable[[], Awaitable[str | None]]
PatchType = Literal["merge", "strategic", "json"]

_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}


KNOWN_RESOURCES: tuple[Resource, ...] = (
    PODS,
    NODES,
    NAMESPACES,
    LEASES,
    REPLICASETS,
    DEPLOYMENTS,
    STATEFULSETS,
    DAEMONSETS,
    PDBS,
)


def resource_for(api_version: str, kind: str) -> Resource | None:
    """The resource of an ownerReference's (apiVersion, kind), when it is one we know."""
    for r in KNOWN_RESOURCES:
        if r.kind == kind and r.api_version == api_version:
            return r
    return None


# ---------------------------------------------------------------------------------------------
# Errors


# ---------------------------------------------------------------------------------------------
# Watch


@dataclass(slots=True)
class WatchEvent:
    """One watch event. `RELISTED` carries a fresh full list after the watch expired (410)."""

    type: str
    object: Obj
    items: list[Obj] | None = None


ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"
RELISTED = "RELISTED"


@dataclass(slots=True)
class ListResult:
    items: list[Obj]
    resource_version: str


class Watch:
    """An endless watch from a resourceVersion, as an async iterator.

    It resumes from the last seen resourceVersion (bookmarks move it forward) whenever a stream
    ends, and when the server says that version is gone (410) it relists and yields a single
    `RELISTED` event with the full list, because only the consumer knows what it had cached.
    """

    def __init__(
        self,
        client: ApiClient,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> None:
        self._client = client
        self._resource = resource
        self.resource_version = resource_version
        self._namespace = namespace
        self._label_selector = label_selector
        self._field_selector = field_selector
        self._timeout_seconds = timeout_seconds
        self._stream: AsyncGenerator[WatchEvent, None] | None = None
        self._failures = 0

    def __aiter__(self) -> Watch:
        return self

    async def aclose(self) -> None:
        """Close the open stream now rather than when the generator is collected."""
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.aclose()

    async def __anext__(self) -> WatchEvent:
        while True:
            if self._stream is None:
                self._stream = self._open()
            try:
                return await self._stream.__anext__()
            except StopAsyncIteration:
                self._stream = None
            except Gone:
                self._stream = None
                return await self._relist()
            except (aiohttp.ClientError, TimeoutError, ApiError, ValueError) as exc:
                self._stream = None
                if isinstance(exc, ApiError) and exc.code in (401, 403, 404):
                    raise
                self._failures += 1
                delay = min(5.0, 0.05 * 2 ** min(self._failures, 7)) * random.uniform(0.8, 1.2)
                log.debug(
                    "watch %s failed (%s), resuming in %.2fs", self._resource.plural, exc, delay
                )
                await asyncio.sleep(delay)

    async def _relist(self) -> WatchEvent:
        result = await self._client.list(
            self._resource,
            self._namespace,
            label_selector=self._label_selector,
            field_selector=self._field_selector,
        )
        self.resource_version = result.resource_version
        return WatchEvent(RELISTED, {}, result.items)

    async def _open(self) -> AsyncGenerator[WatchEvent, None]:
        params: dict[str, str] = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": self.resource_version,
            "timeoutSeconds": str(int(self._timeout_seconds * random.uniform(1.0, 1.2))),
        }
        if self._label_selector:
            params["labelSelector"] = self._label_selector
        if self._field_selector:
            params["fieldSelector"] = self._field_selector
        path = self._resource.path(self._namespace)
        async with self._client.stream(path, params) as resp:
            async for etype, obj in watchlines.events(resp.content.iter_any(), path):
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if rv:
                    self.resource_version = rv
                self._failures = 0
                if etype == "BOOKMARK":
                    continue
                yield WatchEvent(etype, obj)


# ---------------------------------------------------------------------------------------------
# Client


class _Stream:
    def __init__(self, client: ApiClient, path: str, params: dict[str, str]) -> None:
        self._client = client
        self._path = path
        self._params = params
        self._resp: aiohttp.ClientResponse | None = None

    async def __aenter__(self) -> aiohttp.ClientResponse:
        session = self._client.session
        resp = await session.get(
            self._client.base_url + self._path,
            params=self._params,
            headers=await self._client.auth_headers(),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None),
        )
        if resp.status >= 400:
            body = await resp.read()
            resp.release()
            raise error_for(resp.status, status_of(body), "WATCH", self._path)
        self._resp = resp
        return resp

    async def __aexit__(self, *exc: object) -> None:
        if self._resp is not None:
            self._resp.close()


_UNCHECKED = {"fieldValidation": "Ignore"}
"""What the cluster's own components write is built from objects the server sent and from
their types, and goes as protobuf, which has no unknown or duplicate fields to find: the
server's field validation of JSON bodies is work they never cause, and a fifth of the
simulator's request handling when its loops send JSON."""


def _decode(raw: bytes) -> Any:
    if len(raw) < 1 << 20:
        return orjson.loads(raw)
    with paused_gc:
        return orjson.loads(raw)


class ApiClient:
    """One aiohttp session per component, identified by its User-Agent like real components."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        component: str = "cluster",
        max_connections: int = 64,
        request_timeout: float = 30.0,
        throttle_retries: int = 8,
        ca_pem: bytes | None = None,
        ssl_context: ssl.SSLContext | None = None,
        time_scale: float = 1.0,
        token_source: TokenSource | None = None,
    ) -> None:
        """`time_scale` is the simulated clock's, for loops that live on it: the Retry-After of
        a 429 is waited in the cluster's seconds, as a kubelet at real speed waits it (a second
        against its 40 s node grace), not in wall seconds that a fast clock multiplies."""
        self.base_url = base_url.rstrip("/")
        self.time_scale = time_scale if time_scale > 0 else 1.0
        # A server with a self-signed CA is trusted through that CA only, as kubeconfigs do;
        # `ssl_context` carries what a kubeconfig of another cluster says (its CA, a client
        # certificate) when the loops are attached there.
        self._ssl: ssl.SSLContext | bool = (
            ssl_context
            if ssl_context is not None
            else ssl.create_default_context(cadata=ca_pem.decode())
            if ca_pem
            else True
        )
        self.component = component
        self._token = token
        # A kubeconfig's exec plugin (an attached cloud cluster's credentials): asked for the
        # token at each request, so a short-lived one is replaced as it expires.
        self._token_source = token_source
        self._max_connections = max_connections
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)
        self._throttle_retries = throttle_retries
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = {"User-Agent": f"nodeops-sim/{self.component}", "Accept": "application/json"}
            if self._token and self._token_source is None:
                headers["Authorization"] = f"Bearer {self._token}"
            self._session = aiohttp.ClientSession(
                headers=headers,
                connector=aiohttp.TCPConnector(limit=self._max_connections, ssl=self._ssl),
                json_serialize=lambda o: orjson.dumps(o).decode(),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def stream(self, path: str, params: dict[str, str]) -> _Stream:
        return _Stream(self, path, params)

    async def auth_headers(self) -> dict[str, str] | None:
        """The Authorization header of a token source's current token (a fixed token rides in
        the session's headers)."""
        if self._token_source is None:
            return None
        token = await self._token_source()
        return {"Authorization": f"Bearer {token}"} if token else None

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Obj:
        """Send one request; 429s are retried after the server's Retry-After, like client-go.

        Other failures are raised, so each loop decides whether to requeue, refetch or drop.
        """
        data = orjson.dumps(body) if body is not None else None
        headers = {"Content-Type": content_type} if data is not None else None
        attempt = 0
        while True:
            auth = await self.auth_headers()
            if auth:
                headers = {**(headers or {}), **auth}
            async with self.session.request(
                method,
                self.base_url + path,
                params=params,
                data=data,
                headers=headers,
                timeout=self._timeout,
            ) as resp:
                raw = await resp.read()
                if resp.status < 400:
                    result = _decode(raw) if raw else {}
                    return result if isinstance(result, dict) else {"items": result}
                err = error_for(
                    resp.status,
                    status_of(raw),
                    method,
                    path,
                    retry_after_header=retry_after_header(resp.headers.get("Retry-After")),
                )
            # An eviction refused by a PDB is a 429 too, but it is an answer, not throttling.
            throttled = isinstance(err, TooManyRequests) and not path.endswith("/eviction")
            if not throttled or attempt >= self._throttle_retries:
                raise err
            attempt += 1
            delay = err.retry_after
            await asyncio.sleep(
                (delay if delay is not None else 0.1 * attempt)
                * random.uniform(1, 1.2)
                / self.time_scale
            )

    # -- verbs ----------------------------------------------------------------------------------

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj:
        return await self.request("GET", resource.path(namespace, name))

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
    ) -> ListResult:
        """The full list, paginated; restarted from scratch if a continue token expires."""
        while True:
            items: list[Obj] = []
            params: dict[str, str] = {"limit": str(limit)}
            if label_selector:
                params["labelSelector"] = label_selector
            if field_selector:
                params["fieldSelector"] = field_selector
            try:
                while True:
                    page = await self.request("GET", resource.path(namespace), params=params)
                    items.extend(page.get("items") or [])
                    meta = page.get("metadata") or {}
                    token = meta.get("continue")
                    if not token:
                        return ListResult(items, str(meta.get("resourceVersion") or ""))
                    params["continue"] = token
            except Gone:
                if "continue" not in params:
                    raise
                log.debug("list %s: continue token expired, relisting", resource.plural)

    async def create(
        self,
        resource: Resource,
        body: Obj,
        namespace: str | None = None,
        *,
        name: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        """POST to the collection, or to a subresource of `name` (binding, eviction)."""
        ns = namespace if namespace is not None else (body.get("metadata") or {}).get("namespace")
        path = resource.path(ns, name, subresource) if name else resource.path(ns)
        return await self.request("POST", path, params=_UNCHECKED, body=body)

    async def update(self, resource: Resource, body: Obj, *, subresource: str | None = None) -> Obj:
        """PUT; the body's resourceVersion makes it a compare-and-swap."""
        meta = body.get("metadata") or {}
        path = resource.path(meta.get("namespace"), meta["name"], subresource)
        return await self.request("PUT", path, params=_UNCHECKED, body=body)

    async def update_status(self, resource: Resource, body: Obj) -> Obj:
        return await self.update(resource, body, subresource="status")

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
    ) -> Obj:
        return await self.request(
            "PATCH",
            resource.path(namespace, name, subresource),
            params=_UNCHECKED,
            body=patch,
            content_type=_PATCH_CONTENT_TYPES[patch_type],
        )

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> Obj:
        """DELETE with DeleteOptions; `uid`/`resource_version` become preconditions."""
        options: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        pre: dict[str, str] = {}
        if uid:
            pre["uid"] = uid
        if resource_version:
            pre["resourceVersion"] = resource_version
        if pre:
            options["preconditions"] = pre
        return await self.request("DELETE", resource.path(namespace, name), body=options)

    async def evict(
        self, name: str, namespace: str, *, grace_period_seconds: int | None = None
    ) -> Obj:
        body: Obj = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if grace_period_seconds is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": grace_period_seconds}
        return await self.create(PODS, body, namespace, name=name, subresource="eviction")

    async def bind(self, name: str, namespace: str, node: str, uid: str | None = None) -> Obj:
        meta: Obj = {"name": name, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        return await self.create(PODS, body, namespace, name=name, subresource="binding")

    def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> Watch:
        return Watch(
            self,
            resource,
            resource_version=resource_version,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            timeout_seconds=timeout_seconds,
        )
