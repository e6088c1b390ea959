"""Server-side `meta.k8s.io/v1` Table output, as kube-apiserver produces for `kubectl get`.

kubectl asks for `Accept: application/json;as=Table;v=v1;g=meta.k8s.io` and prints the cells it
is given, so every column, cell type and cell text here follows the server code that makes them:
the built-in printers of kube-apiserver (`pkg/printers/internalversion`), the custom resource
convertor of apiextensions-apiserver (printer columns evaluated with Kubernetes JSONPath), and the
request handler that decides what each row's `object` holds.

Printers see objects as the server's internal types would after defaulting and conversion, so a
field the server always defaults (a Deployment's replicas, a Service's type, a port's protocol) is
read with that default when absent. The server always renders the wide columns (priority 1);
kubectl hides them unless `-o wide` is given.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from nodeops.common.selectors import (
    SelectorError,
    format_labels,
    label_selector_from_object,
)
from nodeops.sim.server.jsonpath import JsonPath, JsonPathError, compile_path, format_value

__all__ = [
    "column_definitions",
    "human_duration",
    "to_table",
    "translate_timestamp_since",
]

_DOCS: Final[dict[str, str]] = {
    "ObjectMeta.name": (
        "Name must be unique within a namespace. Is required when creating resources, "
        "although some resources may allow a client to request the generation of an "
        "appropriate name automatically. Name is primarily intended for creation "
        "idempotence and configuration definition. Cannot be updated. More info: "
        "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
    ),
    "ObjectMeta.creationTimestamp": (
        "CreationTimestamp is a timestamp representing the server time when this "
        "object was created. It is not guaranteed to be set in happens-before order "
        "across separate operations. Clients may not set this value. It is represented "
        "in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for "
        "lists. More info: https://git.k8s.io/community/contributors/devel/sig-architec"
        "ture/api-conventions.md#metadata"
    ),
    "PodStatus.podIP": (
        "podIP address allocated to the pod. Routable at least within the cluster. "
        "Empty if not yet allocated."
    ),
    "PodSpec.nodeName": (
        "NodeName indicates in which node this pod is scheduled. If empty, this pod is "
        "a candidate for scheduling by the scheduler defined in schedulerName. Once "
        "this field is set, the kubelet for this node becomes responsible for the "
        "lifecycle of this pod. This field should not be used to express a desire for "
        "the pod to be scheduled on a specific node. "
        "https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#noden"
        "ame"
    ),
    "PodStatus.nominatedNodeName": (
        "nominatedNodeName is set only when this pod preempts other pods on the node, "
        "but it cannot be scheduled right away as preemption victims receive their "
        "graceful termination periods. This field does not guarantee that the pod will "
        "be scheduled on this node. Scheduler may decide to place the pod elsewhere if "
        "other nodes become available sooner. Scheduler may also decide to give the "
        "resources on this node to a higher priority pod that is created after "
        "preemption. As a result, this field may be different than PodSpec.nodeName "
        "when the pod is scheduled."
    ),
    "PodSpec.readinessGates": (
        "If specified, all readiness gates will be evaluated for pod readiness. A pod "
        "is ready when all its containers are ready AND all conditions specified in "
        'the readiness gates have status equal to "True" More info: '
        "https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates"
    ),
    "ReplicaSetSpec.replicas": (
        "Replicas is the number of desired pods. This is a pointer to distinguish "
        "between explicit zero and unspecified. Defaults to 1. More info: "
        "https://kubernetes.io/docs/concepts/workloads/controllers/replicaset"
    ),
    "ReplicaSetStatus.replicas": (
        "Replicas is the most recently observed number of non-terminating pods. More "
        "info: https://kubernetes.io/docs/concepts/workloads/controllers/replicaset"
    ),
    "ReplicaSetStatus.readyReplicas": (
        "The number of non-terminating pods targeted by this ReplicaSet with a Ready Condition."
    ),
    "ReplicaSetSpec.selector": (
        "Selector is a label query over pods that should match the replica count. If "
        "the selector is empty, it is defaulted to the labels present on the pod "
        "template. Label keys and values that must match in order to be controlled by "
        "this replica set. More info: "
        "https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#labe"
        "l-selectors"
    ),
    "DaemonSetStatus.desiredNumberScheduled": (
        "The total number of nodes that should be running the daemon pod (including "
        "nodes correctly running the daemon pod). More info: "
        "https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/"
    ),
    "DaemonSetStatus.currentNumberScheduled": (
        "The number of nodes that are running at least 1 daemon pod and are supposed "
        "to run the daemon pod. More info: "
        "https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/"
    ),
    "DaemonSetStatus.numberReady": (
        "The number of nodes that should be running the daemon pod and have one or "
        "more of the daemon pod running and ready."
    ),
    "DaemonSetStatus.updatedNumberScheduled": (
        "The total number of nodes that are running updated daemon pod"
    ),
    "DaemonSetStatus.numberAvailable": (
        "The number of nodes that should be running the daemon pod and have one or "
        "more of the daemon pod running and available (ready for at least "
        "spec.minReadySeconds)"
    ),
    "PodSpec.nodeSelector": (
        "NodeSelector is a selector which must be true for the pod to fit on a node. "
        "Selector which must match a node's labels for the pod to be scheduled on that "
        "node. More info: https://kubernetes.io/docs/concepts/configuration/assign-pod-"
        "node/"
    ),
    "DaemonSetSpec.selector": (
        "A label query over pods that are managed by the daemon set. Must match in "
        "order to be controlled. If empty, defaulted to labels on Pod template. More "
        "info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels"
        "/#label-selectors"
    ),
    "ServiceSpec.type": (
        "type determines how the Service is exposed. Defaults to ClusterIP. Valid "
        'options are ExternalName, ClusterIP, NodePort, and LoadBalancer. "ClusterIP" '
        "allocates a cluster-internal IP address for load-balancing to endpoints. "
        "Endpoints are determined by the selector or if that is not specified, by "
        "manual construction of an Endpoints object or EndpointSlice objects. If "
        'clusterIP is "None", no virtual IP is allocated and the endpoints are '
        'published as a set of endpoints rather than a virtual IP. "NodePort" builds '
        "on ClusterIP and allocates a port on every node which routes to the same "
        'endpoints as the clusterIP. "LoadBalancer" builds on NodePort and creates an '
        "external load-balancer (if supported in the current cloud) which routes to "
        'the same endpoints as the clusterIP. "ExternalName" aliases this service to '
        "the specified externalName. Several other fields do not apply to ExternalName "
        "services. More info: https://kubernetes.io/docs/concepts/services-networking/s"
        "ervice/#publishing-services-service-types"
    ),
    "ServiceSpec.clusterIP": (
        "clusterIP is the IP address of the service and is usually assigned randomly. "
        "If an address is specified manually, is in-range (as per system "
        "configuration), and is not in use, it will be allocated to the service; "
        "otherwise creation of the service will fail. This field may not be changed "
        "through updates unless the type field is also being changed to ExternalName "
        "(which requires this field to be blank) or the type field is being changed "
        "from ExternalName (in which case this field may optionally be specified, as "
        'describe above).  Valid values are "None", empty string (""), or a valid IP '
        'address. Setting this to "None" makes a "headless service" (no virtual IP), '
        "which is useful when direct endpoint connections are preferred and proxying "
        "is not required.  Only applies to types ClusterIP, NodePort, and "
        "LoadBalancer. If this field is specified when creating a Service of type "
        "ExternalName, creation will fail. This field will be wiped when updating a "
        "Service to type ExternalName. More info: "
        "https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-a"
        "nd-service-proxies"
    ),
    "ServiceSpec.externalIPs": (
        "externalIPs is a list of IP addresses for which nodes in the cluster will "
        "also accept traffic for this service.  These IPs are not managed by "
        "Kubernetes.  The user is responsible for ensuring that traffic arrives at a "
        "node with this IP.  A common example is external load-balancers that are not "
        "part of the Kubernetes system."
    ),
    "ServiceSpec.ports": (
        "The list of ports that are exposed by this service. More info: "
        "https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-a"
        "nd-service-proxies"
    ),
    "ServiceSpec.selector": (
        "Route service traffic to pods with label keys and values matching this "
        "selector. If empty or not present, the service is assumed to have an external "
        "process managing its endpoints, which Kubernetes will not modify. Only "
        "applies to types ClusterIP, NodePort, and LoadBalancer. Ignored if type is "
        "ExternalName. More info: "
        "https://kubernetes.io/docs/concepts/services-networking/service/"
    ),
    "Endpoints.subsets": (
        "The set of all endpoints is the union of all subsets. Addresses are placed "
        "into subsets according to the IPs they share. A single address with multiple "
        "ports, some of which are ready and some of which are not (because they come "
        "from different containers) will result in the address being displayed in "
        "different subsets for the different ports. No address will appear in both "
        "Addresses and NotReadyAddresses in the same subset. Sets of addresses and "
        "ports that comprise a service."
    ),
    "NodeSystemInfo.kubeletVersion": ("Kubelet Version reported by the node."),
    "NodeStatus.addresses": (
        "List of addresses reachable to the node. Queried from cloud provider, if "
        "available. More info: "
        "https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This "
        "field is declared as mergeable, but the merge key is not sufficiently unique, "
        "which can cause data corruption when it is merged. Callers should instead use "
        "a full-replacement patch. See https://pr.k8s.io/79391 for an example. "
        "Consumers should assume that addresses can change during the lifetime of a "
        "Node. However, there are some exceptions where this may not be possible, such "
        "as Pods that inherit a Node's address in its own status or consumers of the "
        "downward API (status.hostIP)."
    ),
    "NodeSystemInfo.osImage": (
        "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."
    ),
    "NodeSystemInfo.kernelVersion": (
        "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."
    ),
    "NodeSystemInfo.containerRuntimeVersion": (
        "ContainerRuntime Version reported by the node through runtime remote API "
        "(e.g. containerd://1.4.2)."
    ),
    "Event.lastTimestamp": (
        "The time at which the most recent occurrence of this event was recorded."
    ),
    "Event.type": ("Type of this event (Normal, Warning), new types could be added in the future"),
    "Event.reason": (
        "This should be a short, machine understandable string that gives the reason "
        "for the transition into the object's current status."
    ),
    "Event.involvedObject": ("The object that this event is about."),
    "ObjectReference.fieldPath": (
        "If referring to a piece of an object instead of an entire object, this string "
        "should contain a valid JSON/Go field access statement, such as "
        "desiredState.manifest.containers[2]. For example, if the object reference is "
        "to a container within a pod, this would take on a value like: "
        '"spec.containers{name}" (where "name" refers to the name of the container '
        "that triggered the event) or if no container name is specified "
        '"spec.containers[2]" (container with index 2 in this pod). This syntax is '
        "chosen only to have some well-defined way of referencing a part of an object."
    ),
    "Event.source": (
        "The component reporting this event. Should be a short machine understandable string."
    ),
    "Event.message": ("A human-readable description of the status of this operation."),
    "Event.firstTimestamp": (
        "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)"
    ),
    "Event.count": ("The number of times this event has occurred."),
    "Secret.type": (
        "Used to facilitate programmatic handling of secret data. More info: "
        "https://kubernetes.io/docs/concepts/configuration/secret/#secret-types"
    ),
    "Secret.data": (
        "Data contains the secret data. Each key must consist of alphanumeric "
        "characters, '-', '_' or '.'. The serialized form of the secret data is a "
        "base64 encoded string, representing the arbitrary (possibly non-string) data "
        "value here. Described in https://tools.ietf.org/html/rfc4648#section-4"
    ),
    "ServiceAccount.secrets": (
        "Secrets is a list of the secrets in the same namespace that pods running "
        "using this ServiceAccount are allowed to use. Pods are only limited to this "
        'list if this service account has a "kubernetes.io/enforce-mountable-secrets" '
        'annotation set to "true". The "kubernetes.io/enforce-mountable-secrets" '
        "annotation is deprecated since v1.32. Prefer separate namespaces to isolate "
        "access to mounted secrets. This field should not be used to find "
        "auto-generated service account token secrets for use outside of pods. "
        "Instead, tokens can be requested directly using the TokenRequest API, or "
        "service account token secrets can be manually created. More info: "
        "https://kubernetes.io/docs/concepts/configuration/secret"
    ),
    "DeploymentStatus.updatedReplicas": (
        "Total number of non-terminating pods targeted by this deployment that have "
        "the desired template spec."
    ),
    "DeploymentStatus.availableReplicas": (
        "Total number of available non-terminating pods (ready for at least "
        "minReadySeconds) targeted by this deployment."
    ),
    "DeploymentSpec.selector": (
        "Label selector for pods. Existing ReplicaSets whose pods are selected by this "
        "will be the ones affected by this deployment."
    ),
    "ConfigMap.data": (
        "Data contains the configuration data. Each key must consist of alphanumeric "
        "characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use "
        "the BinaryData field. The keys stored in Data must not overlap with the keys "
        "in the BinaryData field, this is enforced during validation process."
    ),
    "LeaseSpec.holderIdentity": (
        "holderIdentity contains the identity of the holder of a current lease. If "
        "Coordinated Leader Election is used, the holder identity must be equal to the "
        "elected LeaseCandidate.metadata.name field."
    ),
    "PriorityClass.value": (
        "value represents the integer value of this priority class. This is the actual "
        "priority that pods receive when they have the name of this class in their pod spec."
    ),
    "PriorityClass.globalDefault": (
        "globalDefault specifies whether this PriorityClass should be considered as the "
        "default priority for pods that do not have any priority class. Only one "
        "PriorityClass can be marked as `globalDefault`. However, if more than one "
        "PriorityClasses exists with their `globalDefault` field set to true, the smallest "
        "value of such global default PriorityClasses will be used as the default priority."
    ),
    "PriorityClass.preemptionPolicy": (
        "preemptionPolicy is the Policy for preempting pods with lower priority. One of "
        "Never, PreemptLowerPriority. Defaults to PreemptLowerPriority if unset."
    ),
    "VolumeAttachmentSpec.attacher": (
        "attacher indicates the name of the volume driver that MUST handle this "
        "request. This is the name returned by GetPluginName()."
    ),
    "VolumeAttachmentSource.persistentVolumeName": (
        "persistentVolumeName represents the name of the persistent volume to attach."
    ),
    "VolumeAttachmentSpec.nodeName": (
        "nodeName represents the node that the volume should be attached to."
    ),
    "VolumeAttachmentStatus.attached": (
        "attached indicates the volume is successfully attached. This field must only "
        "be set by the entity completing the attach operation, i.e. the "
        "external-attacher."
    ),
}

TABLE_API_VERSION: Final = "meta.k8s.io/v1"

_NAME_DOC: Final = _DOCS["ObjectMeta.name"]
_AGE_DOC: Final = _DOCS["ObjectMeta.creationTimestamp"]

Cells = list[Any]
_Printer = Callable[[Mapping[str, Any], datetime], Cells]


def _col(
    name: str, type_: str, description: str, *, priority: int = 0, format_: str = ""
) -> dict[str, Any]:
    """A TableColumnDefinition; every field is always serialised, as Go does."""
    return {
        "name": name,
        "type": type_,
        "format": format_,
        "description": description,
        "priority": priority,
    }


def _name_col(priority: int = 0) -> dict[str, Any]:
    return _col("Name", "string", _NAME_DOC, format_="name", priority=priority)


def _age_col() -> dict[str, Any]:
    return _col("Age", "string", _AGE_DOC)


_CONTAINERS_DOC: Final = "Names of each container in the template."
_IMAGES_DOC: Final = "Images referenced by each container in the template."

# --------------------------------------------------------------------------------------------
# Time
# --------------------------------------------------------------------------------------------

_MICROSECOND: Final = timedelta(microseconds=1)
_RFC3339_RE: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")


def _trunc_div(a: int, b: int) -> int:
    """Go's integer division, which truncates toward zero."""
    q = abs(a) // b
    return q if a >= 0 else -q


