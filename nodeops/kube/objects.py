"""Small helpers over plain-dict Kubernetes objects (metadata, owners, conditions, times)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def name(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("name", ""))


def namespace(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("namespace") or "")


def uid(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("uid", ""))


def ref(obj: Mapping[str, Any]) -> str:
    """`namespace/name` (or `name`), the way kube's logs and messages name objects."""
    ns = namespace(obj)
    return f"{ns}/{name(obj)}" if ns else name(obj)


def labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return meta(obj).get("labels") or {}


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return meta(obj).get("annotations") or {}


def controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for owner in meta(obj).get("ownerReferences") or ():
        if owner.get("controller"):
            return dict(owner)
    return None


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def format_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now() -> datetime:
    return datetime.now(UTC)


def deletion_timestamp(obj: Mapping[str, Any]) -> datetime | None:
    return parse_time(meta(obj).get("deletionTimestamp"))


def condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == type_:
            return dict(cond)
    return None
