"""The detach pass: the steps that take a going node out of its load balancers.

Record the targets and the plan, mark the node, leave each target (recorded before and after the
call), follow the draining, then stop the node's pods when the node itself is going. Each step
reads the record its predecessor wrote, so a pass cut short anywhere is finished by the next.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import structlog

from nodeops.controllers.detacher import attachment, signals
from nodeops.controllers.detacher.metrics import DRAINING_TIMEOUTS, TRANSITIONS
from nodeops.controllers.detacher.passes import SOON, Pass, epoch, micro
from nodeops.controllers.detacher.record import (
    DEREGISTERED,
    DEREGISTERING,
    DRAINING,
    NOT_REGISTERED,
    REGISTERED,
    TargetRow,
    newly_registered,
    plan_targets,
    spec_targets,
    static_targets,
)
from nodeops.controllers.kit import drain_pass
from nodeops.kube import NORMAL, WARNING, ReconcileContext, Result
from nodeops.kube import objects as o
from nodeops.providers.base import LoadBalancerDraining, LoadBalancerTarget, RegistrationState

if TYPE_CHECKING:
    from nodeops.controllers.detacher.reconciler import DetacherReconciler

__all__ = ["DetachPass"]

log = structlog.get_logger(__name__)

Obj = dict[str, Any]

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
_STOP_POLL_SECONDS: Final = 2.0


class DetachPass(Pass):
    """Take the node out of its load balancers, one recorded step at a time, then stop its pods."""

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
                detachedAt=micro(self.r.now()),
                message=f"detached from {count} load balancer target(s)",
            )
            TRANSITIONS.labels("Detached").inc()
            self.r.events.event(
                self.node, NORMAL, "Detached", "Detach", str(self.status["message"])
            )
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
        registered_at = [epoch(row.registered_at) for row in self.rows]
        recent = max((t for t in registered_at if t is not None), default=None)
        static: list[LoadBalancerTarget] = []
        registered: list[LoadBalancerTarget] = []
        if self.instance is None:
            self.r.events.event(
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
        self.r.events.event(self.node, NORMAL, "Detaching", "Detach", note)

    def deregistrable(self) -> list[TargetRow]:
        return [row for row in self.rows if row.state in (REGISTERED, DEREGISTERING)]

    async def write_spec(self, targets: list[dict[str, Any]]) -> None:
        self.record = await attachment.write_spec(
            self.r.client, self.r.namespace, self.node, self.record, targets
        )

    # -- marks ---------------------------------------------------------------------------------

    async def mark(self) -> None:
        meta: dict[str, Any] = {}
        if signals.DETACHING_ANNOTATION not in o.annotations_of(self.node):
            meta["annotations"] = {signals.DETACHING_ANNOTATION: o.format_time(self.r.now())}
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
            await self.intend(i, DEREGISTERING)
            self.ctx.ensure_may_act(f"deregister {self.instance} from {row.kind} {row.name}")
            call = self.r.provider.deregister(row.target, self.instance)
            if not await self.target_call(i, "deregister", call, DEREGISTERING, "Detach"):
                return Result(requeue_after=self.r.settings.sync_period)
            self.set_row(
                i,
                self.rows[i].to(
                    DRAINING if wait else DEREGISTERED, deregistered_at=micro(self.r.now())
                ),
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
        now = self.r.now().timestamp()
        waits: list[float] = []
        changed = False
        for i, row in enumerate(self.rows):
            if row.state != DRAINING:
                continue
            since = epoch(row.deregistered_at) or now
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
                self.r.events.event(
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
                self.r.events.event(self.node, WARNING, "DrainingTimedOut", "Detach", message)
            else:
                left = until - now if health.state is RegistrationState.UNUSED else poll
                waits.append(max(0.1, min(poll, left, since + timeout - now)))
        if changed:
            await self.save()
        if any(row.state == REGISTERED for row in self.rows):
            return SOON  # back to deregistering, on a fresh pass
        return self.r.clock.wall(min(waits)) if waits else None

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
        started = o.parse_time(self.status.get("detachedAt")) or self.r.now()
        drained = await drain_pass(self.r.drainer(daemonsets=daemonsets), self.name, started)
        if drained.failed or drained.blocked:
            message = f"cannot stop pods: {drained.message}"
            if self.status.get("message") != message:
                await self.save(message=message)
                self.r.events.event(self.node, WARNING, "StopPodsFailed", "Drain", message)
            return self.r.settings.sync_period
        if drained.gone:
            return _STOP_POLL_SECONDS  # the cache shows it gone next, and the record goes
        if not drained.done:
            if self.status.get("message") != drained.message:
                await self.save(message=drained.message)
            return _STOP_POLL_SECONDS
        if not daemonsets and self.r.settings.stop_daemonset_pods:
            await self.save(daemonSetPodsStopped=True, message="stopping DaemonSet pods")
            self.r.events.event(
                self.node, NORMAL, "StoppingDaemonSetPods", "Drain", "all other pods gone"
            )
            return SOON
        await self.save(podsStoppedAt=micro(self.r.now()), message="detached; pods stopped")
        self.r.events.event(
            self.node, NORMAL, "PodsStopped", "Drain", "the node's pods are stopped"
        )
        return None

    # -- registrations behind our back ---------------------------------------------------------

    async def recheck(self) -> bool:
        """Look for registrations made since the detachment; True when there are some (they
        are recorded Registered, and the next pass deregisters them)."""
        if self.instance is None:
            return False
        times = [epoch(row.deregistered_at) for row in self.rows]
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
        self.r.events.event(self.node, WARNING, "RegisteredAgain", "Detach", note)
        return True
