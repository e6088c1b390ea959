"""Kubernetes objects shaped like the ones a real cluster stores, as plain dicts.

What the operator costs (decoding list responses, caching, patching) depends on the size and shape
of the objects it handles, so benchmark and test data must look like a real cluster's: defaulted
fields, admission additions, status written by kubelet and controllers, and `managedFields`. A pod
built here is ~9.6 KB of compact JSON of which ~39% is `managedFields`, as measured on a v1.31
cluster.

Every generator is deterministic. `rng` may be a `random.Random` (consumed in order, so one
generator stream yields distinct objects), an int or str seed, or None; seeds and None are mixed
with the object's kind, namespace and name, so two objects never share a uid by accident.

Objects come back as stored minus what the API server sets on create (`uid`, `resourceVersion`,
`creationTimestamp`, `generation`); `with_server_fields=True` adds those for data loaded straight
into storage, and `for_create` strips an object down to what a client would send.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import math
import random
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import orjson

from nodeops.common.jsonbytes import json_copy

Obj = dict[str, Any]
RngLike = random.Random | int | str | None
TimeLike = str | datetime
PodPhase = Literal["Pending", "Running", "Succeeded", "Failed"]

DEFAULT_NOW = "2025-01-06T09:00:00Z"
DEFAULT_ZONE = "eu-west-1a"
DEFAULT_INSTANCE_TYPE = "m5.large"
DEFAULT_KUBELET_VERSION = "v1.31.4"

NODE_GROUP_LABEL = "eks.amazonaws.com/nodegroup"
TEAM_LABEL = "team"
POD_TEMPLATE_HASH_LABEL = "pod-template-hash"
NODE_ROLE_PREFIX = "node-role.kubernetes.io/"
DEFAULT_POD_ANNOTATIONS: Mapping[str, str] = {
    "prometheus.io/scrape": "true",
    "prometheus.io/port": "9090",
}

#: (vCPUs, GiB of memory, CPU architecture) of the instance types nodes can be made of.
INSTANCE_TYPES: Mapping[str, tuple[int, int, str]] = {
    "t3.medium": (2, 4, "amd64"),
    "t3.large": (2, 8, "amd64"),
    "t3.xlarge": (4, 16, "amd64"),
    "m5.large": (2, 8, "amd64"),
    "m5.xlarge": (4, 16, "amd64"),
    "m5.2xlarge": (8, 32, "amd64"),
    "m5.4xlarge": (16, 64, "amd64"),
    "m6i.large": (2, 8, "amd64"),
    "m6i.xlarge": (4, 16, "amd64"),
    "m6i.2xlarge": (8, 32, "amd64"),
    "m6g.large": (2, 8, "arm64"),
    "m6g.xlarge": (4, 16, "arm64"),
    "m7g.large": (2, 8, "arm64"),
    "m7g.xlarge": (4, 16, "arm64"),
    "c5.large": (2, 4, "amd64"),
    "c5.xlarge": (4, 8, "amd64"),
    "c5.2xlarge": (8, 16, "amd64"),
    "c6i.large": (2, 4, "amd64"),
    "c6i.xlarge": (4, 8, "amd64"),
    "r5.large": (2, 16, "amd64"),
    "r5.xlarge": (4, 32, "amd64"),
    "r5.2xlarge": (8, 64, "amd64"),
    "r6i.large": (2, 16, "amd64"),
}

# Kubernetes' k8s.io/apimachinery/pkg/util/rand alphabet: generated name suffixes and template
# hashes use it, so names look like the ones real controllers produce.
_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SA_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


# --- small building blocks -------------------------------------------------------------------


def rng_for(rng: RngLike, *key: str) -> random.Random:
    """The generator an object draws from.

    A passed `random.Random` is used as is so a stream of calls yields distinct objects; a seed or
    None is mixed with `key` so independent calls with the same seed still differ per object.
    """
    if isinstance(rng, random.Random):
        return rng
    return random.Random("/".join(("" if rng is None else str(rng), *key)))


def new_uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def random_suffix(rng: random.Random, length: int = 5) -> str:
    """A suffix like the API server's `generateName` one (`web-7d4b9c8f6d-x2k9p`)."""
    return "".join(rng.choice(_SAFE_ALPHABET) for _ in range(length))


def instance_id(rng: random.Random) -> str:
    return f"i-{rng.getrandbits(68):017x}"


def region_of(zone: str) -> str:
    return zone[:-1] if zone and zone[-1].isalpha() else zone


def aws_node_name(ip: str, zone: str = DEFAULT_ZONE) -> str:
    """The private DNS name EC2 gives an instance, which EKS nodes use as node name."""
    region = region_of(zone)
    domain = "ec2.internal" if region == "us-east-1" else f"{region}.compute.internal"
    return f"ip-{ip.replace('.', '-')}.{domain}"


def timestamp(now: TimeLike, offset_seconds: float = 0) -> str:
    """RFC 3339 at second precision, the format of `metav1.Time`."""
    moment = datetime.fromisoformat(now.replace("Z", "+00:00")) if isinstance(now, str) else now
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC) + timedelta(seconds=offset_seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def template_hash(template: Mapping[str, Any]) -> str:
    """A `pod-template-hash`-style value: FNV-32a of the template, safe-encoded like kube's.

    Kubernetes hashes its Go struct dump, which cannot be reproduced here; what matters is that
    the value is stable for a template, changes with it, and looks like the real thing.
    """
    return _fnv_safe(orjson.dumps(template, option=orjson.OPT_SORT_KEYS))


@functools.lru_cache(maxsize=1024)
def _fnv_safe(data: bytes) -> str:
    """Cached: every pod a controller builds hashes its template again, and a byte loop in
    Python over a two-kilobyte template is slower than the rest of building the pod."""
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE_ALPHABET[ord(c) % len(_SAFE_ALPHABET)] for c in str(h))


def _hex(rng: random.Random, digits: int) -> str:
    return f"{rng.getrandbits(4 * digits):0{digits}x}"


def _digest(text: str) -> str:
    """Image digests depend only on the image, as in a registry, so all replicas agree."""
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _image_id(image: str) -> str:
    repo = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
    return f"{repo}@{_digest(image)}"


def _private_ip(rng: random.Random, first: int = 10, second: int | None = None) -> str:
    b = rng.randrange(0, 256) if second is None else second
    return f"{first}.{b}.{rng.randrange(0, 256)}.{rng.randrange(2, 255)}"


def _ip_from_node_name(name: str) -> str | None:
    m = re.match(r"ip-(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})(?:\.|$)", name)
    return ".".join(m.groups()) if m else None


def _server_fields(
    meta: Obj, *, uid: str, rng: random.Random, now: TimeLike, generation: bool
) -> None:
    meta["creationTimestamp"] = timestamp(now)
    if generation:
        meta["generation"] = 1
    meta["resourceVersion"] = str(rng.randrange(1_000_000, 100_000_000))
    meta["uid"] = uid


