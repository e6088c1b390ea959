"""The kubelets of every node, as one loop.

One loop serves all nodes because a process per node would not scale to 5,000 nodes; each node
still behaves like its own kubelet: a lease renewed every 10 simulated seconds, node status
posted when it changes, pods started after a delay and stopped after their grace period, and
nothing at all once that node's kubelet is made to fail (see `sim_annotations.KUBELET_STATE`).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

from nodeops.sim.clock import Clock
from nodeops.sim.cluster import sim_annotations as ann
from nodeops.sim.cluster.apiclient import (
    LEASES,
    NODES,
    PODS,
    AlreadyExists,
    ApiClient,
    Conflict,
    NotFound,
    Obj,
)
from nodeops.sim.cluster.indexes import BY_NODE, pod_node
from nodeops.sim.cluster.informer import Informer, Key, key_of
from nodeops.sim.cluster.nodestatus import node_internal_ip, node_status_patch
from nodeops.sim.cluster.podstatus import IPAllocator, completed_status, pod_ready, running_status
from nodeops.sim.cluster.runtime import Controller
from nodeops.sim.cluster.scheduling import is_deleting, is_terminal
from nodeops.sim.cluster.timeutil import epoch

log = logging.getLogger(__name__)

NODE_LEASE_NAMESPACE = "kube-node-lease"


def kubelet_state(node: Obj) -> str:
    value = ((node.get("metadata") or {}).get("annotations") or {}).get(ann.KUBELET_STATE)
    if value in (ann.KUBELET_NOT_READY, ann.KUBELET_STOPPED):
        return str(value)
    return ann.KUBELET_RUNNING


def _rv(obj: Obj | None) -> int:
    try:
        return int(((obj or {}).get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _float_annotation(pod: Obj, key: str) -> float | None:
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(key)
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def readiness_delay(pod: Obj) -> float:
    """Seconds from start until the readiness probes first pass (their initialDelaySeconds)."""
    delay = 0.0
    for c in (pod.get("spec") or {}).get("containers") or []:
        probe = c.get("readinessProbe") or {}
        delay = max(delay, float(probe.get("initialDelaySeconds") or 0))
    return delay


def termination_grace(pod: Obj) -> float:
    """min(spec.terminationGracePeriodSeconds, the delete's grace), never negative."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    grace = spec.get("terminationGracePeriodSeconds")
    candidates = [
        float(v) for v in (grace, meta.get("deletionGracePeriodSeconds")) if v is not None
    ]
    return max(0.0, min(candidates)) if candidates else 30.0


def exit_code(pod: Obj) -> int:
    """The code the pod's containers exit with when they stop (`sim_annotations.EXIT_CODE`)."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(ann.EXIT_CODE)
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0


def started_at(pod: Obj) -> str | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        running = (cs.get("state") or {}).get("running")
        if running and running.get("startedAt"):
            return str(running["startedAt"])
    return None


class _NodeAgent:
    """Per-node kubelet state: its lease, its pod IPs, its health."""

    def __init__(self, name: str, node: Obj, index: int) -> None:
        self.name = name
        self.node = node
        self.state = kubelet_state(node)
        self.lease: Obj | None = None
        self.task: asyncio.Task[None] | None = None
        self.wake = asyncio.Event()
        spec = node.get("spec") or {}
        self.ips = IPAllocator(spec.get("podCIDR"), index)
        self.index = index

    @property
    def uid(self) -> str:
        return str((self.node.get("metadata") or {}).get("uid") or "")

    @property
    def ip(self) -> str:
        return (
            node_internal_ip(self.node)
            or f"192.168.{self.index // 250 % 256}.{self.index % 250 + 2}"
        )


class Kubelet(Controller[Key]):
    name = "kubelet"

    def __init__(
        self,
        clock: Clock,
        client: ApiClient,
        pods: Informer,
        nodes: Informer,
        *,
        start_seconds: float = 1.0,
        instant: bool = False,
        heartbeat_seconds: float = 10.0,
        lease_duration_seconds: int = 40,
        status_report_seconds: float = 300.0,
        workers: int = 16,
        owns: Callable[[Obj], bool] | None = None,
    ) -> None:
        super().__init__(clock, workers=workers)
        # Attached to a cluster with nodes of its own, only the simulator's nodes have a
        # simulated kubelet; the others' kubelets are real and must not be impersonated.
        self.owns = owns
        self.client = client
        self.pods = pods
        self.nodes = nodes
        self.instant = instant
        self.start_seconds = 0.0 if instant else start_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.lease_duration_seconds = lease_duration_seconds
        self.status_report_seconds = status_report_seconds
        self._agents: dict[str, _NodeAgent] = {}
        self._next_index = 0
        self._start_due: dict[str, float] = {}
        self._stop_due: dict[str, float] = {}
        self._written: dict[str, int] = {}
        self._ips: dict[str, str] = {}
        self._running = False
        pods.add_index(BY_NODE, pod_node)
        pods.add_handler(self._on_pod)
        nodes.add_handler(self._on_node)

    # -- events ---------------------------------------------------------------------------------

    def _on_pod(self, old: Obj | None, new: Obj | None) -> None:
        if new is None:
            assert old is not None
            uid = (old.get("metadata") or {}).get("uid") or ""
            for d in (self._start_due, self._stop_due, self._written, self._ips):
                d.pop(uid, None)
            return
        if not (new.get("spec") or {}).get("nodeName"):
            return
        if is_terminal(new) and not is_deleting(new):
            return
        self.queue.add(key_of(new))

    def _on_node(self, old: Obj | None, new: Obj | None) -> None:
        if new is None:
            assert old is not None
            agent = self._agents.pop(key_of(old)[1], None)
            if agent is not None and agent.task is not None:
                agent.task.cancel()
            return
        name = key_of(new)[1]
        agent = self._agents.get(name)
        if agent is None:
            if self.owns is not None and not self.owns(new):
                return
            agent = self._agents[name] = _NodeAgent(name, new, self._next_index)
            self._next_index += 1
            if self._running:
                self._start_agent(agent)
                self._enqueue_node_pods(name)
            return
        if _rv(new) >= _rv(agent.node):
            agent.node = new
        state = kubelet_state(new)
        if state != agent.state:
            agent.state = state
            agent.wake.set()
            if state == ann.KUBELET_RUNNING:
                self._enqueue_node_pods(name)

    def _enqueue_node_pods(self, node: str) -> None:
        for key in self.pods.index_keys(BY_NODE, node):
            self.queue.add(key)

    # -- node agents ----------------------------------------------------------------------------

    async def run(self) -> None:
        # Heartbeats start as soon as the nodes are known: listing 150,000 pods can take longer
        # than the node grace period, and a kubelet does not stop renewing its lease meanwhile.
        await self.nodes.synced.wait()
        self._running = True
        for agent in self._agents.values():
            self._start_agent(agent)
        try:
            await self.pods.synced.wait()
            await super().run()
        finally:
            self._running = False
            for agent in self._agents.values():
                if agent.task is not None:
                    agent.task.cancel()

    def _start_agent(self, agent: _NodeAgent) -> None:
        if agent.task is None or agent.task.done():
            agent.task = asyncio.create_task(self._agent_loop(agent), name=f"kubelet-{agent.name}")

    async def _agent_loop(self, agent: _NodeAgent) -> None:
        first = True
        failures = 0
        while True:
            try:
                if agent.state != ann.KUBELET_STOPPED:
                    await self._renew_lease(agent)
                    await self._post_status(agent)
                failures = 0
            except asyncio.CancelledError:
                raise
            except NotFound:
                # The node is gone; the node handler cancels this task.
                pass
            except Exception as exc:
                failures += 1
                if failures <= 3 or failures % 50 == 0:
                    log.warning("kubelet %s: heartbeat failed: %s", agent.name, exc)
            if first:
                # Spread renewals over the interval instead of heart-beating in lockstep.
                delay = self.heartbeat_seconds * random.uniform(0.05, 1.0)
                first = False
            elif failures:
                delay = min(self.heartbeat_seconds, 0.5 * failures)
            else:
                delay = self.heartbeat_seconds * random.uniform(0.95, 1.05)
            agent.wake.clear()
            try:
                await asyncio.wait_for(agent.wake.wait(), self.clock.wall_seconds(delay))
            except TimeoutError:
                pass

    async def _renew_lease(self, agent: _NodeAgent) -> None:
        now = self.clock.micro_timestamp()
        # The lease belongs to this node object: a node re-created under the same name takes
        # over the old lease instead of leaving it to the garbage collector.
        owners = [{"apiVersion": "v1", "kind": "Node", "name": agent.name, "uid": agent.uid}]
        if agent.lease is None:
            body: Obj = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": agent.name,
                    "namespace": NODE_LEASE_NAMESPACE,
                    "ownerReferences": owners,
                },
                "spec": {
                    "holderIdentity": agent.name,
                    "leaseDurationSeconds": self.lease_duration_seconds,
                    "renewTime": now,
                },
            }
            try:
                agent.lease = await self.client.create(LEASES, body, NODE_LEASE_NAMESPACE)
                return
            except AlreadyExists:
                agent.lease = await self.client.get(LEASES, agent.name, NODE_LEASE_NAMESPACE)
        for attempt in range(2):
            assert agent.lease is not None
            lease = dict(agent.lease)
            lease["metadata"] = {**(lease.get("metadata") or {}), "ownerReferences": owners}
            lease["spec"] = {
                **(lease.get("spec") or {}),
                "holderIdentity": agent.name,
                "leaseDurationSeconds": self.lease_duration_seconds,
                "renewTime": now,
            }
            try:
                agent.lease = await self.client.update(LEASES, lease)
                return
            except Conflict:
                if attempt:
                    raise
                agent.lease = await self.client.get(LEASES, agent.name, NODE_LEASE_NAMESPACE)
            except NotFound:
                agent.lease = None
                await self._renew_lease(agent)
                return

    async def _post_status(self, agent: _NodeAgent) -> None:
        patch = node_status_patch(
            agent.node,
            state=agent.state,
            now=self.clock.now(),
            now_text=self.clock.timestamp(),
            report_seconds=self.status_report_seconds,
            node_ip=agent.ip,
        )
        if patch is None:
            return
        updated = await self.client.patch(
            NODES, agent.name, patch, patch_type="strategic", subresource="status"
        )
        if _rv(updated) >= _rv(agent.node):
            agent.node = updated

    # -- pods -----------------------------------------------------------------------------------

    async def reconcile(self, key: Key) -> float | None:
        pod = self.pods.store.get(key)
        if pod is None:
            return None
        node = (pod.get("spec") or {}).get("nodeName")
        agent = self._agents.get(node) if node else None
        if agent is None or agent.state != ann.KUBELET_RUNNING:
            return None
        meta = pod.get("metadata") or {}
        uid = meta.get("uid") or ""
        if self._written.get(uid, 0) > _rv(pod):
            return None  # our last write is not in the cache yet; its event will bring us back
        now = self.clock.now().timestamp()
        if is_deleting(pod):
            return await self._terminate(pod, uid, now)
        if is_terminal(pod):
            return None
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        started = started_at(pod)
        if phase == "Pending" or started is None:
            due = self._start_due.setdefault(uid, now + self._start_delay(pod))
            if now < due:
                return due - now
            start_text = self.clock.timestamp()
            ready = self._want_ready(pod, now, now)
            await self._write_status(pod, self._running_status(pod, agent, start_text, ready))
            return self._next_timer(pod, now, now)
        start = epoch(started)
        run = self._run_seconds(pod)
        if run is not None and now >= start + run:
            await self._write_status(
                pod, completed_status(pod, now=self.clock.timestamp(), exit_code=exit_code(pod))
            )
            return None
        ready = self._want_ready(pod, start, now)
        if ready != pod_ready(pod):
            await self._write_status(pod, self._running_status(pod, agent, started, ready))
        return self._next_timer(pod, start, now)

    def _start_delay(self, pod: Obj) -> float:
        if self.instant:
            return 0.0
        override = _float_annotation(pod, ann.START_SECONDS)
        return self.start_seconds if override is None else override

    def _ready_delay(self, pod: Obj) -> float:
        return 0.0 if self.instant else readiness_delay(pod)

    def _run_seconds(self, pod: Obj) -> float | None:
        if (pod.get("spec") or {}).get("restartPolicy", "Always") == "Always":
            return None
        return _float_annotation(pod, ann.RUN_SECONDS)

    def _want_ready(self, pod: Obj, start: float, now: float) -> bool:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if str(annotations.get(ann.READY, "")).lower() == "false":
            return False
        return now >= start + self._ready_delay(pod)

    def _next_timer(self, pod: Obj, start: float, now: float) -> float | None:
        """Seconds until readiness or completion is due, so the key comes back by itself."""
        due: list[float] = []
        ready_at = start + self._ready_delay(pod)
        if ready_at > now:
            due.append(ready_at - now)
        run = self._run_seconds(pod)
        if run is not None:
            due.append(max(0.0, start + run - now))
        return min(due) if due else None

    def _running_status(self, pod: Obj, agent: _NodeAgent, start_text: str, ready: bool) -> Obj:
        uid = (pod.get("metadata") or {}).get("uid") or ""
        status = pod.get("status") or {}
        if (pod.get("spec") or {}).get("hostNetwork"):
            pod_ip = agent.ip
        else:
            pod_ip = status.get("podIP") or self._ips.get(uid) or agent.ips.allocate()
        self._ips[uid] = pod_ip
        return running_status(
            pod,
            now=self.clock.timestamp(),
            started_at=start_text,
            ready=ready,
            host_ip=agent.ip,
            pod_ip=pod_ip,
        )

    async def _write_status(self, pod: Obj, status: Obj) -> None:
        meta = pod.get("metadata") or {}
        uid = meta.get("uid") or ""
        # The uid makes the patch a precondition: a pod recreated under the same name (a
        # StatefulSet ordinal) must not receive the status meant for its predecessor.
        body: dict[str, Any] = {"metadata": {"uid": uid}, "status": status}
        updated = await self.client.patch(
            PODS,
            meta["name"],
            body,
            meta["namespace"],
            patch_type="strategic",
            subresource="status",
        )
        self._written[uid] = _rv(updated)

    async def _terminate(self, pod: Obj, uid: str, now: float) -> float | None:
        """Stop a deleted pod's containers, report how they ended, then remove the pod.

        As kubelet does since 1.27: once the containers have stopped (after the grace period)
        the pod is written in its terminal phase (Succeeded when every container exited 0, else
        Failed), and only then deleted with grace 0 and a uid precondition. A pod with
        finalizers stays, terminal and terminating, until they are removed; the API server then
        removes it by itself.
        """
        started = started_at(pod) is not None
        if self.instant or not started or is_terminal(pod):
            grace = 0.0
        else:
            grace = termination_grace(pod)
        # A second delete with a shorter grace period shortens the wait, as in kubelet.
        due = min(self._stop_due.get(uid, now + grace), now + grace)
        self._stop_due[uid] = due
        if now < due:
            return due - now
        if not is_terminal(pod):
            stopped = completed_status(pod, now=self.clock.timestamp(), exit_code=exit_code(pod))
            try:
                await self._write_status(pod, stopped)
            except NotFound:
                return None  # gone already
            # A Conflict is raised: it may be a new pod under the name, or the server's passing
            # refusal of a write; the retry reads the pod again and tells which.
            return None  # the status's own event brings the pod back for removal
        meta = pod.get("metadata") or {}
        if meta.get("deletionGracePeriodSeconds") == 0 and meta.get("finalizers"):
            return None  # asked already; the finalizers' owners decide when it goes
        try:
            await self.client.delete(
                PODS, meta["name"], meta["namespace"], grace_period_seconds=0, uid=uid
            )
        except NotFound:
            pass
        # A Conflict is raised, as above: retried against the pod as the cache shows it then.
        return None
