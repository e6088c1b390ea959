"""Request bodies in Kubernetes' protobuf encoding, for the built-in kinds clients send that way.

client-go's generated clients send built-in kinds as `application/vnd.kubernetes.protobuf`
(kubectl from 1.32 does for `create rolebinding`, `create clusterrolebinding`, `create token`
and `auth can-i`), and a real API server accepts it. client-go retries in JSON only after a 415
to a CBOR request, never to a protobuf one, so the server must decode these bodies itself.

The envelope is a 4-byte magic ("k8s\\0") and a `runtime.Unknown` whose `raw` field holds the
object's own message. The wire decoding is protobuf's; the messages are described here from
the Kubernetes API's field numbers for exactly the kinds that arrive this way. A kind without a
description is answered with 415, as kube does for a media type a resource cannot take.
Responses stay JSON: every such client accepts it.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, unknown_fields
from google.protobuf.message import DecodeError, Message

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

_PACKAGE = "nodeops.sim.k8s"

# name -> [(json name, field number, type)]; a type is a scalar name, a message name, or either
# with "*" for repeated; "map" is map<string, string>.
_MESSAGES: dict[str, list[tuple[str, int, str]]] = {
    "Unknown": [("typeMeta", 1, "TypeMeta"), ("raw", 2, "bytes")],
    "TypeMeta": [("apiVersion", 1, "string"), ("kind", 2, "string")],
    "Time": [("seconds", 1, "int64"), ("nanos", 2, "int32")],
    "OwnerReference": [
        ("kind", 1, "string"),
        ("name", 3, "string"),
        ("uid", 4, "string"),
        ("apiVersion", 5, "string"),
        ("controller", 6, "bool"),
        ("blockOwnerDeletion", 7, "bool"),
    ],
    "ObjectMeta": [
        ("name", 1, "string"),
        ("generateName", 2, "string"),
        ("namespace", 3, "string"),
        ("selfLink", 4, "string"),
        ("uid", 5, "string"),
        ("resourceVersion", 6, "string"),
        ("generation", 7, "int64"),
        ("creationTimestamp", 8, "Time"),
        ("deletionTimestamp", 9, "Time"),
        ("deletionGracePeriodSeconds", 10, "int64"),
        ("labels", 11, "map"),
        ("annotations", 12, "map"),
        ("ownerReferences", 13, "OwnerReference*"),
        ("finalizers", 14, "string*"),
    ],
    # rbac.authorization.k8s.io/v1
    "Subject": [
        ("kind", 1, "string"),
        ("apiGroup", 2, "string"),
        ("name", 3, "string"),
        ("namespace", 4, "string"),
    ],
    "RoleRef": [("apiGroup", 1, "string"), ("kind", 2, "string"), ("name", 3, "string")],
    "RoleBinding": [
        ("metadata", 1, "ObjectMeta"),
        ("subjects", 2, "Subject*"),
        ("roleRef", 3, "RoleRef"),
    ],
    # authentication.k8s.io/v1
    "BoundObjectReference": [
        ("kind", 1, "string"),
        ("apiVersion", 2, "string"),
        ("name", 3, "string"),
        ("uid", 4, "string"),
    ],
    "TokenRequestSpec": [
        ("audiences", 1, "string*"),
        ("boundObjectRef", 3, "BoundObjectReference"),
        ("expirationSeconds", 4, "int64"),
    ],
    "TokenRequest": [("metadata", 1, "ObjectMeta"), ("spec", 2, "TokenRequestSpec")],
    # authorization.k8s.io/v1
    "ResourceAttributes": [
        ("namespace", 1, "string"),
        ("verb", 2, "string"),
        ("group", 3, "string"),
        ("version", 4, "string"),
        ("resource", 5, "string"),
        ("subresource", 6, "string"),
        ("name", 7, "string"),
    ],
    "NonResourceAttributes": [("path", 1, "string"), ("verb", 2, "string")],
    "SelfSubjectAccessReviewSpec": [
        ("resourceAttributes", 1, "ResourceAttributes"),
        ("nonResourceAttributes", 2, "NonResourceAttributes"),
    ],
    "SelfSubjectAccessReview": [
        ("metadata", 1, "ObjectMeta"),
        ("spec", 2, "SelfSubjectAccessReviewSpec"),
    ],
    "SelfSubjectRulesReviewSpec": [("namespace", 1, "string")],
    "SelfSubjectReview": [("metadata", 1, "ObjectMeta"), ("status", 2, "Empty")],
    "SelfSubjectRulesReview": [
        ("metadata", 1, "ObjectMeta"),
        ("spec", 2, "SelfSubjectRulesReviewSpec"),
    ],
}

_MESSAGES.update(
    {
        "Empty": [],
        "LocalObjectReference": [("name", 1, "string")],
        "ObjectReference": [
            ("kind", 1, "string"),
            ("namespace", 2, "string"),
            ("name", 3, "string"),
            ("uid", 4, "string"),
            ("apiVersion", 5, "string"),
            ("resourceVersion", 6, "string"),
            ("fieldPath", 7, "string"),
        ],
        "LabelSelectorRequirement": [
            ("key", 1, "string"),
            ("operator", 2, "string"),
            ("values", 3, "string*"),
        ],
        "LabelSelector": [
            ("matchLabels", 1, "map"),
            ("matchExpressions", 2, "LabelSelectorRequirement*"),
        ],
        "IntOrString": [("type", 1, "int64"), ("intVal", 2, "int32"), ("strVal", 3, "string")],
        "Quantity": [("string", 1, "string")],
        # core/v1
        # scheduling.k8s.io/v1 (`kubectl create priorityclass`)
        "PriorityClass": [
            ("metadata", 1, "ObjectMeta"),
            ("value", 2, "int32"),
            ("globalDefault", 3, "bool"),
            ("description", 4, "string"),
            ("preemptionPolicy", 5, "string"),
        ],
        "ConfigMap": [
            ("metadata", 1, "ObjectMeta"),
            ("data", 2, "map"),
            ("binaryData", 3, "map:bytes"),
            ("immutable", 4, "bool"),
        ],
        "Secret": [
            ("metadata", 1, "ObjectMeta"),
            ("data", 2, "map:bytes"),
            ("type", 3, "string"),
            ("stringData", 4, "map"),
            ("immutable", 5, "bool"),
        ],
        "NamespaceSpec": [("finalizers", 1, "string*")],
        "Namespace": [
            ("metadata", 1, "ObjectMeta"),
            ("spec", 2, "NamespaceSpec"),
            ("status", 3, "Empty"),
        ],
        "ServiceAccount": [
            ("metadata", 1, "ObjectMeta"),
            ("secrets", 2, "ObjectReference*"),
            ("imagePullSecrets", 3, "LocalObjectReference*"),
            ("automountServiceAccountToken", 4, "bool"),
        ],
        "ServicePort": [
            ("name", 1, "string"),
            ("protocol", 2, "string"),
            ("port", 3, "int32"),
            ("targetPort", 4, "IntOrString"),
            ("nodePort", 5, "int32"),
            ("appProtocol", 6, "string"),
        ],
        "ServiceSpec": [
            ("ports", 1, "ServicePort*"),
            ("selector", 2, "map"),
            ("clusterIP", 3, "string"),
            ("type", 4, "string"),
            ("externalIPs", 5, "string*"),
            ("sessionAffinity", 7, "string"),
            ("externalName", 10, "string"),
            ("clusterIPs", 18, "string*"),
        ],
        "Service": [
            ("metadata", 1, "ObjectMeta"),
            ("spec", 2, "ServiceSpec"),
            ("status", 3, "ServiceStatus"),
        ],
        "ServiceStatus": [("loadBalancer", 1, "Empty")],
        "ContainerPort": [
            ("name", 1, "string"),
            ("hostPort", 2, "int32"),
            ("containerPort", 3, "int32"),
            ("protocol", 4, "string"),
            ("hostIP", 5, "string"),
        ],
        "EnvVar": [("name", 1, "string"), ("value", 2, "string")],
        "VolumeMount": [
            ("name", 1, "string"),
            ("readOnly", 2, "bool"),
            ("mountPath", 3, "string"),
            ("subPath", 4, "string"),
            ("mountPropagation", 5, "string"),
        ],
        "HostPathVolumeSource": [("path", 1, "string"), ("type", 2, "string")],
        "EmptyDirVolumeSource": [("medium", 1, "string"), ("sizeLimit", 2, "Quantity")],
        "VolumeSource": [
            ("hostPath", 1, "HostPathVolumeSource"),
            ("emptyDir", 2, "EmptyDirVolumeSource"),
        ],
        # Go inlines VolumeSource into Volume's JSON.
        "Volume": [("name", 1, "string"), ("volumeSource", 2, "VolumeSource^")],
        "Toleration": [
            ("key", 1, "string"),
            ("operator", 2, "string"),
            ("value", 3, "string"),
            ("effect", 4, "string"),
            ("tolerationSeconds", 5, "int64"),
        ],
        "ResourceRequirements": [
            ("limits", 1, "map:Quantity"),
            ("requests", 2, "map:Quantity"),
        ],
        "Container": [
            ("name", 1, "string"),
            ("image", 2, "string"),
            ("command", 3, "string*"),
            ("args", 4, "string*"),
            ("workingDir", 5, "string"),
            ("ports", 6, "ContainerPort*"),
            ("env", 7, "EnvVar*"),
            ("resources", 8, "ResourceRequirements"),
            ("volumeMounts", 9, "VolumeMount*"),
            ("terminationMessagePath", 13, "string"),
            ("imagePullPolicy", 14, "string"),
            ("stdin", 16, "bool"),
            ("stdinOnce", 17, "bool"),
            ("tty", 18, "bool"),
            ("terminationMessagePolicy", 20, "string"),
        ],
        "PodSpec": [
            ("volumes", 1, "Volume*"),
            ("containers", 2, "Container*"),
            ("restartPolicy", 3, "string"),
            ("terminationGracePeriodSeconds", 4, "int64"),
            ("nodeSelector", 7, "map"),
            ("serviceAccountName", 8, "string"),
            ("nodeName", 10, "string"),
            ("hostNetwork", 11, "bool"),
            ("hostPID", 12, "bool"),
            ("hostIPC", 13, "bool"),
            ("tolerations", 22, "Toleration*"),
        ],
        "Pod": [("metadata", 1, "ObjectMeta"), ("spec", 2, "PodSpec"), ("status", 3, "Empty")],
        "PodTemplateSpec": [("metadata", 1, "ObjectMeta"), ("spec", 2, "PodSpec")],
        # apps/v1
        "DeploymentStrategy": [("type", 1, "string")],
        "DeploymentSpec": [
            ("replicas", 1, "int32"),
            ("selector", 2, "LabelSelector"),
            ("template", 3, "PodTemplateSpec"),
            ("strategy", 4, "DeploymentStrategy"),
            ("minReadySeconds", 5, "int32"),
            ("revisionHistoryLimit", 6, "int32"),
            ("paused", 7, "bool"),
            ("progressDeadlineSeconds", 9, "int32"),
        ],
        "Deployment": [
            ("metadata", 1, "ObjectMeta"),
            ("spec", 2, "DeploymentSpec"),
            ("status", 3, "Empty"),
        ],
        # policy/v1
        "PodDisruptionBudgetSpec": [
            ("minAvailable", 1, "IntOrString"),
            ("selector", 2, "LabelSelector"),
            ("maxUnavailable", 3, "IntOrString"),
            ("unhealthyPodEvictionPolicy", 4, "string"),
        ],
        "PodDisruptionBudget": [
            ("metadata", 1, "ObjectMeta"),
            ("spec", 2, "PodDisruptionBudgetSpec"),
            ("status", 3, "Empty"),
        ],
        # rbac.authorization.k8s.io/v1
        "PolicyRule": [
            ("verbs", 1, "string*"),
            ("apiGroups", 2, "string*"),
            ("resources", 3, "string*"),
            ("resourceNames", 4, "string*"),
            ("nonResourceURLs", 5, "string*"),
        ],
        "Role": [("metadata", 1, "ObjectMeta"), ("rules", 2, "PolicyRule*")],
        "AggregationRule": [("clusterRoleSelectors", 1, "LabelSelector*")],
        "ClusterRole": [
            ("metadata", 1, "ObjectMeta"),
            ("rules", 2, "PolicyRule*"),
            ("aggregationRule", 3, "AggregationRule"),
        ],
    }
)

# Message -> fields whose members Go writes into the enclosing object (`json:",inline"`).
_INLINE: dict[str, frozenset[str]] = {
    name: frozenset(f for f, _, t in fields if t.endswith("^"))
    for name, fields in _MESSAGES.items()
}

# (apiVersion, kind) of a request body -> its message.
KINDS: dict[tuple[str, str], str] = {
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "RoleBinding",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "RoleBinding",
    ("rbac.authorization.k8s.io/v1", "Role"): "Role",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "ClusterRole",
    ("v1", "ConfigMap"): "ConfigMap",
    ("v1", "Secret"): "Secret",
    ("v1", "Namespace"): "Namespace",
    ("v1", "ServiceAccount"): "ServiceAccount",
    ("v1", "Service"): "Service",
    ("v1", "Pod"): "Pod",
    ("apps/v1", "Deployment"): "Deployment",
    ("policy/v1", "PodDisruptionBudget"): "PodDisruptionBudget",
    ("scheduling.k8s.io/v1", "PriorityClass"): "PriorityClass",
    ("authentication.k8s.io/v1", "TokenRequest"): "TokenRequest",
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): "SelfSubjectAccessReview",
    ("authorization.k8s.io/v1", "SelfSubjectRulesReview"): "SelfSubjectRulesReview",
    ("authentication.k8s.io/v1", "SelfSubjectReview"): "SelfSubjectReview",
}

_Proto = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "string": _Proto.TYPE_STRING,
    "bytes": _Proto.TYPE_BYTES,
    "bool": _Proto.TYPE_BOOL,
    "int32": _Proto.TYPE_INT32,
    "int64": _Proto.TYPE_INT64,
}


class ProtobufError(ValueError):
    """The body is not a Kubernetes protobuf object this server can decode."""


class UnsupportedKind(ProtobufError):
    """A well-formed envelope around a kind without a description here."""


def _file() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(name="nodeops_sim_k8s.proto", package=_PACKAGE)
    # proto3: a scalar at its zero value reads as absent, as Go's omitempty fields do in JSON.
    f.syntax = "proto3"
    for name, fields in _MESSAGES.items():
        msg = f.message_type.add(name=name)
        for json_name, number, ftype in fields:
            repeated = ftype.endswith("*")
            base = ftype.rstrip("*^")
            field = msg.field.add(name=json_name, number=number, json_name=json_name)
            if base.startswith("map"):
                value_type = base.partition(":")[2] or "string"
                entry = msg.nested_type.add(name=f"{json_name[0].upper()}{json_name[1:]}Entry")
                entry.options.map_entry = True
                entry.field.add(
                    name="key", number=1, type=_Proto.TYPE_STRING, label=_Proto.LABEL_OPTIONAL
                )
                value = entry.field.add(name="value", number=2, label=_Proto.LABEL_OPTIONAL)
                _set_type(value, value_type)
                field.type = _Proto.TYPE_MESSAGE
                field.type_name = f".{_PACKAGE}.{name}.{entry.name}"
                field.label = _Proto.LABEL_REPEATED
                continue
            field.label = _Proto.LABEL_REPEATED if repeated else _Proto.LABEL_OPTIONAL
            _set_type(field, base)
    return f


def _set_type(field: descriptor_pb2.FieldDescriptorProto, base: str) -> None:
    if base in _SCALARS:
        field.type = _SCALARS[base]
    else:
        field.type = _Proto.TYPE_MESSAGE
        field.type_name = f".{_PACKAGE}.{base}"


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file())
_CLASSES: dict[str, type[Message]] = {
    name: message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
    for name in _MESSAGES
}


def is_protobuf(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == MEDIA_TYPE


def _special(type_name: str, msg: Any) -> Any:
    """Messages whose JSON form is a scalar, as their Go types marshal them."""
    if type_name == "Time":
        if not msg.seconds and not msg.nanos:
            return None  # a zero time is encoded empty and reads back as unset
        return datetime.fromtimestamp(msg.seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if type_name == "Quantity":
        return str(msg.string)
    if type_name == "IntOrString":
        return str(msg.strVal) if msg.type == 1 else int(msg.intVal)
    return _to_json(msg)


def _value(field: Any, value: Any) -> Any:
    if field.message_type is not None:
        return _special(field.message_type.name, value)
    if field.type == _Proto.TYPE_BYTES:
        return base64.b64encode(value).decode()  # []byte is base64 in JSON
    return value


def _meaningful_unknown(msg: Message) -> list[int]:
    """Numbers of undescribed fields that carry a value.

    Go's encoder writes every non-pointer field, zero or not (an empty status, a "" string, a 0
    port); those say nothing and are skipped. Anything else would be lost silently, so it
    refuses the body instead.
    """
    unknown = unknown_fields.UnknownFieldSet(msg)
    return sorted(
        {
            unknown[i].field_number
            for i in range(len(unknown))
            if not _is_zero(unknown[i].wire_type, unknown[i].data)
        }
    )


def _is_zero(wire_type: int, data: Any) -> bool:
    if wire_type != 2:  # varint or fixed-width
        return not data
    if not data:
        return True
    nested = _CLASSES["Empty"]()
    try:
        nested.ParseFromString(bytes(data))
    except DecodeError:
        return False
    return not _meaningful_unknown(nested)


def _to_json(msg: Message) -> dict[str, Any]:
    meaningful = _meaningful_unknown(msg)
    if meaningful:
        raise UnsupportedKind(f"fields {meaningful} of {msg.DESCRIPTOR.name} are not described")
    out: dict[str, Any] = {}
    for field, value in msg.ListFields():
        mtype = field.message_type
        if mtype is not None and mtype.GetOptions().map_entry:
            vfield = mtype.fields_by_name["value"]
            out[field.name] = {k: _value(vfield, v) for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [_value(field, v) for v in value]
        elif field.name in _INLINE.get(msg.DESCRIPTOR.name, ()):
            out.update(_value(field, value))
        else:
            converted = _value(field, value)
            if converted is not None:
                out[field.name] = converted
    return out


def decode(raw: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded object, with its apiVersion and kind."""
    if not raw.startswith(MAGIC):
        raise ProtobufError("the body does not start with the Kubernetes protobuf magic number")
    envelope = _CLASSES["Unknown"]()
    try:
        envelope.ParseFromString(raw[len(MAGIC) :])
    except DecodeError as exc:
        raise ProtobufError(f"the protobuf envelope could not be decoded: {exc}") from None
    type_meta: Any = getattr(envelope, "typeMeta")  # noqa: B009 - a dynamic message's field
    api_version, kind = str(type_meta.apiVersion), str(type_meta.kind)
    name = KINDS.get((api_version, kind))
    if name is None:
        raise UnsupportedKind(f"{api_version}, Kind={kind}")
    obj = _CLASSES[name]()
    try:
        obj.ParseFromString(getattr(envelope, "raw"))  # noqa: B009
    except DecodeError as exc:
        raise ProtobufError(f"the {kind} could not be decoded: {exc}") from None
    return {"apiVersion": api_version, "kind": kind, **_to_json(obj)}