def owner_reference(owner: Mapping[str, Any]) -> Obj:
    """The controller reference a workload controller sets on what it creates."""
    meta = owner.get("metadata") or {}
    uid = meta.get("uid")
    if not uid:
        raise ValueError(
            f"{owner.get('kind')} {meta.get('name')!r} has no metadata.uid: own objects only "
            "with an owner read back from the server or built with with_server_fields=True"
        )
    return {
        "apiVersion": owner.get("apiVersion", "apps/v1"),
        "blockOwnerDeletion": True,
        "controller": True,
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": uid,
    }


def for_create(obj: Mapping[str, Any]) -> Obj:
    """The object as sent to the API server's create: no server-set metadata, and no status.

    Nodes keep their status because kubelet registers a node with it; for every other kind the
    API server discards status on create, so the status writers' `managedFields` entries go too.
    The creator's entries stay: a server honours `managedFields` sent on create, and they are a
    large share of a real object's size.
    """
    return strip_for_create(json_copy(dict(obj)))


def strip_for_create(out: Obj) -> Obj:
    """`for_create` in place, for an object its caller has just built for this create."""
    meta = out.get("metadata", {})
    for key in ("uid", "resourceVersion", "creationTimestamp", "generation"):
        meta.pop(key, None)
    if out.get("kind") != "Node":
        out.pop("status", None)
        managed = [e for e in meta.get("managedFields", []) if e.get("subresource") != "status"]
        if managed:
            meta["managedFields"] = managed
        else:
            meta.pop("managedFields", None)
    return out


# --- managedFields ---------------------------------------------------------------------------

# List fields merged by key, by (enclosing field, field): their items appear as `k:{...}`.
_LIST_KEYS: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("metadata", "ownerReferences"): ("uid",),
    ("spec", "containers"): ("name",),
    ("spec", "initContainers"): ("name",),
    ("spec", "volumes"): ("name",),
    ("spec", "ports"): ("port", "protocol"),
    ("containers", "env"): ("name",),
    ("containers", "ports"): ("containerPort", "protocol"),
    ("containers", "volumeMounts"): ("mountPath",),
    ("status", "conditions"): ("type",),
    ("status", "podIPs"): ("ip",),
    ("status", "addresses"): ("type",),
}
# Fields that are replaced as a whole, so their managed entry never descends into them.
_ATOMIC = frozenset(
    {
        "affinity",
        "args",
        "command",
        "containerStatuses",
        "hostIPs",
        "images",
        "ipFamilies",
        "clusterIPs",
        "nodeSelector",
        "runtimeHandlers",
        "selector",
        "sources",
        "taints",
        "tolerations",
    }
)
_ATOMIC_ITEMS = frozenset({"ownerReferences"})
_SET_LISTS = frozenset({"finalizers", "podCIDRs"})
# Fields Go marshals even for an empty object: present before any write, so no "." of their own.
_ALWAYS_PRESENT = frozenset(
    {"metadata", "spec", "status", "template", "containers", "strategy", "updateStrategy"}
    | {"nodeInfo", "daemonEndpoints", "kubeletEndpoint"}
)


def fields_v1(obj: Mapping[str, Any]) -> Obj:
    """The `fieldsV1` set of the fields in `obj`, with the `f:`/`k:`/`v:`/`.` shape of kube's."""
    return _fields_of_map(obj, parent="", own=False)


def _fields_of_map(value: Mapping[str, Any], *, parent: str, own: bool) -> Obj:
    out: Obj = {".": {}} if own else {}
    for key, child in value.items():
        if key != "creationTimestamp":  # a template's null one is never tracked
            out[f"f:{key}"] = _fields_of(key, child, parent)
    return dict(sorted(out.items()))


def _fields_of(name: str, value: Any, parent: str) -> Obj:
    if name in _ATOMIC or not isinstance(value, dict | list) or not value:
        return {}
    if isinstance(value, dict):
        return _fields_of_map(value, parent=name, own=name not in _ALWAYS_PRESENT)
    if name in _SET_LISTS:
        return {".": {}, **{f"v:{json.dumps(v)}": {} for v in value}}
    keys = _LIST_KEYS.get((parent, name))
    if keys is None:
        return {}
    out: Obj = {} if name in _ALWAYS_PRESENT else {".": {}}
    for item in value:
        ident = {k: item[k] for k in keys if k in item}
        key = "k:" + json.dumps(ident, separators=(",", ":"))
        out[key] = {} if name in _ATOMIC_ITEMS else _fields_of_map(item, parent=name, own=True)
    return dict(sorted(out.items()))


def managed_entry(
    manager: str,
    fields: Obj,
    now: TimeLike,
    *,
    api_version: str = "v1",
    subresource: str | None = None,
    operation: str = "Update",
) -> Obj:
    entry: Obj = {
        "apiVersion": api_version,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
        "manager": manager,
        "operation": operation,
    }
    if subresource:
        entry["subresource"] = subresource
    entry["time"] = timestamp(now)
    return entry


def _tracked_metadata(meta: Mapping[str, Any]) -> Obj:
    """The metadata a writer owns; name, namespace and server-set fields are never tracked."""
    keep = ("annotations", "finalizers", "generateName", "labels", "ownerReferences")
    return {k: meta[k] for k in keep if meta.get(k)}


# --- pods ------------------------------------------------------------------------------------


def _app_container(app: str, team: str | None) -> Obj:
    image = f"registry.example.com/{team or 'apps'}/{app}:1.14.2"
    return {
        "env": [
            {"name": "APP_ENV", "value": "production"},
            {"name": "LOG_LEVEL", "value": "info"},
            {
                "name": "POD_NAME",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
            },
            {
                "name": "POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}},
            },
            {
                "name": "POD_IP",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}},
            },
        ],
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "livenessProbe": {
            "failureThreshold": 3,
            "httpGet": {"path": "/healthz", "port": "http", "scheme": "HTTP"},
            "initialDelaySeconds": 10,
            "periodSeconds": 10,
            "successThreshold": 1,
            "timeoutSeconds": 1,
        },
        "name": app,
        "ports": [
            {"containerPort": 8080, "name": "http", "protocol": "TCP"},
            {"containerPort": 9090, "name": "metrics", "protocol": "TCP"},
        ],
        "readinessProbe": {
            "failureThreshold": 3,
            "httpGet": {"path": "/ready", "port": "http", "scheme": "HTTP"},
            "periodSeconds": 5,
            "successThreshold": 1,
            "timeoutSeconds": 1,
        },
        "resources": {
            "limits": {"cpu": "1", "memory": "512Mi"},
            "requests": {"cpu": "250m", "memory": "256Mi"},
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [
            {"mountPath": "/etc/app", "name": "config", "readOnly": True},
        ],
    }


def _sidecar_container(index: int) -> Obj:
    name = "log-shipper" if index == 1 else f"sidecar-{index}"
    return {
        "args": ["--config=/fluent-bit/etc/fluent-bit.yaml"],
        "env": [
            {
                "name": "NODE_NAME",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}},
            },
        ],
        "image": "cr.fluentbit.io/fluent/fluent-bit:3.1.9",
        "imagePullPolicy": "IfNotPresent",
        "name": name,
        "ports": [
            {"containerPort": 2020 + index, "name": f"fb-metrics-{index}", "protocol": "TCP"}
        ],
        "resources": {
            "limits": {"memory": "128Mi"},
            "requests": {"cpu": "50m", "memory": "64Mi"},
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [
            {"mountPath": "/fluent-bit/etc", "name": "log-shipper-config", "readOnly": True},
        ],
    }


