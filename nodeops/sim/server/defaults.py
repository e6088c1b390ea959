"""Defaulting and admission for built-in kinds, done on create as kube-apiserver does.

Clients read these fields back (a drain reads `terminationGracePeriodSeconds`, a PDB check reads
tolerations), so objects created in the simulator must carry the same defaults as on a real
cluster: the API defaulters plus the DefaultTolerationSeconds and ServiceAccount admission
plugins.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from nodeops.sim.server import errors

_NOT_READY = "node.kubernetes.io/not-ready"
_UNREACHABLE = "node.kubernetes.io/unreachable"


def _container_defaults(c: dict[str, Any]) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    image = str(c.get("image", ""))
    tag_latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
    c.setdefault("imagePullPolicy", "Always" if tag_latest else "IfNotPresent")
    c.setdefault("resources", {})
    for p in c.get("ports") or []:
        p.setdefault("protocol", "TCP")


def pod_spec_defaults(spec: dict[str, Any]) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            _container_defaults(c)


def _pod_admission(spec: dict[str, Any]) -> None:
    sa = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = sa
    spec["serviceAccount"] = sa
    tolerations = spec.setdefault("tolerations", [])
    for key in (_NOT_READY, _UNREACHABLE):
        if not any(
            t.get("key") == key and t.get("effect") in ("NoExecute", None, "") for t in tolerations
        ) and not any(t.get("operator") == "Exists" and not t.get("key") for t in tolerations):
            tolerations.append(
                {
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
            )


def _qos_class(spec: dict[str, Any]) -> str:
    containers = spec.get("containers") or []
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            any_set = True
        for r in ("cpu", "memory"):
            if r not in lim or (r in req and req[r] != lim[r]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _pod(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    pod_spec_defaults(spec)
    _pod_admission(spec)
    status = obj.get("status") or {}
    status.setdefault("phase", "Pending")
    status["qosClass"] = _qos_class(spec)
    obj["status"] = status


def _template(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    tmpl = spec.setdefault("template", {})
    tmpl.setdefault("metadata", {})
    pod_spec_defaults(tmpl.setdefault("spec", {}))


def _deployment(obj: dict[str, Any]) -> None:
    _template(obj)
    spec = obj["spec"]
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
    if strategy.get("type", "RollingUpdate") == "RollingUpdate":
        strategy.setdefault("type", "RollingUpdate")
        ru = strategy.setdefault("rollingUpdate", {})
        ru.setdefault("maxUnavailable", "25%")
        ru.setdefault("maxSurge", "25%")


def _replicaset(obj: dict[str, Any]) -> None:
    _template(obj)
    obj["spec"].setdefault("replicas", 1)


def _statefulset(obj: dict[str, Any]) -> None:
    _template(obj)
    spec = obj["spec"]
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    spec.setdefault(
        "persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"}
    )


def _daemonset(obj: dict[str, Any]) -> None:
    _template(obj)
    spec = obj["spec"]
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault(
        "updateStrategy",
        {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
    )


def _service(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for p in spec.get("ports") or []:
        p.setdefault("protocol", "TCP")
        p.setdefault("targetPort", p.get("port"))


def _namespace(obj: dict[str, Any]) -> None:
    obj.setdefault("spec", {})["finalizers"] = ["kubernetes"]
    obj["status"] = {"phase": "Active"}
    labels = obj["metadata"].setdefault("labels", {})
    labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]


def merge_string_data(obj: dict[str, Any]) -> None:
    """A Secret's `stringData` is write-only: kube-apiserver's conversion merges it into `data`
    (base64-encoded, winning over the same key there) and never stores or returns it."""
    given = obj.pop("stringData", None)
    if not given:
        return
    if not isinstance(given, dict):
        raise errors.bad_request("stringData must be a map of strings")
    data = obj.get("data") or {}
    for key, value in given.items():
        if not isinstance(value, str):
            raise errors.bad_request(f"stringData[{key}] must be a string")
        data[key] = base64.b64encode(value.encode()).decode()
    obj["data"] = data


def _secret(obj: dict[str, Any]) -> None:
    merge_string_data(obj)
    obj.setdefault("type", "Opaque")


def _network_policy(obj: dict[str, Any]) -> None:
    """SetDefaults_NetworkPolicy and _NetworkPolicyPort; an absent podSelector reads back as the
    empty selector (all pods of the namespace), because the field is not omitempty."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("podSelector", {})
    if not spec.get("policyTypes"):
        spec["policyTypes"] = ["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]
    for direction in ("ingress", "egress"):
        for rule in spec.get(direction) or []:
            for port in rule.get("ports") or []:
                port.setdefault("protocol", "TCP")


def _priority_class(obj: dict[str, Any]) -> None:
    obj.setdefault("preemptionPolicy", "PreemptLowerPriority")


DEFAULTERS: dict[tuple[str, str], Callable[[dict[str, Any]], None]] = {
    ("scheduling.k8s.io", "PriorityClass"): _priority_class,
    ("", "Pod"): _pod,
    ("apps", "Deployment"): _deployment,
    ("apps", "ReplicaSet"): _replicaset,
    ("apps", "StatefulSet"): _statefulset,
    ("apps", "DaemonSet"): _daemonset,
    ("", "Service"): _service,
    ("", "Namespace"): _namespace,
    ("", "Secret"): _secret,
    ("networking.k8s.io", "NetworkPolicy"): _network_policy,
}


def apply_create_defaults(group: str, kind: str, obj: dict[str, Any]) -> None:
    fn = DEFAULTERS.get((group, kind))
    if fn is not None:
        fn(obj)


# Kinds whose `status` is reset on create (their strategies' PrepareForCreate); nodes keep
# theirs, and namespaces are given phase Active by their defaulter.
STATUS_RESET_ON_CREATE = frozenset(
    {
        ("", "Pod"),
        ("apps", "Deployment"),
        ("apps", "ReplicaSet"),
        ("apps", "StatefulSet"),
        ("apps", "DaemonSet"),
        ("policy", "PodDisruptionBudget"),
        ("", "Service"),
    }
)

# Fields of a pod's spec that an update may change (pod spec is otherwise immutable).
POD_MUTABLE_SPEC = (
    "activeDeadlineSeconds",
    "tolerations",
    "terminationGracePeriodSeconds",
    "schedulingGates",
)
