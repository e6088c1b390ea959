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
import random
import ssl
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

import aiohttp
import orjson
import structlog

from nodeops import __version__
from nodeops.common import watchlines
from nodeops.kube import errors
from nodeops.kube.metrics import (
    REST_LATENCY,
    REST_RATE_LIMITER_WAIT,
    REST_REQUESTS,
    REST_RETRIES,
)
from nodeops.kube.ratelimit import TokenBucket
from nodeops.kube.resources import PODS, Resource

PATCH_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}
USER_AGENT = f"nodeops/{__version__}"

log = structlog.get_logger(__name__)

#: What `create_or_patch` did, in controller-runtime's words.
OperationResult = Literal["created", "updated", "unchanged"]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: dict[str, Any]


TokenSource = Callable[[], Awaitable[str | None]]
#: Watch event lines, undecoded, as one read of the connection completed them.
EventLines = list[watchlines.Line]


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
        retry: bool | None = None,
    ) -> Any:
        """One API call with the client's deadline; returns decoded JSON (or bytes if raw).

        Idempotent requests (GET, PUT, DELETE, and PATCH unless it is a JSON patch without a
        `test` op) are retried on 429, 5xx and broken connections, waiting what `Retry-After`
        asks or a jittered backoff, at most `max_retries` times. POSTs are never retried here:
        a create may have happened before the connection broke, and an eviction's 429 is a
        PodDisruptionBudget's answer the caller must see. `retry` overrides the choice.
        """
        retrying = _idempotent(method, body, content_type) if retry is None else retry
        attempt = 0
        while True:
            try:
                return await self._request_once(
                    method,
                    path,
                    params=params,
                    body=body,
                    content_type=content_type,
                    timeout=timeout,
                    raw=raw,
                )
            except (errors.TooManyRequests, errors.ServerError, errors.ConnectionFailed) as exc:
                delay = self._retry_delay(exc, attempt) if retrying else None
                if delay is None:
                    raise
                attempt += 1
                code = str(exc.code) if isinstance(exc, errors.ApiError) else "<error>"
                REST_RETRIES.labels(code, method, self.host).inc()
                log.debug(
                    "retrying request",
                    method=method,
                    path=path,
                    error=str(exc),
                    attempt=attempt,
                    retry_in=round(delay, 3),
                )
                if self.on_retry is not None:
                    self.on_retry(RetryNotice(method, path, exc, attempt, delay))
                await asyncio.sleep(delay)

    def _retry_delay(self, exc: errors.KubeError, attempt: int) -> float | None:
        """Seconds to wait before the next attempt, or None to give up and raise."""
        if attempt >= self.max_retries:
            return None
        asked = exc.retry_after if isinstance(exc, errors.ApiError) else None
        if asked is not None:
            return asked if asked <= self.max_retry_after else None
        # client-go's default backoff shape: doubling from 200 ms, capped, with jitter.
        return min(5.0, 0.2 * 2**attempt) * (0.5 + random.random())

    async def _request_once(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None,
        body: Any,
        content_type: str,
        timeout: float | None,
        raw: bool,
    ) -> Any:
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
                    raise errors.error_for(
                        resp.status,
                        errors.status_of(payload),
                        method,
                        url,
                        retry_after_header=errors.retry_after_header(
                            resp.headers.get("Retry-After")
                        ),
                    )
                if raw:
                    return payload
                try:
                    return orjson.loads(payload) if payload else None
                except orjson.JSONDecodeError as exc:
                    raise errors.KubeError(
                        f"{method} {path}: the server's answer is not JSON: {exc}"
                    ) from exc
        except TimeoutError:
            raise errors.RequestTimeout(
                f"{method} {path}: no answer within {timeout or self.timeout}s"
            ) from None
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise errors.ConnectionFailed(f"{method} {path}: {exc}") from exc
        except aiohttp.ClientError as exc:
            # Malformed responses (bad headers, bad chunking): never let aiohttp's own
            # exceptions escape, callers handle KubeError.
            raise errors.KubeError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        finally:
            REST_REQUESTS.labels(code, method, self.host).inc()
            REST_LATENCY.labels(method, self.host).observe(time.perf_counter() - started)

    async def _written(self, res: Resource, namespace: str | None, result: Any) -> None:
        for observer in self.write_observers:
            await observer.written(res, namespace, result)

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
        With `send_initial_events` it is a watch-list: the objects the server holds as ADDED
        events, a BOOKMARK annotated `k8s.io/initial-events-end`, then the watch goes on.
        """
        stream = self.watch_lines(
            res,
            namespace,
            resource_version=resource_version,
            label_selector=label_selector,
            field_selector=field_selector,
            timeout_seconds=timeout_seconds,
            allow_bookmarks=allow_bookmarks,
            read_timeout=read_timeout,
            send_initial_events=send_initial_events,
        )
        try:
            async for batch in stream:
                for line in batch:
                    try:
                        etype, obj = watchlines.decode(line, res.key)
                    except orjson.JSONDecodeError as exc:
                        raise errors.KubeError(
                            f"watch {res.key}: an event is not JSON: {exc}"
                        ) from exc
                    yield WatchEvent(etype, obj)
        finally:
            await stream.aclose()

    async def watch_lines(
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
    ) -> AsyncGenerator[EventLines, None]:
        """A watch's events as undecoded JSON lines, in the groups they arrived in.

        For consumers that decode events their own way (the informer decodes each group with
        the garbage collector paused, and may keep an event's bytes as they came). Each group
        is what one read of the connection completed, so decoding overlaps the server's
        sending and at most a few hundred kilobytes of the stream are held at a time. `ERROR`
        events are lines like any other here; `watchlines.decode` raises them. Opening the
        watch raises the API's error (a 422 for options the server refuses) like any request.
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
                    raise errors.error_for(
                        resp.status, errors.status_of(await resp.read()), "GET", url
                    )
                async for batch in watchlines.batches(resp.content.iter_any()):
                    yield batch
        except TimeoutError:
            raise errors.RequestTimeout(f"watch {res.key}: no data for {stall}s") from None
        except aiohttp.ClientPayloadError as exc:
            raise errors.ConnectionFailed(f"watch {res.key}: stream broken: {exc}") from exc
        except aiohttp.ClientConnectionError as exc:
            raise errors.ConnectionFailed(f"watch {res.key}: {exc}") from exc
        except aiohttp.ClientError as exc:
            raise errors.KubeError(f"watch {res.key}: {type(exc).__name__}: {exc}") from exc

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
        _check_scope(res, ns)
        params = _params(dryRun="All" if dry_run else None, fieldManager=field_manager)
        result: dict[str, Any] = await self.request("POST", res.path(ns), params=params, body=body)
        if not dry_run:
            await self._written(res, ns, result)
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
        await self._written(res, meta.get("namespace"), result)
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
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """Patch an object; with `resource_version`, only if it is still that version.

        The guard is the object's own optimistic concurrency: the resourceVersion travels in
        the patched object (merge and strategic patches carry it in `metadata`, a JSON patch
        replaces it), so the server answers 409 Conflict when someone wrote in between.
        """
        _check_scope(res, namespace)
        if resource_version is not None:
            body = _guarded(body, resource_version)
        params = _params(fieldManager=field_manager, dryRun="All" if dry_run else None)
        result: dict[str, Any] = await self.request(
            "PATCH",
            res.path(namespace, name, subresource),
            params=params,
            body=body,
            content_type=PATCH_CONTENT_TYPES[patch_type],
        )
        if not dry_run:
            await self._written(res, namespace, result)
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
        return await self.patch(
            res,
            name,
            {"status": status},
            namespace,
            subresource="status",
            resource_version=resource_version,
        )

    async def create_or_patch(
        self,
        res: Resource,
        body: Mapping[str, Any],
        namespace: str | None = None,
        *,
        field_manager: str | None = None,
    ) -> tuple[dict[str, Any], OperationResult]:
        """Make the object hold what `body` says: create it, or merge-patch what differs.

        Reads first, so an object that already says everything is left alone ("unchanged", no
        write and no new resourceVersion). The patch is guarded by the resourceVersion read and
        redone on a conflict, so nobody's concurrent write is undone by a stale decision.
        """
        meta = body.get("metadata") or {}
        name = str(meta.get("name") or "")
        if not name:
            raise ValueError("create_or_patch needs metadata.name in the body")
        ns = namespace or meta.get("namespace")
        _check_scope(res, ns)
        for _ in range(5):
            try:
                current = await self.get(res, name, ns)
            except errors.NotFound:
                try:
                    return await self.create(res, body, ns, field_manager=field_manager), "created"
                except errors.AlreadyExists:
                    continue  # created meanwhile: patch it
            if not _patch_changes(current, body):
                return current, "unchanged"
            try:
                patched = await self.patch(
                    res,
                    name,
                    dict(body),
                    ns,
                    field_manager=field_manager,
                    resource_version=(current.get("metadata") or {}).get("resourceVersion"),
                )
            except errors.Conflict:
                continue
            except errors.NotFound:
                continue  # deleted meanwhile: create it
            return patched, "updated"
        raise errors.Conflict(
            409,
            {"reason": "Conflict", "message": f"{res.key} {name!r} kept changing"},
        )

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
        _check_scope(res, namespace)
        result: dict[str, Any] | None = await self.request(
            "DELETE", res.path(namespace, name), body=body
        )
        if not dry_run:
            await self._written(res, namespace, result)
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


def _idempotent(method: str, body: Any, content_type: str) -> bool:
    """Whether sending the request twice leaves the same result as sending it once."""
    if method in ("GET", "HEAD", "PUT", "DELETE"):
        return True
    if method == "PATCH":
        if content_type == PATCH_CONTENT_TYPES["json"] and isinstance(body, list):
            # `add` to a list's end twice adds twice; a `test` op makes the second one fail.
            return any(isinstance(op, dict) and op.get("op") == "test" for op in body)
        return True
    return False


def _check_scope(res: Resource, namespace: str | None) -> None:
    if namespace and not res.namespaced:
        raise ValueError(f"{res.key} are cluster-scoped; no namespace ({namespace!r}) applies")


def _guarded(body: Any, resource_version: str) -> Any:
    if isinstance(body, list):
        return [
            *body,
            {"op": "replace", "path": "/metadata/resourceVersion", "value": resource_version},
        ]
    if isinstance(body, Mapping):
        meta = dict(body.get("metadata") or {})
        meta["resourceVersion"] = resource_version
        return {**body, "metadata": meta}
    raise TypeError(f"a patch body is a mapping or a list of operations, not {type(body)}")


def _patch_changes(current: Any, patch: Any) -> bool:
    """Whether merge-patching `current` with `patch` would change it (RFC 7386 semantics)."""
    if not isinstance(patch, Mapping):
        return bool(current != patch)
    if not isinstance(current, Mapping):
        return True
    for key, value in patch.items():
        if value is None:
            if key in current:
                return True
        elif key not in current:
            return True
        elif _patch_changes(current[key], value):
            return True
    return False


def _params(**kwargs: str | None) -> dict[str, str]:
    return {k: v for k, v in kwargs.items() if v is not None and v != ""}