def make_pod_template(
    *,
    app: str,
    team: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    containers: int = 2,
    termination_grace_period_seconds: int = 30,
    tolerations: Sequence[Mapping[str, Any]] | None = None,
    node_selector: Mapping[str, str] | None = None,
    affinity: Mapping[str, Any] | None = None,
    topology_spread_constraints: Sequence[Mapping[str, Any]] | None = None,
) -> Obj:
    """A workload's `spec.template` after API defaulting, as a Deployment stores it.

    Pods created from it with `pod_from_template` look like `make_pod`'s, which is built the
    same way, so pods the simulated controllers make match the benchmark data.
    """
    if containers < 1:
        raise ValueError("a pod needs at least one container")
    pod_labels: dict[str, str] = {"app": app}
    if team:
        pod_labels[TEAM_LABEL] = team
    pod_labels.update(labels or {})
    spec: Obj = {
        "containers": [_app_container(app, team)]
        + [_sidecar_container(i) for i in range(1, containers)],
        "dnsPolicy": "ClusterFirst",
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    spec |= {
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "terminationGracePeriodSeconds": termination_grace_period_seconds,
    }
    if affinity:
        spec["affinity"] = copy.deepcopy(dict(affinity))
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if topology_spread_constraints:
        spec["topologySpreadConstraints"] = copy.deepcopy(list(topology_spread_constraints))
    volumes: list[Obj] = [
        {"configMap": {"defaultMode": 420, "name": f"{app}-config"}, "name": "config"},
    ]
    if containers > 1:
        volumes.append(
            {
                "configMap": {"defaultMode": 420, "name": "log-shipper-config"},
                "name": "log-shipper-config",
            }
        )
    spec["volumes"] = volumes
    return {
        "metadata": {
            "annotations": dict(DEFAULT_POD_ANNOTATIONS if annotations is None else annotations),
            "creationTimestamp": None,
            "labels": pod_labels,
        },
        "spec": spec,
    }


_DEFAULT_TOLERATIONS = (
    {
        "effect": "NoExecute",
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "tolerationSeconds": 300,
    },
    {
        "effect": "NoExecute",
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "tolerationSeconds": 300,
    },
)
# What the DaemonSet controller adds so its pods run on nodes others avoid.
_DAEMONSET_TOLERATIONS = (
    {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists"},
    {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists"},
    {"effect": "NoSchedule", "key": "node.kubernetes.io/disk-pressure", "operator": "Exists"},
    {"effect": "NoSchedule", "key": "node.kubernetes.io/memory-pressure", "operator": "Exists"},
    {"effect": "NoSchedule", "key": "node.kubernetes.io/pid-pressure", "operator": "Exists"},
    {"effect": "NoSchedule", "key": "node.kubernetes.io/unschedulable", "operator": "Exists"},
)


def _tolerates(toleration: Mapping[str, Any], key: str, effect: str) -> bool:
    """Whether `toleration` covers a `key` taint with `effect`, whatever the taint's value."""
    if toleration.get("effect") not in (None, "", effect):
        return False
    if not toleration.get("key"):
        return toleration.get("operator") == "Exists"
    return bool(toleration["key"] == key)


def _add_tolerations(spec: Obj, extra: Iterable[Mapping[str, Any]]) -> None:
    """Add each of `extra` the pod does not already tolerate, as admission and controllers do."""
    tolerations: list[Obj] = spec.setdefault("tolerations", [])
    for toleration in extra:
        if not any(_tolerates(t, toleration["key"], toleration["effect"]) for t in tolerations):
            tolerations.append(dict(toleration))


def _apply_pod_defaults(spec: Obj) -> None:
    """API defaulting of a pod spec, for templates not made by `make_pod_template`."""
    for container in spec.get("containers", []):
        container.setdefault("imagePullPolicy", "IfNotPresent")
        container.setdefault("resources", {})
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        for port in container.get("ports", []):
            port.setdefault("protocol", "TCP")
    for key, value in (
        ("dnsPolicy", "ClusterFirst"),
        ("enableServiceLinks", True),
        ("restartPolicy", "Always"),
        ("schedulerName", "default-scheduler"),
        ("securityContext", {}),
        ("terminationGracePeriodSeconds", 30),
    ):
        spec.setdefault(key, value)


def _admit_pod(spec: Obj, rng: random.Random) -> None:
    """What admission plugins add to every pod after the creator's fields are recorded.

    ServiceAccount mounts the projected API token volume, DefaultTolerationSeconds adds the
    not-ready/unreachable tolerations, Priority resolves the priority; none of it appears in the
    creator's `managedFields`.
    """
    spec.setdefault("serviceAccountName", "default")
    spec["serviceAccount"] = spec["serviceAccountName"]
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    _add_tolerations(spec, _DEFAULT_TOLERATIONS)
    volume = f"kube-api-access-{random_suffix(rng)}"
    for container in spec.get("containers", []):
        container.setdefault("volumeMounts", []).append(
            {"mountPath": _SA_MOUNT_PATH, "name": volume, "readOnly": True}
        )
    spec.setdefault("volumes", []).append(
        {
            "name": volume,
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {
                        "configMap": {
                            "items": [{"key": "ca.crt", "path": "ca.crt"}],
                            "name": "kube-root-ca.crt",
                        }
                    },
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "fieldRef": {
                                        "apiVersion": "v1",
                                        "fieldPath": "metadata.namespace",
                                    },
                                    "path": "namespace",
                                }
                            ]
                        }
                    },
                ],
            },
        }
    )


