"""The list/watch loop that feeds an informer's cache.

Semantics are client-go's reflector: a watch-list (or a paginated list and a watch) to sync,
bookmarks, server and client timeouts, a relist on 410 Gone, and backoff on errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncGenerator
from typing import Any

import orjson

from nodeops.common import jsonbytes, watchlines
from nodeops.common.gcpause import paused_gc
from nodeops.kube import errors
from nodeops.kube.client import EventLines
from nodeops.kube.freememory import _release_free_memory
from nodeops.kube.indexers import object_key
from nodeops.kube.informercache import InformerCache, _call
from nodeops.kube.metrics import (
    INFORMER_LIST_WATCH_FAILURES,
    INFORMER_LISTS,
    INFORMER_OBJECTS,
    INFORMER_STALE,
    INFORMER_WATCH_RESTARTS,
)
from nodeops.kube.relistbackoff import _error_kind
from nodeops.kube.transforms import Obj, default_transform
from nodeops.kube.watchdecoding import (
    INITIAL_EVENTS_END,
    _IncompleteSync,
    _list_head,
    _NoWatchList,
    _Sync,
)

# Watch-lists broken in a row (each after some of its initial events) before one sync is done
# by a paginated list instead.
BROKEN_WATCH_LISTS = 3


class Informer(InformerCache):
    """List+watch of one resource (and optional selectors) into an indexed cache.

    Reads (`get`, `objects`, `by_index`, ...) raise `NotSynced` until the first list is in: an
    unsynced cache is not an empty one. A namespace given for a cluster-scoped resource, or
    none for a namespaced one, raises ValueError rather than answering "not found".
    """

    # ------------------------------------------------------------------ list / watch
    #
    # A sync (the first one, and each relist after 410 Gone) is a watch-list where the server
    # supports it: one watch with `sendInitialEvents=true` streams the objects as ADDED events
    # from the API server's watch cache, a BOOKMARK annotated `k8s.io/initial-events-end` says
    # the state is complete, and the same watch simply goes on. Where the server refuses it, the
    # sync is a paginated list followed by a watch from the list's resourceVersion. Either way,
    # objects are applied to the cache as they arrive (adds for new ones, updates for changed
    # ones) and those the sync did not see are deleted at its end, so a relist never empties a
    # cache that readers and waiters are using.
    #
    # Events are decoded in the groups the connection delivered them, with the cyclic garbage
    # collector paused (decoded JSON has no cycles; see `nodeops.common.gcpause`), and every
    # decoded object of a group is released before the collector is switched back on.

    async def _sync(self) -> AsyncGenerator[EventLines, None] | None:
        """Bring the cache to the server's current state; returns the watch to continue, if any."""
        INFORMER_LISTS.labels(self.resource.key).inc()
        refused = self.client.watch_list_refused.get(self.resource.key)
        if self.watch_list and refused is None and self._broken_watch_lists >= BROKEN_WATCH_LISTS:
            # Streams that keep breaking before their state is complete (a proxy that cuts long
            # responses, say) would never sync: short paged requests get through this time.
            self._log.warning(
                "watch-lists keep breaking; syncing by a paginated list this time",
                attempts=self._broken_watch_lists,
            )
        elif self.watch_list and refused is None:
            try:
                return await self._watch_list()
            except (errors.TooManyRequests, errors.Gone):
                raise  # retried as a watch-list: after a backoff, or at once for 410
            except (errors.ApiError, _NoWatchList) as exc:
                # As client-go: a watch-list the server answers with an error is replaced by a
                # paged list, so the informer makes progress whatever the server supports.
                # A refusal of the request itself (a server without WatchList answers 422
                # Invalid, or a plain watch instead) is remembered for the resource.
                if isinstance(exc, errors.BadRequest | errors.Invalid) or (
                    isinstance(exc, _NoWatchList) and exc.refused
                ):
                    first = not self.client.watch_list_refused
                    self.client.watch_list_refused[self.resource.key] = str(exc)
                    # A server without the feature (kube-apiserver before 1.27, or with the
                    # WatchList gate off) is a fact about the cluster, not a fault: said once
                    # per process, not once per resource at every start.
                    if first:
                        self._log.info(
                            "the API server does not serve watch-lists; syncing by paginated lists",
                            error=str(exc),
                        )
                elif isinstance(exc, errors.ApiError):
                    # The server answered the watch-list itself with an error: kube-apiserver
                    # does so (500, in an ERROR event) when its etcd cannot report watch
                    # progress (older than 3.4.31 / 3.5.13). It is tried again at the next
                    # sync, as client-go does, since the same code also means a passing fault.
                    self._log.warning(
                        "the API server answered a watch-list with an error; syncing by a "
                        "paginated list this time",
                        error=str(exc),
                        error_type=type(exc).__name__,
                    )
                else:
                    self._log.info(
                        "watch-list failed; syncing by a paginated list this time",
                        error=str(exc),
                        error_type=type(exc).__name__,
                    )
        await self._list()
        self.synced_by = "list"
        self._broken_watch_lists = 0
        self._mark_synced()
        return None

    async def _watch_list(self) -> AsyncGenerator[EventLines, None]:
        """Stream the initial state into the cache; returns the watch, open, at its end."""
        stream = self.client.watch_lines(
            self.resource,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=random.randint(*self.watch_timeout),
            allow_bookmarks=True,
            send_initial_events=True,
            on_open=self.backoff.reset,  # the cache is current only at the end of the state
        )
        sync = _Sync()
        try:
            async for batch in stream:
                with paused_gc:
                    self._apply_batch(batch, sync)
                if sync.done:
                    self._broken_watch_lists = 0
                    return stream
        except BaseException:
            await stream.aclose()
            if sync.events:
                self._broken_watch_lists += 1
            raise
        await stream.aclose()
        if sync.events:
            self._broken_watch_lists += 1
        if not sync.events:
            # client-go's "very short watch": nothing at all came; list instead this time.
            raise _NoWatchList("the watch-list ended without any event", refused=False)
        raise _IncompleteSync(
            f"watch-list of {self.resource.key}: the stream ended after {sync.events} events, "
            "before the end of the initial events"
        )

    def _open_watch(self) -> AsyncGenerator[EventLines, None]:
        return self.client.watch_lines(
            self.resource,
            self.namespace,
            resource_version=self.resource_version,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=random.randint(*self.watch_timeout),
            allow_bookmarks=True,
            on_open=self._established,
        )

    async def _follow(self, stream: AsyncGenerator[EventLines, None]) -> None:
        """Apply a watch's events until the server ends it."""
        async for batch in stream:
            with paused_gc:
                self._apply_batch(batch, None)
        INFORMER_OBJECTS.labels(self.resource.key).set(len(self._items))

    def _apply_batch(self, batch: EventLines, sync: _Sync | None) -> None:
        """Apply one group of event lines: to the sync in progress until it is done, then live.

        Runs without awaiting, so the decoded objects it makes are all gone when it returns.
        """
        key = self.resource.key
        on_bytes = self.transform is default_transform  # done on the bytes: see `_compact`
        for line in batch:
            obj: Any = None
            raw: memoryview | None = None
            compact: bytes | None = None
            found = watchlines.object_event(line)
            try:
                if found is not None:
                    etype, raw = found
                    if on_bytes:
                        compact = self._compact(raw)
                    try:
                        obj = orjson.loads(compact if compact is not None else raw)
                    except orjson.JSONDecodeError:
                        if compact is not None:
                            raise
                        raw = None  # not the object alone: decode the event whole
                if obj is None:
                    etype, obj = watchlines.decode(line, key)
            except orjson.JSONDecodeError as exc:
                raise errors.KubeError(f"watch {key}: an event is not JSON: {exc}") from exc
            if not isinstance(obj, dict):
                raise errors.KubeError(f"watch {key}: a {etype} event carries no object")
            if sync is not None and not sync.done:
                self._apply_initial(sync, etype, obj, raw, compact)
            else:
                self._apply_event(etype, obj, raw, compact)

    def _apply_event(
        self, etype: str, obj: Obj, raw: memoryview | None, compact: bytes | None = None
    ) -> None:
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if etype == "BOOKMARK":
            if rv:
                self.resource_version = rv
            if self.failures:
                self._recovered()
            return
        if "kind" not in obj:
            obj["kind"] = self.resource.kind
            obj["apiVersion"] = self.resource.api_version
            raw = None
        if etype in ("ADDED", "MODIFIED"):
            accepted = self._accept(obj, raw, compact)
            if accepted is not None and self._handlers:
                obj, _, old = accepted
                if old is None:
                    self._dispatch_add(obj)
                else:
                    self._dispatch_update(old, obj)
        elif etype == "DELETED":
            self._remove(object_key(obj))
            if self._handlers:
                self._dispatch_delete(self._transformed_for_delete(obj))
        if rv:
            self.resource_version = rv
        if self.failures:
            self._recovered()

    def _apply_initial(
        self,
        sync: _Sync,
        etype: str,
        obj: Obj,
        raw: memoryview | None,
        compact: bytes | None = None,
    ) -> None:
        """One event of a watch-list's initial state (or of what changed while it streamed)."""
        meta = obj.get("metadata") or {}
        if etype == "BOOKMARK":
            if (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) != "true":
                # kube-apiserver sends no other bookmark before this one: the server answered
                # with a plain watch, which would never say when the state is complete.
                raise _NoWatchList(
                    "the server answered a watch-list with a plain watch", refused=True
                )
            self._finish_sync(sync.seen, meta.get("resourceVersion") or "")
            sync.done = True
            self.synced_by = "watch-list"
            self._recovered()
            self._mark_synced()
            return
        sync.events += 1
        if "kind" not in obj:
            obj["kind"] = self.resource.kind
            obj["apiVersion"] = self.resource.api_version
            raw = None
        key = object_key(obj)
        if etype in ("ADDED", "MODIFIED"):
            sync.seen.add(key)  # a skipped object keeps what the cache had
            accepted = self._accept(obj, raw, compact)
            if accepted is not None and self._handlers:
                self._dispatch_synced(*accepted)
        elif etype == "DELETED":
            sync.seen.discard(key)
            if self._remove(key) is not None and self._handlers:
                self._dispatch_delete(self._transformed_for_delete(obj))

    def _dispatch_synced(self, obj: Obj, new: bytes, old: bytes | None) -> None:
        """Handlers' view of an object a sync brought: new, changed, or (no call) the same."""
        if old is None:
            self._dispatch_add(obj)
        elif old != new:
            previous = orjson.loads(old)
            if (previous.get("metadata") or {}).get("resourceVersion") != (
                obj.get("metadata") or {}
            ).get("resourceVersion"):
                self._dispatch_update(old, obj, previous)

    def _finish_sync(self, seen: set[str], resource_version: str) -> None:
        """End a sync: what it did not see is gone from the server, and the cache is at its
        resourceVersion."""
        deletes = any(h.on_delete is not None for h in self._handlers)
        for key in [k for k in self._items if k not in seen]:
            old = self._remove(key)
            if old is not None and deletes:
                self._dispatch_delete(orjson.loads(old))
        if resource_version:
            self.resource_version = resource_version
        INFORMER_OBJECTS.labels(self.resource.key).set(len(self._items))
        _release_free_memory()

    def _mark_synced(self) -> None:
        if not self._synced.is_set():
            self._synced.set()
            self._log.debug("informer synced", objects=len(self._items), by=self.synced_by)

    async def _list(self) -> None:
        """Paginated list, applied page by page; the next page is fetched while this one is
        decoded, so the server's work on it overlaps ours."""
        seen: set[str] = set()
        rv = ""
        fetch: asyncio.Future[bytes] | None = asyncio.ensure_future(self._page(None))
        try:
            while fetch is not None:
                payload = await fetch
                fetch = None
                # The continue token is in the page's head: ask for the next page first.
                head = _list_head(payload)
                token = head.get("continue") if head is not None else None
                if token:
                    fetch = asyncio.ensure_future(self._page(token))
                with paused_gc:
                    meta = self._apply_page(payload, seen)
                del payload
                if meta.get("continue") != token:  # the head said otherwise: trust the page
                    if fetch is not None:
                        fetch.cancel()
                        fetch.add_done_callback(_retrieved)
                    token = meta.get("continue")
                    fetch = asyncio.ensure_future(self._page(token)) if token else None
                rv = meta.get("resourceVersion") or rv
        finally:
            if fetch is not None:
                fetch.cancel()
                fetch.add_done_callback(_retrieved)
        self._finish_sync(seen, rv)

    async def _page(self, token: str | None) -> bytes:
        return await self.client.list_page(
            self.resource,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            limit=self.page_size,
            continue_token=token,
        )

    def _apply_page(self, payload: bytes, seen: set[str]) -> dict[str, Any]:
        """Apply one list page; returns its metadata. The decoded objects are gone on return.

        The page is split into its items undecoded, and each item decoded on its own, as a
        watch event is: decoding 500 objects at once costs two to four times as much per
        object (they outgrow the processor's caches) and holds them all at once.
        """
        split = jsonbytes.list_items(payload)
        if split is None:  # not a list as kube writes one: decode it whole
            page = orjson.loads(payload)
            for item in page.get("items") or ():
                self._apply_item(item, None, seen)
            whole: dict[str, Any] = page.get("metadata") or {}
            return whole
        top, items = split
        on_bytes = self.transform is default_transform  # done on the bytes: see `_compact`
        for raw in items:
            compact = self._compact(raw) if on_bytes else None
            item = orjson.loads(compact if compact is not None else memoryview(raw))
            self._apply_item(item, compact, seen)
        meta = orjson.loads(memoryview(top["metadata"])) if "metadata" in top else None
        if meta and not isinstance(meta, dict):
            raise errors.KubeError(
                f"list {self.resource.key}: the page's metadata is not an object"
            )
        return meta or {}

    def _apply_item(self, item: Any, compact: bytes | None, seen: set[str]) -> None:
        if "kind" not in item:
            item["kind"] = self.resource.kind
            item["apiVersion"] = self.resource.api_version
        seen.add(object_key(item))  # a skipped object keeps what the cache had
        accepted = self._accept(item, None, compact)
        if accepted is not None and self._handlers:
            self._dispatch_synced(*accepted)

    async def run(self) -> None:
        """List and watch until cancelled; never returns on errors, it backs off and retries."""
        loop = asyncio.get_running_loop()
        need_list = True
        self._ended = False
        resync = asyncio.create_task(self._resync_loop()) if self.resync_period else None
        try:
            while True:
                stream: AsyncGenerator[EventLines, None] | None = None
                try:
                    if need_list:
                        stream = await self._sync()
                        need_list = False
                        self._established()
                    if stream is None:
                        stream = self._open_watch()
                    await self._follow(stream)
                    INFORMER_WATCH_RESTARTS.labels(self.resource.key, "timeout").inc()
                    self._recovered()
                except errors.Gone:
                    self._went_stale(loop.time())
                    INFORMER_WATCH_RESTARTS.labels(self.resource.key, "expired").inc()
                    self._log.info(
                        "watch expired, relisting", resource_version=self.resource_version
                    )
                    need_list = True
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    # Whatever went wrong (the API, the connection, a malformed event, a bug on
                    # our side), the cache must not freeze: back off, and relist unless it was
                    # only the connection.
                    self.last_error = exc
                    # A watch-list broken after some of its events made progress: it is retried
                    # at once, and not counted against the informer's health.
                    broken_stream = isinstance(exc, _IncompleteSync)
                    if not broken_stream:
                        self.failures += 1
                    if self._synced.is_set():
                        self._went_stale(loop.time())
                    INFORMER_WATCH_RESTARTS.labels(self.resource.key, "error").inc()
                    INFORMER_LIST_WATCH_FAILURES.labels(self.resource.key, _error_kind(exc)).inc()
                    if broken_stream:
                        # A proxy or server that cuts long responses: after a few such breaks
                        # in a row the next sync is a paginated list.
                        delay = 0.0
                    else:
                        retry_after = exc.retry_after if isinstance(exc, errors.ApiError) else None
                        delay = self.backoff.next(retry_after)
                    expected = isinstance(exc, errors.KubeError | OSError)
                    self._log.warning(
                        "list/watch failed, retrying",
                        error=str(exc) or type(exc).__name__,
                        error_type=type(exc).__name__,
                        failures=self.failures,
                        retry_in=round(delay, 2),
                        exc_info=not expected,
                    )
                    if not expected or (
                        isinstance(exc, errors.ApiError) and exc.code in (400, 401, 403, 404)
                    ):
                        need_list = True
                    if delay > 0:
                        self._retry_at = loop.time() + delay
                        self._release_hopeless_waiters()
                        try:
                            await asyncio.sleep(delay)
                        finally:
                            self._retry_at = None
                finally:
                    if stream is not None:
                        await stream.aclose()
        finally:
            self._ended = True
            self._release_hopeless_waiters()
            if resync is not None:
                resync.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await resync

    def _established(self) -> None:
        """A sync completed or a watch from the cache's resourceVersion was opened: the cache is
        current again (what the watch missed comes first), and the failure streak is over.

        `failures` (what readiness reports) is cleared only once the watch delivers, so a
        watch that opens and fails at once again and again is still reported as failing.
        """
        self.backoff.reset()
        if self._stale_since is not None:
            INFORMER_STALE.labels(self.resource.key).observe(
                asyncio.get_running_loop().time() - self._stale_since
            )
            self._stale_since = None

    def _went_stale(self, now: float) -> None:
        if self._stale_since is None:
            self._stale_since = now

    async def _resync_loop(self) -> None:
        assert self.resync_period is not None
        while True:
            await asyncio.sleep(self.resync_period)
            if not self._synced.is_set():
                continue
            for raw in list(self._items.values()):
                obj = orjson.loads(raw)
                for h in self._handlers:
                    if h.on_update is not None:
                        _call(h.on_update, obj, obj)

    def start(self) -> asyncio.Task[None]:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.run(), name=f"informer:{self.resource.key}")
        return self._task

    async def stop(self) -> None:
        """Stop listing and watching; the cache keeps what it holds.

        A task that had already died is not re-raised here: its end was reported (and, under a
        manager, handled) when it happened.
        """
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        await asyncio.wait({task})
        if not task.cancelled() and task.exception() is not None:
            self._log.debug("stopped an informer that had failed", error=str(task.exception()))


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Done-callback of an abandoned prefetch: its error, if any, is not worth reporting."""
    if not task.cancelled():
        task.exception()
