"""How the simulated cloud shows its servers: Nova's server body and the Node a kubelet registers."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

from nodeops.sim import objects as gen
from nodeops.sim.openstack.model import (
    DELETED,
    FLATCAR_VERSION_LABEL,
    NODEPOOL_LABEL,
    NodePool,
    NovaServer,
)

__all__ = ["node_object", "server_body"]

Obj = dict[str, Any]


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def server_body(server: NovaServer, project_id: str) -> Obj:
    """A server as `GET /servers/{id}` (microversion 2.1) answers it."""
    return {
        "id": server.id,
        "name": server.name,
        "status": server.status,
        "tenant_id": project_id,
        "user_id": "kubernikus",
        "metadata": {"kubernikus:nodepool": server.pool},
        "hostId": "",
        "image": {"id": "flatcar-stable"},
        "flavor": {"id": server.flavor},
        "created": _iso(server.created_at),
        "updated": _iso(server.deleted_at or server.created_at),
        "addresses": {"private": [{"addr": server.ip, "version": 4}]},
        "accessIPv4": "",
        "accessIPv6": "",
        "links": [],
        "OS-EXT-AZ:availability_zone": server.zone,
        "OS-EXT-STS:task_state": "deleting"
        if server.deleting and server.status != DELETED
        else None,
        "OS-EXT-STS:vm_state": {"BUILD": "building", "ACTIVE": "active"}.get(
            server.status, "deleted"
        ),
        "OS-EXT-STS:power_state": 1 if server.status == "ACTIVE" else 0,
    }


def node_object(server: NovaServer, pool: NodePool, *, rng: random.Random, now: str) -> Obj:
    """The Node the server's kubelet registers: the pool's labels and taints, the server's name,
    address, provider ID and Kubernetes version, a Flatcar OS image."""
    labels = {**pool.labels, NODEPOOL_LABEL: pool.name, FLATCAR_VERSION_LABEL: server.os_version}
    node = gen.make_node(
        server.name,
        zone=server.zone,
        instance_type=server.flavor,
        provider_id=server.provider_id,
        labels=labels,
        taints=pool.taints,
        kubelet_version=server.kubelet_version,
        internal_ip=server.ip,
        rng=rng,
        now=now,
    )
    node["metadata"]["labels"].pop("k8s.io/cloud-provider-aws", None)
    info = node["status"]["nodeInfo"]
    info["osImage"] = f"Flatcar Container Linux by Kinvolk {server.os_version} (Oklo)"
    info["kernelVersion"] = "6.6.60-flatcar"
    info["systemUUID"] = server.id
    return node
