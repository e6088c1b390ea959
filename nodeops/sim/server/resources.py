"""The resource catalogue: which kinds the simulated API server serves and how.

A `ResourceType` carries everything that differs between kinds (scope, names for discovery,
subresources, which fields a field selector may use), so the storage and HTTP layers stay
generic. Custom resources get a `ResourceType` built from their CRD at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
NO_COLLECTION_VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")

FieldExtractor = Callable[[Mapping[str, Any]], dict[str, str]]


def _dig(obj: Mapping[str, Any], *path: str) -> Any:
    cur: Any = obj
    for p in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(p)
    return cur


def _s(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _pod_fields(obj: Mapping[str, Any]) -> dict[str, str]:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return {
        "spec.nodeName": _s(spec.get("nodeName")),
        "spec.restartPolicy": _s(spec.get("restartPolicy")),
        "spec.schedulerName": _s(spec.get("schedulerName")),
        "spec.serviceAccountName": _s(spec.get("serviceAccountName")),
        "spec.hostNetwork": _s(bool(spec.get("hostNetwork"))),
        "status.phase": _s(status.get("phase")),
        "status.podIP": _s(status.get("podIP")),
        "status.nominatedNodeName": _s(status.get("nominatedNodeName")),
    }


def _node_fields(obj: Mapping[str, Any]) -> dict[str, str]:
    return {"spec.unschedulable": _s(bool(_dig(obj, "spec", "unschedulable")))}


def _event_fields(obj: Mapping[str, Any]) -> dict[str, str]:
    inv = obj.get("involvedObject") or obj.get("regarding") or {}
    src = obj.get("source") or obj.get("deprecatedSource") or {}
    return {
        "involvedObject.kind": _s(inv.get("kind")),
        "involvedObject.namespace": _s(inv.get("namespace")),
        "involvedObject.name": _s(inv.get("name")),
        "involvedObject.uid": _s(inv.get("uid")),
        "involvedObject.apiVersion": _s(inv.get("apiVersion")),
        "involvedObject.resourceVersion": _s(inv.get("resourceVersion")),
        "involvedObject.fieldPath": _s(inv.get("fieldPath")),
        "reason": _s(obj.get("reason")),
        "reportingComponent": _s(obj.get("reportingComponent") or obj.get("reportingController")),
        "source": _s(src.get("component")),
        "type": _s(obj.get("type")),
    }


def _events_v1_fields(obj: Mapping[str, Any]) -> dict[str, str]:
    reg = obj.get("regarding") or {}
    return {
        "regarding.kind": _s(reg.get("kind")),
        "regarding.namespace": _s(reg.get("namespace")),
        "regarding.name": _s(reg.get("name")),
        "regarding.uid": _s(reg.get("uid")),
        "reason": _s(obj.get("reason")),
        "reportingController": _s(obj.get("reportingController")),
        "type": _s(obj.get("type")),
    }


def _namespace_fields(obj: Mapping[str, Any]) -> dict[str, str]:
    return {"status.phase": _s(_dig(obj, "status", "phase"))}


def _secret_fields(obj: Mapping[str, Any]) -> dict[str, str]:
    return {"type": _s(obj.get("type"))}


def _replicaset_fields(obj: Mapping[str, Any]) -> dict[str, str]:
    return {"status.replicas": _s(_dig(obj, "status", "replicas") or 0)}


@dataclass(frozen=True, slots=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    subresources: frozenset[str] = frozenset()
    categories: tuple[str, ...] = ()
    # Kinds served under several group/versions share one storage (PDBs in policy/v1 and
    # v1beta1, Events in v1 and events.k8s.io/v1); the storage key names it.
    storage_group: str | None = None
    storage_plural: str | None = None
    extra_fields: FieldExtractor | None = None
    # Custom resources: the CRD's version entry, for schema defaults and printer columns.
    crd_version: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)
    # Whether list items keep a per-item apiVersion/kind (custom resources do).
    custom: bool = False

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def storage_key(self) -> tuple[str, str]:
        return (
            self.storage_group if self.storage_group is not None else self.group,
            self.storage_plural or self.plural,
        )

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    def field_set(self, obj: Mapping[str, Any]) -> dict[str, str]:
        meta = obj.get("metadata") or {}
        fields = {"metadata.name": _s(meta.get("name"))}
        if self.namespaced:
            fields["metadata.namespace"] = _s(meta.get("namespace"))
        if self.extra_fields is not None:
            fields.update(self.extra_fields(obj))
        return fields

    def supported_fields(self) -> frozenset[str]:
        probe = self.field_set({"metadata": {}})
        return frozenset(probe)


def _rt(
    group: str,
    version: str,
    plural: str,
    kind: str,
    namespaced: bool,
    short: tuple[str, ...] = (),
    sub: tuple[str, ...] = (),
    **kw: Any,
) -> ResourceType:
    return ResourceType(
        group=group,
        version=version,
        plural=plural,
        kind=kind,
        namespaced=namespaced,
        singular=kind.lower(),
        short_names=short,
        subresources=frozenset(sub),
        **kw,
    )


BUILTIN: tuple[ResourceType, ...] = (
    _rt(
        "",
        "v1",
        "namespaces",
        "Namespace",
        False,
        ("ns",),
        ("status", "finalize"),
        verbs=NO_COLLECTION_VERBS,
        extra_fields=_namespace_fields,
    ),
    _rt("", "v1", "nodes", "Node", False, ("no",), ("status", "proxy"), extra_fields=_node_fields),
    _rt(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        ("po",),
        ("status", "eviction", "binding", "log"),
        categories=("all",),
        extra_fields=_pod_fields,
    ),
    _rt("", "v1", "services", "Service", True, ("svc",), ("status",), categories=("all",)),
    _rt("", "v1", "endpoints", "Endpoints", True, ("ep",)),
    _rt("", "v1", "configmaps", "ConfigMap", True, ("cm",)),
    _rt("", "v1", "secrets", "Secret", True, extra_fields=_secret_fields),
    _rt("", "v1", "serviceaccounts", "ServiceAccount", True, ("sa",), ("token",)),
    _rt("", "v1", "events", "Event", True, ("ev",), extra_fields=_event_fields),
    _rt(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        True,
        ("ev",),
        storage_group="",
        extra_fields=_events_v1_fields,
    ),
    _rt("apps", "v1", "daemonsets", "DaemonSet", True, ("ds",), ("status",), categories=("all",)),
    _rt("apps", "v1", "controllerrevisions", "ControllerRevision", True),
    _rt(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        True,
        ("deploy",),
        ("status", "scale"),
        categories=("all",),
    ),
    _rt(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        True,
        ("rs",),
        ("status", "scale"),
        categories=("all",),
        extra_fields=_replicaset_fields,
    ),
    _rt(
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        True,
        ("sts",),
        ("status", "scale"),
        categories=("all",),
    ),
    _rt("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("pdb",), ("status",)),
    _rt(
        "policy",
        "v1beta1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        True,
        ("pdb",),
        ("status",),
        storage_group="policy",
    ),
    _rt("coordination.k8s.io", "v1", "leases", "Lease", True),
    _rt("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, ("netpol",)),
    _rt("", "v1", "persistentvolumes", "PersistentVolume", False, ("pv",), ("status",)),
    _rt("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, ("pvc",), ("status",)),
    _rt("storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", False, (), ("status",)),
    _rt("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, ("pc",)),
    _rt(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        ("crd", "crds"),
        ("status",),
    ),
    _rt("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    _rt("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    _rt("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    _rt("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
    # Created and answered, never stored (see `reviews`).
    _rt(
        "authorization.k8s.io",
        "v1",
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
        False,
        verbs=("create",),
    ),
    _rt(
        "authentication.k8s.io",
        "v1",
        "selfsubjectreviews",
        "SelfSubjectReview",
        False,
        verbs=("create",),
    ),
)

# The group/version kube-apiserver prefers for each group (discovery's preferredVersion).
PREFERRED_VERSIONS: dict[str, str] = {"policy": "v1"}

# Kinds whose writes through the main endpoint ignore `status` (it has its own subresource),
# and kinds with `metadata.generation` bumped on spec changes, are derived from the catalogue.


def crd_resource_types(crd: Mapping[str, Any]) -> list[ResourceType]:
    """One ResourceType per served version of a CustomResourceDefinition."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    out: list[ResourceType] = []
    for ver in spec.get("versions") or []:
        if not ver.get("served", True):
            continue
        subs = ver.get("subresources") or {}
        sub: set[str] = set()
        if "status" in subs:
            sub.add("status")
        if "scale" in subs:
            sub.add("scale")
        selectable = [f.get("jsonPath", "") for f in ver.get("selectableFields") or []]
        out.append(
            ResourceType(
                group=spec.get("group", ""),
                version=ver["name"],
                plural=names.get("plural", ""),
                kind=names.get("kind", ""),
                namespaced=spec.get("scope") == "Namespaced",
                singular=names.get("singular") or names.get("kind", "").lower(),
                short_names=tuple(names.get("shortNames") or ()),
                subresources=frozenset(sub),
                categories=tuple(names.get("categories") or ()),
                crd_version=ver,
                custom=True,
                extra_fields=_selectable_extractor(selectable) if selectable else None,
            )
        )
    return out


def _selectable_extractor(paths: list[str]) -> FieldExtractor:
    def extract(obj: Mapping[str, Any]) -> dict[str, str]:
        out: dict[str, str] = {}
        for p in paths:
            parts = [x for x in p.split(".") if x]
            out[".".join(parts)] = _s(_dig(obj, *parts))
        return out

    return extract