def pod_from_template(
    template: Mapping[str, Any],
    *,
    name: str,
    namespace: str,
    owner: Mapping[str, Any] | None,
    node_name: str | None = None,
    rng: RngLike = None,
    now: TimeLike = DEFAULT_NOW,
    with_server_fields: bool = False,
) -> Obj:
    """The pod a workload controller creates from its template, as stored before kubelet runs it.

    It carries what the owning controller adds for its kind (DaemonSet node affinity and
    tolerations, StatefulSet identity labels and hostname), the creator's `managedFields` entry,
    and what admission adds; it has no status. `node_name` stands for the scheduler's binding.
    """
    r = rng_for(rng, "Pod", namespace, name)
    uid = new_uid(r)
    tmeta = template.get("metadata") or {}
    spec: Obj = json_copy(dict(template["spec"]))
    _apply_pod_defaults(spec)
    labels: dict[str, str] = dict(tmeta.get("labels") or {})
    meta: Obj = {}
    if tmeta.get("annotations"):
        meta["annotations"] = dict(tmeta["annotations"])
    manager = "kubectl-create"
    if owner is not None:
        manager = "kube-controller-manager"
        owner_name = owner["metadata"]["name"]
        kind = owner["kind"]
        revision = template_hash(template)
        if kind == "StatefulSet":
            labels["apps.kubernetes.io/pod-index"] = name.rsplit("-", 1)[-1]
            labels["controller-revision-hash"] = f"{owner_name}-{revision}"
            labels["statefulset.kubernetes.io/pod-name"] = name
            spec["hostname"] = name
            spec["subdomain"] = (owner.get("spec") or {}).get("serviceName", owner_name)
        else:
            meta["generateName"] = f"{owner_name}-"
        if kind == "DaemonSet":
            labels["controller-revision-hash"] = revision
            labels["pod-template-generation"] = "1"
            if node_name:
                spec["affinity"] = {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchFields": [
                                        {
                                            "key": "metadata.name",
                                            "operator": "In",
                                            "values": [node_name],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                }
            _add_tolerations(spec, _DAEMONSET_TOLERATIONS)
        meta["ownerReferences"] = [owner_reference(owner)]
    meta["labels"] = labels
    creator = managed_entry(
        manager, fields_v1({"metadata": _tracked_metadata(meta), "spec": spec}), now
    )
    _admit_pod(spec, r)
    if node_name:
        spec["nodeName"] = node_name
    meta = _sorted({"name": name, "namespace": namespace, **meta, "managedFields": [creator]})
    if with_server_fields:
        _server_fields(meta, uid=uid, rng=r, now=now, generation=False)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": _sorted(spec)}


def _sorted(d: Obj) -> Obj:
    return dict(sorted(d.items()))


def _condition(kind: str, status: bool | str, at: str, reason: str = "", message: str = "") -> Obj:
    cond: Obj = {"lastProbeTime": None, "lastTransitionTime": at}
    if message:
        cond["message"] = message
    if reason:
        cond["reason"] = reason
    cond["status"] = status if isinstance(status, str) else ("True" if status else "False")
    cond["type"] = kind
    return cond


def _qos_class(spec: Mapping[str, Any]) -> str:
    resources = [c.get("resources") or {} for c in spec.get("containers", [])]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    guaranteed = all(
        (r.get("limits") or {}).get(k) is not None
        and (r.get("requests") or {}).get(k, (r.get("limits") or {}).get(k))
        == (r.get("limits") or {}).get(k)
        for r in resources
        for k in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"


def make_pod_status(
    pod: Mapping[str, Any],
    *,
    phase: PodPhase = "Running",
    ready: bool = True,
    host_ip: str | None = None,
    pod_ip: str | None = None,
    rng: RngLike = None,
    now: TimeLike = DEFAULT_NOW,
) -> Obj:
    """The status kubelet (or, for an unschedulable pod, the scheduler) writes for `pod`.

    `now` is when the pod was created; the status' timestamps trail it by the few seconds a real
    pod takes to be scheduled, start and pass its readiness probe.
    """
    meta = pod["metadata"]
    r = rng_for(rng, "PodStatus", meta.get("namespace", ""), meta["name"])
    spec = pod["spec"]
    node_name = spec.get("nodeName")
    qos = _qos_class(spec)
    containers = spec.get("containers", [])
    if node_name is None:
        if phase != "Pending":
            raise ValueError(f"a {phase} pod must be bound to a node")
        return {
            "conditions": [
                _condition(
                    "PodScheduled",
                    False,
                    timestamp(now),
                    "Unschedulable",
                    "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are "
                    "available: 3 No preemption victims found for incoming pod.",
                )
            ],
            "phase": "Pending",
            "qosClass": qos,
        }
    host_ip = host_ip or _ip_from_node_name(node_name) or _private_ip(r)
    pod_ip = pod_ip or _private_ip(r)
    t = {k: timestamp(now, s) for k, s in (("sched", 0), ("init", 1), ("net", 3), ("ready", 12))}
    names = [c["name"] for c in containers]
    statuses: list[Obj] = []
    for index, container in enumerate(containers):
        state: Obj
        c_ready = phase == "Running" and (ready or index > 0)
        if phase == "Pending":
            state = {"waiting": {"reason": "ContainerCreating"}}
        elif phase == "Running":
            state = {"running": {"startedAt": timestamp(now, 2 + index)}}
        else:
            code = 0 if phase == "Succeeded" else 1
            state = {
                "terminated": {
                    "containerID": f"containerd://{_hex(r, 64)}",
                    "exitCode": code,
                    "finishedAt": timestamp(now, 600),
                    "reason": "Completed" if code == 0 else "Error",
                    "startedAt": timestamp(now, 2 + index),
                }
            }
        status: Obj = {}
        if phase != "Pending":
            container_id = state.get("terminated", {}).get("containerID")
            status["containerID"] = container_id or f"containerd://{_hex(r, 64)}"
        status |= {
            "image": container["image"],
            "imageID": "" if phase == "Pending" else _image_id(container["image"]),
            "lastState": {},
            "name": container["name"],
            "ready": c_ready,
            "restartCount": 0,
            "started": phase == "Running",
            "state": state,
        }
        mounts = [
            {
                "mountPath": m["mountPath"],
                "name": m["name"],
                **(
                    {"readOnly": True, "recursiveReadOnly": "Disabled"} if m.get("readOnly") else {}
                ),
            }
            for m in container.get("volumeMounts", [])
        ]
        if mounts:
            status["volumeMounts"] = mounts
        statuses.append(status)
    running = phase == "Running"
    all_ready = running and ready
    done = phase in ("Succeeded", "Failed")
    unready, unready_msg = "", ""
    if done:
        unready = "PodCompleted"
    elif not all_ready:
        waiting = names[:1] if running else names
        unready = "ContainersNotReady"
        unready_msg = f"containers with unready status: [{' '.join(waiting)}]"
    conditions = [
        _condition("PodReadyToStartContainers", running, t["net"]),
        _condition("Initialized", True, t["init"], "PodCompleted" if done else ""),
        _condition("Ready", all_ready, t["ready"], unready, unready_msg),
        _condition("ContainersReady", all_ready, t["ready"], unready, unready_msg),
        _condition("PodScheduled", True, t["sched"]),
    ]
    out: Obj = {
        "conditions": conditions,
        "containerStatuses": statuses,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "phase": phase,
    }
    if phase != "Pending":
        out["podIP"] = pod_ip
        out["podIPs"] = [{"ip": pod_ip}]
    out["qosClass"] = qos
    out["startTime"] = t["init"]
    return out


def status_managed_entry(pod: Mapping[str, Any], now: TimeLike = DEFAULT_NOW) -> Obj:
    """The `managedFields` entry of whoever wrote the pod's status.

    kubelet owns everything but `qosClass` (set on create) and `PodScheduled` (set through the
    binding); a pod no node took has only the scheduler's condition.
    """
    status = pod["status"]
    if not pod["spec"].get("nodeName"):
        fields = fields_v1({"status": {"conditions": status["conditions"]}})
        return managed_entry("kube-scheduler", fields, now, subresource="status")
    owned = {k: v for k, v in status.items() if k != "qosClass"}
    owned["conditions"] = [c for c in status["conditions"] if c["type"] != "PodScheduled"]
    fields = fields_v1({"status": owned})
    # The binding wrote PodScheduled first, so the conditions list predates kubelet's write.
    fields["f:status"]["f:conditions"].pop(".", None)
    return managed_entry("kubelet", fields, timestamp(now, 12), subresource="status")


def _app_from_name(name: str) -> str:
    """`web` from `web-7d4b9c8f6d-x2k9p` or `web-x2k9p`, so bare pods get a plausible app label."""
    parts = name.split("-")
    safe = set(_SAFE_ALPHABET)
    while len(parts) > 1 and len(parts[-1]) in (5, 9, 10) and set(parts[-1]) <= safe:
        parts.pop()
    return "-".join(parts)


def make_pod(
    name: str,
    namespace: str,
    *,
    node_name: str | None,
    owner: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    phase: PodPhase = "Running",
    ready: bool = True,
    containers: int = 2,
    host_ip: str | None = None,
    pod_ip: str | None = None,
    rng: RngLike = None,
    now: TimeLike = DEFAULT_NOW,
    with_server_fields: bool = False,
) -> Obj:
    """A pod as a real cluster stores it once kubelet has reported on it.

    With an owner that has a template (a ReplicaSet, DaemonSet, StatefulSet) the pod is made from
    that template exactly as its controller would; `labels` and `annotations` are laid on top.
    """
    r = rng_for(rng, "Pod", namespace, name)
    owner_template = ((owner or {}).get("spec") or {}).get("template")
    if owner_template:
        template: Obj = json_copy(owner_template)
        template.setdefault("metadata", {}).setdefault("labels", {}).update(labels or {})
        if annotations is not None:
            template["metadata"]["annotations"] = {
                **(template["metadata"].get("annotations") or {}),
                **annotations,
            }
    else:
        app = (labels or {}).get("app") or _app_from_name(name)
        extra: dict[str, str] = dict(labels or {})
        if owner is not None and owner.get("kind") == "ReplicaSet":
            extra.setdefault(POD_TEMPLATE_HASH_LABEL, owner["metadata"]["name"].rsplit("-", 1)[-1])
        template = make_pod_template(
            app=app, team=namespace, labels=extra, annotations=annotations, containers=containers
        )
    pod = pod_from_template(
        template,
        name=name,
        namespace=namespace,
        owner=owner,
        node_name=node_name,
        rng=r,
        now=now,
        with_server_fields=with_server_fields,
    )
    pod["status"] = make_pod_status(
        pod, phase=phase, ready=ready, host_ip=host_ip, pod_ip=pod_ip, rng=r, now=now
    )
    pod["metadata"]["managedFields"].append(status_managed_entry(pod, now))
    return pod


# --- nodes -----------------------------------------------------------------------------------

_NODE_IMAGES: tuple[tuple[str, int], ...] = (
    ("602401143452.dkr.ecr.eu-west-1.amazonaws.com/amazon-k8s-cni:v1.19.0-eksbuild.1", 52_361_548),
    ("602401143452.dkr.ecr.eu-west-1.amazonaws.com/eks/aws-ebs-csi-driver:v1.37.0", 39_512_334),
    ("602401143452.dkr.ecr.eu-west-1.amazonaws.com/eks/kube-proxy:v1.31.2-eksbuild.3", 30_681_104),
    ("cr.fluentbit.io/fluent/fluent-bit:3.1.9", 30_127_862),
    ("602401143452.dkr.ecr.eu-west-1.amazonaws.com/eks/pause:3.5", 298_689),
)


def _node_resources(instance_type: str) -> tuple[Obj, Obj, str]:
    """Capacity and allocatable as kubelet reports them with EKS' reservations."""
    if instance_type not in INSTANCE_TYPES:
        known = ", ".join(sorted(INSTANCE_TYPES))
        raise ValueError(f"unknown instance type {instance_type!r}; known: {known}")
    cpus, gib, arch = INSTANCE_TYPES[instance_type]
    # The OS sees ~3% less memory than the instance type advertises.
    memory_ki = gib * 1024 * 1024 * 967 // 1000
    # EKS' kube-reserved: 6% of the first core, 1% of the second, 0.5% of the next two and
    # 0.25% of the rest; 255 MiB + 11 MiB per pod, plus a 100 MiB eviction threshold.
    reserved_mcpu = 60 + 10 + 5 * min(max(cpus - 2, 0), 2) + max(cpus - 4, 0) * 5 // 2
    reserved_mem_ki = (255 + 11 * 110 + 100) * 1024
    capacity = {
        "cpu": str(cpus),
        "ephemeral-storage": "83873772Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": f"{memory_ki}Ki",
        "pods": "110",
    }
    allocatable = {
        "cpu": f"{cpus * 1000 - reserved_mcpu}m",
        "ephemeral-storage": "76224326324",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": f"{memory_ki - reserved_mem_ki}Ki",
        "pods": "110",
    }
    return capacity, allocatable, arch


def make_node(
    name: str,
    *,
    group: str | None = None,
    zone: str = DEFAULT_ZONE,
    instance_type: str = DEFAULT_INSTANCE_TYPE,
    provider_id: str | None = None,
    cloud: Literal["aws", "sim"] = "aws",
    labels: Mapping[str, str] | None = None,
    roles: Sequence[str] = (),
    taints: Sequence[Mapping[str, Any]] | None = None,
    ready: bool = True,
    unschedulable: bool = False,
    kubelet_version: str = DEFAULT_KUBELET_VERSION,
    internal_ip: str | None = None,
    pod_cidr: str | None = None,
    rng: RngLike = None,
    now: TimeLike = DEFAULT_NOW,
    with_server_fields: bool = False,
) -> Obj:
    """A node as kubelet registered it and keeps reporting on it.

    The provider ID is EC2's (`aws:///<zone>/i-...`) unless `cloud="sim"` (`sim:///<group>/<id>`)
    or given. A node that is not ready carries the not-ready taints the node lifecycle
    controller puts on it.
    """
    r = rng_for(rng, "Node", name)
    uid = new_uid(r)
    ip = internal_ip or _ip_from_node_name(name) or _private_ip(r, 10, r.randrange(0, 64))
    iid = instance_id(r)
    if provider_id is None:
        provider_id = (
            f"aws:///{zone}/{iid}" if cloud == "aws" else f"sim:///{group or 'standalone'}/{iid}"
        )
    pod_cidr = pod_cidr or f"10.244.{r.randrange(0, 256)}.0/24"
    capacity, allocatable, arch = _node_resources(instance_type)
    region = region_of(zone)

    node_labels: dict[str, str] = {
        "beta.kubernetes.io/arch": arch,
        "beta.kubernetes.io/instance-type": instance_type,
        "beta.kubernetes.io/os": "linux",
        "failure-domain.beta.kubernetes.io/region": region,
        "failure-domain.beta.kubernetes.io/zone": zone,
        "k8s.io/cloud-provider-aws": _hex(r, 32),
        "kubernetes.io/arch": arch,
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": instance_type,
        "topology.kubernetes.io/region": region,
        "topology.kubernetes.io/zone": zone,
    }
    if group:
        node_labels["eks.amazonaws.com/capacityType"] = "ON_DEMAND"
        node_labels[NODE_GROUP_LABEL] = group
    node_labels.update(labels or {})
    role_labels = {f"{NODE_ROLE_PREFIX}{role}": "" for role in roles}

    annotations = {
        "alpha.kubernetes.io/provided-node-ip": ip,
        "csi.volume.kubernetes.io/nodeid": json.dumps(
            {"ebs.csi.aws.com": iid}, separators=(",", ":")
        ),
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
    }
    node_taints = [dict(t) for t in taints or ()]
    if not ready:
        for effect in ("NoSchedule", "NoExecute"):
            if not any(
                t.get("key") == "node.kubernetes.io/not-ready" and t.get("effect") == effect
                for t in node_taints
            ):
                taint: Obj = {"effect": effect, "key": "node.kubernetes.io/not-ready"}
                if effect == "NoExecute":
                    taint["timeAdded"] = timestamp(now, 40)
                node_taints.append(taint)
    spec: Obj = {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr], "providerID": provider_id}
    if node_taints:
        spec["taints"] = node_taints
    if unschedulable:
        spec["unschedulable"] = True

    heartbeat = timestamp(now, 30)
    pressure = (
        ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    )
    conditions = [
        {
            "lastHeartbeatTime": heartbeat,
            "lastTransitionTime": timestamp(now),
            "message": message,
            "reason": reason,
            "status": "False",
            "type": kind,
        }
        for kind, reason, message in pressure
    ]
    conditions.append(
        {
            "lastHeartbeatTime": heartbeat,
            "lastTransitionTime": timestamp(now, 15),
            "message": "kubelet is posting ready status"
            if ready
            else "container runtime network not ready: NetworkReady=false "
            "reason:NetworkPluginNotReady message:Network plugin returns error: "
            "cni plugin not initialized",
            "reason": "KubeletReady" if ready else "KubeletNotReady",
            "status": "True" if ready else "False",
            "type": "Ready",
        }
    )
    kernel = "6.1.115-126.197.amzn2023." + ("aarch64" if arch == "arm64" else "x86_64")
    status: Obj = {
        "addresses": [
            {"address": ip, "type": "InternalIP"},
            {"address": name, "type": "InternalDNS"},
            {"address": name, "type": "Hostname"},
        ],
        "allocatable": allocatable,
        "capacity": capacity,
        "conditions": conditions,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "images": [
            {"names": [_image_id(image), image], "sizeBytes": size} for image, size in _NODE_IMAGES
        ],
        "nodeInfo": {
            "architecture": arch,
            "bootID": new_uid(r),
            "containerRuntimeVersion": "containerd://1.7.23",
            "kernelVersion": kernel,
            "kubeProxyVersion": kubelet_version,
            "kubeletVersion": kubelet_version,
            "machineID": _hex(r, 32),
            "operatingSystem": "linux",
            "osImage": "Amazon Linux 2023.6.20241212",
            "systemUUID": "ec2" + _hex(r, 5) + "-" + new_uid(r)[9:],
        },
        "runtimeHandlers": [
            {"features": {"recursiveReadOnlyMounts": True, "userNamespaces": True}, "name": "runc"},
            {"features": {"recursiveReadOnlyMounts": True, "userNamespaces": True}, "name": ""},
        ],
    }

    kubelet_meta = {
        "annotations": {
            k: v for k, v in annotations.items() if k != "node.alpha.kubernetes.io/ttl"
        },
        "labels": node_labels,
    }
    kubelet_spec = {k: v for k, v in spec.items() if k in ("providerID", "taints")}
    managed = [
        managed_entry("kubelet", fields_v1({"metadata": kubelet_meta, "spec": kubelet_spec}), now),
        managed_entry(
            "kube-controller-manager",
            fields_v1(
                {
                    "metadata": {"annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
                    "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]},
                }
            ),
            timestamp(now, 1),
        ),
    ]
    if role_labels:
        managed.append(
            managed_entry(
                "kubectl-label",
                fields_v1({"metadata": {"labels": role_labels}}),
                timestamp(now, 60),
            )
        )
    managed.append(
        managed_entry("kubelet", fields_v1({"status": status}), heartbeat, subresource="status")
    )
    meta: Obj = {
        "annotations": annotations,
        "labels": _sorted({**node_labels, **role_labels}),
        "managedFields": managed,
        "name": name,
    }
    if with_server_fields:
        _server_fields(meta, uid=uid, rng=r, now=now, generation=False)
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec, "status": status}


# --- workloads -------------------------------------------------------------------------------


def _workload_meta(
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
    owner: Mapping[str, Any] | None = None,
) -> Obj:
    meta: Obj = {}
    if annotations:
        meta["annotations"] = dict(annotations)
    meta["labels"] = dict(labels)
    meta["name"] = name
    meta["namespace"] = namespace
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(owner)]
    return meta