def human_duration(d: timedelta) -> str:
    """duration.HumanDuration: the AGE text (`45s`, `5m10s`, `3h20m`, `3d4h`, `2y30d`)."""
    us = d // _MICROSECOND
    seconds = _trunc_div(us, 1_000_000)
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 60 * 2:
        return f"{seconds}s"
    minutes = us // 60_000_000
    if minutes < 10:
        s = seconds % 60
        return f"{minutes}m" if s == 0 else f"{minutes}m{s}s"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = us // 3_600_000_000
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        years = hours // 24 // 365
        return f"{years}y" if dy == 0 else f"{years}y{dy}d"
    return f"{hours // 24 // 365}y"


def _parse_time(value: Any) -> datetime | None:
    """A metav1.Time/MicroTime JSON value; None stands for Go's zero time."""
    if not value or not isinstance(value, str):
        return None
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    if t.year == 1 and t == datetime(1, 1, 1, tzinfo=UTC):
        return None
    return t


def _aware(now: datetime) -> datetime:
    return now if now.tzinfo is not None else now.replace(tzinfo=UTC)


def translate_timestamp_since(value: Any, now: datetime) -> str:
    """translateTimestampSince: the age of a timestamp, `<unknown>` when it is unset."""
    t = _parse_time(value)
    if t is None:
        return "<unknown>"
    return human_duration(_aware(now) - t)


