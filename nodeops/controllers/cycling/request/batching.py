"""Initialised and WaitingTermination: the next batch, within concurrency and budgets.

A batch is as many selected nodes as the request's concurrency leaves room for, fewer when a
disruption budget (the request's, or a NodeGroup's for the same cloud groups) allows fewer.
Intent goes before action: the finalizer and the origin group go on each node, then the batch
goes into status with the phase ScalingUp, and only then are the instances detached.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from nodeops.api import InvalidResource, NodeGroup
from nodeops.api.cyclenoderequest import CycleNodeRequestSpec
from nodeops.api.cycling import CycleNodeRequestNode
from nodeops.controllers.cycling.budgets import BudgetScope, Room, next_change, room
from nodeops.controllers.cycling.fit import node_is_ready
from nodeops.controllers.cycling.inventory import Inventory, instance_id
from nodeops.controllers.cycling.keys import TERMINATE_LABEL
from nodeops.controllers.cycling.loadbalancers import targets_left_unserved
from nodeops.controllers.cycling.nodes import edit_node, mark_for_detach, set_cycle_taint
from nodeops.controllers.cycling.request.annotations import remove_annotations
from nodeops.controllers.cycling.request.env import (
    Children,
    Heal,
    Obj,
    RequestEnv,
    RequestView,
    Wait,
    cnr_node,
    each,
    node_dicts,
    status_of,
)
from nodeops.controllers.cycling.status import timestamp
from nodeops.kube import ReconcileContext, Request, Result
from nodeops.kube import objects as o
from nodeops.providers.base import Lifecycle, NodeGroups, ProviderError

__all__ = [
    "concurrency",
    "detach",
    "initialised",
    "succeed",
    "taint_pending",
    "waiting_termination",
]

log = structlog.get_logger("nodeops.controllers.cycling.request")


def concurrency(view: RequestView, spec: CycleNodeRequestSpec) -> int:
    """The concurrency in force: as Pending recorded it, or (a status written before it was
    recorded) as the spec resolves it for the selected nodes. One meaning everywhere:
    `CycleSettings.concurrency_for`."""
    recorded = view.typed.concurrency
    if recorded:
        return recorded
    return spec.cycle_settings.concurrency_for(view.total)


async def initialised(
    env: RequestEnv,
    request: Request,
    view: RequestView,
    spec: CycleNodeRequestSpec,
    ctx: ReconcileContext,
) -> Result | None:
    children = env.children_of(view)
    if children.failed:
        raise Heal(children.failure_message(), "NodeFailed")
    current = view.current_nodes
    # Nodes gone before their turn (replaced by someone else) have left the queue with their
    # Node: nothing to do for them.
    still = env.queued(view)
    if not still and not current:
        if children.active:
            await env.commit_progress(view, children, {}, phase="WaitingTermination")
            return None
        return await succeed(env, view, spec, children)
    provider_name, provider, inventory = await env.inventory(request, spec, fresh=True)
    async with env.batch_lock:
        capacity = concurrency(view, spec) - len(children.active) - len(current)
        budget = await _budget_room(env, view, spec, inventory)
        allowed = capacity if budget.nodes is None else min(capacity, budget.nodes)
        batch = _pick(env, view, still, inventory, allowed)
        if not batch:
            _wait_for_room(env, view, spec, children, current, budget)
        await _load_balancers_ready(env, provider, batch)

        async def mark(entry: CycleNodeRequestNode) -> None:
            node = env.node(entry.name)
            if node is not None:
                await edit_node(env.client, node, mark_for_detach(entry.node_group_name))

        await each(batch, mark)
        picked = {e.name for e in batch}
        changes: Obj = {
            "currentNodes": node_dicts([*current, *batch]),
            "scaleUpStarted": timestamp(env.time.now()),
            "annotatedNodes": None,
        }
        changes.update(env.progress(children, view, changes))
        await env.status.commit(
            view,
            changes,
            phase="ScalingUp",
            message=f"detaching {len(batch)} nodes: {', '.join(sorted(picked)[:10])}",
            condition=("Blocked", "False", "Detaching", f"batch of {len(batch)} nodes"),
        )
    await detach(env, view, provider, [*current, *batch], inventory, ctx)
    env.cloud.invalidate(provider_name, spec.node_groups)
    # The nodes still to be replaced are tainted while the batch scales up: no pod moves
    # before the replacements are up, and the first batch does not wait for it.
    await taint_pending(env, view, spec)
    return None


def _wait_for_room(
    env: RequestEnv,
    view: RequestView,
    spec: CycleNodeRequestSpec,
    children: Children,
    current: Sequence[CycleNodeRequestNode],
    budget: Room,
) -> None:
    """Why no node can start now, raised as a Wait.

    The request stays in Initialised until a child finishes, a budget window opens or a node
    becomes eligible (each wakes it); going back to WaitingTermination would flip-flop between
    the two phases (Cyclops issue #10)."""
    busy = len(children.active) + len(current)
    if budget.nodes is not None and budget.nodes <= 0:
        change = next_change(_budget_scopes(env, view, spec), env.time.now())
        after = (change - env.time.now()).total_seconds() + 1 if change else None
        raise Wait(f"disruption budget: {budget.reason}", after=after, reason="BudgetExhausted")
    if busy:
        raise Wait(
            f"{busy} nodes in progress; the next batch starts when they finish",
            after=env.settings.check_interval * 6,
            reason="BatchInProgress",
        )
    raise Wait(
        "no selected node can start now (not Ready, or its instance is not in service)",
        reason="NoEligibleNode",
    )


async def _load_balancers_ready(
    env: RequestEnv, provider: NodeGroups, batch: Sequence[CycleNodeRequestNode]
) -> None:
    """Wait while the batch would leave a load balancer with no healthy target."""
    if not env.settings.wait_for_load_balancers:
        return
    leaving = {instance_id(e.provider_id or "") for e in batch} - {None}
    try:
        unserved = await targets_left_unserved(provider, {str(i) for i in leaving})
    except ProviderError as e:
        hint = "" if e.retryable else " (--cycling-wait-for-load-balancers=false skips this)"
        raise Wait(f"checking the batch's load balancers: {e}{hint}", reason="CloudError") from None
    if unserved:
        raise Wait(
            "the batch would leave load balancers with no healthy target: "
            + "; ".join(unserved[:5]),
            reason="LoadBalancerNotReady",
        )


def _pick(
    env: RequestEnv,
    view: RequestView,
    queue: Sequence[str],
    inventory: Inventory,
    n: int,
) -> list[CycleNodeRequestNode]:
    """Up to `n` nodes of the queue (in name order) that can start: Ready first, their
    instance in service, not in use. Reads nodes only until `n` Ready ones are found, not the
    whole queue, which may be the whole node group."""
    if n <= 0:
        return []
    ready: list[CycleNodeRequestNode] = []
    not_ready: list[CycleNodeRequestNode] = []
    for name in queue:
        node = env.node(name)
        if node is None or o.deletion_timestamp(node) is not None:
            continue
        member = inventory.member(node)
        if member is None or member.instance.lifecycle_state is not Lifecycle.IN_SERVICE:
            continue
        label = o.labels(node).get(TERMINATE_LABEL)
        if label is not None and label != view.name:
            continue
        if env.claimed_elsewhere(view, name):
            continue
        if node_is_ready(node):
            ready.append(cnr_node(node, member.group))
            if len(ready) == n:
                break
        elif len(not_ready) < n:
            not_ready.append(cnr_node(node, member.group))
    # NotReady nodes are replaced too, once no Ready one is left to start with.
    return ready or not_ready


async def detach(
    env: RequestEnv,
    view: RequestView,
    provider: NodeGroups,
    entries: Sequence[CycleNodeRequestNode],
    inventory: Inventory,
    ctx: ReconcileContext,
) -> None:
    """Detach the entries' instances that are still in service in their group."""

    async def one(entry: CycleNodeRequestNode) -> None:
        iid = instance_id(entry.provider_id or "")
        member = inventory.member_by_instance(iid)
        if iid is None or member is None:
            return  # already out of the group (detached, or gone)
        if member.instance.lifecycle_state is not Lifecycle.IN_SERVICE:
            return
        ctx.ensure_may_act(f"detach {iid} from {member.group}")
        try:
            await provider.detach_instance(member.group, iid)
        except ProviderError as e:
            if e.retryable:
                raise Wait(f"detaching {iid}: {e}", reason="CloudError") from None
            raise Heal(
                f"detaching {iid} of node {entry.name} from {member.group}: {e}",
                "DetachFailed",
            ) from None
        log.info(
            "detached", request=o.ref(view.obj), node=entry.name, instance=iid, group=member.group
        )

    await each(entries, one)


async def taint_pending(env: RequestEnv, view: RequestView, spec: CycleNodeRequestSpec) -> None:
    """Our taint on every node of the queue that lacks it."""
    effect = spec.cycle_settings.pending_node_taint
    if effect == "Off":
        return

    async def taint(name: str) -> None:
        node = env.node(name)
        if node is not None and o.deletion_timestamp(node) is None:
            await edit_node(env.client, node, set_cycle_taint(view.name, effect))

    await each(env.untainted(view), taint)


def _budget_scopes(
    env: RequestEnv, view: RequestView, spec: CycleNodeRequestSpec
) -> list[BudgetScope]:
    groups = frozenset(spec.node_groups)
    scopes = []
    if spec.budgets:
        scopes.append(BudgetScope(f"CycleNodeRequest {view.name}", groups, tuple(spec.budgets)))
    for obj in env.nodegroups.objects():
        try:
            ng = NodeGroup.parse_spec(obj)
        except InvalidResource:
            continue
        theirs = frozenset(ng.spec.node_groups)
        if ng.spec.budgets and theirs & groups:
            scopes.append(BudgetScope(f"NodeGroup {ng.name}", theirs, tuple(ng.spec.budgets)))
    return scopes


async def _budget_room(
    env: RequestEnv, view: RequestView, spec: CycleNodeRequestSpec, inventory: Inventory
) -> Room:
    scopes = _budget_scopes(env, view, spec)
    if not scopes:
        return room((), {}, {}, env.time.now())
    sizes = {name: g.desired for name, g in inventory.groups.items()}
    extra = sorted({g for s in scopes for g in s.groups} - set(sizes))
    if extra:
        provider_name = env.providers.name(spec.provider)
        try:
            more = await env.cloud.describe(
                provider_name,
                extra,
                max_age=env.time.wall(env.settings.cloud_poll_interval * 6),
            )
        except ProviderError:
            more = {}
        sizes.update({name: g.desired for name, g in more.items()})
    return room(scopes, _in_replacement(env, view), sizes, env.time.now())


def _in_replacement(env: RequestEnv, view: RequestView) -> dict[str, set[str]]:
    """Nodes being replaced by any request (this one included), by cloud node group."""
    busy: dict[str, set[str]] = {}
    for r in env.unfinished_requests(view.namespace):
        for entry in status_of(r).current_nodes or ():
            busy.setdefault(entry.node_group_name, set()).add(entry.name)
        for child in env.active_children(r):
            spec = child.get("spec") or {}
            group = spec.get("nodeGroupName") or (
                (child.get("status") or {}).get("currentNode") or {}
            ).get("nodeGroupName")
            busy.setdefault(str(group), set()).add(str(spec.get("nodeName")))
    return busy


async def waiting_termination(
    env: RequestEnv,
    request: Request,
    view: RequestView,
    spec: CycleNodeRequestSpec,
    ctx: ReconcileContext,
) -> Result | None:
    del request, ctx
    children = env.children_of(view)
    if children.failed:
        raise Heal(children.failure_message(), "NodeFailed")
    active = len(children.active)
    available = env.queued_count(view)
    changes = env.progress(children, view, {})
    refill = int(concurrency(view, spec) * env.settings.batch_refill)
    if not available and active == 0:
        await remove_annotations(env, view)
        await env.status.commit(view, changes, phase="Initialised")
        return None
    if available and active <= refill:
        # The batch's annotations come off in the next scale-up (`annotate_new_nodes`).
        await env.status.commit(view, changes, phase="Initialised")
        return None
    await env.status.commit(view, changes)
    return None


async def succeed(
    env: RequestEnv, view: RequestView, spec: CycleNodeRequestSpec, children: Children
) -> Result | None:
    """No node left to replace: Successful, saying what was asked for and not found."""
    changes = env.progress(children, view, {})
    changes["finishedTimestamp"] = timestamp(env.time.now())
    await env.status.commit(
        view,
        changes,
        phase="Successful",
        message=view.typed.selection_note or "",
        condition=("Ready", "True", "Successful", f"{changes['numNodesCycled']} nodes replaced"),
    )
    return None
