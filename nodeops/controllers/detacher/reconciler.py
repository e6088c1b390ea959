"""The detacher's reconciler: take a node out of its load balancers before its pods stop, and
put it back in exactly those when it returns.

One request per node. Each pass reads the node, its `LoadBalancerAttachment` and (for ingress
DaemonSets) its pods from the shared caches, and moves the record one step on:

    going away, no current record -> record the targets (spec), then the plan (status)
    -> mark the node (annotation, exclusion label, NodeDetached condition)
    -> per target: Deregistering written, the call, Draining written
    -> draining read from the provider's target health until every target is Deregistered
    -> Detached; then, if configured, the node's pods are stopped through the drain engine
    back (not going away) -> per target: Registering written, the call, Registered written
    -> marks removed -> Attached

Every step is recorded before and after it is taken and every cloud call is idempotent, so a
pass cut short at any line (a crash, a lost lease) is finished by the next one. The caches may
lag: before the first deregistration or registration of a pass, the node (and its pods) are read
again from the API server, and nothing is done unless that read agrees, so a stale or delayed
cache never takes a node that stays out of its load balancers (nor puts a leaving one back).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import structlog

from nodeops.api.errors import InvalidResource
from nodeops.api.loadbalancerattachment import parse as parse_attachment
from nodeops.controllers.detacher import signals
from nodeops.controllers.detacher.discovery import Inventory, service_refs
from nodeops.controllers.detacher.ingress import ingress_view, rollout_holds
from nodeops.controllers.detacher.metrics import DRAINING_TIMEOUTS, TARGET_CALLS, TRANSITIONS
from nodeops.controllers.detacher.record import (
    DEREGISTERED,
    DEREGISTERING,
    DRAINING,
    LEFT,
    NOT_REGISTERED,
    REGISTERED,
    REGISTERING,
    TargetRow,
    newly_registered,
    plan_targets,
    rows_from_status,
    rows_to_status,
    spec_targets,
    static_targets,
)
from nodeops.controllers.detacher.settings import DetacherSettings
from nodeops.drain.engine import Drainer
from nodeops.drain.errors import DrainError
from nodeops.drain.options import DAEMONSET_DRAIN_TAINT, DrainOptions
from nodeops.drain.sources import DrainSources
from nodeops.kube import (
    NORMAL,
    WARNING,
    Client,
    EventRecorder,
    Informer,
    ReconcileContext,
    Request,
    Resource,
    Result,
    errors,
)
from nodeops.kube import objects as o
from nodeops.kube.resources import NODES, PODS
from nodeops.providers.base import (
    LoadBalancerDraining,
    LoadBalancers,
    LoadBalancerTarget,
    ProviderError,
    RegistrationState,
    Servers,
    node_provider_id,
)

__all__ = ["ATTACHMENTS", "PROVIDER_METHODS", "DetacherReconciler"]

log = structlog.get_logger(__name__)

Obj = dict[str, Any]

ATTACHMENTS: Final = Resource(
    "nodeops.dev", "v1alpha1", "loadbalancerattachments", "LoadBalancerAttachment", True
)
CONTROLLER: Final = "detacher"

PROVIDER_METHODS: Final = (
    "registrations",
    "targets_behind_services",
    "deregister",
    "register",
    "target_health",
    "find_server",
)
"""The provider methods the detacher calls (a unit test reads the code to check), from which
docs/detacher.md's IAM policy is generated."""

# Reasons after which the node's pods are stopped: the node itself is going. A detach on request,
# an exclusion label or an ingress rollout only takes the node out of its load balancers.
_STOP_PODS_FOR: Final = frozenset(
    {
        signals.UNSCHEDULABLE,
        signals.TO_BE_DELETED,
        signals.TERMINATION_HANDLER,
        signals.CONFIGURED_TAINT,
    }
)
_FRESH_PHASES: Final = frozenset({None, "", "Attached", "Attaching", "Invalid"})
_DETACHED_PHASES: Final = frozenset({"Detaching", "Detached"})
_STOP_POLL_SECONDS: Final = 2.0
_SOON: Final = 0.05
"""A requeue for the next step of work already decided (a delay of 0 means no requeue)."""