def _age(obj: Mapping[str, Any], now: datetime) -> str:
    meta = obj.get("metadata") or {}
    return translate_timestamp_since(meta.get("creationTimestamp"), now)


def _rfc3339_utc(value: Any) -> str:
    """`Time.UTC().Format(time.RFC3339)`, which renders an unset time as year 1."""
    t = _parse_time(value)
    if t is None:
        return "0001-01-01T00:00:00Z"
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------------------
# Shared formatting
# --------------------------------------------------------------------------------------------


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _layout_containers(containers: list[Mapping[str, Any]] | None) -> tuple[str, str]:
    cs = containers or []
    return (
        ",".join(str(c.get("name") or "") for c in cs),
        ",".join(str(c.get("image") or "") for c in cs),
    )


def _template_containers(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    return (template.get("spec") or {}).get("containers") or []


_SELECTOR_CACHE: dict[str, str | None] = {}


def _selector_string(selector: Mapping[str, Any] | None) -> str | None:
    """LabelSelectorAsSelector(...).String(), or None when the selector is invalid.

    Workload lists repeat the same selectors, so results are memoised on the selector's
    canonical form rather than compiling a matcher per row.
    """
    if selector is None:
        return ""
    key = repr(sorted((selector.get("matchLabels") or {}).items())) + repr(
        selector.get("matchExpressions") or []
    )
    if key in _SELECTOR_CACHE:
        return _SELECTOR_CACHE[key]
    try:
        text: str | None = str(label_selector_from_object(selector))
    except (SelectorError, AttributeError, TypeError):
        text = None
    if len(_SELECTOR_CACHE) > 4096:
        _SELECTOR_CACHE.clear()
    _SELECTOR_CACHE[key] = text
    return text


def _format_label_selector(selector: Mapping[str, Any] | None) -> str:
    """metav1.FormatLabelSelector."""
    text = _selector_string(selector)
    if text is None:
        return "<error>"
    return text or "<none>"


def _int(value: Any, default: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return int(value)


def _int_or_string(value: Any) -> str:
    """intstr.IntOrString.String()."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    return str(value)


def _join_host_port(host: str, port: Any) -> str:
    if ":" in host:
        return f"[{host}]:{_int(port)}"
    return f"{host}:{_int(port)}"


# --------------------------------------------------------------------------------------------
# Pods
# --------------------------------------------------------------------------------------------

_POD_COLUMNS: Final = [
    _name_col(),
    _col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
    _col("Status", "string", "The aggregate status of the containers in this pod."),
    _col(
        "Restarts",
        "string",
        "The number of times the containers in this pod have been restarted and when the last "
        "container in this pod has restarted.",
    ),
    _age_col(),
    _col("IP", "string", _DOCS["PodStatus.podIP"], priority=1),
    _col("Node", "string", _DOCS["PodSpec.nodeName"], priority=1),
    _col("Nominated Node", "string", _DOCS["PodStatus.nominatedNodeName"], priority=1),
    _col("Readiness Gates", "string", _DOCS["PodSpec.readinessGates"], priority=1),
]

_POD_SUCCEEDED: Final = [
    {
        "type": "Completed",
        "status": "True",
        "reason": "Succeeded",
        "message": "The pod has completed successfully.",
    }
]
_POD_FAILED: Final = [
    {"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}
]


def _pod_conditions(pod: Mapping[str, Any]) -> list[dict[str, str]] | None:
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Succeeded":
        return _POD_SUCCEEDED
    if phase == "Failed":
        return _POD_FAILED
    return None


def _last_finished(cs: Mapping[str, Any]) -> datetime | None:
    last = cs.get("lastState") or {}
    terminated = last.get("terminated")
    if terminated is None:
        return None
    return _parse_time(terminated.get("finishedAt"))


def _initialized(status: Mapping[str, Any]) -> bool:
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Initialized":
            return bool(cond.get("status") == "True")
    return False


def _pod_ready(status: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _print_pod(pod: Mapping[str, Any], now: datetime) -> Cells:
    """printPod: READY, STATUS and RESTARTS computed exactly as kubectl shows them."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    init_specs = spec.get("initContainers") or []
    total = len(spec.get("containers") or [])
    ready = 0
    restarts = 0
    sidecar_restarts = 0
    last_restart: datetime | None = None
    last_sidecar_restart: datetime | None = None

    phase = status.get("phase") or ""
    reason = status.get("reason") or phase
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"

    sidecars = {c.get("name") for c in init_specs if c.get("restartPolicy") == "Always"}
    total += sum(1 for c in init_specs if c.get("restartPolicy") == "Always")

    initializing = False
    for i, cs in enumerate(status.get("initContainerStatuses") or []):
        count = _int(cs.get("restartCount"))
        restarts += count
        finished = _last_finished(cs)
        if finished is not None and (last_restart is None or last_restart < finished):
            last_restart = finished
        is_sidecar = cs.get("name") in sidecars
        if is_sidecar:
            sidecar_restarts += count
            if finished is not None and (
                last_sidecar_restart is None or last_sidecar_restart < finished
            ):
                last_sidecar_restart = finished
        state = cs.get("state") or {}
        terminated = state.get("terminated")
        waiting = state.get("waiting")
        if terminated is not None and _int(terminated.get("exitCode")) == 0:
            continue
        if is_sidecar and cs.get("started") is True:
            if cs.get("ready"):
                ready += 1
            continue
        if terminated is not None:
            why = terminated.get("reason") or ""
            if not why:
                signal = _int(terminated.get("signal"))
                if signal != 0:
                    reason = f"Init:Signal:{signal}"
                else:
                    reason = f"Init:ExitCode:{_int(terminated.get('exitCode'))}"
            else:
                reason = "Init:" + why
        elif (
            waiting is not None and waiting.get("reason") and waiting["reason"] != "PodInitializing"
        ):
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break

    if not initializing or _initialized(status):
        restarts = sidecar_restarts
        last_restart = last_sidecar_restart
        has_running = False
        for cs in reversed(status.get("containerStatuses") or []):
            restarts += _int(cs.get("restartCount"))
            finished = _last_finished(cs)
            if finished is not None and (last_restart is None or last_restart < finished):
                last_restart = finished
            state = cs.get("state") or {}
            terminated = state.get("terminated")
            waiting = state.get("waiting")
            if waiting is not None and waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated is not None and terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated is not None:
                signal = _int(terminated.get("signal"))
                if signal != 0:
                    reason = f"Signal:{signal}"
                else:
                    reason = f"ExitCode:{_int(terminated.get('exitCode'))}"
            elif cs.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            reason = "Running" if _pod_ready(status) else "NotReady"

    if meta.get("deletionTimestamp") is not None:
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"

    restarts_text = str(restarts)
    if restarts != 0 and last_restart is not None:
        restarts_text = f"{restarts} ({human_duration(_aware(now) - last_restart)} ago)"

    pod_ips = status.get("podIPs") or []
    pod_ip = (pod_ips[0].get("ip") if pod_ips else status.get("podIP")) or "<none>"
    gates = spec.get("readinessGates") or []
    readiness = "<none>"
    if gates:
        conditions = status.get("conditions") or []
        true_count = 0
        for gate in gates:
            for cond in conditions:
                if cond.get("type") == gate.get("conditionType"):
                    if cond.get("status") == "True":
                        true_count += 1
                    break
        readiness = f"{true_count}/{len(gates)}"
    return [
        meta.get("name") or "",
        f"{ready}/{total}",
        reason,
        restarts_text,
        translate_timestamp_since(meta.get("creationTimestamp"), now),
        pod_ip,
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        readiness,
    ]


# --------------------------------------------------------------------------------------------
# Nodes and namespaces
# --------------------------------------------------------------------------------------------

_NODE_COLUMNS: Final = [
    _name_col(),
    _col("Status", "string", "The status of the node"),
    _col("Roles", "string", "The roles of the node"),
    _age_col(),
    _col("Version", "string", _DOCS["NodeSystemInfo.kubeletVersion"]),
    _col("Internal-IP", "string", _DOCS["NodeStatus.addresses"], priority=1),
    _col("External-IP", "string", _DOCS["NodeStatus.addresses"], priority=1),
    _col("OS-Image", "string", _DOCS["NodeSystemInfo.osImage"], priority=1),
    _col("Kernel-Version", "string", _DOCS["NodeSystemInfo.kernelVersion"], priority=1),
    _col(
        "Container-Runtime", "string", _DOCS["NodeSystemInfo.containerRuntimeVersion"], priority=1
    ),
]

_ROLE_PREFIX: Final = "node-role.kubernetes.io/"
_ROLE_LABEL: Final = "kubernetes.io/role"


def _node_roles(labels: Mapping[str, str]) -> list[str]:
    roles: set[str] = set()
    for k, v in labels.items():
        if k.startswith(_ROLE_PREFIX):
            role = k[len(_ROLE_PREFIX) :]
            if role:
                roles.add(role)
        elif k == _ROLE_LABEL and v != "":
            roles.add(v)
    return sorted(roles)


def _node_address(node: Mapping[str, Any], kind: str) -> str:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == kind:
            return str(address.get("address") or "")
    return "<none>"


def _print_node(node: Mapping[str, Any], now: datetime) -> Cells:
    """printNode: STATUS from the Ready condition plus SchedulingDisabled, ROLES from labels."""
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    ready: Mapping[str, Any] | None = None
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            ready = cond
    states: list[str] = []
    if ready is not None:
        states.append("Ready" if ready.get("status") == "True" else "NotReady")
    else:
        states.append("Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        states.append("SchedulingDisabled")
    roles = ",".join(_node_roles(meta.get("labels") or {})) or "<none>"
    info = status.get("nodeInfo") or {}
    return [
        meta.get("name") or "",
        ",".join(states),
        roles,
        translate_timestamp_since(meta.get("creationTimestamp"), now),
        info.get("kubeletVersion") or "",
        _node_address(node, "InternalIP"),
        _node_address(node, "ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


_NAMESPACE_COLUMNS: Final = [
    _name_col(),
    _col("Status", "string", "The status of the namespace"),
    _age_col(),
]


def _print_namespace(ns: Mapping[str, Any], now: datetime) -> Cells:
    return [_name(ns), (ns.get("status") or {}).get("phase") or "", _age(ns, now)]


# --------------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------------

_DEPLOYMENT_COLUMNS: Final = [
    _name_col(),
    _col("Ready", "string", "Number of the pod with ready state"),
    _col("Up-to-date", "string", _DOCS["DeploymentStatus.updatedReplicas"]),
    _col("Available", "string", _DOCS["DeploymentStatus.availableReplicas"]),
    _age_col(),
    _col("Containers", "string", _CONTAINERS_DOC, priority=1),
    _col("Images", "string", _IMAGES_DOC, priority=1),
    _col("Selector", "string", _DOCS["DeploymentSpec.selector"], priority=1),
]


def _replicas(obj: Mapping[str, Any]) -> int:
    """spec.replicas after defaulting, which sets an absent value to 1."""
    value = (obj.get("spec") or {}).get("replicas")
    return 1 if value is None else _int(value)


def _print_deployment(d: Mapping[str, Any], now: datetime) -> Cells:
    status = d.get("status") or {}
    names, images = _layout_containers(_template_containers(d))
    selector = _selector_string((d.get("spec") or {}).get("selector"))
    return [
        _name(d),
        f"{_int(status.get('readyReplicas'))}/{_replicas(d)}",
        _int(status.get("updatedReplicas")),
        _int(status.get("availableReplicas")),
        _age(d, now),
        names,
        images,
        "<invalid>" if selector is None else selector,
    ]


_REPLICASET_COLUMNS: Final = [
    _name_col(),
    _col("Desired", "integer", _DOCS["ReplicaSetSpec.replicas"]),
    _col("Current", "integer", _DOCS["ReplicaSetStatus.replicas"]),
    _col("Ready", "integer", _DOCS["ReplicaSetStatus.readyReplicas"]),
    _age_col(),
    _col("Containers", "string", _CONTAINERS_DOC, priority=1),
    _col("Images", "string", _IMAGES_DOC, priority=1),
    _col("Selector", "string", _DOCS["ReplicaSetSpec.selector"], priority=1),
]


def _print_replicaset(rs: Mapping[str, Any], now: datetime) -> Cells:
    status = rs.get("status") or {}
    names, images = _layout_containers(_template_containers(rs))
    return [
        _name(rs),
        _replicas(rs),
        _int(status.get("replicas")),
        _int(status.get("readyReplicas")),
        _age(rs, now),
        names,
        images,
        _format_label_selector((rs.get("spec") or {}).get("selector")),
    ]


_STATEFULSET_COLUMNS: Final = [
    _name_col(),
    _col("Ready", "string", "Number of the pod with ready state"),
    _age_col(),
    _col("Containers", "string", _CONTAINERS_DOC, priority=1),
    _col("Images", "string", _IMAGES_DOC, priority=1),
]


def _print_statefulset(sts: Mapping[str, Any], now: datetime) -> Cells:
    status = sts.get("status") or {}
    names, images = _layout_containers(_template_containers(sts))
    return [
        _name(sts),
        f"{_int(status.get('readyReplicas'))}/{_replicas(sts)}",
        _age(sts, now),
        names,
        images,
    ]


_DAEMONSET_COLUMNS: Final = [
    _name_col(),
    _col("Desired", "integer", _DOCS["DaemonSetStatus.desiredNumberScheduled"]),
    _col("Current", "integer", _DOCS["DaemonSetStatus.currentNumberScheduled"]),
    _col("Ready", "integer", _DOCS["DaemonSetStatus.numberReady"]),
    _col("Up-to-date", "integer", _DOCS["DaemonSetStatus.updatedNumberScheduled"]),
    _col("Available", "integer", _DOCS["DaemonSetStatus.numberAvailable"]),
    _col("Node Selector", "string", _DOCS["PodSpec.nodeSelector"]),
    _age_col(),
    _col("Containers", "string", _CONTAINERS_DOC, priority=1),
    _col("Images", "string", _IMAGES_DOC, priority=1),
    _col("Selector", "string", _DOCS["DaemonSetSpec.selector"], priority=1),
]


def _print_daemonset(ds: Mapping[str, Any], now: datetime) -> Cells:
    status = ds.get("status") or {}
    spec = ds.get("spec") or {}
    pod_spec = (spec.get("template") or {}).get("spec") or {}
    names, images = _layout_containers(pod_spec.get("containers"))
    return [
        _name(ds),
        _int(status.get("desiredNumberScheduled")),
        _int(status.get("currentNumberScheduled")),
        _int(status.get("numberReady")),
        _int(status.get("updatedNumberScheduled")),
        _int(status.get("numberAvailable")),
        format_labels(pod_spec.get("nodeSelector")),
        _age(ds, now),
        names,
        images,
        _format_label_selector(spec.get("selector")),
    ]


_PDB_COLUMNS: Final = [
    _name_col(),
    _col("Min Available", "string", "The minimum number of pods that must be available."),
    _col("Max Unavailable", "string", "The maximum number of pods that may be unavailable."),
    _col(
        "Allowed Disruptions",
        "integer",
        "Calculated number of pods that may be disrupted at this time.",
    ),
    _age_col(),
]


def _print_pdb(pdb: Mapping[str, Any], now: datetime) -> Cells:
    spec = pdb.get("spec") or {}
    min_available = spec.get("minAvailable")
    max_unavailable = spec.get("maxUnavailable")
    return [
        _name(pdb),
        "N/A" if min_available is None else _int_or_string(min_available),
        "N/A" if max_unavailable is None else _int_or_string(max_unavailable),
        _int((pdb.get("status") or {}).get("disruptionsAllowed")),
        _age(pdb, now),
    ]


# --------------------------------------------------------------------------------------------
# Network policies
# --------------------------------------------------------------------------------------------

_NETWORKPOLICY_COLUMNS: Final = [
    _name_col(),
    _col(
        "Pod-Selector",
        "string",
        "podSelector selects the pods to which this NetworkPolicy object applies. The array of "
        "rules is applied to any pods selected by this field. An empty selector matches all "
        "pods in the policy's namespace. Multiple network policies can select the same set of "
        "pods. In this case, the ingress rules for each are combined additively. This field is "
        "optional. If it is not specified, it defaults to an empty selector.",
    ),
    _age_col(),
]


def _print_networkpolicy(policy: Mapping[str, Any], now: datetime) -> Cells:
    spec = policy.get("spec") or {}
    return [_name(policy), _format_label_selector(spec.get("podSelector") or {}), _age(policy, now)]


# --------------------------------------------------------------------------------------------
# Services and endpoints
# --------------------------------------------------------------------------------------------

_SERVICE_COLUMNS: Final = [
    _name_col(),
    _col("Type", "string", _DOCS["ServiceSpec.type"]),
    _col("Cluster-IP", "string", _DOCS["ServiceSpec.clusterIP"]),
    _col("External-IP", "string", _DOCS["ServiceSpec.externalIPs"]),
    _col("Port(s)", "string", _DOCS["ServiceSpec.ports"]),
    _age_col(),
    _col("Selector", "string", _DOCS["ServiceSpec.selector"], priority=1),
]


def _load_balancer_ips(svc: Mapping[str, Any]) -> str:
    lb = (svc.get("status") or {}).get("loadBalancer") or {}
    found: set[str] = set()
    for ingress in lb.get("ingress") or []:
        if ingress.get("ip"):
            found.add(ingress["ip"])
        elif ingress.get("hostname"):
            found.add(ingress["hostname"])
    # The server always renders wide output, so the address list is never clipped.
    return ",".join(sorted(found))


def _service_external_ip(svc: Mapping[str, Any], svc_type: str) -> str:
    spec = svc.get("spec") or {}
    external: list[str] = spec.get("externalIPs") or []
    if svc_type in ("ClusterIP", "NodePort"):
        return ",".join(external) if external else "<none>"
    if svc_type == "LoadBalancer":
        lb = _load_balancer_ips(svc)
        if external:
            return ",".join((lb.split(",") if lb else []) + external)
        return lb or "<pending>"
    if svc_type == "ExternalName":
        return str(spec.get("externalName") or "")
    return "<unknown>"


def _port_string(ports: list[Mapping[str, Any]]) -> str:
    pieces = []
    for p in ports:
        protocol = p.get("protocol") or "TCP"
        node_port = _int(p.get("nodePort"))
        if node_port > 0:
            pieces.append(f"{_int(p.get('port'))}:{node_port}/{protocol}")
        else:
            pieces.append(f"{_int(p.get('port'))}/{protocol}")
    return ",".join(pieces)


def _print_service(svc: Mapping[str, Any], now: datetime) -> Cells:
    spec = svc.get("spec") or {}
    svc_type = spec.get("type") or "ClusterIP"
    cluster_ips = spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else [])
    return [
        _name(svc),
        svc_type,
        cluster_ips[0] if cluster_ips else "<none>",
        _service_external_ip(svc, svc_type),
        _port_string(spec.get("ports") or []) or "<none>",
        _age(svc, now),
        format_labels(spec.get("selector")),
    ]


_ENDPOINTS_COLUMNS: Final = [
    _name_col(),
    _col("Endpoints", "string", _DOCS["Endpoints.subsets"]),
    _age_col(),
]


def _format_endpoints(ep: Mapping[str, Any]) -> str:
    subsets = ep.get("subsets") or []
    if not subsets:
        return "<none>"
    shown: list[str] = []
    limit = 3
    more = False
    count = 0
    for ss in subsets:
        addresses = ss.get("addresses") or []
        ports = ss.get("ports") or []
        if not ports:
            count += len(addresses)
            for a in addresses:
                if len(shown) == limit:
                    more = True
                    break
                shown.append(str(a.get("ip") or ""))
            continue
        for port in ports:
            count += len(addresses)
            for a in addresses:
                if len(shown) == limit:
                    more = True
                    break
                shown.append(_join_host_port(str(a.get("ip") or ""), port.get("port")))
    text = ",".join(shown)
    if more:
        return f"{text} + {count - limit} more..."
    return text


def _print_endpoints(ep: Mapping[str, Any], now: datetime) -> Cells:
    return [_name(ep), _format_endpoints(ep), _age(ep, now)]


# --------------------------------------------------------------------------------------------
# Config, identity, coordination, storage
# --------------------------------------------------------------------------------------------

_CONFIGMAP_COLUMNS: Final = [
    _name_col(),
    _col("Data", "string", _DOCS["ConfigMap.data"]),
    _age_col(),
]


def _print_configmap(cm: Mapping[str, Any], now: datetime) -> Cells:
    size = len(cm.get("data") or {}) + len(cm.get("binaryData") or {})
    return [_name(cm), size, _age(cm, now)]


_SECRET_COLUMNS: Final = [
    _name_col(),
    _col("Type", "string", _DOCS["Secret.type"]),
    _col("Data", "string", _DOCS["Secret.data"]),
    _age_col(),
]


def _print_secret(secret: Mapping[str, Any], now: datetime) -> Cells:
    return [
        _name(secret),
        secret.get("type") or "Opaque",
        len(secret.get("data") or {}),
        _age(secret, now),
    ]


_SERVICEACCOUNT_COLUMNS: Final = [
    _name_col(),
    _col("Secrets", "string", _DOCS["ServiceAccount.secrets"]),
    _age_col(),
]


def _print_serviceaccount(sa: Mapping[str, Any], now: datetime) -> Cells:
    return [_name(sa), len(sa.get("secrets") or []), _age(sa, now)]


_LEASE_COLUMNS: Final = [
    _name_col(),
    _col("Holder", "string", _DOCS["LeaseSpec.holderIdentity"]),
    _age_col(),
]


def _print_lease(lease: Mapping[str, Any], now: datetime) -> Cells:
    holder = (lease.get("spec") or {}).get("holderIdentity")
    return [_name(lease), holder or "", _age(lease, now)]


_PRIORITYCLASS_COLUMNS: Final = [
    _name_col(),
    _col("Value", "integer", _DOCS["PriorityClass.value"]),
    _col("Global-Default", "boolean", _DOCS["PriorityClass.globalDefault"]),
    _age_col(),
    _col("PreemptionPolicy", "string", _DOCS["PriorityClass.preemptionPolicy"]),
]


def _print_priorityclass(pc: Mapping[str, Any], now: datetime) -> Cells:
    return [
        _name(pc),
        pc.get("value", 0),
        bool(pc.get("globalDefault")),
        _age(pc, now),
        pc.get("preemptionPolicy") or "",
    ]


_VOLUMEATTACHMENT_COLUMNS: Final = [
    _name_col(),
    _col("Attacher", "string", _DOCS["VolumeAttachmentSpec.attacher"], format_="name"),
    _col("PV", "string", _DOCS["VolumeAttachmentSource.persistentVolumeName"]),
    _col("Node", "string", _DOCS["VolumeAttachmentSpec.nodeName"]),
    _col("Attached", "boolean", _DOCS["VolumeAttachmentStatus.attached"]),
    _age_col(),
]


def _print_volumeattachment(va: Mapping[str, Any], now: datetime) -> Cells:
    spec = va.get("spec") or {}
    source = spec.get("source") or {}
    return [
        _name(va),
        spec.get("attacher") or "",
        source.get("persistentVolumeName") or "",
        spec.get("nodeName") or "",
        bool((va.get("status") or {}).get("attached")),
        _age(va, now),
    ]


# --------------------------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------------------------

_EVENT_COLUMNS: Final = [
    _col("Last Seen", "string", _DOCS["Event.lastTimestamp"]),
    _col("Type", "string", _DOCS["Event.type"]),
    _col("Reason", "string", _DOCS["Event.reason"]),
    _col("Object", "string", _DOCS["Event.involvedObject"]),
    _col("Subobject", "string", _DOCS["ObjectReference.fieldPath"], priority=1),
    _col("Source", "string", _DOCS["Event.source"], priority=1),
    _col("Message", "string", _DOCS["Event.message"]),
    _col("First Seen", "string", _DOCS["Event.firstTimestamp"], priority=1),
    _col("Count", "string", _DOCS["Event.count"], priority=1),
    _name_col(priority=1),
]


def _core_event(ev: Mapping[str, Any]) -> Mapping[str, Any]:
    """An events.k8s.io/v1 Event in core/v1 field names, as the server's conversion maps it."""
    return {
        "metadata": ev.get("metadata") or {},
        "involvedObject": ev.get("regarding") or {},
        "reason": ev.get("reason"),
        "message": ev.get("note"),
        "type": ev.get("type"),
        "source": ev.get("deprecatedSource") or {},
        "firstTimestamp": ev.get("deprecatedFirstTimestamp"),
        "lastTimestamp": ev.get("deprecatedLastTimestamp"),
        "count": ev.get("deprecatedCount"),
        "eventTime": ev.get("eventTime"),
        "series": ev.get("series"),
        "reportingComponent": ev.get("reportingController"),
        "reportingInstance": ev.get("reportingInstance"),
    }


def _print_event(ev: Mapping[str, Any], now: datetime) -> Cells:
    if "regarding" in ev or "note" in ev or "reportingController" in ev:
        ev = _core_event(ev)
    first_time = _parse_time(ev.get("firstTimestamp"))
    if first_time is None:
        first = translate_timestamp_since(ev.get("eventTime"), now)
    else:
        first = human_duration(_aware(now) - first_time)
    last = translate_timestamp_since(ev.get("lastTimestamp"), now)
    if _parse_time(ev.get("lastTimestamp")) is None:
        last = first
    count = _int(ev.get("count"))
    series = ev.get("series")
    if series is not None:
        last = translate_timestamp_since(series.get("lastObservedTime"), now)
        count = _int(series.get("count"))
    elif count == 0:
        count = 1
    involved = ev.get("involvedObject") or {}
    kind = str(involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = ev.get("source") or {}
    component = source.get("component") or ev.get("reportingComponent") or ""
    instance = source.get("host") or ev.get("reportingInstance") or ""
    return [
        last,
        ev.get("type") or "",
        ev.get("reason") or "",
        target,
        involved.get("fieldPath") or "",
        f"{component}, {instance}" if instance else component,
        str(ev.get("message") or "").strip(),
        first,
        count,
        _name(ev),
    ]


# --------------------------------------------------------------------------------------------
# CustomResourceDefinitions
# --------------------------------------------------------------------------------------------

_CRD_COLUMNS: Final = [
    _name_col(),
    _col("Scope", "string", "Cluster/Namespaced"),
    _col("Versions", "string", "Served versions"),
    _col("Created At", "date", _AGE_DOC),
    _col("Group", "string", "API group", priority=1),
    _col("Kind", "string", "CustomResource kind", priority=1),
    _col("ShortNames", "string", "Short names", priority=1),
    _col("Established", "boolean", "Established status", priority=1),
]


def _print_crd(crd: Mapping[str, Any], now: datetime) -> Cells:
    spec = crd.get("spec") or {}
    versions = sorted(
        (v.get("name") or "") + ("(storage)" if v.get("storage") else "")
        for v in spec.get("versions") or []
        if v.get("served")
    )
    names = spec.get("names") or {}
    established = any(
        c.get("type") == "Established" and c.get("status") == "True"
        for c in (crd.get("status") or {}).get("conditions") or []
    )
    return [
        _name(crd),
        spec.get("scope") or "",
        ",".join(versions),
        _rfc3339_utc((crd.get("metadata") or {}).get("creationTimestamp")),
        spec.get("group") or "",
        names.get("kind") or "",
        ",".join(names.get("shortNames") or []),
        established,
    ]


# --------------------------------------------------------------------------------------------
# Registry of built-in printers
# --------------------------------------------------------------------------------------------


class _BuiltIn:
    __slots__ = ("columns", "conditions", "null_when_empty", "printer")

    def __init__(
        self,
        columns: list[dict[str, Any]],
        printer: _Printer,
        conditions: Callable[[Mapping[str, Any]], list[dict[str, str]] | None] | None = None,
        null_when_empty: bool = False,
    ) -> None:
        self.columns = columns
        self.printer = printer
        self.conditions = conditions
        # Convertors that append to a nil slice send `"rows": null` for an empty list.
        self.null_when_empty = null_when_empty


_BUILT_IN: Final[dict[tuple[str, str], _BuiltIn]] = {
    ("", "Pod"): _BuiltIn(_POD_COLUMNS, _print_pod, _pod_conditions),
    ("", "Node"): _BuiltIn(_NODE_COLUMNS, _print_node),
    ("", "Namespace"): _BuiltIn(_NAMESPACE_COLUMNS, _print_namespace),
    ("", "Service"): _BuiltIn(_SERVICE_COLUMNS, _print_service),
    ("", "Endpoints"): _BuiltIn(_ENDPOINTS_COLUMNS, _print_endpoints),
    ("", "ConfigMap"): _BuiltIn(_CONFIGMAP_COLUMNS, _print_configmap),
    ("", "Secret"): _BuiltIn(_SECRET_COLUMNS, _print_secret),
    ("", "ServiceAccount"): _BuiltIn(_SERVICEACCOUNT_COLUMNS, _print_serviceaccount),
    ("", "Event"): _BuiltIn(_EVENT_COLUMNS, _print_event),
    ("events.k8s.io", "Event"): _BuiltIn(_EVENT_COLUMNS, _print_event),
    ("apps", "Deployment"): _BuiltIn(_DEPLOYMENT_COLUMNS, _print_deployment),
    ("apps", "ReplicaSet"): _BuiltIn(_REPLICASET_COLUMNS, _print_replicaset),
    ("apps", "StatefulSet"): _BuiltIn(_STATEFULSET_COLUMNS, _print_statefulset),
    ("apps", "DaemonSet"): _BuiltIn(_DAEMONSET_COLUMNS, _print_daemonset),
    ("policy", "PodDisruptionBudget"): _BuiltIn(_PDB_COLUMNS, _print_pdb),
    ("coordination.k8s.io", "Lease"): _BuiltIn(_LEASE_COLUMNS, _print_lease),
    ("networking.k8s.io", "NetworkPolicy"): _BuiltIn(_NETWORKPOLICY_COLUMNS, _print_networkpolicy),
    ("scheduling.k8s.io", "PriorityClass"): _BuiltIn(_PRIORITYCLASS_COLUMNS, _print_priorityclass),
    ("storage.k8s.io", "VolumeAttachment"): _BuiltIn(
        _VOLUMEATTACHMENT_COLUMNS, _print_volumeattachment
    ),
    ("apiextensions.k8s.io", "CustomResourceDefinition"): _BuiltIn(
        _CRD_COLUMNS, _print_crd, null_when_empty=True
    ),
}


# --------------------------------------------------------------------------------------------
# Custom resources (apiextensions-apiserver tableconvertor)
# --------------------------------------------------------------------------------------------

_DEFAULT_CR_COLUMNS: Final = [
    {
        "name": "Age",
        "type": "date",
        "description": _AGE_DOC,
        "jsonPath": ".metadata.creationTimestamp",
    }
]


class _CustomColumns:
    __slots__ = ("columns", "paths", "types")

    def __init__(self, printer_columns: Sequence[Mapping[str, Any]] | None) -> None:
        self.columns: list[dict[str, Any]] = [_name_col()]
        self.paths: list[JsonPath] = []
        self.types: list[str] = []
        for col in printer_columns or _DEFAULT_CR_COLUMNS:
            expr = str(col.get("jsonPath") or "")
            try:
                path = compile_path(expr, template=False, allow_missing_keys=True)
            except JsonPathError:
                # kube logs the bad column and serves the columns before it.
                break
            self.paths.append(path)
            self.types.append(str(col.get("type") or ""))
            self.columns.append(
                _col(
                    str(col.get("name") or ""),
                    str(col.get("type") or ""),
                    str(col.get("description") or "")
                    or f"Custom resource definition column (in JSONPath format): {expr}",
                    priority=_int(col.get("priority")),
                    format_=str(col.get("format") or ""),
                )
            )

    def cells(self, obj: Mapping[str, Any], now: datetime) -> Cells:
        cells: Cells = [_name(obj)]
        for path, col_type in zip(self.paths, self.types, strict=True):
            try:
                results = path.find_results(obj)
            except JsonPathError:
                cells.append(None)
                continue
            if not results or not results[0]:
                cells.append(None)
                continue
            value = results[0][0]
            if col_type == "string":
                # Go prints the value through a fresh reflect.Value, so null has no value.
                cells.append("<no value>" if value is None else format_value(value))
            else:
                cells.append(_cell_for_json_value(col_type, value, now))
        return cells


def _cell_for_json_value(col_type: str, value: Any, now: datetime) -> Any:
    """cellForJSONValue: typed cells; anything that does not fit its column becomes null."""
    if value is None:
        return None
    if col_type == "integer":
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            return int(value) if value == value and abs(value) != float("inf") else None
        return None
    if col_type == "number":
        if isinstance(value, bool):
            return None
        if isinstance(value, (int, float)):
            return float(value)
        return None
    if col_type == "boolean":
        return value if isinstance(value, bool) else None
    if col_type == "string":
        return value if isinstance(value, str) else None
    if col_type == "date":
        if not isinstance(value, str):
            return None
        if value in ("", "null"):
            return "<unknown>"
        if not _RFC3339_RE.fullmatch(value):
            return "<invalid>"
        try:
            t = datetime.fromisoformat(value)
        except ValueError:
            return "<invalid>"
        if t == datetime(1, 1, 1, tzinfo=UTC):
            return "<unknown>"
        return human_duration(_aware(now) - t)
    return None


_CUSTOM_CACHE: dict[str, _CustomColumns] = {}


def _custom_columns(printer_columns: Sequence[Mapping[str, Any]] | None) -> _CustomColumns:
    """Compiled printer columns, memoised because every list of a CRD uses the same ones."""
    key = repr(printer_columns)
    found = _CUSTOM_CACHE.get(key)
    if found is None:
        if len(_CUSTOM_CACHE) > 256:
            _CUSTOM_CACHE.clear()
        found = _CustomColumns(printer_columns)
        _CUSTOM_CACHE[key] = found
    return found


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------

_INCLUDE_VALUES: Final = ("Object", "Metadata", "None", "")


def column_definitions(
    kind: str, group: str, printer_columns: Sequence[Mapping[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The columnDefinitions kube-apiserver sends for this kind (copies, safe to modify)."""
    if printer_columns is None and (group, kind) in _BUILT_IN:
        return [dict(c) for c in _BUILT_IN[(group, kind)].columns]
    return [dict(c) for c in _custom_columns(printer_columns).columns]


def _row_object(obj: Mapping[str, Any], include_object: str, api_version: str) -> Any:
    if include_object == "Object":
        return obj
    if include_object == "None":
        return None
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": api_version,
        "metadata": obj.get("metadata") or {},
    }


def to_table(
    kind: str,
    group: str,
    objects: list[dict[str, Any]],
    *,
    printer_columns: list[dict[str, Any]] | None,
    include_object: str = "Metadata",
    now: datetime,
    list_metadata: dict[str, Any] | None = None,
    no_headers: bool = False,
    api_version: str = TABLE_API_VERSION,
) -> dict[str, Any]:
    """Render objects as the `meta.k8s.io/v1` Table kube-apiserver would return.

    `printer_columns` is a CRD version's `additionalPrinterColumns` (None or empty gives kube's
    default NAME/AGE); when None, built-in kinds use kube's own printers and any other kind the
    NAME/AGE default. `include_object` is the `includeObject` query value: each row carries the
    full object, a PartialObjectMetadata (the default), or null. `list_metadata` is the list's
    `metadata` (resourceVersion, continue, remainingItemCount); without it the response is taken
    to be for a single object and carries that object's resourceVersion. `no_headers` leaves
    out the columnDefinitions (`null`), as kube does for every watch event after the first.
    `api_version` is the Table's (`meta.k8s.io/v1` or `meta.k8s.io/v1beta1`, as requested), which
    the rows' PartialObjectMetadata share.

    Raises ValueError with kube's BadRequest message for an unknown `include_object`.
    """
    built_in = _BUILT_IN.get((group, kind)) if printer_columns is None else None
    if built_in is not None:
        columns = built_in.columns
        printer = built_in.printer
        conditions = built_in.conditions
        empty_rows: list[Any] | None = None if built_in.null_when_empty else []
    else:
        custom = _custom_columns(printer_columns)
        columns = custom.columns
        printer = custom.cells
        conditions = None
        empty_rows = []

    if objects and include_object not in _INCLUDE_VALUES:
        raise ValueError(f'unrecognized includeObject value: "{include_object}"')

    now = _aware(now)
    rows: list[dict[str, Any]] = []
    for obj in objects:
        row: dict[str, Any] = {"cells": printer(obj, now)}
        if conditions is not None:
            row_conditions = conditions(obj)
            if row_conditions is not None:
                row["conditions"] = [dict(c) for c in row_conditions]
        row["object"] = _row_object(obj, include_object, api_version)
        rows.append(row)

    metadata: dict[str, Any] = {}
    if list_metadata is not None:
        if list_metadata.get("resourceVersion"):
            metadata["resourceVersion"] = list_metadata["resourceVersion"]
        if list_metadata.get("continue"):
            metadata["continue"] = list_metadata["continue"]
        if list_metadata.get("remainingItemCount") is not None:
            metadata["remainingItemCount"] = list_metadata["remainingItemCount"]
    elif len(objects) == 1:
        rv = (objects[0].get("metadata") or {}).get("resourceVersion")
        if rv:
            metadata["resourceVersion"] = rv

    return {
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": metadata,
        "columnDefinitions": None if no_headers else [dict(c) for c in columns],
        "rows": rows if rows else empty_rows,
    }