def _selector_of(template: Mapping[str, Any], selector: Mapping[str, str] | None) -> dict[str, str]:
    if selector is not None:
        return dict(selector)
    labels: dict[str, str] = dict((template.get("metadata") or {}).get("labels") or {})
    if "app" in labels:
        picked = {"app": labels["app"]}
        if POD_TEMPLATE_HASH_LABEL in labels:
            picked[POD_TEMPLATE_HASH_LABEL] = labels[POD_TEMPLATE_HASH_LABEL]
        return picked
    return labels


def _finish_workload(
    obj: Obj,
    *,
    creator: str,
    status: Obj,
    r: random.Random,
    uid: str,
    now: TimeLike,
    with_server_fields: bool,
) -> Obj:
    """Attach status and both managers' entries: the creator's and the controller's status."""
    meta = obj["metadata"]
    api_version = obj["apiVersion"]
    meta["managedFields"] = [
        managed_entry(
            creator,
            fields_v1({"metadata": _tracked_metadata(meta), "spec": obj["spec"]}),
            now,
            api_version=api_version,
        ),
        managed_entry(
            "kube-controller-manager",
            fields_v1({"status": status}),
            timestamp(now, 15),
            api_version=api_version,
            subresource="status",
        ),
    ]
    obj["metadata"] = _sorted(meta)
    obj["status"] = status
    if with_server_fields:
        _server_fields(obj["metadata"], uid=uid, rng=r, now=now, generation=True)
    return obj