def _now() -> datetime:
    return datetime.now(UTC)


def _micro(t: datetime) -> str:
    """RFC 3339 with microseconds: deregistrations come seconds apart and their order counts."""
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _epoch(value: str | None) -> float | None:
    parsed = o.parse_time(value)
    return parsed.timestamp() if parsed is not None else None


def _reasons_of(status: dict[str, Any]) -> list[str]:
    return [r for r in str(status.get("reason") or "").split(",") if r]


class DetacherReconciler:
    """Reconciles Nodes against their LoadBalancerAttachments and the provider's load balancers.

    `nodes`, `attachments` (in `namespace`), `pods` (indexed by node, only with ingress
    DaemonSets) and `services` (only with discovery=services) are the manager's shared
    informers, declared as the controller's sources. `drain_sources` gives where the drain that
    stops a node's pods reads the cluster (the manager's `SharedInformers`, so its budget tokens
    are those of every other controller in the process); asked for only when pods are stopped.
    """

    def __init__(
        self,
        *,
        client: Client,
        events: EventRecorder | None,
        provider: LoadBalancers,
        settings: DetacherSettings,
        namespace: str,
        nodes: Informer,
        attachments: Informer,
        pods: Informer | None = None,
        services: Informer | None = None,
        drain_sources: Callable[[], DrainSources] | None = None,
    ) -> None:
        self.client = client
        self.drain_sources = drain_sources
        self.events = events
        self.provider = provider
        self.settings = settings
        self.namespace = namespace
        self.nodes = nodes
        self.attachments = attachments
        self.pods = pods
        self.services = services
        self.inventory = Inventory(
            provider,
            ttl=settings.cache_seconds,
            miss_refresh=settings.miss_refresh_seconds,
            cluster=settings.cluster_name,
        )
        self.ingress = settings.ingress_daemonsets
        self.kinds = frozenset(settings.integrations)

    # ------------------------------------------------------------------ the pass

    async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
        name = request.name
        node = self.nodes.get(name)
        record = self.attachments.get(name, self.namespace)
        if node is None:
            await self._forget(name, record)
            return None
        if signals.is_control_plane(node) and not self.settings.control_plane:
            return None
        if record is not None:
            try:
                parse_attachment(record)
            except InvalidResource as exc:
                await self._invalid(record, exc)
                return None
        pods = self._cached_pods(name)
        reasons = self._reasons(node, record, pods)
        if reasons:
            return await _Detach(self, ctx, node, record, reasons).run()
        if self._marked(node, record):
            return await _Attach(self, ctx, node, record).run()
        return None

    # ------------------------------------------------------------------ reading

    def _cached_pods(self, node: str) -> list[Obj]:
        if self.pods is None:
            return []
        return self.pods.by_index("node", node)

    def _reasons(self, node: Obj, record: Obj | None, pods: Sequence[Obj]) -> list[str]:
        status = (record or {}).get("status") or {}
        extra: list[str] = []
        if self.ingress and rollout_holds(
            ingress_view(pods, self.ingress),
            rolling=signals.INGRESS_ROLLOUT in _reasons_of(status)
            and status.get("phase") in _DETACHED_PHASES,
            stopping_daemonset_pods=bool(status.get("daemonSetPodsStopped")),
        ):
            extra.append(signals.INGRESS_ROLLOUT)
        reasons = signals.going_away_reasons(node, taints=self.settings.taints, extra=extra)
        if status.get("cordoned") and signals.UNSCHEDULABLE in reasons:
            # Our own cordon (to stop the pods) is not a reason to stay detached.
            reasons.remove(signals.UNSCHEDULABLE)
        return reasons

    def _marked(self, node: Obj, record: Obj | None) -> bool:
        status = (record or {}).get("status") or {}
        if status.get("phase") in ("Detaching", "Detached", "Attaching") or status.get("cordoned"):
            return True
        if signals.DETACHING_ANNOTATION in o.annotations_of(node):
            return True
        if o.labels(node).get(signals.EXCLUDE_LABEL) == signals.EXCLUDE_LABEL_VALUE:
            return True
        cond = o.condition(node, signals.CONDITION_TYPE)
        return cond is not None and cond.get("status") == "True"

    async def live_reasons(self, name: str, record: Obj | None) -> tuple[Obj | None, list[str]]:
        """The node and its reasons as the API server has them now (not the cache)."""
        try:
            node = await self.client.get(NODES, name)
        except errors.NotFound:
            return None, []
        pods: list[Obj] = []
        if self.ingress:
            pods, _ = await self.client.list(PODS, field_selector=f"spec.nodeName={name}")
        return node, self._reasons(node, record, pods)

    async def instance_of(self, node: Obj) -> str | None:
        """The cloud instance behind the node: its provider ID, else the provider's lookup."""
        provider_id = node_provider_id(node)
        if provider_id is not None:
            return provider_id.id
        if isinstance(self.provider, Servers):
            server = await self.provider.find_server(node)
            return server.id if server is not None else None
        return None

    async def discover(
        self, instance: str, record: Obj | None, newer_than: float | None
    ) -> tuple[list[LoadBalancerTarget], list[LoadBalancerTarget]]:
        """(static targets, registrations of the instance among the candidates)."""
        static = [*self.settings.targets, *static_targets((record or {}).get("spec"))]
        among: list[LoadBalancerTarget] | None
        if self.settings.discovery == "all":
            among = None
        elif self.settings.discovery == "services":
            assert self.services is not None
            behind = await self.inventory.behind_services(service_refs(self.services.objects()))
            among = [*behind, *static]
        else:
            among = list(static)
        registered, _ = await self.inventory.targets_of(instance, among, newer_than=newer_than)
        return static, registered

    # ------------------------------------------------------------------ writing

    def event(self, obj: Obj, type_: str, reason: str, action: str, note: str) -> None:
        if self.events is not None:
            self.events.event(obj, type_, reason, action, note)

    async def write_status(self, record: Obj, status: dict[str, Any]) -> Obj:
        """A merge patch of the whole status, guarded by the record's resourceVersion."""
        updated = await self.client.patch_status(
            ATTACHMENTS,
            o.name(record),
            status,
            self.namespace,
            resource_version=o.resource_version(record),
        )
        return updated

    async def _forget(self, name: str, record: Obj | None) -> None:
        """The node is gone: its record goes too (its instance is not coming back)."""
        if record is None:
            return
        try:
            await self.client.get(NODES, name)
            return  # only the cache has not seen it yet (a record written before its node)
        except errors.NotFound:
            pass
        try:
            await self.client.delete(
                ATTACHMENTS, name, self.namespace, preconditions={"uid": o.uid(record)}
            )
        except (errors.NotFound, errors.Conflict):
            return
        log.info("node gone, its load balancer record removed", node=name)

    async def _invalid(self, record: Obj, exc: InvalidResource) -> None:
        status = dict(record.get("status") or {})
        message = f"invalid: {exc}"
        if status.get("phase") == "Invalid" and status.get("message") == message:
            return
        status.update(phase="Invalid", message=message)
        await self.write_status(record, status)
        self.event(record, WARNING, "InvalidAttachment", "Validate", message)

    async def patch_node(
        self, node: Obj, body: dict[str, Any], *, status: bool = False, guarded: bool = False
    ) -> Obj:
        """Patch the node. Our annotation and label (merged by key) and our condition (merged by
        type) cannot undo anyone's write, so they are not guarded: the kubelet writes the node
        every few seconds and a guard would only make them conflict. Whole lists (taints) and
        the cordon are `guarded` by the resourceVersion they were read at."""
        return await self.client.patch(
            NODES,
            o.name(node),
            body,
            patch_type="strategic" if status else "merge",
            subresource="status" if status else None,
            resource_version=o.resource_version(node) if guarded else None,
        )

    async def set_condition(
        self, node: Obj, status: str, reason: str, message: str, *, moved: bool
    ) -> Obj:
        """The NodeDetached condition, written through the node's status subresource."""
        current = o.condition(node, signals.CONDITION_TYPE)
        if current is not None and (current.get("status"), current.get("reason")) == (
            status,
            reason,
        ):
            return node
        if current is None and status == "False" and not moved:
            return node  # never detached: nothing to say
        now = o.format_time(_now())
        cond = {
            "type": signals.CONDITION_TYPE,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now
            if current is None or current.get("status") != status
            else current.get("lastTransitionTime", now),
        }
        return await self.patch_node(node, {"status": {"conditions": [cond]}}, status=True)

    def drainer(self, *, daemonsets: bool) -> Drainer:
        s = self.settings
        options = DrainOptions(
            force=s.drain_force,
            delete_emptydir_data=s.drain_delete_emptydir_data,
            grace_period=s.drain_grace_period,
            ignore_daemonsets=not daemonsets,
            evict_daemonsets=daemonsets,
        )
        sources = self.drain_sources() if self.drain_sources is not None else None
        return Drainer(
            self.client, options, sources=sources, events=self.events, controller=CONTROLLER
        )


