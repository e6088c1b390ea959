"""Resource descriptors the runtime and the operator use (the shared ones live in common)."""

from __future__ import annotations

from nodeops.common.resources import (
    CONFIGMAPS,
    CRDS,
    DAEMONSETS,
    DEPLOYMENTS,
    EVENTS,
    EVENTS_CORE,
    LEASES,
    NAMESPACES,
    NODES,
    PDBS,
    PERSISTENTVOLUMECLAIMS,
    PERSISTENTVOLUMES,
    PODS,
    PRIORITYCLASSES,
    REPLICASETS,
    SECRETS,
    SERVICES,
    STATEFULSETS,
    VOLUMEATTACHMENTS,
    Resource,
)

__all__ = [
    "CONFIGMAPS",
    "CRDS",
    "DAEMONSETS",
    "DEPLOYMENTS",
    "EVENTS",
    "EVENTS_CORE",
    "LEASES",
    "NAMESPACES",
    "NODEDRAINRULES",
    "NODES",
    "PDBS",
    "PERSISTENTVOLUMECLAIMS",
    "PERSISTENTVOLUMES",
    "PODS",
    "PRIORITYCLASSES",
    "REPLICASETS",
    "SECRETS",
    "SERVICES",
    "STATEFULSETS",
    "VOLUMEATTACHMENTS",
    "Resource",
]

NODEDRAINRULES = Resource("nodeops.dev", "v1alpha1", "nodedrainrules", "NodeDrainRule", False)
