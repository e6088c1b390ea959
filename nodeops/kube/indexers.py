"""Cache keys and the stock index functions of informer caches.

Kept apart so that controllers declaring indexes (pods by node for draining and detaching)
depend on these small pure functions rather than on the informer's machinery.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from nodeops.kube.transforms import Obj

IndexFunc = Callable[[Obj], Iterable[str]]


def object_key(obj: Obj) -> str:
    """`namespace/name`, or `name` for cluster-scoped objects (client-go's MetaNamespaceKey)."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def index_by_namespace(obj: Obj) -> list[str]:
    ns = (obj.get("metadata") or {}).get("namespace")
    return [ns] if ns else []


def index_pods_by_node(obj: Obj) -> list[str]:
    node = (obj.get("spec") or {}).get("nodeName")
    return [node] if node else []