def _default_template(
    template: Mapping[str, Any] | None, name: str, namespace: str, containers: int
) -> Obj:
    if template is not None:
        return json_copy(dict(template))
    return make_pod_template(app=name, team=namespace, containers=containers)


def _workload_labels(
    template: Mapping[str, Any], labels: Mapping[str, str] | None
) -> dict[str, str]:
    if labels is not None:
        return dict(labels)
    tlabels = (template.get("metadata") or {}).get("labels") or {}
    return {k: v for k, v in tlabels.items() if k != POD_TEMPLATE_HASH_LABEL}


def make_deployment(
    name: str,
    namespace: str,
    *,
    replicas: int = 3,
    template: Mapping[str, Any] | None = None,
    containers: int = 2,
    labels: Mapping[str, str] | None = None,
    selector: Mapping[str, str] | None = None,
    ready: bool = True,
    rng: RngLike = None,
    now: TimeLike = DEFAULT_NOW,
    with_server_fields: bool = False,
) -> Obj:
    """A Deployment after its first rollout; `ready=False` reports no replica available."""
    r = rng_for(rng, "Deployment", namespace, name)
    uid = new_uid(r)
    tmpl = _default_template(template, name, namespace, containers)
    obj: Obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _workload_meta(
            name,
            namespace,
            _workload_labels(tmpl, labels),
            {"deployment.kubernetes.io/revision": "1"},
        ),
        "spec": {
            "progressDeadlineSeconds": 600,
            "replicas": replicas,
            "revisionHistoryLimit": 10,
            "selector": {"matchLabels": _selector_of(tmpl, selector)},
            "strategy": {
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
                "type": "RollingUpdate",
            },
            "template": tmpl,
        },
    }
    available = replicas if ready else 0
    rs_name = f"{name}-{template_hash(tmpl)}"
    status: Obj = {}
    if available:
        status["availableReplicas"] = available
    status["conditions"] = [
        {
            "lastTransitionTime": timestamp(now, 15),
            "lastUpdateTime": timestamp(now, 15),
            "message": "Deployment has minimum availability."
            if ready
            else "Deployment does not have minimum availability.",
            "reason": "MinimumReplicasAvailable" if ready else "MinimumReplicasUnavailable",
            "status": "True" if ready else "False",
            "type": "Available",
        },
        {
            "lastTransitionTime": timestamp(now),
            "lastUpdateTime": timestamp(now, 15),
            "message": f'ReplicaSet "{rs_name}" has successfully progressed.'
            if ready
            else f'ReplicaSet "{rs_name}" is progressing.',
            "reason": "NewReplicaSetAvailable" if ready else "ReplicaSetUpdated",
            "status": "True",
            "type": "Progressing",
        },
    ]
    status["observedGeneration"] = 1
    if available:
        status["readyReplicas"] = available
    status["replicas"] = replicas
    status["updatedReplicas"] = replicas
    if not ready and replicas:
        status["unavailableReplicas"] = replicas
    return _finish_workload(
        obj,
        creator="kubectl-create",
        status=status,
        r=r,
        uid=uid,
        now=now,
        with_server_fields=with_server_fields,
    )


