"""The request core of the client: rate limiting, deadlines, retries with backoff, typed errors.

Every call of the client, verbs and watches alike, goes through `request`, so the retry policy
(idempotent requests only, `Retry-After` honoured up to a bound) lives in one place.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson
import structlog

from nodeops.kube import errors
from nodeops.kube.clientconfig import ClientConnection, RetryNotice
from nodeops.kube.metrics import (
    REST_LATENCY,
    REST_RATE_LIMITER_WAIT,
    REST_REQUESTS,
    REST_RETRIES,
)
from nodeops.kube.resources import Resource

# Logged under the public module's name, which log filters and dashboards key on.
log = structlog.get_logger("nodeops.kube.client")

PATCH_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}


class RequestCore(ClientConnection):
    """One JSON request with the retry policy, and the write observers told of each write."""

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
        asks or a jittered backoff, at most `max_retries` times; a GET also when it timed out.
        A POST is retried only on 429: the API server throttles a request before serving it (as
        client-go, which retries any verb the server asked to come back later), while after a
        5xx or a broken connection a create may have happened. An eviction's 429 is never
        retried here: it is a PodDisruptionBudget's answer the caller must see. `retry`
        overrides the choice.
        """
        retrying = _idempotent(method, body, content_type) if retry is None else retry
        throttled_only = retry is None and not retrying and _throttled_retry(method, path)
        retryable: tuple[type[errors.KubeError], ...] = _RETRYABLE
        if method == "GET" and retrying:
            retryable = (*_RETRYABLE, errors.RequestTimeout)
        attempt = 0
        reauthenticated = False
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
            except errors.Unauthorized:
                # A refused token from a source that can fetch another (an exec plugin's,
                # revoked or expired before it said): once more with a fresh one. The server
                # refused the request before serving it, so any verb may go again.
                expire = getattr(self._token_source, "expire", None)
                if reauthenticated or expire is None:
                    raise
                expire()
                reauthenticated = True
            except retryable as exc:
                if retrying or (throttled_only and isinstance(exc, errors.TooManyRequests)):
                    delay = self._retry_delay(exc, attempt)
                else:
                    delay = None
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
            self.requests += 1
            REST_LATENCY.labels(method, self.host).observe(time.perf_counter() - started)

    async def _written(self, res: Resource, namespace: str | None, result: Any) -> None:
        for observer in self.write_observers:
            await observer.written(res, namespace, result)


_RETRYABLE: tuple[type[errors.KubeError], ...] = (
    errors.TooManyRequests,
    errors.ServerError,
    errors.ConnectionFailed,
)


def _throttled_retry(method: str, path: str) -> bool:
    """Whether a non-idempotent request is still retried on 429: a POST but an eviction."""
    return method == "POST" and not path.endswith("/eviction")


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


def _params(**kwargs: str | None) -> dict[str, str]:
    return {k: v for k, v in kwargs.items() if v is not None and v != ""}
