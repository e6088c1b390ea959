"""The snapshot, copied into a simulated cluster and cloud: the ground the rehearsal rolls.

Objects are created in-process as the API server would store them, owners before what they own
(new uids, so owner references are rewritten), and each cloud group adopts its nodes as
instances. Two things are changed on purpose, both in the templates and pods of the copy only:
the simulated kubelet is told how long each workload's pods take to start (what the live
cluster showed), and pods of StatefulSets and DaemonSets carry the simulator's own revision
hash, so the copy does not mistake them for outdated pods and roll them.
"""

from __future__ import annotations

import contextlib
import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeops.common.jsonbytes import json_copy
from nodeops.controllers.cycling.resources import NODEGROUPS
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
    Resource,
)
from nodeops.providers.base import NodeGroup
from nodeops.rehearse.snapshot import Snapshot
from nodeops.rehearse.timings import Workloads
from nodeops.sim import objects as gen
from nodeops.sim.cloud import SimCloud
from nodeops.sim.cluster import sim_annotations as ann
from nodeops.sim.cluster.kubelet import readiness_delay, started_at
from nodeops.sim.cluster.statefulset import update_revision
from nodeops.sim.objects import template_hash
from nodeops.sim.scenario import BUILTIN_NAMESPACES
from nodeops.sim.scenario import NodeGroup as NodeGroupSpec
from nodeops.sim.server.app import SimServer
from nodeops.sim.server.errors import ApiError
from nodeops.sim.server.priority import SYSTEM_PRIORITY_CLASSES

__all__ = ["Copied", "StartTimes", "copy_snapshot"]

Obj = dict[str, Any]

REVISION_LABEL = "controller-revision-hash"
_PER_NODE_LABEL = re.compile(r"hostname|zone|region|instance-type")
_ZONE_LABEL = "topology.kubernetes.io/zone"
_INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


@dataclass
class StartTimes:
    """Seconds from a pod's creation to Ready, per workload as observed, and the fallback."""

    observed: dict[str, float] = field(default_factory=dict)
    default: float | None = None


@dataclass
class Copied:
    """What the copy holds, for the roll and its report."""

    nodes: int = 0
    pods: int = 0
    pods_to_start: int = 0
    """Pods bound to a node in the copy: the warm-up waits for them to run."""
    desired: dict[str, int] = field(default_factory=dict)
    """Replicas each workload wants (a DaemonSet: the pods it had)."""
    left_out: dict[str, int] = field(default_factory=dict)
    """Objects not copied, by the reason."""


def _stripped(obj: Mapping[str, Any], res: Resource) -> Obj:
    """The object as a create sends it; list items may lack their kind, so it is set."""
    out = gen.for_create(obj)
    out["apiVersion"] = f"{res.group}/{res.version}" if res.group else res.version
    out["kind"] = res.kind
    meta = out.setdefault("metadata", {})
    meta.pop("selfLink", None)
    meta.pop("deletionTimestamp", None)
    meta.pop("deletionGracePeriodSeconds", None)
    meta.pop("finalizers", None)
    return out


def _priority_classes(snapshot: Snapshot) -> list[Obj]:
    """The snapshot's PriorityClasses, and one for each class a pod names that is gone (a
    class deleted after its pods were made), at the priority those pods have: the copy's
    admission would refuse them otherwise."""
    classes = {
        pc["metadata"]["name"]: _stripped(pc, PRIORITYCLASSES)
        for pc in snapshot.of(PRIORITYCLASSES)
    }
    for pod in snapshot.of(PODS):
        spec = pod.get("spec") or {}
        name = spec.get("priorityClassName")
        if name and name not in classes and name not in SYSTEM_PRIORITY_CLASSES:
            classes[name] = {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": int(spec.get("priority") or 0),
                "preemptionPolicy": spec.get("preemptionPolicy") or "PreemptLowerPriority",
            }
    return list(classes.values())


