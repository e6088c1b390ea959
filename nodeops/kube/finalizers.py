"""Adding and removing finalizers: idempotent, and never undoing someone else's write.

`metadata.finalizers` is one list that several controllers (and the garbage collector) edit, so
a write of the whole list from a stale read would drop a finalizer another writer just added.
Each write here is a merge patch guarded by the resourceVersion it was computed from; on a
409 the object is read again and the decision redone, since adding or removing one name never
depends on anything else in the object. A finalizer already present (or already absent) in the
object given costs no write at all: pass the object as the cache shows it, which read-your-writes
keeps current with this process's own writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeops.kube import errors
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.resources import Resource

__all__ = ["add_finalizer", "remove_finalizer"]

_ATTEMPTS = 5


async def add_finalizer(
    client: Client, resource: Resource, obj: Mapping[str, Any], finalizer: str
) -> dict[str, Any]:
    """Make sure `obj` carries `finalizer`; returns the object as it now is on the server.

    Call it before the first external action on an object, so its deletion waits for the
    cleanup. Kubernetes refuses new finalizers on an object that is already being deleted.
    """
    return await _edit(client, resource, obj, finalizer, add=True)


async def remove_finalizer(
    client: Client, resource: Resource, obj: Mapping[str, Any], finalizer: str
) -> dict[str, Any]:
    """Make sure `obj` no longer carries `finalizer`; returns the object as it now is.

    An object already gone counts as done (its finalizer cannot hold anything back any more);
    the returned object is then the one given.
    """
    return await _edit(client, resource, obj, finalizer, add=False)


async def _edit(
    client: Client, resource: Resource, obj: Mapping[str, Any], finalizer: str, *, add: bool
) -> dict[str, Any]:
    current: Mapping[str, Any] = obj
    name, namespace = o.name(obj), o.namespace(obj) or None
    # An object without a resourceVersion cannot guard a write: decide on the server's copy.
    fresh = bool(o.resource_version(current))
    try:
        for _ in range(_ATTEMPTS):
            if not fresh:
                current = await client.get(resource, name, namespace)
            if o.has_finalizer(current, finalizer) == add:
                return dict(current)
            names = o.finalizers(current)
            names = [*names, finalizer] if add else [f for f in names if f != finalizer]
            try:
                return await client.patch(
                    resource,
                    name,
                    {"metadata": {"finalizers": names or None}},
                    namespace,
                    resource_version=o.resource_version(current),
                )
            except errors.Conflict:
                fresh = False  # someone wrote meanwhile: read again, decide again
    except errors.NotFound:
        if add:
            raise
        return dict(current)
    raise errors.Conflict(
        409,
        {
            "reason": "Conflict",
            "message": f"{resource.key} {o.ref(obj)!r} kept changing; finalizer {finalizer!r} "
            f"not {'added' if add else 'removed'}",
        },
    )