def make_replicaset(
    name: str,
    namespace: str,
    *,
    replicas: int = 3,
    template: Mapping[str, Any] | None = None,
    containers: int = 2,
    owner: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    selector: Mapping[str, str] | None = None,
    ready: bool = True,
    rng: RngLike = None,
    now: TimeLike = DEFAULT_NOW,
    with_server_fields: bool = False,
) -> Obj:
    """A ReplicaSet; its template gets a `pod-template-hash` label unless it has one.

    Owned by a Deployment it carries the revision annotations the deployment controller sets;
    `replicaset_for_deployment` derives both name and template from the Deployment.
    """
    r = rng_for(rng, "ReplicaSet", namespace, name)
    uid = new_uid(r)
    tmpl = _default_template(template, name, namespace, containers)
    tlabels = tmpl.setdefault("metadata", {}).setdefault("labels", {})
    tlabels.setdefault(POD_TEMPLATE_HASH_LABEL, template_hash(tmpl))
    annotations = None
    if owner is not None and owner.get("kind") == "Deployment":
        desired = (owner.get("spec") or {}).get("replicas", replicas)
        annotations = {
            "deployment.kubernetes.io/desired-replicas": str(desired),
            "deployment.kubernetes.io/max-replicas": str(desired + math.ceil(desired * 0.25)),
            "deployment.kubernetes.io/revision": "1",
        }
    obj: Obj = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": _workload_meta(
            name, namespace, labels if labels is not None else dict(tlabels), annotations, owner
        ),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": _selector_of(tmpl, selector)},
            "template": tmpl,
        },
    }
    available = replicas if ready else 0
    status: Obj = {}
    if available:
        status["availableReplicas"] = available
    status["fullyLabeledReplicas"] = replicas
    status["observedGeneration"] = 1
    if available:
        status["readyReplicas"] = available
    status["replicas"] = replicas
    creator = "kube-controller-manager" if owner is not None else "kubectl-create"
    return _finish_workload(
        obj,
        creator=creator,
        status=status,
        r=r,
        uid=uid,
        now=now,
        with_server_fields=with_server_fields,
    )


def replicaset_for_deployment(
    deployment: Mapping[str, Any],
    *,
    ready: bool = True,
    rng: RngLike = None,
    now: TimeLike = DEFAULT_NOW,
    with_server_fields: bool = False,
) -> Obj:
    """The ReplicaSet the deployment controller creates for the Deployment's current template."""
    spec = deployment["spec"]
    tmpl = json_copy(spec["template"])
    pth = template_hash(tmpl)
    tmpl["metadata"].setdefault("labels", {})[POD_TEMPLATE_HASH_LABEL] = pth
    selector = {**spec["selector"]["matchLabels"], POD_TEMPLATE_HASH_LABEL: pth}
    meta = deployment["metadata"]
    return make_replicaset(
        f"{meta['name']}-{pth}",
        meta["namespace"],
        replicas=spec.get("replicas", 1),
        template=tmpl,
        owner=deployment,
        labels=dict(tmpl["metadata"]["labels"]),
        selector=selector,
        ready=ready,
        rng=rng,
        now=now,
        with_server_fields=with_server_fields,
    )


def make_statefulset(
    name: str,
    namespace: str,
    *,
    replicas: int = 3,
    service_name: str | None = None,
    template: Mapping[str, Any] | None = None,
    containers: int = 2,
    labels: Mapping[str, str] | None = None,
    selector: Mapping[str, str] | None = None,
    ready: bool = True,
    rng: RngLike = None,
    now: TimeLike = DEFAULT_NOW,
    with_server_fields: bool = False,
) -> Obj:
    r = rng_for(rng, "StatefulSet", namespace, name)
    uid = new_uid(r)
    tmpl = _default_template(template, name, namespace, containers)
    obj: Obj = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _workload_meta(name, namespace, _workload_labels(tmpl, labels)),
        "spec": {
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": "Retain",
                "whenScaled": "Retain",
            },
            "podManagementPolicy": "OrderedReady",
            "replicas": replicas,
            "revisionHistoryLimit": 10,
            "selector": {"matchLabels": _selector_of(tmpl, selector)},
            "serviceName": service_name or name,
            "template": tmpl,
            "updateStrategy": {"rollingUpdate": {"partition": 0}, "type": "RollingUpdate"},
        },
    }
    revision = f"{name}-{template_hash(tmpl)}"
    available = replicas if ready else 0
    status: Obj = {
        "availableReplicas": available,
        "collisionCount": 0,
        "currentReplicas": replicas,
        "currentRevision": revision,
        "observedGeneration": 1,
    }
    if available:
        status["readyReplicas"] = available
    status |= {"replicas": replicas, "updateRevision": revision, "updatedReplicas": replicas}
    return _finish_workload(
        obj,
        creator="kubectl-create",
        status=status,
        r=r,
        uid=uid,
        now=now,
        with_server_fields=with_server_fields,
    )


