"""Index functions shared by the loops, registered once per informer under these names."""

from __future__ import annotations

from collections.abc import Iterable

from nodeops.sim.cluster.apiclient import Obj

BY_NODE = "nodeName"
BY_CONTROLLER = "controllerUID"
BY_OWNER = "ownerUID"
BY_NAMESPACE = "namespace"
BY_UID = "uid"


def uid(obj: Obj) -> Iterable[str]:
    value = (obj.get("metadata") or {}).get("uid")
    return (value,) if value else ()


def pod_node(obj: Obj) -> Iterable[str]:
    node = (obj.get("spec") or {}).get("nodeName")
    return (node,) if node else ()


def controller_uid(obj: Obj) -> Iterable[str]:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("uid"):
            return (ref["uid"],)
    return ()


def owner_uids(obj: Obj) -> Iterable[str]:
    return tuple(
        ref["uid"]
        for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
        if ref.get("uid")
    )


def namespace(obj: Obj) -> Iterable[str]:
    return ((obj.get("metadata") or {}).get("namespace") or "",)


def controller_ref(obj: Obj) -> Obj | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            ref_obj: Obj = ref
            return ref_obj
    return None
