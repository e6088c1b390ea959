"""Resource descriptors: where a kind lives in the API, for building request paths.

Plain data shared by the runtime's client and the simulator's own client, so both spell paths
the same way without sharing any client behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote


@dataclass(frozen=True, slots=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """`pods`, `deployments.apps`: kube's group-resource spelling, for logs and metrics."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)
NODES = Resource("", "v1", "nodes", "Node", False)
PODS = Resource("", "v1", "pods", "Pod", True)
SERVICES = Resource("", "v1", "services", "Service", True)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", True)
SECRETS = Resource("", "v1", "secrets", "Secret", True)
EVENTS_CORE = Resource("", "v1", "events", "Event", True)
EVENTS = Resource("events.k8s.io", "v1", "events", "Event", True)
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet", True)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True)
REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet", True)
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet", True)
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
PRIORITYCLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False)
VOLUMEATTACHMENTS = Resource("storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", False)
CRDS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)
PERSISTENTVOLUMES = Resource("", "v1", "persistentvolumes", "PersistentVolume", False)
PERSISTENTVOLUMECLAIMS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True)