class _Pass:
    """State shared by one detach or attach pass."""

    def __init__(
        self,
        r: DetacherReconciler,
        ctx: ReconcileContext,
        node: Obj,
        record: Obj | None,
    ) -> None:
        self.r = r
        self.ctx = ctx
        self.node = node
        self.record = record
        self.status: dict[str, Any] = dict((record or {}).get("status") or {})
        self.rows = rows_from_status(self.status)
        self.confirmed = False

    @property
    def name(self) -> str:
        return o.name(self.node)

    async def save(self, **changes: Any) -> None:
        assert self.record is not None
        self.status.update(changes)
        self.status["targets"] = rows_to_status(self.rows)
        self.status["observedGeneration"] = o.meta(self.record).get("generation")
        self.record = await self.r.write_status(self.record, self.status)

    def set_row(self, index: int, row: TargetRow) -> None:
        self.rows[index] = row


class _Detach(_Pass):
    def __init__(
        self,
        r: DetacherReconciler,
        ctx: ReconcileContext,
        node: Obj,
        record: Obj | None,
        reasons: list[str],
    ) -> None:
        super().__init__(r, ctx, node, record)
        self.reasons = reasons
        self.instance: str | None = self.status.get("instanceId")

    async def confirm(self) -> bool:
        """Re-read the node from the API server; True when it is still going away."""
        if self.confirmed:
            return True
        live, reasons = await self.r.live_reasons(self.name, self.record)
        if live is None or not reasons:
            log.info(
                "the cache said the node is going away, the API server says not; waiting",
                node=self.name,
            )
            return False
        self.node, self.reasons, self.confirmed = live, reasons, True
        return True

    async def run(self) -> Result | None:
        if self.status.get("phase") in _FRESH_PHASES or self.record is None:
            if not await self.confirm():
                return None
            await self.start()
        await self.mark()
        joined = ",".join(self.reasons)
        if self.status.get("reason") != joined:
            # Why the node stays out changed (a cordon during an ingress rollout, say).
            await self.save(reason=joined)
        if any(row.state in (REGISTERED, DEREGISTERING) for row in self.rows):
            if not await self.confirm():
                return None
            result = await self.deregister()
            if result is not None:
                return result
        wait = await self.drained()
        if wait is not None:
            return Result(requeue_after=wait)
        if self.status.get("phase") != "Detached":
            count = sum(1 for row in self.rows if row.state == DEREGISTERED)
            await self.save(
                phase="Detached",
                detachedAt=_micro(_now()),
                message=f"detached from {count} load balancer target(s)",
            )
            TRANSITIONS.labels("Detached").inc()
            self.r.event(self.node, NORMAL, "Detached", "Detach", str(self.status["message"]))
        if self.r.settings.stop_pods and _STOP_PODS_FOR & set(self.reasons):
            waiting = await self.stop_pods()
            if waiting is not None:
                return Result(requeue_after=waiting)
        if await self.recheck():
            return Result(requeue=True)
        return Result(requeue_after=self.r.settings.sync_period)

    # -- record --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Record where the instance is registered, before anything is changed."""
        self.instance = await self.r.instance_of(self.node)
        registered_at = [_epoch(row.registered_at) for row in self.rows]
        recent = max((t for t in registered_at if t is not None), default=None)
        static: list[LoadBalancerTarget] = []
        registered: list[LoadBalancerTarget] = []
        if self.instance is None:
            self.r.event(
                self.node,
                WARNING,
                "NoInstance",
                "Detach",
                "no cloud instance found for the node (no spec.providerID); nothing to detach",
            )
        else:
            static, registered = await self.r.discover(self.instance, self.record, recent)
        plan = plan_targets(
            static,
            registered,
            kinds=self.r.kinds,
            static_only=self.r.settings.discovery == "static",
        )
        await self.write_spec(plan.spec)
        self.rows = plan.rows
        note = (
            f"{', '.join(self.reasons)}: leaving {len(self.deregistrable())} load balancer "
            "target(s)"
        )
        await self.save(
            phase="Detaching",
            reason=",".join(self.reasons),
            message=note,
            instanceId=self.instance,
            detachedAt=None,
            podsStoppedAt=None,
            daemonSetPodsStopped=None,
            cordoned=None,
        )
        self.r.event(self.node, NORMAL, "Detaching", "Detach", note)

    def deregistrable(self) -> list[TargetRow]:
        return [row for row in self.rows if row.state in (REGISTERED, DEREGISTERING)]

    async def write_spec(self, targets: list[dict[str, Any]]) -> None:
        spec = {"nodeName": self.name, "targets": targets}
        if self.record is None:
            body = {
                "apiVersion": "nodeops.dev/v1alpha1",
                "kind": "LoadBalancerAttachment",
                "metadata": {
                    "name": self.name,
                    "namespace": self.r.namespace,
                    "labels": {"app.kubernetes.io/managed-by": "nodeops"},
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Node",
                            "name": self.name,
                            "uid": o.uid(self.node),
                        }
                    ],
                },
                "spec": spec,
            }
            self.record = await self.r.client.create(ATTACHMENTS, body, self.r.namespace)
            return
        if (self.record.get("spec") or {}) == spec:
            return
        self.record = await self.r.client.patch(
            ATTACHMENTS,
            self.name,
            {"spec": spec},
            self.r.namespace,
            resource_version=o.resource_version(self.record),
        )

    # -- marks ---------------------------------------------------------------------------------

    async def mark(self) -> None:
        meta: dict[str, Any] = {}
        if signals.DETACHING_ANNOTATION not in o.annotations_of(self.node):
            meta["annotations"] = {signals.DETACHING_ANNOTATION: o.format_time(_now())}
        if self.r.settings.exclude_label and signals.EXCLUDE_LABEL not in o.labels(self.node):
            meta["labels"] = {signals.EXCLUDE_LABEL: signals.EXCLUDE_LABEL_VALUE}
        if meta:
            self.node = await self.r.patch_node(self.node, {"metadata": meta})
        self.node = await self.r.set_condition(
            self.node,
            "True",
            self.reasons[0],
            f"taken out of its load balancers: {', '.join(self.reasons)}",
            moved=True,
        )

    # -- deregistration ------------------------------------------------------------------------

    async def deregister(self) -> Result | None:
        assert self.instance is not None or not self.deregistrable()
        wait = self.r.settings.wait_for_draining
        for i, row in enumerate(self.rows):
            if row.state not in (REGISTERED, DEREGISTERING):
                continue
            assert self.instance is not None
            if row.state != DEREGISTERING:
                self.set_row(i, row.to(DEREGISTERING, message=None))
                await self.save()
            self.ctx.ensure_may_act(f"deregister {self.instance} from {row.kind} {row.name}")
            try:
                await self.r.provider.deregister(row.target, self.instance)
            except ProviderError as exc:
                TARGET_CALLS.labels("deregister", exc.code).inc()
                if exc.retryable:
                    raise
                self.set_row(i, self.rows[i].to(DEREGISTERING, message=str(exc)))
                await self.save()
                self.r.event(self.node, WARNING, "DeregisterFailed", "Detach", str(exc))
                return Result(requeue_after=self.r.settings.sync_period)
            TARGET_CALLS.labels("deregister", "ok").inc()
            self.set_row(
                i,
                self.rows[i].to(DRAINING if wait else DEREGISTERED, deregistered_at=_micro(_now())),
            )
            await self.save()
            log.info("deregistered", node=self.name, target=row.name, port=row.port)
        return None

    async def drained(self) -> float | None:
        """Move Draining targets on; the seconds to wait when some still drain."""
        if not any(row.state == DRAINING for row in self.rows):
            return None
        provider = self.r.provider
        poll = self.r.settings.draining_poll_seconds
        timeout = self.r.settings.draining_timeout
        now = time.time()
        waits: list[float] = []
        changed = False
        for i, row in enumerate(self.rows):
            if row.state != DRAINING:
                continue
            since = _epoch(row.deregistered_at) or now
            if not isinstance(provider, LoadBalancerDraining):
                self.set_row(i, row.to(DEREGISTERED))
                changed = True
                continue
            assert self.instance is not None
            health = await provider.target_health(row.target, self.instance)
            if health.state is RegistrationState.REGISTERED:
                # Registered again behind our back: leave it again.
                self.set_row(i, row.to(REGISTERED, message="registered again; leaving again"))
                changed = True
                self.r.event(
                    self.node,
                    WARNING,
                    "RegisteredAgain",
                    "Detach",
                    f"{row.kind} {row.name} registered the node again while it drained",
                )
                continue
            until = since + health.drain_seconds
            if health.state is RegistrationState.UNUSED and now >= until:
                self.set_row(i, row.to(DEREGISTERED))
                changed = True
            elif now - since >= timeout:
                message = f"still draining after {timeout:g}s; carried on"
                self.set_row(i, row.to(DEREGISTERED, message=message))
                changed = True
                DRAINING_TIMEOUTS.inc()
                self.r.event(self.node, WARNING, "DrainingTimedOut", "Detach", message)
            else:
                left = until - now if health.state is RegistrationState.UNUSED else poll
                waits.append(max(0.1, min(poll, left, since + timeout - now)))
        if changed:
            await self.save()
        if any(row.state == REGISTERED for row in self.rows):
            return _SOON  # back to deregistering, on a fresh pass
        return min(waits) if waits else None

    # -- pods ----------------------------------------------------------------------------------

    async def stop_pods(self) -> float | None:
        if self.status.get("podsStoppedAt"):
            return None
        if not (self.node.get("spec") or {}).get("unschedulable") and not self.status.get(
            "cordoned"
        ):
            # The drain cordons the node; say so first, to uncordon it when it comes back.
            await self.save(cordoned=True)
        daemonsets = bool(self.status.get("daemonSetPodsStopped"))
        started = o.parse_time(self.status.get("detachedAt")) or _now()
        try:
            progress = await self.r.drainer(daemonsets=daemonsets).step(self.name, started)
        except DrainError as exc:
            message = f"cannot stop pods: {exc}"
            if self.status.get("message") != message:
                await self.save(message=message)
                self.r.event(self.node, WARNING, "StopPodsFailed", "Drain", message)
            return self.r.settings.sync_period
        if not progress.complete:
            if self.status.get("message") != progress.message:
                await self.save(message=progress.message)
            return _STOP_POLL_SECONDS
        if not daemonsets and self.r.settings.stop_daemonset_pods:
            await self.save(daemonSetPodsStopped=True, message="stopping DaemonSet pods")
            self.r.event(self.node, NORMAL, "StoppingDaemonSetPods", "Drain", "all other pods gone")
            return _SOON
        await self.save(podsStoppedAt=_micro(_now()), message="detached; pods stopped")
        self.r.event(self.node, NORMAL, "PodsStopped", "Drain", "the node's pods are stopped")
        return None

    # -- registrations behind our back ---------------------------------------------------------

    async def recheck(self) -> bool:
        """Look for registrations made since the detachment; True when there are some (they
        are recorded Registered, and the next pass deregisters them)."""
        if self.instance is None:
            return False
        times = [_epoch(row.deregistered_at) for row in self.rows]
        newest = max((t for t in times if t is not None), default=None)
        _, registered = await self.r.discover(self.instance, self.record, newest)
        found = newly_registered(self.rows, registered, kinds=self.r.kinds)
        if not found:
            return False
        keys = {row.key: i for i, row in enumerate(self.rows)}
        for target in found:
            row = TargetRow(target.kind, target.name, target.port, REGISTERED)
            if row.key in keys:
                self.set_row(keys[row.key], row)
            else:
                self.rows.append(row)
        static = static_targets((self.record or {}).get("spec"))
        discovered = [r.target for r in self.rows if r.state != NOT_REGISTERED]
        await self.write_spec(spec_targets(static, discovered))
        note = f"registered again in {len(found)} target(s) since the detachment; leaving them"
        await self.save(phase="Detaching", message=note)
        self.r.event(self.node, WARNING, "RegisteredAgain", "Detach", note)
        return True


