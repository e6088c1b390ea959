"""Simulated clients sending requests through a load balancer to NodePort backends.

A flow sends requests at a steady rate through one simulated load balancer to the nodes of its
instances, and records what became of each, so that what a node operation costs in failed
requests can be measured, not argued about. It behaves as an AWS load balancer in front of a
`type: NodePort` or `LoadBalancer` Service does:

- New requests go only to registered targets that are not draining, round robin, and only to
  targets its health checks find healthy; when none is healthy it fails open and uses them all.
- Health checks run every `interval` seconds. With `externalTrafficPolicy: Local` a node passes
  only while it has a ready local endpoint of the Service (kube-proxy's health check node port
  answers 503 otherwise); with `Cluster`, while its machine runs. A target turns unhealthy after
  `unhealthyThreshold` failed checks in a row and healthy after `healthyThreshold` passes, so a
  node whose backends are gone keeps receiving requests until the checks notice: the failures a
  detach-before-drain avoids. A newly registered target starts `initial` and receives nothing
  until it has passed.
- At the node, kube-proxy sends a request to a ready local endpoint (`Local`) or any ready
  endpoint (`Cluster`); with no ready one it uses a terminating endpoint that still runs
  (ProxyTerminatingEndpoints), and with none at all the request fails.
- A request is in flight for `requestSeconds`. It fails if its pod stops (is deleted) before it
  completes, if its machine stops, or if the load balancer's deregistration delay (connection
  draining) ends first: deregistering lets requests in flight finish, up to that delay.

Everything runs on the simulator's clock; times in records are seconds since the epoch on it.
The flows are driven over HTTP (`/sim/cloud/traffic`, see `traffic_routes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from nodeops.sim.clock import Clock
from nodeops.sim.cloud.model import CloudError, Registration, SimLoadBalancer
from nodeops.sim.cloud.state import CloudState
from nodeops.sim.cluster.apiclient import PODS, ApiClient, Obj, Resource
from nodeops.sim.cluster.indexes import BY_NODE, pod_node
from nodeops.sim.cluster.informer import Informer, slim_pod
from nodeops.sim.cluster.podstatus import pod_ready
from nodeops.sim.cluster.scheduling import is_deleting, is_terminal

__all__ = [
    "SERVICES",
    "Flow",
    "FlowSpec",
    "HealthCheck",
    "RequestRecord",
    "TrafficSimulator",
]

log = logging.getLogger(__name__)

SERVICES: Final = Resource("", "v1", "services", "Service", True)

MAX_RECORDS: Final = 200_000
"""Requests kept per flow for queries; counters cover every request regardless."""

_MIN_WALL_SLEEP: Final = 0.005
_MAX_WALL_SLEEP: Final = 0.25

Outcome = Literal["pending", "succeeded", "failed"]
HealthState = Literal["initial", "healthy", "unhealthy"]


@dataclass(frozen=True, slots=True)
class HealthCheck:
    """The load balancer's health check of its targets (AWS's defaults for an NLB: 30 s, 3/3)."""

    interval: float = 30.0
    healthy_threshold: int = 3
    unhealthy_threshold: int = 3

    def __post_init__(self) -> None:
        if self.interval <= 0:
            raise ValueError("healthCheck.intervalSeconds must be > 0")
        if self.healthy_threshold < 1 or self.unhealthy_threshold < 1:
            raise ValueError("healthCheck thresholds must be >= 1")


@dataclass(frozen=True, slots=True)
class FlowSpec:
    load_balancer: str
    namespace: str
    service: str
    rate: float = 10.0
    """Requests per simulated second."""
    request_seconds: float = 0.5
    """How long each request is in flight."""
    health: HealthCheck = field(default_factory=HealthCheck)

    def __post_init__(self) -> None:
        if not 0 < self.rate <= 10_000:
            raise ValueError("requestsPerSecond must be > 0 and <= 10000")
        if self.request_seconds < 0:
            raise ValueError("requestSeconds must be >= 0")


@dataclass(slots=True)
class RequestRecord:
    """One request: where it went and what became of it."""

    id: int
    sent_at: float
    node: str | None
    instance_id: str | None
    pod: str | None
    outcome: Outcome = "pending"
    completed_at: float | None = None
    reason: str = ""


@dataclass(slots=True)
class _InFlight:
    record: RequestRecord
    due: float
    pod_uid: str
    registration: Registration


@dataclass(slots=True)
class _Health:
    state: HealthState
    passes: int = 0
    fails: int = 0


@dataclass(slots=True)
class _NodeCounts:
    sent: int = 0
    succeeded: int = 0
    failed: int = 0
    last_sent_at: float | None = None
    last_succeeded_at: float | None = None
    last_failed_at: float | None = None


class Flow:
    """The requests of one load balancer: what is in flight, what was recorded, target health."""

    def __init__(self, spec: FlowSpec, started_at: float) -> None:
        self.spec = spec
        self.started_at = started_at
        self.next_send = started_at
        self.next_check = started_at
        self.records: deque[RequestRecord] = deque(maxlen=MAX_RECORDS)
        self.in_flight: dict[int, _InFlight] = {}
        self.health: dict[tuple[str, int], _Health] = {}
        self.nodes: dict[str, _NodeCounts] = {}
        self.sent = 0
        self.succeeded = 0
        self.failed = 0
        self.stopped_at: float | None = None
        self._turn = itertools.count()
        self._ids = itertools.count(1)
        self._bootstrapped = False

    def _counts(self, node: str | None) -> _NodeCounts | None:
        if node is None:
            return None
        counts = self.nodes.get(node)
        if counts is None:
            counts = self.nodes[node] = _NodeCounts()
        return counts

    def new_record(
        self, at: float, node: str | None, instance_id: str | None, pod: str | None
    ) -> RequestRecord:
        record = RequestRecord(next(self._ids), at, node, instance_id, pod)
        self.records.append(record)
        self.sent += 1
        counts = self._counts(node)
        if counts is not None:
            counts.sent += 1
            counts.last_sent_at = at
        return record

    def finish(self, record: RequestRecord, at: float, ok: bool, reason: str = "") -> None:
        record.outcome = "succeeded" if ok else "failed"
        record.completed_at = at
        record.reason = reason
        counts = self._counts(record.node)
        if ok:
            self.succeeded += 1
            if counts is not None:
                counts.succeeded += 1
                counts.last_succeeded_at = at
        else:
            self.failed += 1
            if counts is not None:
                counts.failed += 1
                counts.last_failed_at = at

    def turn(self) -> int:
        return next(self._turn)


def _matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _pod_ref(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _uid(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


class TrafficSimulator:
    """The flows of one simulated cloud, run on its clock against the cluster's pods.

    It watches pods and Services through the API server like any other client (only once a
    flow exists, so clusters without traffic pay nothing).
    """

    def __init__(self, state: CloudState, clock: Clock) -> None:
        self.state = state
        self.clock = clock
        self.flows: dict[str, Flow] = {}
        self._client: ApiClient | None = None
        self._pods: Informer | None = None
        self._services: Informer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._gone: dict[str, float] = {}
        # Bumped by every pod event: the endpoints worked out before it are stale. A flow sends
        # `rate` requests a simulated second (3,000 a wall second at 30x), and working out a
        # request's endpoints scans every pod: done once per change, not once per request.
        self._pods_generation = 0
        self._endpoints: dict[tuple[str, tuple[tuple[str, str], ...], str], tuple[int, list[Obj]]]
        self._endpoints = {}
        self._stopped_machines: dict[str, float] = {}
        self._wake = asyncio.Event()
        state.health_checks = self.health_of

    def health_of(self, load_balancer: str, instance_id: str, port: int) -> str | None:
        """The health checks' verdict on a registration, as the load balancer's API reports it;
        None when no flow runs through the load balancer (nothing checks its targets)."""
        flow = self.flows.get(load_balancer)
        if flow is None or flow.stopped_at is not None:
            return None
        health = flow.health.get((instance_id, port))
        return health.state if health is not None else "initial"

    def now(self) -> float:
        return self.state.now()

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self, client: ApiClient) -> None:
        """Serve flows against the API server `client` talks to."""
        self._client = client
        if self.flows:
            self._ensure_running()

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._pods = self._services = None

    def _ensure_running(self) -> None:
        if self._tasks or self._client is None:
            return
        pods = self._pods = Informer(self._client, PODS, transform=slim_pod)
        pods.add_index(BY_NODE, pod_node)
        pods.add_handler(self._on_pod, replay=False)
        services = self._services = Informer(self._client, SERVICES)
        self._tasks = [
            asyncio.create_task(pods.run(), name="sim-traffic-pods"),
            asyncio.create_task(services.run(), name="sim-traffic-services"),
            asyncio.create_task(self._run(), name="sim-traffic"),
        ]

    def _on_pod(self, old: Obj | None, new: Obj | None) -> None:
        self._pods_generation += 1
        if new is None and old is not None:
            self._gone[_uid(old)] = self.now()
            self._wake.set()
        elif new is not None and is_terminal(new):
            self._gone.setdefault(_uid(new), self.now())

    @property
    def synced(self) -> bool:
        return (
            self._pods is not None
            and self._services is not None
            and self._pods.synced.is_set()
            and self._services.synced.is_set()
        )

    async def wait_synced(self, timeout: float = 30.0) -> None:
        self._ensure_running()
        if self._pods is None or self._services is None:
            raise RuntimeError("the simulated cloud has not been started")
        await self._pods.wait_synced(timeout)
        await self._services.wait_synced(timeout)

    # -- flows ---------------------------------------------------------------------------------

    def start_flow(self, spec: FlowSpec) -> Flow:
        self.state.load_balancer(spec.load_balancer)  # 404 for an unknown load balancer
        if spec.load_balancer in self.flows and self.flows[spec.load_balancer].stopped_at is None:
            raise CloudError(
                409, "FlowExists", f"traffic through {spec.load_balancer} is already flowing"
            )
        flow = self.flows[spec.load_balancer] = Flow(spec, self.now())
        self._ensure_running()
        self._wake.set()
        return flow

    def flow(self, name: str) -> Flow:
        flow = self.flows.get(name)
        if flow is None:
            raise CloudError(404, "FlowNotFound", f"no traffic through {name}")
        return flow

    def stop_flow(self, name: str) -> Flow:
        """Stop sending; requests in flight still complete and are recorded."""
        flow = self.flow(name)
        if flow.stopped_at is None:
            flow.stopped_at = self.now()
        self._wake.set()
        return flow

    # -- the clockwork -------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            wait = _MAX_WALL_SLEEP
            if self.synced:
                try:
                    wait = self.step(self.now())
                except Exception:
                    log.exception("simulated traffic: step failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    def step(self, now: float) -> float:
        """Everything due up to `now`; the wall seconds until something is due again."""
        self._note_stopped_machines(now)
        next_due: list[float] = []
        for flow in self.flows.values():
            lb = self.state.load_balancers.get(flow.spec.load_balancer)
            self._complete(flow, now)
            if lb is not None:
                self._check_health(flow, lb, now)
                self._send(flow, lb, now)
            next_due += [f.due for f in flow.in_flight.values()]
            if flow.stopped_at is None:
                next_due += [flow.next_send, flow.next_check]
        if not next_due:
            return _MAX_WALL_SLEEP
        wall = self.clock.wall_seconds(min(next_due) - now)
        return min(_MAX_WALL_SLEEP, max(_MIN_WALL_SLEEP, wall))

    def _note_stopped_machines(self, now: float) -> None:
        for instance in self.state.instances.values():
            if not instance.running:
                self._stopped_machines.setdefault(instance.id, now)

    def _complete(self, flow: Flow, now: float) -> None:
        for key, item in list(flow.in_flight.items()):
            due = item.due
            gone = self._gone.get(item.pod_uid)
            machine = self._stopped_machines.get(item.record.instance_id or "")
            drained = item.registration.draining_until
            if gone is not None and gone <= due:
                flow.finish(item.record, gone, False, "the pod stopped with the request in flight")
            elif machine is not None and machine <= due:
                flow.finish(item.record, machine, False, "the machine stopped")
            elif drained is not None and drained <= due and drained <= now:
                flow.finish(
                    item.record, drained, False, "the load balancer's deregistration delay ended"
                )
            elif due <= now:
                flow.finish(item.record, due, True)
            else:
                continue
            del flow.in_flight[key]

    # -- health checks -------------------------------------------------------------------------

    def _service(self, flow: Flow) -> Obj | None:
        if self._services is None:
            return None
        return self._services.get(flow.spec.namespace, flow.spec.service)

    def _local_pods(self, flow: Flow, node: str, service: Obj) -> list[Obj]:
        assert self._pods is not None
        selector = (service.get("spec") or {}).get("selector") or {}
        return [
            pod
            for pod in self._pods.by_index(BY_NODE, node)
            if (pod.get("metadata") or {}).get("namespace") == flow.spec.namespace
            and _matches(selector, (pod.get("metadata") or {}).get("labels") or {})
            and not is_terminal(pod)
            and _uid(pod) not in self._gone
        ]

    def _all_pods(self, flow: Flow, service: Obj) -> list[Obj]:
        assert self._pods is not None
        selector = (service.get("spec") or {}).get("selector") or {}
        return [
            pod
            for pod in self._pods.items()
            if (pod.get("metadata") or {}).get("namespace") == flow.spec.namespace
            and (pod.get("spec") or {}).get("nodeName")
            and _matches(selector, (pod.get("metadata") or {}).get("labels") or {})
            and not is_terminal(pod)
            and _uid(pod) not in self._gone
        ]

    @staticmethod
    def _local_policy(service: Obj) -> bool:
        return (service.get("spec") or {}).get("externalTrafficPolicy") == "Local"

    def _passes(self, flow: Flow, registration: Registration) -> bool:
        instance = self.state.instances.get(registration.instance_id)
        if instance is None or not instance.running:
            return False
        service = self._service(flow)
        if service is None:
            return False
        if not self._local_policy(service):
            return True
        return any(
            pod_ready(p) and not is_deleting(p)
            for p in self._local_pods(flow, instance.node_name, service)
        )

    def _check_health(self, flow: Flow, lb: SimLoadBalancer, now: float) -> None:
        live = {k: r for k, r in lb.registrations.items() if not r.draining}
        for key in [k for k in flow.health if k not in live]:
            del flow.health[key]
        if not flow._bootstrapped:
            # Targets in service when the traffic starts have long passed their checks.
            for key, registration in live.items():
                passes = self._passes(flow, registration)
                flow.health[key] = _Health("healthy" if passes else "unhealthy")
            flow._bootstrapped = True
            flow.next_check = now + flow.spec.health.interval
            return
        for key in live:
            flow.health.setdefault(key, _Health("initial"))
        if now < flow.next_check:
            return
        check = flow.spec.health
        while flow.next_check <= now:
            flow.next_check += check.interval
        for key, registration in live.items():
            health = flow.health[key]
            if self._passes(flow, registration):
                health.passes += 1
                health.fails = 0
                if health.state != "healthy" and health.passes >= check.healthy_threshold:
                    health.state = "healthy"
            else:
                health.fails += 1
                health.passes = 0
                if health.state != "unhealthy" and health.fails >= check.unhealthy_threshold:
                    health.state = "unhealthy"

    # -- requests ------------------------------------------------------------------------------

    def _send(self, flow: Flow, lb: SimLoadBalancer, now: float) -> None:
        interval = 1.0 / flow.spec.rate
        while flow.stopped_at is None and flow.next_send <= now:
            self._send_one(flow, lb, flow.next_send)
            flow.next_send += interval

    def _send_one(self, flow: Flow, lb: SimLoadBalancer, at: float) -> None:
        live = [r for k, r in sorted(lb.registrations.items()) if not r.draining]
        healthy = [
            r
            for r in live
            if flow.health.get((r.instance_id, r.port), _Health("initial")).state == "healthy"
        ]
        pool = healthy or [
            r
            for r in live
            if flow.health.get((r.instance_id, r.port), _Health("initial")).state != "initial"
        ]
        if not pool:
            record = flow.new_record(at, None, None, None)
            flow.finish(record, at, False, "no target in service")
            return
        registration = pool[flow.turn() % len(pool)]
        instance = self.state.instances.get(registration.instance_id)
        node = instance.node_name if instance is not None else None
        if instance is None or not instance.running:
            record = flow.new_record(at, node, registration.instance_id, None)
            flow.finish(record, at, False, "the machine is not running")
            return
        service = self._service(flow)
        if service is None:
            record = flow.new_record(at, node, instance.id, None)
            flow.finish(record, at, False, "no such Service")
            return
        node_name = instance.node_name if self._local_policy(service) else ""
        pod = self._pick(flow, self._serving(flow, service, node_name))
        if pod is None:
            record = flow.new_record(at, node, instance.id, None)
            flow.finish(record, at, False, "no endpoint on the node")
            return
        record = flow.new_record(at, node, instance.id, _pod_ref(pod))
        flow.in_flight[record.id] = _InFlight(
            record, at + flow.spec.request_seconds, _uid(pod), registration
        )

    def _serving(self, flow: Flow, service: Obj, node: str) -> list[Obj]:
        """The pods a request through `service` may reach (on `node` only, when one is given),
        in a stable order; worked out again only after a pod event."""
        selector = (service.get("spec") or {}).get("selector") or {}
        key = (flow.spec.namespace, tuple(sorted(selector.items())), node)
        cached = self._endpoints.get(key)
        if cached is not None and cached[0] == self._pods_generation:
            return cached[1]
        candidates = (
            self._local_pods(flow, node, service) if node else self._all_pods(flow, service)
        )
        ordered = sorted(candidates, key=_pod_ref)
        ready = [p for p in ordered if pod_ready(p) and not is_deleting(p)]
        # ProxyTerminatingEndpoints: with no ready endpoint, terminating ones that still run.
        serving = ready or [p for p in ordered if is_deleting(p) and pod_ready(p)]
        if len(self._endpoints) > 4096:
            self._endpoints.clear()
        self._endpoints[key] = (self._pods_generation, serving)
        return serving

    @staticmethod
    def _pick(flow: Flow, serving: list[Obj]) -> Obj | None:
        if not serving:
            return None
        return serving[flow.turn() % len(serving)]

    # -- views ---------------------------------------------------------------------------------

    def summary(self, flow: Flow) -> dict[str, Any]:
        lb = self.state.load_balancers.get(flow.spec.load_balancer)
        targets = []
        for (iid, port), health in sorted(flow.health.items()):
            instance = self.state.instances.get(iid)
            targets.append(
                {
                    "instanceId": iid,
                    "port": port,
                    "node": instance.node_name if instance is not None else None,
                    "health": health.state,
                }
            )
        if lb is not None:
            for registration in lb.registrations.values():
                if registration.draining:
                    instance = self.state.instances.get(registration.instance_id)
                    targets.append(
                        {
                            "instanceId": registration.instance_id,
                            "port": registration.port,
                            "node": instance.node_name if instance is not None else None,
                            "health": "draining",
                        }
                    )
        check = flow.spec.health
        return {
            "loadBalancer": flow.spec.load_balancer,
            "service": f"{flow.spec.namespace}/{flow.spec.service}",
            "requestsPerSecond": flow.spec.rate,
            "requestSeconds": flow.spec.request_seconds,
            "healthCheck": {
                "intervalSeconds": check.interval,
                "healthyThreshold": check.healthy_threshold,
                "unhealthyThreshold": check.unhealthy_threshold,
            },
            "startedAt": flow.started_at,
            "stoppedAt": flow.stopped_at,
            "now": self.now(),
            "sent": flow.sent,
            "succeeded": flow.succeeded,
            "failed": flow.failed,
            "inFlight": len(flow.in_flight),
            "nodes": {
                name: {
                    "sent": c.sent,
                    "succeeded": c.succeeded,
                    "failed": c.failed,
                    "lastSentAt": c.last_sent_at,
                    "lastSucceededAt": c.last_succeeded_at,
                    "lastFailedAt": c.last_failed_at,
                }
                for name, c in sorted(flow.nodes.items())
            },
            "targets": targets,
        }

    @staticmethod
    def records(
        flow: Flow,
        *,
        since: float | None = None,
        node: str | None = None,
        outcome: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        out = []
        for r in flow.records:
            if since is not None and r.sent_at < since:
                continue
            if node is not None and r.node != node:
                continue
            if outcome is not None and r.outcome != outcome:
                continue
            out.append(
                {
                    "id": r.id,
                    "sentAt": r.sent_at,
                    "completedAt": r.completed_at,
                    "node": r.node,
                    "instanceId": r.instance_id,
                    "pod": r.pod,
                    "outcome": r.outcome,
                    "reason": r.reason,
                }
            )
        return out[-limit:] if limit else out
