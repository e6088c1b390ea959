"""The HTTP face of the simulated API server: kube-apiserver's paths, verbs and wire formats.

Requests are parsed into kube's request attributes (verb, group, version, resource,
subresource, namespace, name), authenticated and authorized when that is switched on, passed
through fault injection, and dispatched to the registry. Lists and watches stream the stored
JSON bytes without decoding them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from dataclasses import dataclass
from typing import Any

import orjson
import yaml
from aiohttp import web

from nodeops.common.selectors import SelectorError, parse_field_selector, parse_label_selector
from nodeops.sim.server import (
    discovery,
    errors,
    listoptions,
    openapi,
    protobuf,
    reviews,
    subresources,
)
from nodeops.sim.server.accounting import RequestStats
from nodeops.sim.server.auth import (
    ADMIN_USER,
    Authenticator,
    RBACAuthorizer,
    RequestAttributes,
    UserInfo,
    forbidden_error,
)
from nodeops.sim.server.faults import FaultInjector
from nodeops.sim.server.fieldvalidation import FieldValidation
from nodeops.sim.server.patch import (
    apply_json_patch,
    apply_merge_patch,
    patch_type_for_content_type,
)
from nodeops.sim.server.registry import Registry
from nodeops.sim.server.resources import ResourceType
from nodeops.sim.server.store import Filter, Watcher
from nodeops.sim.server.tables import TABLE_API_VERSION, to_table
from nodeops.sim.server.transform import (
    PARTIAL_OBJECT_METADATA_LIST,
    TABLE,
    EncodeFailed,
    EventWriter,
    WatchTransformer,
    negotiate,
    partial_object_metadata,
    table_include_object,
)

_JSON = "application/json"
_UNDECODABLE_MEDIA_TYPES = frozenset({"application/cbor", "application/cbor-seq"})
"""Encodings kube may serve but the simulator does not: 415, on which client-go falls back to
JSON (for CBOR)."""
_WRITE_PIECE = 128 * 1024
_NON_RESOURCE_OK = ("/healthz", "/livez", "/readyz")
_ADDED_PREFIX = b'{"type":"ADDED","object":'
_EVENT_SUFFIX = b"}\n"
# How long a watch-list from a resourceVersion the store has not reached yet waits for it
# (the cacher's blockTimeout).
_TOO_LARGE_RV_WAIT = 3.0
BOOKMARK_SECONDS = 60.0
"""How often a watch that allows bookmarks gets one: kube-apiserver's watch cache sends one a
minute (`defaultBookmarkFrequency`). Every five seconds, as here before, cost a rehearsal at time
scale 1 a quarter more work than at 2, for bookmarks nothing needed."""
BOOKMARK_BEFORE_DEADLINE = 2.0
"""kube-apiserver's last bookmark of a watch goes out this many seconds before its timeout."""


@dataclass(slots=True)
class Request:
    verb: str
    group: str
    version: str
    plural: str
    subresource: str
    namespace: str
    name: str


def _selected_name(query: Any) -> str:
    """The name a list or watch selects with `fieldSelector=metadata.name=X`, else "".

    kube's RequestInfo gives such a request that name, so RBAC rules limited by `resourceNames`
    apply to it (a leader elector may watch its one Lease).
    """
    try:
        selector = parse_field_selector(query.get("fieldSelector", ""))
    except SelectorError:
        return ""
    name = selector.requires_exact_match("metadata.name") or ""
    if name in (".", "..") or "/" in name or "%" in name:
        return ""
    return name


def parse_resource_path(method: str, path: str, query: Any) -> Request | None:
    """Map a URL to kube's request info, or None for a non-resource path."""
    parts = [p for p in path.split("/") if p]
    if not parts:
        return None
    if parts[0] == "api" and len(parts) >= 2:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[0] == "apis" and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return None
    watch_path = False
    if rest[0] == "watch":
        watch_path = True
        rest = rest[1:]
    namespace = ""
    # /namespaces/{ns}/{resource}... vs the namespaces resource itself.
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace = rest[1]
        rest = rest[2:]
    elif rest[0] == "namespaces" and len(rest) == 2:
        namespace = rest[1]
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    sub = "/".join(rest[2:]) if len(rest) > 2 else ""
    if method == "GET":
        if watch_path or listoptions.kube_bool(query.get("watch")):
            verb = "watch"
        else:
            verb = "get" if name else "list"
    elif method == "POST":
        verb = "create"
    elif method == "PUT":
        verb = "update"
    elif method == "PATCH":
        verb = "patch"
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = method.lower()
    return Request(verb, group, version, plural, sub, namespace, name)