class _Attach(_Pass):
    async def run(self) -> Result | None:
        live, reasons = await self.r.live_reasons(self.name, self.record)
        if live is None or reasons:
            log.info(
                "the cache said the node is back, the API server says not; waiting",
                node=self.name,
            )
            return None
        self.node = live
        instance = self.status.get("instanceId") or await self.r.instance_of(self.node)
        pending = [i for i, row in enumerate(self.rows) if row.state in LEFT]
        if self.record is not None and pending:
            if self.status.get("phase") != "Attaching":
                await self.save(phase="Attaching", message="registering the node again")
                self.r.event(
                    self.node,
                    NORMAL,
                    "Attaching",
                    "Attach",
                    f"the node is back: registering it in {len(pending)} target(s) again",
                )
            for i in pending:
                row = self.rows[i]
                if instance is None:
                    break
                if row.state != REGISTERING:
                    self.set_row(i, row.to(REGISTERING, message=None))
                    await self.save()
                self.ctx.ensure_may_act(f"register {instance} in {row.kind} {row.name}")
                try:
                    await self.r.provider.register(row.target, instance)
                except ProviderError as exc:
                    TARGET_CALLS.labels("register", exc.code).inc()
                    if exc.retryable:
                        raise
                    self.set_row(i, self.rows[i].to(NOT_REGISTERED, message=str(exc)))
                    await self.save()
                    self.r.event(self.node, WARNING, "RegisterFailed", "Attach", str(exc))
                    continue
                TARGET_CALLS.labels("register", "ok").inc()
                self.set_row(
                    i,
                    self.rows[i].to(REGISTERED, registered_at=_micro(_now()), message=None),
                )
                await self.save()
                log.info("registered", node=self.name, target=row.name, port=row.port)
            self.r.inventory.forget()
        await self.unmark()
        if self.record is not None and self.status.get("phase") != "Attached":
            count = sum(1 for row in self.rows if row.state == REGISTERED)
            await self.save(
                phase="Attached",
                attachedAt=_micro(_now()),
                reason=None,
                message=f"registered in {count} load balancer target(s)",
                cordoned=None,
                daemonSetPodsStopped=None,
            )
            TRANSITIONS.labels("Attached").inc()
            self.r.event(self.node, NORMAL, "Attached", "Attach", str(self.status["message"]))
        return None

    async def unmark(self) -> None:
        meta: dict[str, Any] = {}
        if signals.DETACHING_ANNOTATION in o.annotations_of(self.node):
            meta["annotations"] = {signals.DETACHING_ANNOTATION: None}
        if o.labels(self.node).get(signals.EXCLUDE_LABEL) == signals.EXCLUDE_LABEL_VALUE:
            meta["labels"] = {signals.EXCLUDE_LABEL: None}
        body: dict[str, Any] = {"metadata": meta} if meta else {}
        spec = self.node.get("spec") or {}
        if self.status.get("daemonSetPodsStopped"):
            taints = [t for t in spec.get("taints") or [] if t.get("key") != DAEMONSET_DRAIN_TAINT]
            if len(taints) != len(spec.get("taints") or []):
                body["spec"] = {"taints": taints or None}
        if self.status.get("cordoned") and spec.get("unschedulable"):
            body.setdefault("spec", {})["unschedulable"] = None
        if body:
            self.node = await self.r.patch_node(self.node, body, guarded="spec" in body)
        self.node = await self.r.set_condition(
            self.node, "False", "Attached", "back in its load balancers", moved=False
        )
