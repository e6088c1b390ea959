"""The DaemonSet controller: one pod per eligible node, including cordoned ones.

Daemon pods are what a drain must skip and what keeps running on a cordoned node, so they carry
the controller's default tolerations and are pinned to their node by node affinity (the
scheduler still binds them), exactly as kube-controller-manager creates them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import DAEMONSETS, AlreadyExists, ApiClient, Obj, Resource
from nodeops.sim.cluster.informer import Informer, Key
from nodeops.sim.cluster.owned import OwnerController
from nodeops.sim.cluster.podcontrol import (
    available_after,
    int_or_percent,
    is_available,
    merge_status,
    write_status,
)
from nodeops.sim.cluster.podstatus import pod_ready
from nodeops.sim.cluster.scheduling import (
    NO_EXECUTE,
    NO_SCHEDULE,
    TAINT_DISK_PRESSURE,
    TAINT_MEMORY_PRESSURE,
    TAINT_NETWORK_UNAVAILABLE,
    TAINT_NOT_READY,
    TAINT_PID_PRESSURE,
    TAINT_UNREACHABLE,
    TAINT_UNSCHEDULABLE,
    is_deleting,
    is_terminal,
    node_matches_affinity,
    node_taints,
    untolerated_taint,
)
from nodeops.sim.objects import template_hash

REVISION_LABEL = "controller-revision-hash"
CONTROLLERREVISIONS = Resource("apps", "v1", "controllerrevisions", "ControllerRevision", True)
GENERATION_LABEL = "pod-template-generation"

DAEMONSET_TOLERATIONS: tuple[Obj, ...] = (
    {"key": TAINT_NOT_READY, "operator": "Exists", "effect": NO_EXECUTE},
    {"key": TAINT_UNREACHABLE, "operator": "Exists", "effect": NO_EXECUTE},
    {"key": TAINT_DISK_PRESSURE, "operator": "Exists", "effect": NO_SCHEDULE},
    {"key": TAINT_MEMORY_PRESSURE, "operator": "Exists", "effect": NO_SCHEDULE},
    {"key": TAINT_PID_PRESSURE, "operator": "Exists", "effect": NO_SCHEDULE},
    {"key": TAINT_UNSCHEDULABLE, "operator": "Exists", "effect": NO_SCHEDULE},
)
HOST_NETWORK_TOLERATION: Obj = {
    "key": TAINT_NETWORK_UNAVAILABLE,
    "operator": "Exists",
    "effect": NO_SCHEDULE,
}

STATUS_FIELDS = (
    "currentNumberScheduled",
    "desiredNumberScheduled",
    "numberAvailable",
    "numberMisscheduled",
    "numberReady",
    "numberUnavailable",
    "observedGeneration",
    "updatedNumberScheduled",
)


def daemon_tolerations(pod_spec: Mapping[str, Any]) -> list[Obj]:
    """The template's tolerations plus the ones the controller adds to every daemon pod."""
    out = [dict(t) for t in pod_spec.get("tolerations") or []]
    extra = list(DAEMONSET_TOLERATIONS)
    if pod_spec.get("hostNetwork"):
        extra.append(HOST_NETWORK_TOLERATION)
    for t in extra:
        if not any(o.get("key") == t["key"] and o.get("effect") == t["effect"] for o in out):
            out.append(dict(t))
    return out