def _create(server: SimServer, obj: Obj) -> Obj | None:
    try:
        return server.create(obj)
    except ApiError as e:
        if e.code == 409:
            return None
        raise


def _common_labels(nodes: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    if not nodes:
        return {}
    common = dict((nodes[0].get("metadata") or {}).get("labels") or {})
    for node in nodes[1:]:
        labels = (node.get("metadata") or {}).get("labels") or {}
        common = {k: v for k, v in common.items() if labels.get(k) == v}
    return {k: v for k, v in common.items() if not _PER_NODE_LABEL.search(k)}


def _common_taints(nodes: Sequence[Mapping[str, Any]]) -> list[Obj]:
    if not nodes:
        return []

    def taints(node: Mapping[str, Any]) -> list[Obj]:
        return [
            {k: v for k, v in t.items() if k in ("key", "value", "effect")}
            for t in (node.get("spec") or {}).get("taints") or ()
            # Cordons and the roll's own taints come and go; they are no part of the launch.
            if not str(t.get("key", "")).startswith(("node.kubernetes.io/", "nodeops.dev/"))
        ]

    first = taints(nodes[0])
    return [t for t in first if all(t in taints(n) for n in nodes[1:])]


def _group_spec(group: NodeGroup, members: Sequence[Mapping[str, Any]], boot: float) -> Any:
    labels = [(n.get("metadata") or {}).get("labels") or {} for n in members]
    zones = sorted({str(x[_ZONE_LABEL]) for x in labels if x.get(_ZONE_LABEL)})
    types = [str(x.get(_INSTANCE_TYPE_LABEL)) for x in labels]
    instance_type = max(set(types), key=types.count) if types else gen.DEFAULT_INSTANCE_TYPE
    spec: dict[str, Any] = {
        "name": group.name,
        "size": group.desired,
        "labels": _common_labels(members),
        "taints": _common_taints(members),
        "bootSeconds": boot,
        "launchVersion": group.launch_version or "1",
    }
    if instance_type in gen.INSTANCE_TYPES:
        spec["instanceType"] = instance_type
    if zones:
        spec["zones"] = zones
    try:
        return NodeGroupSpec.model_validate(spec)
    except ValueError:
        # Zones or labels the simulated cloud cannot take: the group's shape without them.
        spec.pop("zones", None)
        spec["labels"] = {}
        return NodeGroupSpec.model_validate(spec)


def _start_annotation(template: Obj, seconds: float | None) -> None:
    """Tell the simulated kubelet how long this template's pods take to start; its readiness
    probes' initial delays it adds itself, so they come off the observed time."""
    if seconds is None:
        return
    meta = template.setdefault("metadata", {})
    start = max(0.0, seconds - readiness_delay(template))
    meta["annotations"] = {**(meta.get("annotations") or {}), ann.START_SECONDS: f"{start:g}"}


def _startup_delay(template: Mapping[str, Any]) -> float:
    spec = template.get("spec") or {}
    return max(
        (
            float((c.get("startupProbe") or {}).get("initialDelaySeconds") or 0)
            for c in spec.get("containers") or ()
        ),
        default=0.0,
    )


def copy_snapshot(
    server: SimServer,
    cloud: SimCloud,
    snapshot: Snapshot,
    *,
    boot_seconds: float,
    start_times: StartTimes,
    workloads: Workloads,
) -> Copied:
    """Create the snapshot's objects in `server` and its cloud groups in `cloud`.

    Runs without awaiting, so the simulated cloud never sees a group before it has adopted its
    nodes (it would launch instances to make up the difference)."""
    copied = Copied()
    uids: dict[str, str] = {}

    def skip(reason: str) -> None:
        copied.left_out[reason] = copied.left_out.get(reason, 0) + 1

    for ns in snapshot.of(NAMESPACES):
        name = ns["metadata"]["name"]
        if name not in BUILTIN_NAMESPACES:
            _create(server, _stripped(ns, NAMESPACES))
    # A pod without a class was made when no class was the default, at priority 0: the
    # default class is made the default only once the pods are in, or the copy's admission
    # would give them its priority. The pods that name it need it there before them.
    defaults: list[Obj] = []
    for pc in _priority_classes(snapshot):
        if pc.get("globalDefault"):
            pc = {**pc, "globalDefault": False}
            made_default = _create(server, pc)
            if made_default is not None:
                defaults.append(made_default)
        else:
            _create(server, pc)  # the system classes are there already

    nodes = snapshot.of(NODES)
    group_of: dict[str, str] = {}
    for group in snapshot.cloud_groups:
        ids = {i.provider_id for i in group.instances}
        members = [n for n in nodes if (n.get("spec") or {}).get("providerID") in ids]
        cloud.add_group(
            _group_spec(group, members, boot_seconds),
            desired=group.desired,
            min_size=group.min,
            max_size=max(group.max, group.desired),
        )
        for node in members:
            group_of[node["metadata"]["name"]] = group.name
    # The simulator streams a watch's initial objects in the order they were created, and the
    # controllers pick batches in that order: create nodes in the order their cloud lists them.
    place = {
        i.provider_id: n
        for n, i in enumerate(i for group in snapshot.cloud_groups for i in group.instances)
    }
    nodes = sorted(
        nodes, key=lambda n: place.get(str((n.get("spec") or {}).get("providerID")), 1 << 30)
    )
    node_names = set()
    for node in nodes:
        name = node["metadata"]["name"]
        body = _stripped(node, NODES)
        body = cloud.adopt(group_of[name], body) if name in group_of else cloud.admit(body)
        created = _create(server, body)
        if created is not None:
            uids[node["metadata"]["uid"]] = created["metadata"]["uid"]
            node_names.add(name)
    copied.nodes = len(node_names)

    for res in (NODEGROUPS, NODEDRAINRULES):
        for obj in snapshot.of(res):
            _create(server, _stripped(obj, res))

    def start_of(key: str, template: Mapping[str, Any]) -> float | None:
        seconds = start_times.observed.get(key)
        if seconds is None and start_times.default is not None:
            seconds = start_times.default + _startup_delay(template)
        return seconds

    def owned(obj: Obj) -> Obj | None:
        """`obj` with its owner references pointing at the copies; None when its controller
        was not copied (a Job, a kind the simulator does not run)."""
        meta = obj.setdefault("metadata", {})
        refs = []
        for ref in meta.get("ownerReferences") or ():
            new = uids.get(ref.get("uid"))
            if new is None:
                if ref.get("controller"):
                    return None
                continue
            refs.append({**ref, "uid": new})
        if refs:
            meta["ownerReferences"] = refs
        else:
            meta.pop("ownerReferences", None)
        return obj

    revision_of: dict[str, str] = {}
    templates: dict[str, Obj] = {}
    for res in (DEPLOYMENTS, STATEFULSETS, DAEMONSETS):
        for obj in snapshot.of(res):
            body = _stripped(obj, res)
            meta = body["metadata"]
            key = f"{res.kind}/{meta.get('namespace', '')}/{meta['name']}"
            template = body.setdefault("spec", {}).setdefault("template", {})
            _start_annotation(template, start_of(key, template))
            templates[key] = template
            created = _create(server, body)
            if created is None:
                continue
            uids[obj["metadata"]["uid"]] = created["metadata"]["uid"]
            spec = created.get("spec") or {}
            if res is STATEFULSETS:
                revision_of[created["metadata"]["uid"]] = update_revision(created)
            elif res is DAEMONSETS:
                revision_of[created["metadata"]["uid"]] = template_hash(spec.get("template") or {})
            if res is not DAEMONSETS:
                copied.desired[key] = int(spec.get("replicas", 1))
    for obj in snapshot.of(REPLICASETS):
        rs = owned(_stripped(obj, REPLICASETS))
        if rs is None:
            skip("ReplicaSets of a controller not copied")
            continue
        meta = rs["metadata"]
        deployment = next(
            (r["name"] for r in meta.get("ownerReferences") or () if r.get("kind") == "Deployment"),
            None,
        )
        parent = f"Deployment/{meta.get('namespace', '')}/{deployment}" if deployment else None
        template = rs.setdefault("spec", {}).setdefault("template", {})
        if parent is not None and parent in templates:
            # The Deployment's template, annotation included, keeps EqualIgnoreHash true.
            labels = (template.get("metadata") or {}).get("labels") or {}
            template.clear()
            template.update(copy.deepcopy(templates[parent]))
            template.setdefault("metadata", {})["labels"] = labels
        else:
            own = f"ReplicaSet/{meta.get('namespace', '')}/{meta['name']}"
            _start_annotation(template, start_of(own, template))
            copied.desired[own] = int((rs.get("spec") or {}).get("replicas", 1))
        made = _create(server, rs)
        if made is not None:
            uids[obj["metadata"]["uid"]] = made["metadata"]["uid"]

    for obj in snapshot.of(PDBS):
        _create(server, _stripped(obj, PDBS))

    ds_pods: dict[str, int] = {}
    for pod in snapshot.of(PODS):
        meta = pod.get("metadata") or {}
        phase = (pod.get("status") or {}).get("phase")
        if meta.get("deletionTimestamp") or phase in ("Succeeded", "Failed"):
            skip("pods finished or being deleted")
            continue
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound and bound not in node_names:
            skip("pods on nodes not copied")
            continue
        copy_ = owned(_stripped(pod, PODS))
        if copy_ is None:
            skip("pods of a controller not copied")
            continue
        for key in ("priority", "preemptionPolicy"):
            # The copy's admission writes them from the pod's class, as it does for the
            # pods the copy's controllers make.
            copy_["spec"].pop(key, None)
        bmeta = copy_["metadata"]
        annotations = dict(bmeta.get("annotations") or {})
        # Pods of the snapshot are running already: they start at once in the copy.
        annotations[ann.START_SECONDS] = "0"
        if phase == "Running" and not _was_ready(pod):
            annotations[ann.READY] = "false"
        bmeta["annotations"] = annotations
        for ref in bmeta.get("ownerReferences") or ():
            revision = revision_of.get(ref.get("uid"))
            if revision is not None and ref.get("controller"):
                bmeta["labels"] = {**(bmeta.get("labels") or {}), REVISION_LABEL: revision}
        workload = workloads.of(pod)
        if workload is not None and workload.startswith("DaemonSet/"):
            ds_pods[workload] = ds_pods.get(workload, 0) + 1
        made = _create(server, copy_)
        if made is not None:
            copied.pods += 1
            if bound:
                copied.pods_to_start += 1
                _running_as_seen(server, made, pod)
    copied.desired.update(ds_pods)
    if defaults:
        # Two defaults can exist after a race between writers; kube's admission then takes
        # the one of the lowest value, and so does the copy's, which allows only one.
        lowest = min(defaults, key=lambda pc: int(pc.get("value") or 0))
        server.update({**lowest, "globalDefault": True})
    return copied


def _running_as_seen(server: SimServer, made: Obj, seen: Mapping[str, Any]) -> None:
    """Give a pod the snapshot shows running the status it showed, as its kubelet would write
    it: the copy's kubelets then have nothing to start, and the copy's controllers count it
    Ready (or not) from their first look. Otherwise the copy replays every pod's start before
    the roll, a fifth of a rehearsal's work. A status the simulator refuses is left to the
    copy's kubelet, which starts the pod at once."""
    status = seen.get("status") or {}
    if status.get("phase") != "Running" or started_at(dict(seen)) is None:
        return
    with contextlib.suppress(ApiError):
        server.update_status({**made, "status": json_copy(status)})


def _was_ready(pod: Mapping[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False
