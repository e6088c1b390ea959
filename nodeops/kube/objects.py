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


def resource_version(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("resourceVersion") or "")


def finalizers(obj: Mapping[str, Any]) -> list[str]:
    return list(meta(obj).get("finalizers") or ())


def has_finalizer(obj: Mapping[str, Any], finalizer: str) -> bool:
    return finalizer in (meta(obj).get("finalizers") or ())


# ---------------------------------------------------------------------- owner references


def owner_reference(
    owner: Mapping[str, Any], *, controller: bool = True, block_owner_deletion: bool = True
) -> dict[str, Any]:
    """An ownerReference naming `owner` (which must carry apiVersion, kind, name and uid).

    `controller=True` marks the owner as the one controller of the child, which is what
    `Controller.owns` maps back from; `block_owner_deletion` makes a foreground delete of the
    owner wait for the child, as controller-runtime's SetControllerReference does.
    """
    missing = [
        f
        for f, v in (
            ("apiVersion", owner.get("apiVersion")),
            ("kind", owner.get("kind")),
            ("metadata.name", name(owner)),
            ("metadata.uid", uid(owner)),
        )
        if not v
    ]
    if missing:
        raise ValueError(f"an owner needs {', '.join(missing)} to be referenced")
    reference: dict[str, Any] = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": name(owner),
        "uid": uid(owner),
    }
    if controller:
        reference["controller"] = True
    if block_owner_deletion:
        reference["blockOwnerDeletion"] = True
    return reference


def owner_references(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(r) for r in meta(obj).get("ownerReferences") or ()]


def is_owned_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    owner_uid = uid(owner)
    return any(r.get("uid") == owner_uid for r in meta(obj).get("ownerReferences") or ())


def is_controlled_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    ref = controller_ref(obj)
    return ref is not None and ref.get("uid") == uid(owner)


def set_owner_reference(
    obj: Obj, owner: Mapping[str, Any], *, controller: bool = True, owner_namespaced: bool = True
) -> Obj:
    """Add (or refresh) `owner` in `obj`'s ownerReferences, in place; returns `obj`.

    Kubernetes garbage collection only honours owners a child can see: a namespaced owner must
    live in the child's namespace, and a cluster-scoped child cannot have a namespaced owner.
    Those mistakes, and a second controller, raise ValueError instead of producing a child the
    garbage collector deletes at once or never.
    """
    child_ns = namespace(obj)
    if owner_namespaced:
        if not child_ns:
            raise ValueError(
                f"a cluster-scoped object cannot be owned by the namespaced {owner.get('kind')} "
                f"{ref(owner)}"
            )
        if namespace(owner) != child_ns:
            raise ValueError(
                f"{owner.get('kind')} {ref(owner)} is in another namespace than {child_ns!r}; "
                "cross-namespace owners are not allowed"
            )
    new = owner_reference(owner, controller=controller)
    refs = owner_references(obj)
    if controller:
        current = next((r for r in refs if r.get("controller")), None)
        if current is not None and current.get("uid") != new["uid"]:
            raise ValueError(
                f"{ref(obj)} is already controlled by {current.get('kind')} {current.get('name')}"
            )
    refs = [r for r in refs if r.get("uid") != new["uid"]]
    refs.append(new)
    obj.setdefault("metadata", {})["ownerReferences"] = refs
    return obj