def node_should_run(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> tuple[bool, bool]:
    """(should run a new pod, may keep an existing one), `NodeShouldRunDaemonPod`'s answer.

    A NoSchedule taint keeps new daemon pods off but lets a running one stay; a NoExecute taint
    evicts. Resources are the scheduler's business, not this controller's.
    """
    if not node_matches_affinity(pod_spec, node):
        return False, False
    tolerations = daemon_tolerations(pod_spec)
    taints = node_taints(node)
    if untolerated_taint(taints, tolerations, (NO_EXECUTE,)) is not None:
        return False, False
    if untolerated_taint(taints, tolerations, (NO_SCHEDULE,)) is not None:
        return False, True
    return True, True


ShouldRun = Callable[[Mapping[str, Any]], tuple[bool, bool]]
"""`node_should_run` for one template: a node's answer."""


class CachedShouldRun:
    """`node_should_run` for one template, each node's answer kept until the node changes.

    Every change of a daemon pod replans its DaemonSet over every node, twice (plan and
    status): at a thousand nodes, re-reading each node's affinity, taints and tolerations for
    that was a twelfth of a roll's work, for answers that change only with the node.
    """

    def __init__(self, pod_spec: Mapping[str, Any]) -> None:
        self.pod_spec = pod_spec
        self._answers: dict[str, tuple[str, tuple[bool, bool]]] = {}

    def __call__(self, node: Mapping[str, Any]) -> tuple[bool, bool]:
        meta = node.get("metadata") or {}
        name = str(meta.get("name") or "")
        version = str(meta.get("resourceVersion") or "")
        kept = self._answers.get(name)
        if kept is not None and version and kept[0] == version:
            return kept[1]
        answer = node_should_run(self.pod_spec, node)
        self._answers[name] = (version, answer)
        return answer

    def __len__(self) -> int:
        return len(self._answers)

    def keep_only(self, names: Iterable[str]) -> None:
        """Forget nodes no longer in the cluster."""
        keep = set(names)
        for name in [n for n in self._answers if n not in keep]:
            del self._answers[name]


def target_node(pod: Mapping[str, Any]) -> str | None:
    """The node a daemon pod is for: its nodeName, or the node its affinity pins it to."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for f in term.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("operator") == "In":
                values = f.get("values") or []
                if len(values) == 1:
                    return str(values[0])
    return None


def pin_to_node(pod: Obj, node: str) -> None:
    """`ReplaceDaemonSetPodNodeNameNodeAffinity`: required node affinity becomes this node only,
    other affinity (preferred terms, pod affinity) is kept."""
    spec = pod["spec"]
    affinity = spec.get("affinity") or {}
    node_affinity = dict(affinity.get("nodeAffinity") or {})
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }
    spec["affinity"] = {**affinity, "nodeAffinity": node_affinity}


def _counted(pod: Mapping[str, Any]) -> bool:
    """`getNodesToDaemonPods(includeDeletedTerminal=false)`: a pod that has finished and is
    being deleted (held by a finalizer, or waiting for the kubelet's final delete) is nothing
    the controller has to do with any more, so it neither blocks a replacement on its node nor
    counts in the status."""
    return not (is_terminal(pod) and is_deleting(pod))


@dataclass(slots=True)
class DsPlan:
    create: list[str] = field(default_factory=list)
    delete: list[Mapping[str, Any]] = field(default_factory=list)


def plan_daemonset(
    ds: Mapping[str, Any],
    nodes: Iterable[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    revision: str,
    now: float,
    should_run_on: ShouldRun | None = None,
) -> DsPlan:
    """Nodes that need a pod and pods that must go (misplaced, failed, duplicate, outdated)."""
    spec = ds.get("spec") or {}
    pod_spec = (spec.get("template") or {}).get("spec") or {}
    if should_run_on is None:
        should_run_on = CachedShouldRun(pod_spec)
    min_ready = float(spec.get("minReadySeconds") or 0)
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for p in pods:
        if not _counted(p):
            continue
        n = target_node(p)
        by_node.setdefault(n or "", []).append(p)
    plan = DsPlan()
    node_names: set[str] = set()
    desired = 0
    unavailable = 0
    outdated: list[tuple[bool, Mapping[str, Any]]] = []
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name") or "")
        node_names.add(name)
        should_run, may_stay = should_run_on(node)
        on_node = by_node.get(name, [])
        running: list[Mapping[str, Any]] = []
        for p in on_node:
            if is_deleting(p):
                continue
            if (p.get("status") or {}).get("phase") == "Failed":
                plan.delete.append(p)
                continue
            running.append(p)
        if should_run:
            desired += 1
        if may_stay and running:
            running.sort(key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")
            plan.delete.extend(running[1:])
            keep = running[0]
            available = is_available(keep, min_ready, now)
            if should_run and not available:
                unavailable += 1
            labels = (keep.get("metadata") or {}).get("labels") or {}
            if labels.get(REVISION_LABEL) != revision:
                outdated.append((available, keep))
        elif should_run and not on_node:
            plan.create.append(name)
            unavailable += 1
        elif should_run:
            unavailable += 1  # the previous pod is still terminating
        else:
            plan.delete.extend(running)
    # Unscheduled pods for nodes that no longer exist.
    for n, ps in by_node.items():
        if n and n not in node_names:
            plan.delete.extend(
                p for p in ps if not (p.get("spec") or {}).get("nodeName") and not is_deleting(p)
            )
    strategy = spec.get("updateStrategy") or {}
    if strategy.get("type", "RollingUpdate") == "RollingUpdate" and outdated:
        max_unavailable = int_or_percent(
            (strategy.get("rollingUpdate") or {}).get("maxUnavailable"),
            desired,
            round_up=True,
            default=1,
        )
        max_unavailable = max(1, max_unavailable)
        outdated.sort(key=lambda x: x[0])  # unavailable ones first: replacing them costs nothing
        for available, p in outdated:
            if not available:
                plan.delete.append(p)
            elif unavailable < max_unavailable:
                plan.delete.append(p)
                unavailable += 1
    return plan


def daemonset_status(
    ds: Mapping[str, Any],
    nodes: Iterable[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    revision: str,
    now: float,
    should_run_on: ShouldRun | None = None,
) -> Obj:
    spec = ds.get("spec") or {}
    pod_spec = (spec.get("template") or {}).get("spec") or {}
    if should_run_on is None:
        should_run_on = CachedShouldRun(pod_spec)
    min_ready = float(spec.get("minReadySeconds") or 0)
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for p in pods:
        if not _counted(p):
            continue
        n = target_node(p)
        if n:
            by_node.setdefault(n, []).append(p)
    desired = current = misscheduled = ready = available = updated = 0
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name") or "")
        should_run, _ = should_run_on(node)
        on_node = by_node.get(name) or []
        if should_run:
            desired += 1
            if on_node:
                current += 1
                oldest = min(
                    on_node,
                    key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "",
                )
                if pod_ready(oldest):
                    ready += 1
                if is_available(oldest, min_ready, now):
                    available += 1
                labels = (oldest.get("metadata") or {}).get("labels") or {}
                if labels.get(REVISION_LABEL) == revision:
                    updated += 1
        elif on_node:
            misscheduled += 1
    computed: Obj = {
        "currentNumberScheduled": current,
        "desiredNumberScheduled": desired,
        "numberAvailable": available,
        "numberMisscheduled": misscheduled,
        "numberReady": ready,
        "numberUnavailable": max(0, desired - available),
        "observedGeneration": int((ds.get("metadata") or {}).get("generation") or 0),
        "updatedNumberScheduled": updated,
    }
    status = merge_status(ds.get("status"), STATUS_FIELDS, computed)
    # These four are always present in a real DaemonSet status, zero or not.
    for k in (
        "currentNumberScheduled",
        "desiredNumberScheduled",
        "numberMisscheduled",
        "numberReady",
    ):
        status[k] = computed[k]
    return status


def _node_signature(node: Mapping[str, Any]) -> tuple[Any, ...]:
    meta = node.get("metadata") or {}
    return (
        tuple(sorted((meta.get("labels") or {}).items())),
        repr((node.get("spec") or {}).get("taints")),
    )


class DaemonSetController(OwnerController):
    name = "daemonset"
    owner_kind = "DaemonSet"

    def __init__(
        self,
        clock: Clock,
        client: ApiClient,
        pods: Informer,
        nodes: Informer,
        daemonsets: Informer,
        *,
        workers: int = 2,
    ) -> None:
        super().__init__(clock, client, pods, daemonsets, workers=workers)
        self.nodes = nodes
        self.needs(nodes)
        nodes.add_handler(self._on_node)
        self._revisions: set[tuple[str, str]] = set()
        self._should_run: dict[str, tuple[str, CachedShouldRun]] = {}
        """Per DaemonSet uid: its template's revision and the nodes' answers for it."""

    def _on_node(self, old: Obj | None, new: Obj | None) -> None:
        """A node added or removed concerns every DaemonSet; a node whose labels or taints
        changed only those whose pods it now should, or should no longer, run (as kube's
        controller does): a roll cordons and taints every node, and replanning every
        DaemonSet over every node for each of those would cost O(nodes) per node."""
        if old is not None and new is not None and _node_signature(old) == _node_signature(new):
            return
        for key in list(self.owners.store):
            if old is None or new is None:
                self.queue.add(key)
                continue
            ds = self.owners.store.get(key) or {}
            spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
            if node_should_run(spec, old) != node_should_run(spec, new):
                self.queue.add(key)

    async def reconcile(self, key: Key) -> float | None:
        ds = self.owners.store.get(key)
        if ds is None:
            return None
        meta = ds.get("metadata") or {}
        ds_uid = meta.get("uid") or ""
        pods = self.owned_pods(ds_uid)
        template = (ds.get("spec") or {}).get("template") or {}
        revision = template_hash(template)
        nodes = list(self.nodes.store.values())
        should_run_on = self._should_run_for(ds_uid, revision, template)
        now = self.clock.now().timestamp()
        if not is_deleting(ds) and (ds_uid, revision) not in self._revisions:
            await self._record_revision(ds, revision)
        if not is_deleting(ds) and self.expectations.satisfied(ds_uid):
            plan = plan_daemonset(ds, nodes, pods, revision, now, should_run_on)
            if plan.delete:
                await self.control.delete_many(plan.delete, self.expectations, ds_uid)
            if plan.create:
                generation = str(meta.get("generation") or 1)
                new_pods = []
                for node in plan.create:
                    pod = self.control.build(template, ds, node_name=node)
                    pod["spec"].pop("nodeName", None)
                    pin_to_node(pod, node)
                    pod["spec"]["tolerations"] = daemon_tolerations(pod["spec"])
                    pod["metadata"].setdefault("labels", {})[GENERATION_LABEL] = generation
                    new_pods.append(pod)
                await self.control.create_many(new_pods, self.expectations, ds_uid)
        await write_status(
            self.client,
            DAEMONSETS,
            ds,
            daemonset_status(ds, nodes, pods, revision, now, should_run_on),
            self.written,
        )
        min_ready = float((ds.get("spec") or {}).get("minReadySeconds") or 0)
        return available_after(pods, min_ready, now)

    def _should_run_for(self, uid: str, revision: str, template: Obj) -> CachedShouldRun:
        kept = self._should_run.get(uid)
        if kept is None or kept[0] != revision:
            kept = (revision, CachedShouldRun(template.get("spec") or {}))
            self._should_run[uid] = kept
            live = {(ds.get("metadata") or {}).get("uid") for ds in self.owners.store.values()}
            for gone in [u for u in self._should_run if u not in live and u != uid]:
                del self._should_run[gone]
        answers = kept[1]
        if len(answers) > 2 * len(self.nodes.store) + 16:
            answers.keep_only(key[1] for key in self.nodes.store)
        return answers

    async def _record_revision(self, ds: Obj, revision: str) -> None:
        """The ControllerRevision of the DaemonSet's current template, as the real controller
        keeps one per template: clients tell current pods from outdated ones by its hash."""
        meta = ds.get("metadata") or {}
        namespace, uid = str(meta.get("namespace") or ""), str(meta.get("uid") or "")
        existing = await self.client.list(CONTROLLERREVISIONS, namespace)
        owned = [
            r
            for r in existing.items
            if any(
                o.get("uid") == uid for o in (r.get("metadata") or {}).get("ownerReferences") or ()
            )
        ]
        labels = dict(((ds.get("spec") or {}).get("selector") or {}).get("matchLabels") or {})
        labels[REVISION_LABEL] = revision
        body: Obj = {
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "metadata": {
                "name": f"{meta.get('name')}-{revision}",
                "namespace": namespace,
                "labels": labels,
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": meta.get("name"),
                        "uid": uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "data": {"spec": {"template": (ds.get("spec") or {}).get("template") or {}}},
            "revision": 1 + max((int(r.get("revision") or 0) for r in owned), default=0),
        }
        if not any(r["metadata"]["name"] == body["metadata"]["name"] for r in owned):
            try:
                await self.client.create(CONTROLLERREVISIONS, body, namespace)
            except AlreadyExists:
                pass
        self._revisions.add((uid, revision))
