"""ScalingUp: wait for the cloud to replace the detached batch, then for the replacements to
be Ready, healthy, and (with waitForCapacity) roomy enough for the batch's pods.

Nodes change under watch, instances only when polled; where the two disagree for a moment (a
Ready node whose instance the cloud still calls pending) the cloud is looked at again soon
rather than at the next poll.
"""

from __future__ import annotations

from collections.abc import Sequence

from nodeops.api.cyclenoderequest import CycleNodeRequestSpec
from nodeops.api.cycling import CycleNodeRequestNode
from nodeops.controllers.cycling.fit import FitResult, check_fit, neighbours, node_is_ready
from nodeops.controllers.cycling.inventory import Inventory, instance_id
from nodeops.controllers.cycling.pods import awaiting_scheduler
from nodeops.controllers.cycling.request.annotations import annotate_new_nodes
from nodeops.controllers.cycling.request.batching import detach, taint_pending
from nodeops.controllers.cycling.request.env import (
    BY_NODE,
    Children,
    Heal,
    RequestEnv,
    RequestView,
    Wait,
    node_dicts,
    status_of,
)
from nodeops.controllers.cycling.request.health import new_node_health
from nodeops.controllers.cycling.request.indexes import (
    BY_ANTI_AFFINITY,
    BY_LABEL,
    BY_UNBOUND,
    REQUIRED,
    UNBOUND,
    phase_of,
)
from nodeops.kube import ReconcileContext, Request, Result
from nodeops.kube import objects as o
from nodeops.providers.base import Lifecycle
from nodeops.providers.base import NodeGroup as CloudGroup

__all__ = ["scaling_up"]


async def scaling_up(
    env: RequestEnv,
    request: Request,
    view: RequestView,
    spec: CycleNodeRequestSpec,
    ctx: ReconcileContext,
) -> Result | None:
    children = env.children_of(view)
    if children.failed:
        raise Heal(children.failure_message(), "NodeFailed")
    _, provider, inventory = await env.inventory(request, spec)
    current = view.current_nodes
    await detach(env, view, provider, current, inventory, ctx)
    await taint_pending(env, view, spec)
    # A batch node that vanished (node and instance gone) needs nothing more from us.
    kept = []
    for entry in current:
        gone = (
            env.node(entry.name) is None
            and inventory.member_by_instance(instance_id(entry.provider_id or "")) is None
        )
        if gone:
            env.event(view, "Normal", "NodeGone", f"node {entry.name} went away during scale-up")
        else:
            kept.append(entry)
    if len(kept) != len(current):
        await env.commit_progress(view, children, {"currentNodes": node_dicts(kept)})
        current = kept
    limit = env.settings.scale_up_limit
    elapsed = env.time.since(view.typed.scale_up_started)
    # Past the limit, what is still waited for (replacements, their health checks, room for
    # the batch's pods, which no replacement brought) is given up on instead of waited for.
    past = elapsed > limit

    def give_up(still: str) -> Heal:
        return Heal(f"scale-up did not finish within {limit:g}s: {still}", "ScaleUpTimeout")

    if not past and elapsed < env.settings.scale_up_wait:
        raise Wait(
            "waiting the minimum scale-up time",
            after=env.settings.scale_up_wait - elapsed,
            reason="ScalingUp",
        )
    waiting = _scale_up_state(env, spec, inventory, current)
    catch_up = max(0.5, min(env.settings.cloud_poll_interval / 5, 2.0))
    if waiting:
        # Before waiting longer, look at the cloud again unless it was looked at a moment ago.
        _, _, inventory = await env.inventory(request, spec, max_age=catch_up)
        waiting = _scale_up_state(env, spec, inventory, current)
    if waiting and past:
        raise give_up(waiting)
    # Replacements get their annotation as they come up, while the slowest still boots:
    # the batch does not wait for those writes at its end.
    await annotate_new_nodes(env, view, spec, inventory)
    if waiting:
        after = _recheck(env, elapsed)
        if _cloud_behind_nodes(env, spec, inventory, current):
            # Clouds flip a pending instance with a Ready node within seconds, and no event
            # says so.
            after = min(after, catch_up)
        raise Wait(f"scaling up: {waiting}", after=after, reason="ScalingUp")
    health = await new_node_health(env, view, spec, inventory)
    if health:
        if past:
            raise give_up(health)
        raise Wait(health, after=env.settings.check_interval, reason="HealthCheckFailing")
    if not spec.cycle_settings.wait_for_capacity:
        await env.commit_progress(view, children, {}, phase="CordoningNode", message="")
        return None
    # Checked and committed under the batch lock: two batches checked at once would each
    # count on the room the other is about to take.
    async with env.batch_lock:
        fit = _fit(env, view, spec, children, current)
        if not fit.fits:
            if past:
                raise give_up(f"waiting for capacity: {fit.message}")
            raise Wait(
                f"waiting for capacity: {fit.message}",
                after=_recheck(env, elapsed),
                reason="InsufficientCapacity",
            )
        # Placeholders preempted or left to wait are said, not hidden: "38 of 40 pods fit
        # ..., in the room of 6 of a negative priority; 2 of a negative priority may wait".
        message = fit.message if fit.spare_unplaced or fit.preempted else ""
        await env.commit_progress(view, children, {}, phase="CordoningNode", message=message)
    return None


