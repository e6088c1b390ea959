"""Responses in another shape than the resource's own: `as=Table` and `as=PartialObjectMetadata`.

kube-apiserver picks the shape from the Accept header (the first acceptable clause wins, and a
clause asking for a shape the endpoint cannot give is skipped, falling back to the plain
object), and applies it to a GET, a LIST and to every event of a watch. On a watch each event's
object is converted on its own: a Table holds the one row for that object, and only the first
event of a stream carries the columnDefinitions, so kubectl prints headers once per stream.
BOOKMARK events are converted like any other (their object is the resource's empty object with
a resourceVersion, so a table bookmark is a row of empty cells); ERROR events keep their Status.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol

import orjson

from nodeops.sim.server import errors
from nodeops.sim.server.tables import to_table

__all__ = [
    "PARTIAL_OBJECT_METADATA",
    "PARTIAL_OBJECT_METADATA_LIST",
    "TABLE",
    "EncodeFailed",
    "EventWriter",
    "Target",
    "WatchTransformer",
    "negotiate",
    "partial_object_metadata",
    "table_include_object",
]

TABLE: Final = "Table"
PARTIAL_OBJECT_METADATA: Final = "PartialObjectMetadata"
PARTIAL_OBJECT_METADATA_LIST: Final = "PartialObjectMetadataList"

_META_GROUP: Final = "meta.k8s.io"
_META_VERSIONS: Final = ("v1", "v1beta1")
# The media types a resource endpoint serves, in the server's order of preference; the first is
# the answer when no clause of the Accept header fits.
_SERVED: Final = (
    ("application", "json", True),
    ("application", "yaml", False),
    ("application", "vnd.kubernetes.protobuf", True),
)
_INCLUDE_OBJECT: Final = ("Metadata", "None", "Object", "")


@dataclass(frozen=True, slots=True)
class Target:
    """The shape a request asked for: a `meta.k8s.io` kind in one of its versions."""

    kind: str
    version: str

    @property
    def api_version(self) -> str:
        return f"{_META_GROUP}/{self.version}"


@dataclass(slots=True)
class _Clause:
    type: str
    subtype: str
    q: float
    params: dict[str, str]


def _parse_accept(header: str) -> list[_Clause]:
    """Accept clauses, best first: by quality, then concrete types before wildcards."""
    clauses: list[_Clause] = []
    for part in header.split(","):
        pieces = part.strip(" ").split(";")
        media = pieces[0].split("/")
        type_ = media[0].strip(" ")
        if len(media) == 1 and type_ == "*":
            subtype = "*"
        elif len(media) == 2:
            subtype = media[1].strip(" ")
        else:
            continue
        clause = _Clause(type_, subtype, 1.0, {})
        for param in pieces[1:]:
            key, sep, value = param.partition("=")
            if not sep:
                continue
            key = key.strip(" ")
            if key == "q":
                try:
                    clause.q = float(value)
                except ValueError:
                    clause.q = 0.0
            else:
                clause.params[key] = value.strip(" ")
        clauses.append(clause)
    clauses.sort(key=lambda c: (-c.q, c.type == "*", c.subtype == "*"))
    return clauses


def _clause_target(
    params: Mapping[str, str], type_: str, subtype: str, streams: bool
) -> tuple[bool, Target | None]:
    """Whether a clause can be served as this media type, and the conversion it asks for."""
    stream = params.get("stream", "")
    if stream and (not streams or stream != "watch"):
        return False, None
    server_version = params.get("sv", "")
    if server_version and server_version != "v1":
        return False, None
    if not any(k in params for k in ("as", "g", "v")):
        return True, None
    kind, group, version = params.get("as", ""), params.get("g", ""), params.get("v", "")
    if group != _META_GROUP or version not in _META_VERSIONS:
        return False, None
    if kind == TABLE:
        allowed = type_ == "application" and subtype in ("json", "yaml")
    else:
        allowed = kind in (PARTIAL_OBJECT_METADATA, PARTIAL_OBJECT_METADATA_LIST)
    return allowed, Target(kind, version) if allowed else None


def negotiate(accept: str) -> Target | None:
    """The conversion an Accept header asks for and the endpoint allows, or None.

    Tables are served as JSON or YAML only, so `application/vnd.kubernetes.protobuf;as=Table`
    is passed over for the next clause; a conversion without `g=meta.k8s.io` and `v=v1` (or
    `v1beta1`) is not one the server knows, and its clause is passed over too. When no clause
    fits, the server answers with plain objects.
    """
    if not accept:
        return None
    for clause in _parse_accept(accept):
        for type_, subtype, streams in _SERVED:
            if not (
                (clause.type == type_ and clause.subtype in (subtype, "*"))
                or (clause.type == "*" and clause.subtype == "*")
            ):
                continue
            acceptable, target = _clause_target(clause.params, type_, subtype, streams)
            if acceptable:
                return target
    return None


def table_include_object(query: Mapping[str, str]) -> str:
    """The validated `includeObject` of a Table request (kube's TableOptions validation)."""
    value = query.get("includeObject", "")
    if value not in _INCLUDE_OBJECT:
        raise errors.bad_request(
            "Unable to convert to Table as requested: includeObject: Invalid value: "
            f"{orjson.dumps(value).decode()}: must be 'Metadata', 'Object', 'None', or empty"
        )
    return value


def partial_object_metadata(obj: Mapping[str, Any], api_version: str) -> dict[str, Any]:
    """An object's metadata alone, as `meta.AsPartialObjectMetadata` gives it."""
    partial: dict[str, Any] = {"kind": PARTIAL_OBJECT_METADATA, "apiVersion": api_version}
    metadata = obj.get("metadata")
    if metadata:
        partial["metadata"] = metadata
    return partial


class EncodeFailed(Exception):
    """An event's object could not be encoded in the requested shape: kube ends the stream."""


class EventWriter(Protocol):
    """Where a watch's event lines go: the response, or a writer converting them on the way."""

    def write(self, data: bytes) -> Awaitable[None]: ...


class WatchTransformer:
    """Converts a watch stream's event lines, in order, into the requested shape.

    Holds the one piece of per-stream state kube keeps: whether the column headers have gone
    out yet. Any event, a BOOKMARK included, uses up the headers.
    """

    def __init__(
        self,
        target: Target,
        *,
        kind: str,
        group: str,
        printer_columns: Sequence[Mapping[str, Any]] | None,
        include_object: str,
        now: Callable[[], datetime],
    ) -> None:
        self.target = target
        self.kind = kind
        self.group = group
        self.printer_columns = (
            [dict(c) for c in printer_columns] if printer_columns is not None else None
        )
        self.include_object = include_object or "Metadata"
        self.now = now
        self.headers_sent = False

    def event(self, line: bytes) -> bytes:
        """One `{"type":..,"object":..}` line, without its newline, in the target shape."""
        event = orjson.loads(line)
        if event.get("type") == "ERROR":
            return line + b"\n"
        event["object"] = self._convert(event.get("object") or {})
        return orjson.dumps(event) + b"\n"

    def _convert(self, obj: dict[str, Any]) -> Any:
        kind = self.target.kind
        if kind == PARTIAL_OBJECT_METADATA:
            return partial_object_metadata(obj, self.target.api_version)
        if kind != TABLE:
            # A list shape for a single object fails to encode; kube then closes the stream.
            raise EncodeFailed(f"{kind} cannot hold a single watched object")
        table = to_table(
            self.kind,
            self.group,
            [obj],
            printer_columns=self.printer_columns,
            include_object=self.include_object,
            now=self.now(),
            no_headers=self.headers_sent,
            api_version=self.target.api_version,
        )
        self.headers_sent = True
        return table

    def wrap(self, out: EventWriter) -> _TransformingWriter:
        """A writer that converts the whole event lines written to it, then passes them on."""
        return _TransformingWriter(self, out)


class _TransformingWriter:
    __slots__ = ("_out", "_transformer")

    def __init__(self, transformer: WatchTransformer, out: EventWriter) -> None:
        self._transformer = transformer
        self._out = out

    async def write(self, data: bytes) -> None:
        lines = [self._transformer.event(ln) for ln in data.split(b"\n") if ln.strip()]
        if lines:
            await self._out.write(b"".join(lines))
