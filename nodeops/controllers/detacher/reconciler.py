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

This module decides which pass a node needs and answers the passes' questions (the node as the
API server has it, its instance, its targets); the steps themselves are in `detach` and `attach`,
the record they share in `passes`, the record's creation in `attachment`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

import structlog

from nodeops.api.errors import InvalidResource
from nodeops.api.loadbalancerattachment import parse as parse_attachment
from nodeops.controllers.detacher import signals
from nodeops.controllers.detacher.attach import AttachPass
from nodeops.controllers.detacher.attachment import ATTACHMENTS
from nodeops.controllers.detacher.detach import DetachPass
from nodeops.controllers.detacher.discovery import Inventory, service_refs
from nodeops.controllers.detacher.ingress import ingress_view, rollout_holds
from nodeops.controllers.detacher.record import static_targets
from nodeops.controllers.detacher.settings import DetacherSettings
from nodeops.controllers.kit import (
    NULL_EVENTS,
    Clock,
    Drainers,
    StatusWriter,
    View,
    events_or_null,
)
from nodeops.drain.engine import Drainer
from nodeops.drain.options import DrainOptions
from nodeops.kube import (
    WARNING,
    Client,
    EventRecorder,
    Informer,
    ReconcileContext,
    Request,
    Result,
    errors,
)
from nodeops.kube import objects as o
from nodeops.kube.resources import NODES, PODS
from nodeops.providers.base import (
    LoadBalancers,
    LoadBalancerTarget,
    Servers,
    node_provider_id,
)

__all__ = ["ATTACHMENTS", "CONTROLLER", "PROVIDER_METHODS", "DetacherReconciler"]

log = structlog.get_logger(__name__)

Obj = dict[str, Any]

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
_DETACHED_PHASES: Final = frozenset({"Detaching", "Detached"})


def _reasons_of(status: dict[str, Any]) -> list[str]:
    return [r for r in str(status.get("reason") or "").split(",") if r]


class DetacherReconciler:
    """Reconciles Nodes against their LoadBalancerAttachments and the provider's load balancers.

    `nodes`, `attachments` (in `namespace`), `pods` (indexed by node, only with ingress
    DaemonSets) and `services` (only with discovery=services) are the manager's shared
    informers, declared as the controller's sources. `drainers` are the drains that stop a
    node's pods (`Drainers.for_manager`: the manager's shared sources, so their budget tokens are
    those of every other controller in the process; made only when pods are stopped). `clock`
    is the manager's.
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
        drainers: Drainers | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.drainers = drainers or Drainers(client, controller=CONTROLLER, events=events)
        self.clock = clock or Clock()
        self.events = events_or_null(events)
        # Status only: the detacher's Events say more than "entered phase X".
        self.status_writer = StatusWriter(client, ATTACHMENTS, events=NULL_EVENTS, clock=self.clock)
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
            return await DetachPass(self, ctx, node, record, reasons).run()
        if self._marked(node, record):
            return await AttachPass(self, ctx, node, record).run()
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

    async def write_status(self, record: Obj, status: dict[str, Any]) -> Obj:
        """Write `status` (a None removes a field): a merge patch of what changed, guarded by
        the record's resourceVersion; the record as it now is."""
        view = View(record)
        await self.status_writer.commit(view, status)
        return view.obj

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
        self.events.event(record, WARNING, "InvalidAttachment", "Validate", message)

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
        now = o.format_time(self.clock.now())
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
        """The drain that stops the node's pods (the node may come back: not the preset of a
        node that goes away, but the detacher's own settings)."""
        s = self.settings
        options = DrainOptions(
            force=s.drain_force,
            delete_emptydir_data=s.drain_delete_emptydir_data,
            grace_period=s.drain_grace_period,
            ignore_daemonsets=not daemonsets,
            evict_daemonsets=daemonsets,
        )
        return self.drainers.get(options)

    def now(self) -> datetime:
        return self.clock.now()
