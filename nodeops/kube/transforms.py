"""Transforms applied to every object before an informer caches it.

They live apart from the informer because controllers pick them when asking for informers
(the maintenance wiring, the factory default) without needing anything of the list/watch loop;
dropping `managedFields` and the last-applied annotation is what keeps a large cache small.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

Obj = dict[str, Any]
Transform = Callable[[Obj], Obj]

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def default_transform(obj: Obj) -> Obj:
    """Drop what no controller reads: managedFields and the last-applied annotation."""
    meta = obj.get("metadata")
    if meta:
        meta.pop("managedFields", None)
        ann = meta.get("annotations")
        if ann and LAST_APPLIED in ann:
            del ann[LAST_APPLIED]
    return obj


def metadata_projection(fields: Iterable[str] = ()) -> Transform:
    """A transform keeping `apiVersion`, `kind`, `metadata` and the named fields only.

    For watchers that need labels, owners and a few fields of objects that are large and many
    (pods at 150,000: `metadata_only=("spec.nodeName",)` keeps a pod at a tenth of its size).
    Fields are dotted paths; a field an object lacks is simply left out.
    """
    paths = []
    for f in fields:
        parts = tuple(f.split("."))
        if not f or any(not p for p in parts):
            raise ValueError(f"bad field path {f!r}: use dotted names such as spec.nodeName")
        if parts[0] in ("metadata", "apiVersion", "kind"):
            continue  # kept anyway
        paths.append(parts)

    def project(obj: Obj) -> Obj:
        out: Obj = {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "metadata": obj.get("metadata") or {},
        }
        for path in paths:
            src: Any = obj
            for part in path:
                if not isinstance(src, dict) or part not in src:
                    break
                src = src[part]
            else:
                dst = out
                for part in path[:-1]:
                    dst = dst.setdefault(part, {})
                dst[path[-1]] = src
        return out

    return project


def _then(first: Transform | None, second: Transform) -> Transform:
    if first is None:
        return second

    def both(obj: Obj) -> Obj:
        return second(first(obj))

    return both
