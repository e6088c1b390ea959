"""Watch streaming: events decoded lazily from the connection, with server and client timeouts.

Apart from the request core because a watch is a long-lived stream that must not be retried
like a request: its caller (an informer) relists or resumes from its own resourceVersion.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from nodeops.common import watchlines
from nodeops.kube import errors
from nodeops.kube.metrics import (
    REST_REQUESTS,
)
from nodeops.kube.requestcore import RequestCore, _params
from nodeops.kube.resources import Resource


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: dict[str, Any]


#: Watch event lines, undecoded, as one read of the connection completed them.
EventLines = list[watchlines.Line]


class WatchStreaming(RequestCore):
    """Watches of one resource, as decoded events or as raw lines for an informer's cache."""

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
        on_open: Callable[[], None] | None = None,
    ) -> AsyncGenerator[EventLines, None]:
        """A watch's events as undecoded JSON lines, in the groups they arrived in.

        For consumers that decode events their own way (the informer decodes each group with
        the garbage collector paused, and may keep an event's bytes as they came). Each group
        is what one read of the connection completed, so decoding overlaps the server's
        sending and at most a few hundred kilobytes of the stream are held at a time. `ERROR`
        events are lines like any other here; `watchlines.decode` raises them. Opening the
        watch raises the API's error (a 422 for options the server refuses) like any request,
        with the `Retry-After` the server sent. `on_open` is called once the server has
        accepted the watch, which is what ends a watcher's failure streak.
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
                self.requests += 1
                if resp.status >= 400:
                    raise errors.error_for(
                        resp.status,
                        errors.status_of(await resp.read()),
                        "GET",
                        url,
                        retry_after_header=errors.retry_after_header(
                            resp.headers.get("Retry-After")
                        ),
                    )
                if on_open is not None:
                    on_open()
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