class ApiHttp:
    """aiohttp handlers bound to one registry and the cross-cutting parts."""

    def __init__(
        self,
        registry: Registry,
        *,
        stats: RequestStats,
        faults: FaultInjector,
        authn: Authenticator | None,
        authz: RBACAuthorizer | None,
        bookmark_interval: float = BOOKMARK_SECONDS,
        min_request_timeout: float = 1800.0,
    ) -> None:
        self.registry = registry
        self.stats = stats
        self.faults = faults
        self.authn = authn
        self.authz = authz
        self.bookmark_interval = bookmark_interval
        self.min_request_timeout = min_request_timeout
        self.server_address = "127.0.0.1:0"
        self.version: dict[str, str] = dict(discovery.KUBE_VERSION)
        """What `/version` answers; `SimServer.set_kube_version` changes it."""
        self.watchers: set[Watcher] = set()
        self.shutting_down = False
        # Set on shutdown, so requests and watches held back by injected faults end with it.
        self._closing = asyncio.Event()

    # ----------------------------------------------------------------- entry

    async def handle(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        req = parse_resource_path(request.method, request.path, request.query)
        resource = req.plural + ("/" + req.subresource if req.subresource else "") if req else ""
        verb = req.verb if req else request.method.lower()
        agent = request.headers.get("User-Agent", "")
        code = 500
        try:
            user = self._authenticate(request)
            self._authorize(user, req, request)
            if req is not None and self.faults.enabled:
                injected = self.faults.maybe_error(verb, resource, name=req.name, group=req.group)
                delay = self.faults.latency(verb, resource)
                if delay:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._closing.wait(), delay)
                    if self._closing.is_set():
                        raise errors.ApiError(
                            503, "ServiceUnavailable", "apiserver is shutting down"
                        )
                if injected is not None:
                    raise injected
            if req is None:
                response = self._non_resource(request)
            else:
                response = await self._resource(request, req)
            # A watch that streamed was counted when it started (it may stream for minutes).
            code = -1 if verb == "watch" and response.status == 200 else response.status
            return response
        except errors.ApiError as exc:
            code = exc.code
            return self._error(exc)
        finally:
            if code != -1:
                self.stats.record(
                    verb, resource or request.path, code, agent, time.perf_counter() - started
                )

    def _authenticate(self, request: web.Request) -> UserInfo:
        if self.authn is None:
            return ADMIN_USER
        return self.authn.user_for(request.headers.get("Authorization"))

    def _authorize(self, user: UserInfo, req: Request | None, request: web.Request) -> None:
        if self.authz is None:
            return
        if req is None:
            attrs = RequestAttributes(
                user=user,
                verb=request.method.lower() if request.method != "GET" else "get",
                is_resource_request=False,
                path=request.path,
            )
        else:
            name = req.name
            if not name and req.verb in ("list", "watch"):
                name = _selected_name(request.query)
            attrs = RequestAttributes(
                user=user,
                verb=req.verb,
                api_group=req.group,
                resource=req.plural,
                subresource=req.subresource,
                namespace=req.namespace if req.plural != "namespaces" else req.name,
                name=name,
                path=request.path,
            )
        allowed, reason = self.authz.authorize(attrs)
        if not allowed:
            raise forbidden_error(attrs, reason)

    @staticmethod
    def _json(body: Any, status: int = 200) -> web.Response:
        return web.Response(body=orjson.dumps(body), status=status, content_type=_JSON)

    @staticmethod
    def _raw(raw: bytes, status: int = 200) -> web.Response:
        return web.Response(body=raw, status=status, content_type=_JSON)

    def _error(self, exc: errors.ApiError) -> web.Response:
        resp = self._json(exc.status(), exc.code)
        for key, value in exc.headers.items():
            resp.headers[key] = value
        return resp

    # ----------------------------------------------------------------- non-resource

    def _non_resource(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        types = list(self.registry.all_types())
        if path in _NON_RESOURCE_OK or path.startswith(tuple(p + "/" for p in _NON_RESOURCE_OK)):
            return web.Response(text="ok", content_type="text/plain")
        if path == "/version":
            return self._json(self.version)
        if path == "/api":
            return self._json(discovery.api_versions(self.server_address))
        if path == "/apis":
            return self._json(discovery.api_group_list(types))
        if path == "/openapi/v2":
            body, media_type = openapi.v2_document(request.headers.get("Accept", ""))
            return web.Response(body=body, content_type=media_type)
        if path == "/openapi/v3":
            return self._json(openapi.root(types))
        if path.startswith("/openapi/v3/"):
            doc = openapi.group_version(types, path[len("/openapi/v3/") :])
            if doc is not None:
                return self._json(doc)
        parts = [p for p in path.split("/") if p]
        if len(parts) == 2 and parts[0] == "api":
            doc = discovery.resource_list(types, "", parts[1])
            if doc is not None:
                return self._json(doc)
        if len(parts) == 2 and parts[0] == "apis":
            doc = discovery.api_group(types, parts[1])
            if doc is not None:
                return self._json(doc)
        if len(parts) == 3 and parts[0] == "apis":
            doc = discovery.resource_list(types, parts[1], parts[2])
            if doc is not None:
                return self._json(doc)
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")

    # ----------------------------------------------------------------- resources

    async def _resource(self, request: web.Request, req: Request) -> web.StreamResponse:
        rt = self.registry.lookup(req.group, req.version, req.plural)
        if not rt.namespaced and req.namespace and req.plural != "namespaces":
            raise errors.ApiError(
                404, "NotFound", "the server could not find the requested resource"
            )
        if req.subresource and req.subresource not in rt.subresources:
            raise errors.ApiError(
                404, "NotFound", "the server could not find the requested resource"
            )
        if (rt.group, rt.plural) in reviews.KINDS:
            return await self._review(request, req, rt)
        q = request.query
        dry_run = q.get("dryRun") == "All"
        ns = req.namespace
        reg = self.registry
        if req.subresource:
            return await self._subresource(request, req, rt, dry_run)
        if req.verb == "get":
            entry = reg._entry(rt, ns, req.name)
            target = negotiate(request.headers.get("Accept", ""))
            if target is not None and target.kind == TABLE:
                return self._json(self._table(rt, [reg.decode(rt, entry)], request))
            if target is not None:
                return self._json(
                    partial_object_metadata(reg.decode(rt, entry), target.api_version)
                )
            encoder = reg.encoder(rt)
            return self._raw(encoder(entry.raw) if encoder else entry.raw)
        if req.verb == "list":
            return await self._list(request, rt, ns)
        if req.verb == "watch":
            return await self._watch(request, rt, ns)
        if req.verb == "create":
            fields = FieldValidation(q, "CreateOptions")
            body = await self._body(request)
            fields.check_body(rt, await request.read(), request.content_type, body)
            obj = reg.create(rt, ns, body, dry_run)
            return fields.add_headers(self._json(obj, 201))
        if req.verb == "update":
            fields = FieldValidation(q, "UpdateOptions")
            body = await self._body(request)
            fields.check_body(rt, await request.read(), request.content_type, body)
            obj = reg.update(rt, ns, req.name, body, "", dry_run)
            return fields.add_headers(self._json(obj))
        if req.verb == "patch":
            ptype, body = await self._patch_body(request, rt.custom)
            fields = FieldValidation(q, "PatchOptions")
            check = fields.for_patch(rt, ptype, body, await request.read())
            bucket = reg.store.bucket(rt.storage_key)
            existed = bucket.get(ns if rt.namespaced else "", req.name) is not None
            obj = reg.patch(rt, ns, req.name, ptype, body, "", dry_run, check)
            # An apply that creates answers 201, as kube's patch handler does (`wasCreated`).
            return fields.add_headers(self._json(obj, 200 if existed else 201))
        if req.verb == "delete":
            options = await self._delete_options(request)
            result, _ = reg.delete(rt, ns, req.name, options, dry_run)
            return self._json(result)
        if req.verb == "deletecollection":
            options = await self._delete_options(request)
            flt = self._filter(request, rt, ns)
            items = reg.delete_collection(rt, flt, options, dry_run)
            return self._json(
                {
                    "kind": rt.list_kind,
                    "apiVersion": rt.group_version,
                    "metadata": {"resourceVersion": str(reg.store.rv)},
                    "items": items,
                }
            )
        raise errors.method_not_allowed()

    async def _review(
        self, request: web.Request, req: Request, rt: ResourceType
    ) -> web.StreamResponse:
        if req.verb != "create" or req.subresource:
            raise errors.method_not_allowed()
        body = await self._body(request)
        user = self._authenticate(request)
        if (rt.group, rt.plural) == reviews.ACCESS:
            return self._json(reviews.access_review(self.authz, user, body), 201)
        return self._json(reviews.whoami(user, body), 201)

    async def _subresource(
        self, request: web.Request, req: Request, rt: ResourceType, dry_run: bool
    ) -> web.StreamResponse:
        reg = self.registry
        ns, name, sub, verb = req.namespace, req.name, req.subresource, req.verb
        if sub == "status" or (sub == "finalize" and verb == "update"):
            if verb == "get":
                return self._json(reg.get(rt, ns, name))
            # The subresource's writes go through the same decoding, so fieldValidation holds
            # for them too.
            if verb == "update":
                fields = FieldValidation(request.query, "UpdateOptions")
                body = await self._body(request)
                fields.check_body(rt, await request.read(), request.content_type, body)
                target = "status" if sub == "status" else ""
                return fields.add_headers(
                    self._json(reg.update(rt, ns, name, body, target, dry_run))
                )
            if verb == "patch":
                ptype, body = await self._patch_body(request, rt.custom)
                fields = FieldValidation(request.query, "PatchOptions")
                check = fields.for_patch(rt, ptype, body, await request.read())
                return fields.add_headers(
                    self._json(reg.patch(rt, ns, name, ptype, body, "status", dry_run, check))
                )
        elif sub == "eviction" and verb == "create":
            body = await self._body(request)
            return self._json(await subresources.evict(reg, ns, name, body, dry_run), 201)
        elif sub == "binding" and verb == "create":
            body = await self._body(request)
            return self._json(subresources.bind(reg, ns, name, body, dry_run), 201)
        elif sub == "scale":
            if verb == "get":
                return self._json(subresources.get_scale(reg, rt, ns, name))
            if verb in ("update", "patch"):
                if verb == "update":
                    body = await self._body(request)
                else:
                    ptype, patch = await self._patch_body(request, rt.custom)
                    current = subresources.get_scale(reg, rt, ns, name)
                    body = reg_patch_scale(current, ptype, patch)
                spec = body.get("spec") or {} if isinstance(body, dict) else {}
                rv = (
                    (body.get("metadata") or {}).get("resourceVersion")
                    if isinstance(body, dict)
                    else None
                )
                return self._json(
                    subresources.update_scale(reg, rt, ns, name, spec.get("replicas"), rv)
                )
        elif sub == "token" and verb == "create":
            if self.authn is None:
                raise errors.ApiError(
                    404, "NotFound", "the server could not find the requested resource"
                )
            body = await self._body(request)
            return self._json(subresources.request_token(reg, self.authn, ns, name, body), 201)
        elif sub == "log" and verb == "get":
            reg.get(rt, ns, name)
            return web.Response(text="", content_type="text/plain")
        raise errors.method_not_allowed()

    # ----------------------------------------------------------------- bodies

    @staticmethod
    async def _body(request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            raise errors.bad_request("the body of the request is empty")
        ctype = request.content_type
        if protobuf.is_protobuf(ctype):
            try:
                return protobuf.decode(raw)
            except protobuf.UnsupportedKind as exc:
                # What kube answers for a media type the resource cannot take (custom
                # resources and protobuf); client-go then reports it rather than retrying.
                raise errors.unsupported_body_media_type(f"{ctype}: {exc}") from None
            except protobuf.ProtobufError as exc:
                raise errors.bad_request(
                    f"the body of the request could not be decoded: {exc}"
                ) from None
        if ctype in _UNDECODABLE_MEDIA_TYPES:
            raise errors.unsupported_body_media_type(ctype)
        try:
            if "yaml" in ctype:
                return yaml.safe_load(raw)
            return orjson.loads(raw)
        except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
            raise errors.bad_request(
                f"the body of the request could not be decoded: {exc}"
            ) from None

    async def _patch_body(self, request: web.Request, custom: bool) -> tuple[str, Any]:
        ptype = patch_type_for_content_type(
            request.headers.get("Content-Type", ""), custom_resource=custom
        )
        raw = await request.read()
        try:
            body = yaml.safe_load(raw) if ptype == "apply" else orjson.loads(raw)
        except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
            raise errors.bad_request(f"error decoding patch: {exc}") from None
        return ptype, body

    async def _delete_options(self, request: web.Request) -> dict[str, Any]:
        options: dict[str, Any] = {}
        raw = await request.read()
        if raw:
            try:
                decoded = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise errors.bad_request(f"invalid DeleteOptions: {exc}") from None
            if isinstance(decoded, dict):
                options.update(decoded)
        q = request.query
        if "gracePeriodSeconds" in q:
            try:
                options["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
            except ValueError:
                raise errors.bad_request("gracePeriodSeconds must be an integer") from None
        if "propagationPolicy" in q:
            options["propagationPolicy"] = q["propagationPolicy"]
        if "orphanDependents" in q:
            options["orphanDependents"] = listoptions.kube_bool(q["orphanDependents"])
        policy = options.get("propagationPolicy")
        if policy is not None and policy not in ("Orphan", "Background", "Foreground"):
            raise errors.invalid(
                "DeleteOptions",
                "",
                "",
                [
                    (
                        "FieldValueNotSupported",
                        "propagationPolicy",
                        f'Unsupported value: "{policy}": supported values: "Foreground", '
                        '"Background", "Orphan", "nil"',
                    )
                ],
            )
        return options

    # ----------------------------------------------------------------- list

    def _filter(self, request: web.Request, rt: ResourceType, ns: str) -> Filter:
        q = request.query
        try:
            labels = parse_label_selector(q.get("labelSelector", ""))
            fields = parse_field_selector(q.get("fieldSelector", ""))
        except SelectorError as exc:
            raise errors.bad_request(str(exc)) from None
        return self.registry.make_filter(rt, ns or None, labels, fields)

    def _table(
        self,
        rt: ResourceType,
        objects: list[dict[str, Any]],
        request: web.Request,
        list_metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        columns = None
        if rt.crd_version is not None:
            columns = list(rt.crd_version.get("additionalPrinterColumns") or [])
        include = table_include_object(request.query) or "Metadata"
        target = negotiate(request.headers.get("Accept", ""))
        return to_table(
            rt.kind,
            rt.group,
            objects,
            printer_columns=columns,
            include_object=include,
            now=self.registry.clock.now(),
            list_metadata=list_metadata,
            api_version=target.api_version if target is not None else TABLE_API_VERSION,
        )

    async def _list(self, request: web.Request, rt: ResourceType, ns: str) -> web.StreamResponse:
        q = request.query
        listoptions.parse(q, watch=False)
        flt = self._filter(request, rt, ns)
        try:
            limit = int(q.get("limit", "0") or 0)
        except ValueError:
            raise errors.bad_request("limit must be an integer") from None
        result = self.registry.list_entries(rt, flt, limit, q.get("continue", ""))
        meta: dict[str, Any] = {"resourceVersion": str(result.rv)}
        if result.continue_token:
            meta["continue"] = result.continue_token
            if result.remaining is not None:
                meta["remainingItemCount"] = result.remaining
        target = negotiate(request.headers.get("Accept", ""))
        if target is not None:
            objs = [self.registry.decode(rt, e) for e in result.entries]
            if target.kind == TABLE:
                return self._json(self._table(rt, objs, request, meta))
            # `asPartialObjectMetadataList`: each item keeps its own kind and apiVersion.
            return self._json(
                {
                    "kind": PARTIAL_OBJECT_METADATA_LIST,
                    "apiVersion": target.api_version,
                    "metadata": meta,
                    "items": [partial_object_metadata(o, target.api_version) for o in objs],
                }
            )
        head = (
            b'{"kind":"'
            + rt.list_kind.encode()
            + b'","apiVersion":"'
            + rt.group_version.encode()
            + b'","metadata":'
            + orjson.dumps(meta)
            + b',"items":['
        )
        encoder = self.registry.encoder(rt)
        raws = [encoder(e.raw) if encoder else e.raw for e in result.entries]
        size = len(head) + sum(map(len, raws)) + max(0, len(raws) - 1) + 2
        if size <= _WRITE_PIECE:
            return self._raw(head + b",".join(raws) + b"]}")
        # Large bodies go out in pieces of about _WRITE_PIECE with a Content-Length: no
        # multi-megabyte joins (each costs page faults on first touch) and no chunked framing.
        resp = web.StreamResponse(headers={"Content-Type": _JSON})
        resp.content_length = size
        await resp.prepare(request)
        await resp.write(head)
        piece: list[bytes] = []
        piece_size = 0
        for i, raw in enumerate(raws):
            piece.append(raw if i == 0 else b"," + raw)
            piece_size += len(raw)
            if piece_size >= _WRITE_PIECE:
                await resp.write(b"".join(piece))
                piece, piece_size = [], 0
        piece.append(b"]}")
        await resp.write(b"".join(piece))
        await resp.write_eof()
        return resp

    # ----------------------------------------------------------------- watch

    def _bookmark(self, rt: ResourceType, rv: int, initial_end: bool = False) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {listoptions.INITIAL_EVENTS_END: "true"}
        return (
            orjson.dumps(
                {
                    "type": "BOOKMARK",
                    "object": {"kind": rt.kind, "apiVersion": rt.group_version, "metadata": meta},
                }
            )
            + b"\n"
        )

    def _next_bookmark(self, now: float, deadline: float) -> float:
        """When a watch with bookmarks gets its next one, as kube-apiserver's watch cache sends
        them: `bookmark_interval` after the last, and one `BOOKMARK_BEFORE_DEADLINE` seconds
        before the watch ends, so that the client resumes from as late a resourceVersion as it
        can; none after that."""
        due = min(now + self.bookmark_interval, deadline - BOOKMARK_BEFORE_DEADLINE)
        return due if due > now else math.inf

    async def _watch(self, request: web.Request, rt: ResourceType, ns: str) -> web.StreamResponse:
        """A watch, or a watch-list: kube's semantics for every combination of options.

        - `sendInitialEvents=true` (or a plain watch from resourceVersion "" or "0", which kube
          defaults to it): ADDED for every object of one consistent snapshot, then, with
          bookmarks allowed, a BOOKMARK annotated `k8s.io/initial-events-end` carrying the
          snapshot's resourceVersion, then the events after it. A resourceVersion the store has
          not reached is waited for up to 3 s, then answered with kube's "Too large resource
          version" ERROR event. The snapshot is a list of references to immutable entries and is
          written in pieces, so a 150,000-pod watch-list never builds one big buffer.
        - `sendInitialEvents=false`: no initial events; from the given resourceVersion, or from
          now for "" and "0".
        - otherwise, from the given resourceVersion (410 Expired when it is too old).

        An Accept header asking for a Table (or PartialObjectMetadata) has every event's object
        converted on its way out, see `transform`.
        """
        q = request.query
        opts = listoptions.parse(q, watch=True)
        flt = self._filter(request, rt, ns)
        rv_param = opts.resource_version
        bookmarks = opts.allow_watch_bookmarks
        timeout = self.min_request_timeout * (1 + random.random())
        if "timeoutSeconds" in q:
            try:
                timeout = float(q["timeoutSeconds"])
            except ValueError:
                raise errors.bad_request("timeoutSeconds must be a number") from None
        since: int | None = None
        if rv_param not in ("", "0"):
            try:
                since = int(rv_param)
            except ValueError:
                raise errors.bad_request(f"invalid resource version: {rv_param}") from None
        resource = rt.plural
        max_events, max_seconds = (
            self.faults.watch_limits(resource) if self.faults.enabled else (None, None)
        )
        if max_seconds is not None:
            timeout = min(timeout, max_seconds)
        hold = self.faults.watch_delay(resource) if self.faults.enabled else 0.0
        transformer = self._watch_transformer(request, rt)
        store = self.registry.store
        if opts.watch_list and since is not None:
            await self._wait_for_rv(since)
        bucket = store.bucket(rt.storage_key)
        encoder = self.registry.encoder(rt)
        watcher = Watcher(flt, encoder, store.watcher_buffer)
        watcher.hold = hold
        resp = web.StreamResponse(headers={"Content-Type": _JSON})
        resp.enable_chunked_encoding()
        failure: bytes | None = None
        initial: list[Any] = []
        initial_end: bytes | None = None
        # From here to `bucket.watchers.add` nothing awaits: the snapshot and the registration
        # are one atomic step, so no event falls between them.
        if opts.watch_list:
            if since is not None and since > store.rv:
                failure = _error_line(_too_large(since, store.rv))
            else:
                initial = [e for e in bucket.entries(flt.namespace) if flt.matches(e)]
                if bookmarks:
                    initial_end = self._bookmark(rt, store.rv, initial_end=True)
                bucket.watchers.add(watcher)
        elif since is None:
            bucket.watchers.add(watcher)  # sendInitialEvents=false from "" or "0": from now
        else:
            events = bucket.events_since(since)
            if events is None or (self.faults.enabled and self.faults.force_expired(resource)):
                failure = _error_line(
                    errors.gone(f"too old resource version: {since} ({bucket.compacted_rv + 1})")
                )
            else:
                for ev in events:
                    watcher.offer(ev)
                bucket.watchers.add(watcher)
        self.stats.record("watch", rt.plural, 200, request.headers.get("User-Agent", ""), 0.0)
        try:
            await resp.prepare(request)
        except ConnectionResetError:
            watcher.close()
            bucket.watchers.discard(watcher)
            return resp
        out = resp if transformer is None else transformer.wrap(resp)
        if failure is not None:
            await resp.write(failure)
            await resp.write_eof()
            return resp
        self.watchers.add(watcher)
        # The loop's time, which a time-skipping loop moves: the timers below are its own.
        clock = asyncio.get_running_loop().time
        deadline = clock() + timeout
        next_bookmark = self._next_bookmark(clock(), deadline)
        sent = 0
        try:
            if (initial or initial_end is not None) and hold > 0.0:
                # Injected slowness delays the initial state as it delays any event.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), hold)
            if initial:
                sent = await _write_initial(out, initial, encoder, max_events)
                initial = []
            if max_events is not None and sent >= max_events:
                watcher.close()
            elif initial_end is not None:
                await out.write(initial_end)
            while not self.shutting_down and not watcher.closed:
                now = clock()
                if now >= deadline:
                    break
                if not watcher.pending:
                    watcher.wake.clear()
                    wait = deadline - now
                    if bookmarks:
                        wait = min(wait, max(0.0, next_bookmark - now))
                    # Not `wait_for`: it makes a task of every wait, and a busy watch waits often.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):
                            await watcher.wake.wait()
                if watcher.pending:
                    if hold > 0.0:
                        # Injected slowness: what is pending now goes out `hold` seconds later;
                        # what arrives meanwhile waits for its own turn, so nothing goes early.
                        count = len(watcher.pending)
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self._closing.wait(), hold)
                        lines, upto = watcher.take(count)
                    else:
                        lines, upto = watcher.take()
                    cut = max_events is not None and sent + len(lines) >= max_events
                    if cut and max_events is not None:
                        lines = lines[: max(0, max_events - sent)]
                    sent += len(lines)
                    await _write_pieces(out, lines)
                    if cut:
                        break
                    watcher.mark_sent(upto)
                if watcher.closed:
                    break
                if bookmarks and clock() >= next_bookmark:
                    if not watcher.pending:
                        await out.write(self._bookmark(rt, store.rv))
                    next_bookmark = self._next_bookmark(clock(), deadline)
        except (ConnectionResetError, asyncio.CancelledError, EncodeFailed):
            pass
        finally:
            watcher.close()
            bucket.watchers.discard(watcher)
            self.watchers.discard(watcher)
        try:
            await resp.write_eof()
        except ConnectionResetError:
            pass
        return resp

    def _watch_transformer(self, request: web.Request, rt: ResourceType) -> WatchTransformer | None:
        """What converts each event's object, when the Accept header asks for another shape."""
        target = negotiate(request.headers.get("Accept", ""))
        if target is None:
            return None
        include = table_include_object(request.query) if target.kind == TABLE else ""
        columns = None
        if rt.crd_version is not None:
            columns = list(rt.crd_version.get("additionalPrinterColumns") or [])
        return WatchTransformer(
            target,
            kind=rt.kind,
            group=rt.group,
            printer_columns=columns,
            include_object=include,
            now=self.registry.clock.now,
        )

    async def _wait_for_rv(self, rv: int) -> None:
        """Block until the store reaches `rv`, for at most the cacher's 3 s."""
        store = self.registry.store
        if store.rv >= rv:
            return
        reached = asyncio.Event()

        def on_write(_key: object, _event: object) -> None:
            if store.rv >= rv:
                reached.set()

        store.write_hooks.append(on_write)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reached.wait(), _TOO_LARGE_RV_WAIT)
        finally:
            store.write_hooks.remove(on_write)

    def close_watches(self) -> None:
        self.shutting_down = True
        self._closing.set()
        for w in list(self.watchers):
            w.close()


def reg_patch_scale(current: dict[str, Any], ptype: str, patch: Any) -> Any:
    """Apply a patch to a Scale object (the scale subresource has no strategy of its own)."""
    if ptype == "json":
        return apply_json_patch(current, patch)
    return apply_merge_patch(current, patch)


def _error_line(error: errors.ApiError) -> bytes:
    return orjson.dumps({"type": "ERROR", "object": error.status()}) + b"\n"


def _too_large(rv: int, current: int) -> errors.ApiError:
    """storage.NewTooLargeResourceVersionError: a 504 Timeout the client retries after 1 s."""
    return errors.ApiError(
        504,
        "Timeout",
        f"Timeout: Too large resource version: {rv}, current: {current}",
        {
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
    )


async def _write_initial(
    resp: EventWriter,
    entries: list[Any],
    encoder: Any,
    max_events: int | None,
) -> int:
    """ADDED events for a snapshot, written in pieces of about _WRITE_PIECE bytes.

    Each entry's stored bytes are framed and joined once per piece, so at most one piece is
    built at a time whatever the size of the snapshot. Returns how many events were written.
    """
    limit = len(entries) if max_events is None else min(len(entries), max_events)
    piece: list[bytes] = []
    size = 0
    for i in range(limit):
        raw = entries[i].raw
        if encoder is not None:
            raw = encoder(raw)
        piece.append(_ADDED_PREFIX)
        piece.append(raw)
        piece.append(_EVENT_SUFFIX)
        size += len(raw)
        if size >= _WRITE_PIECE:
            await resp.write(b"".join(piece))
            piece, size = [], 0
    if piece:
        await resp.write(b"".join(piece))
    return limit


async def _write_pieces(resp: EventWriter, lines: list[bytes]) -> None:
    """Write a lagging watcher's backlog in pieces, not as one multi-megabyte buffer."""
    piece: list[bytes] = []
    size = 0
    for line in lines:
        piece.append(line)
        size += len(line)
        if size >= _WRITE_PIECE:
            await resp.write(b"".join(piece))
            piece, size = [], 0
    if piece:
        await resp.write(b"".join(piece))