def _recheck(env: RequestEnv, elapsed: float) -> float:
    remaining = env.settings.scale_up_limit - elapsed
    return max(1.0, min(env.settings.check_interval * 3, remaining + 1))


def _batch_groups(
    spec: CycleNodeRequestSpec, inventory: Inventory, current: Sequence[CycleNodeRequestNode]
) -> list[tuple[str, CloudGroup]]:
    """The described cloud groups that the batch's nodes come from, in the spec's order."""
    names = {e.node_group_name for e in current}
    return [
        (name, group)
        for name in spec.node_groups
        if name in names and (group := inventory.groups.get(name)) is not None
    ]


def _cloud_behind_nodes(
    env: RequestEnv,
    spec: CycleNodeRequestSpec,
    inventory: Inventory,
    current: Sequence[CycleNodeRequestNode],
) -> bool:
    """Whether an instance of the batch's groups that the cloud has not put in service yet
    already has a Ready Node (a kubelet registers as soon as the machine is up; the cloud
    may mark the instance in service only after its own checks or lifecycle hooks)."""
    for _, group in _batch_groups(spec, inventory, current):
        for inst in group.instances:
            if inst.lifecycle_state is not Lifecycle.PENDING:
                continue
            node = env.node_by_pid(inst.provider_id)
            if node is not None and node_is_ready(node):
                return True
    return False


def _scale_up_state(
    env: RequestEnv,
    spec: CycleNodeRequestSpec,
    inventory: Inventory,
    current: Sequence[CycleNodeRequestNode],
) -> str:
    """What the replacements still wait for ("" when they are in service and Ready)."""
    problems: list[str] = []
    for entry in current:
        member = inventory.member_by_instance(instance_id(entry.provider_id or ""))
        if member is not None:
            state = member.instance.raw_state or member.instance.lifecycle_state
            problems.append(f"instance of {entry.name} still in {member.group} ({state})")
    gone = (Lifecycle.TERMINATED, Lifecycle.TERMINATING, Lifecycle.DETACHING)
    for name, group in _batch_groups(spec, inventory, current):
        members = [i for i in group.instances if i.lifecycle_state not in gone]
        in_service = [i for i in members if i.lifecycle_state is Lifecycle.IN_SERVICE]
        if len(in_service) < group.desired:
            problems.append(f"{name}: {len(in_service)} of {group.desired} instances in service")
            continue
        for inst in in_service:
            node = env.node_by_pid(inst.provider_id)
            if node is None:
                problems.append(f"{name}: instance {inst.id} has no node yet")
            elif not node_is_ready(node):
                problems.append(f"{name}: node {o.name(node)} is not Ready")
    return "; ".join(problems[:10])


DRAINING_PHASES = frozenset({"CordoningNode", "WaitingTermination"})
"""Phases of a request whose batch has passed its capacity check: its pods are on the move."""


def _fit(
    env: RequestEnv,
    view: RequestView,
    spec: CycleNodeRequestSpec,
    children: Children,
    current: Sequence[CycleNodeRequestNode],
) -> FitResult:
    batch = {e.name for e in current}
    draining = {str((c.get("spec") or {}).get("nodeName")) for c in children.active}
    leaving = set(batch) | draining
    for r in env.active_requests(view):
        theirs = {entry.name for entry in status_of(r).current_nodes or ()}
        leaving |= theirs
        draining |= {str((c.get("spec") or {}).get("nodeName")) for c in env.active_children(r)}
        if phase_of(r) in DRAINING_PHASES:
            draining |= theirs
    exclude = set(leaving)
    if spec.cycle_settings.pending_node_taint == "NoSchedule":
        exclude |= set(env.queued(view))
    batch_pods = [p for name in batch for p in env.pods.by_index(BY_NODE, name)]
    # What other batches drain now needs room on the same nodes; a batch still scaling up
    # has not claimed any yet, and counts ours once it checks (the batch lock orders them).
    moving = [p for name in sorted(draining - batch) for p in env.pods.by_index(BY_NODE, name)]
    # And before either, the pods made a moment ago that the scheduler has still to place.
    now = env.time.now()
    to_place = [p for p in env.pods.by_index(BY_UNBOUND, UNBOUND) if awaiting_scheduler(p, now)]
    # The inter-pod rules read every node that stays (the domains of a spread) and the pods
    # they select; without any, only the nodes the first fit reaches are read.
    around = neighbours(
        [*to_place, *moving, *batch_pods],
        {name for name in env.nodes.keys() if name not in leaving},
        env.node,
        lambda key, value: env.pods.by_index(BY_LABEL, f"{key}={value}"),
        env.pods.objects,
        env.pods.by_index(BY_ANTI_AFFINITY, REQUIRED),
    )
    nodes = (env.node(name) for name in env.nodes.keys() if name not in exclude)
    return check_fit(
        batch_pods,
        nodes,
        lambda name: env.pods.by_index(BY_NODE, name),
        exclude=exclude,
        neighbours=around,
        moving=moving,
        waiting=to_place,
    )
