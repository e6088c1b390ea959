"""The LoadBalancerAttachment as the cluster stores it: its resource, and the write of its spec.

A node's record is created (owned by the node, so it goes with it) or its spec replaced under the
resourceVersion it was read at, before any target is left; its status goes through the kit's
status writer. Kept apart from the steps so the one place that creates records is easy to find.
"""

from __future__ import annotations

from typing import Any, Final

from nodeops.kube import Client, Resource
from nodeops.kube import objects as o

__all__ = ["ATTACHMENTS", "write_spec"]

Obj = dict[str, Any]

ATTACHMENTS: Final = Resource(
    "nodeops.dev", "v1alpha1", "loadbalancerattachments", "LoadBalancerAttachment", True
)


async def write_spec(
    client: Client, namespace: str, node: Obj, record: Obj | None, targets: list[dict[str, Any]]
) -> Obj:
    """Create the node's record with `targets` as its spec, or replace a different spec; the
    record as it now is (the one given when its spec was already `targets`)."""
    name = o.name(node)
    spec = {"nodeName": name, "targets": targets}
    if record is None:
        body = {
            "apiVersion": "nodeops.dev/v1alpha1",
            "kind": "LoadBalancerAttachment",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": "nodeops"},
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": name,
                        "uid": o.uid(node),
                    }
                ],
            },
            "spec": spec,
        }
        return await client.create(ATTACHMENTS, body, namespace)
    if (record.get("spec") or {}) == spec:
        return record
    return await client.patch(
        ATTACHMENTS,
        name,
        {"spec": spec},
        namespace,
        resource_version=o.resource_version(record),
    )
