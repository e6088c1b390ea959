"""The read-only snapshot a rehearsal starts from: what the roll depends on, read once.

Only `get`/`list` calls (and SelfSubjectAccessReviews, which store nothing) reach the API server,
and only the provider's describe call reaches the cloud, so taking a snapshot changes nothing a
controller or a person could notice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from nodeops.common.resources import Resource
from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS, NODEGROUPS
from nodeops.kube import errors
from nodeops.kube.client import Client
from nodeops.kube.resources import (
    DAEMONSETS,
    DEPLOYMENTS,
    NAMESPACES,
    NODEDRAINRULES,
    NODES,
    PDBS,
    PODS,
    PRIORITYCLASSES,
    REPLICASETS,
    STATEFULSETS,
)
from nodeops.providers.base import NodeGroup, NodeGroups

__all__ = [
    "JOBS",
    "PRIORITYCLASSES",
    "SNAPSHOT_RESOURCES",
    "AccessDenied",
    "Snapshot",
    "check_read_access",
    "take_snapshot",
]

JOBS = Resource("batch", "v1", "jobs", "Job", True)
_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False
)

SNAPSHOT_RESOURCES: tuple[Resource, ...] = (
    NODEGROUPS,
    NODES,
    PODS,
    DEPLOYMENTS,
    REPLICASETS,
    STATEFULSETS,
    DAEMONSETS,
    JOBS,
    PDBS,
    PRIORITYCLASSES,
    NODEDRAINRULES,
    NAMESPACES,
    CYCLENODEREQUESTS,
)
"""Everything a rehearsal lists, in the order the permission check asks about it. Past
CycleNodeRequests are read for the boot times they recorded."""


class AccessDenied(Exception):
    """The credentials may not read something the rehearsal needs; names verb and resource."""


def _described(res: Resource) -> str:
    return f"{res.plural}.{res.group}" if res.group else res.plural


async def check_read_access(client: Client, resources: Iterable[Resource]) -> None:
    """Ask the API server, as `kubectl auth can-i` does, before the first list: a refusal then
    names the verb and resource instead of surfacing as a 403 halfway through."""
    for res in resources:
        attributes = {"verb": "list", "resource": res.plural, "group": res.group}
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        answer = await client.create(_ACCESS_REVIEWS, review)
        status = answer.get("status") or {}
        if not status.get("allowed"):
            why = status.get("reason") or "not allowed"
            raise AccessDenied(f"cannot list {_described(res)} (cluster-wide): {why}")


@dataclass
class Snapshot:
    """The objects as read, per resource plural, and the cloud groups as described."""

    objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    cloud_groups: list[NodeGroup] = field(default_factory=list)
    not_served: list[str] = field(default_factory=list)
    """Resources the API server does not serve (an optional CRD, an API group turned off)."""
    json_bytes: int = 0
    """Size of everything read as JSON: the base of the memory estimate."""

    def of(self, res: Resource) -> list[dict[str, Any]]:
        return self.objects.get(res.plural, [])


async def take_snapshot(
    client: Client,
    cloud: NodeGroups | None,
    cloud_group_names: Sequence[str],
    *,
    already: Mapping[str, list[dict[str, Any]]] | None = None,
) -> Snapshot:
    """List every resource of `SNAPSHOT_RESOURCES` (except those in `already`) and describe the
    cloud groups; resources the server does not serve are noted and left empty."""
    snapshot = Snapshot(objects={k: list(v) for k, v in (already or {}).items()})

    async def read(res: Resource) -> None:
        if res.plural in snapshot.objects:
            return
        try:
            items, _ = await client.list(res)
        except errors.NotFound:
            snapshot.not_served.append(_described(res))
            items = []
        snapshot.objects[res.plural] = items

    await asyncio.gather(*(read(res) for res in SNAPSHOT_RESOURCES))
    if cloud is not None and cloud_group_names:
        snapshot.cloud_groups = await cloud.describe_groups(list(cloud_group_names))
    snapshot.json_bytes = sum(len(orjson.dumps(v)) for v in snapshot.objects.values())
    return snapshot
