"""`detach`: remove every object an attach created, found by its label in the cluster.

Nothing is read from the attach process's memory, so this works the same after a clean stop,
after a crash and after `kill -9`. Each object is deleted with a uid precondition, so an object
recreated under the same name by someone else in the meantime is never touched.

Owners go before what they own (a Deployment before its ReplicaSets, those before their pods),
so that no controller, the cluster's or ours, recreates what was just removed; pods go with
grace 0 because their kubelet may be gone; CustomResourceDefinitions go last, and only those
carrying the label, which attach sets only on definitions it installed itself.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Sequence
from typing import Final

from nodeops.sim.attach.labels import selector
from nodeops.sim.cluster.apiclient import (
    ApiClient,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    Obj,
    Resource,
)
from nodeops.sim.cluster.discovery import deletable_resources

__all__ = ["remove_labelled"]

_FIRST: Final = ("deployments", "statefulsets", "daemonsets", "jobs", "cronjobs", "replicasets")
_LAST: Final = ("pods", "nodes", "leases", "namespaces", "customresourcedefinitions")


def _order(resource: Resource) -> tuple[int, int]:
    if resource.plural in _FIRST:
        return (0, _FIRST.index(resource.plural))
    if resource.plural in _LAST:
        return (2, _LAST.index(resource.plural))
    return (1, 0)


async def remove_labelled(
    client: ApiClient, instance: str | None, *, resources: Sequence[Resource] | None = None
) -> Counter[str]:
    """Delete every object labelled as `instance`'s (every attach's when None); how many of
    each resource were deleted. Resources the credentials may not list are passed over."""
    found = list(resources) if resources is not None else await deletable_resources(client)
    removed: Counter[str] = Counter()
    for resource in sorted(found, key=_order):
        try:
            listed = await client.list(resource, label_selector=selector(instance))
        except (Forbidden, NotFound):
            continue
        for obj in listed.items:
            meta = obj.get("metadata") or {}
            with contextlib.suppress(NotFound, Conflict):
                left = await client.delete(
                    resource,
                    str(meta["name"]),
                    meta.get("namespace"),
                    uid=meta.get("uid"),
                    grace_period_seconds=0 if resource.plural == "pods" else None,
                    propagation_policy="Background",
                )
                removed[resource.key] += 1
                await _release(client, resource, left)
    return removed


async def _release(client: ApiClient, resource: Resource, left: Obj) -> None:
    """Drop the finalizers of an object of ours that its deletion left Terminating.

    A finalizer is a promise by a controller to clean up first. On what an attach created, the
    controller that made the promise (an operator tried against the attached nodes) has usually
    stopped by now, and what it would clean up goes in this same pass; kept, the finalizer would
    hold the object, its namespace and its CustomResourceDefinition Terminating for ever. The
    uid test makes sure the object released is the one deleted.
    """
    meta = left.get("metadata")
    if not isinstance(meta, dict) or not meta.get("deletionTimestamp"):
        return
    if not meta.get("finalizers"):
        return
    patch = [
        {"op": "test", "path": "/metadata/uid", "value": meta.get("uid")},
        {"op": "remove", "path": "/metadata/finalizers"},
    ]
    with contextlib.suppress(NotFound, Conflict, Invalid):
        await client.patch(
            resource, str(meta["name"]), patch, meta.get("namespace"), patch_type="json"
        )