def make_daemonset(
    name: str,
    namespace: str,
    *,
    nodes: int = 0,
    template: Mapping[str, Any] | None = None,
    containers: int = 2,
    labels: Mapping[str, str] | None = None,
    selector: Mapping[str, str] | None = None,
    ready: bool = True,
    rng: RngLike = None,
    now: TimeLike = DEFAULT_NOW,
    with_server_fields: bool = False,
) -> Obj:
    """A DaemonSet whose status reports `nodes` nodes to run on."""
    r = rng_for(rng, "DaemonSet", namespace, name)
    uid = new_uid(r)
    tmpl = _default_template(template, name, namespace, containers)
    obj: Obj = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _workload_meta(
            name,
            namespace,
            _workload_labels(tmpl, labels),
            {"deprecated.daemonset.template.generation": "1"},
        ),
        "spec": {
            "revisionHistoryLimit": 10,
            "selector": {"matchLabels": _selector_of(tmpl, selector)},
            "template": tmpl,
            "updateStrategy": {
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
                "type": "RollingUpdate",
            },
        },
    }
    available = nodes if ready else 0
    status: Obj = {"currentNumberScheduled": nodes, "desiredNumberScheduled": nodes}
    if available:
        status["numberAvailable"] = available
    status["numberMisscheduled"] = 0
    status["numberReady"] = available
    status["observedGeneration"] = 1
    if nodes - available:
        status["numberUnavailable"] = nodes - available
    status["updatedNumberScheduled"] = nodes
    return _finish_workload(
        obj,
        creator="kubectl-create",
        status=status,
        r=r,
        uid=uid,
        now=now,
        with_server_fields=with_server_fields,
    )


# --- policy, namespaces, services ------------------------------------------------------------

IntOrPercent = int | str


def scaled_value(value: IntOrPercent, total: int) -> int:
    """An int-or-percent resolved against `total`, rounding up as the disruption controller does."""
    if isinstance(value, int):
        return value
    if not value.endswith("%"):
        raise ValueError(f"{value!r} is neither an integer nor a percentage")
    return math.ceil(int(value[:-1]) * total / 100)


def make_pdb(
    name: str,
    namespace: str,
    *,
    selector: Mapping[str, str],
    min_available: IntOrPercent | None = None,
    max_unavailable: IntOrPercent | None = None,
    expected_pods: int | None = None,
    healthy_pods: int | None = None,
    rng: RngLike = None,
    now: TimeLike = DEFAULT_NOW,
    with_server_fields: bool = False,
) -> Obj:
    """A PodDisruptionBudget; with `expected_pods` it has the disruption controller's status."""
    if (min_available is None) == (max_unavailable is None):
        raise ValueError("set exactly one of min_available and max_unavailable")
    r = rng_for(rng, "PodDisruptionBudget", namespace, name)
    uid = new_uid(r)
    spec: Obj = {}
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    if min_available is not None:
        spec["minAvailable"] = min_available
    spec["selector"] = {"matchLabels": dict(selector)}
    obj: Obj = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    meta = obj["metadata"]
    managed = [
        managed_entry(
            "kubectl-create",
            fields_v1({"spec": spec}),
            now,
            api_version="policy/v1",
        )
    ]
    if expected_pods is not None:
        healthy = expected_pods if healthy_pods is None else healthy_pods
        if min_available is not None:
            desired = scaled_value(min_available, expected_pods)
        else:
            assert max_unavailable is not None
            desired = max(0, expected_pods - scaled_value(max_unavailable, expected_pods))
        allowed = max(0, healthy - desired)
        obj["status"] = {
            "conditions": [
                {
                    "lastTransitionTime": timestamp(now, 15),
                    "message": "",
                    "observedGeneration": 1,
                    "reason": "SufficientPods" if allowed else "InsufficientPods",
                    "status": "True" if allowed else "False",
                    "type": "DisruptionAllowed",
                }
            ],
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "disruptionsAllowed": allowed,
            "expectedPods": expected_pods,
            "observedGeneration": 1,
        }
        managed.append(
            managed_entry(
                "kube-controller-manager",
                fields_v1({"status": obj["status"]}),
                timestamp(now, 15),
                api_version="policy/v1",
                subresource="status",
            )
        )
    meta["managedFields"] = managed
    if with_server_fields:
        _server_fields(meta, uid=uid, rng=r, now=now, generation=True)
    return obj


def make_namespace(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    rng: RngLike = None,
    now: TimeLike = DEFAULT_NOW,
    with_server_fields: bool = False,
) -> Obj:
    r = rng_for(rng, "Namespace", name)
    uid = new_uid(r)
    ns_labels = {**(labels or {}), "kubernetes.io/metadata.name": name}
    meta: Obj = {
        "labels": ns_labels,
        "managedFields": [
            managed_entry("kubectl-create", fields_v1({"metadata": {"labels": ns_labels}}), now)
        ],
        "name": name,
    }
    if with_server_fields:
        _server_fields(meta, uid=uid, rng=r, now=now, generation=False)
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": meta,
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def make_service(
    name: str,
    namespace: str,
    *,
    selector: Mapping[str, str],
    ports: Sequence[int | Mapping[str, Any]] = (80,),
    target_port: int | str = "http",
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP",
    headless: bool = False,
    rng: RngLike = None,
    now: TimeLike = DEFAULT_NOW,
    with_server_fields: bool = False,
) -> Obj:
    """A Service; the cluster IP and node ports are allocated by the server, so need server fields."""
    if headless and service_type != "ClusterIP":
        raise ValueError("only a ClusterIP service can be headless")
    r = rng_for(rng, "Service", namespace, name)
    uid = new_uid(r)
    port_list: list[Obj] = []
    for port in ports:
        if isinstance(port, int):
            entry: Obj = {
                "name": {80: "http", 443: "https"}.get(port, f"port-{port}"),
                "port": port,
                "protocol": "TCP",
                "targetPort": target_port,
            }
        else:
            entry = {"protocol": "TCP", "targetPort": port.get("port"), **port}
        if service_type != "ClusterIP" and with_server_fields:
            entry.setdefault("nodePort", r.randrange(30000, 32768))
        port_list.append(_sorted(entry))
    spec: Obj = {"internalTrafficPolicy": "Cluster", "ipFamilies": ["IPv4"]}
    spec["ipFamilyPolicy"] = "SingleStack"
    spec["ports"] = port_list
    spec["selector"] = dict(selector)
    spec["sessionAffinity"] = "None"
    spec["type"] = service_type
    if service_type != "ClusterIP":
        spec["externalTrafficPolicy"] = "Cluster"
    created_spec = dict(spec)
    cluster_ip = "None" if headless else (f"172.20.{r.randrange(256)}.{r.randrange(1, 255)}")
    if headless:
        created_spec["clusterIP"] = "None"
    if headless or with_server_fields:
        spec["clusterIP"] = cluster_ip
        spec["clusterIPs"] = [cluster_ip]
    status: Obj = {"loadBalancer": {}}
    if service_type == "LoadBalancer" and with_server_fields:
        host = f"a{_hex(r, 32)}-{r.randrange(10**9, 10**10)}.eu-west-1.elb.amazonaws.com"
        status = {"loadBalancer": {"ingress": [{"hostname": host}]}}
    meta: Obj = {
        "managedFields": [managed_entry("kubectl-create", fields_v1({"spec": created_spec}), now)],
        "name": name,
        "namespace": namespace,
    }
    if with_server_fields:
        _server_fields(meta, uid=uid, rng=r, now=now, generation=False)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": _sorted(spec),
        "status": status,
    }
