"""Pending: which nodes the request replaces, and its claim on them.

The cloud and the cluster must agree first (every selected node's instance in service in one
of the groups, every instance of the groups a Ready node); a node we detached earlier and lost
track of is put back, an orphaned Node removed. Then each selected node is labelled with the
request's name (`SELECTED_LABEL`), and only then does the status say Initialised, with counts.
The label is the claim (another request waits for a node labelled by a request that has not
ended) and the queue the batches are taken from; a crash while labelling leaves the request in
Pending, which labels again.
"""

from __future__ import annotations

from collections.abc import Sequence

from nodeops.api import InvalidResource
from nodeops.api.cyclenoderequest import CycleNodeRequestSpec
from nodeops.api.cycling import CycleNodeRequestNode
from nodeops.controllers.cycling.fit import node_is_ready
from nodeops.controllers.cycling.inventory import instance_id
from nodeops.controllers.cycling.keys import (
    NODE_FINALIZER,
    NODE_GROUP_ANNOTATION,
    REQUEST_LABEL,
    SELECTED_LABEL,
)
from nodeops.controllers.cycling.nodes import clear_cycle_marks, edit_node, select_for
from nodeops.controllers.cycling.pods import movable
from nodeops.controllers.cycling.request.env import (
    BY_NODE,
    Heal,
    Obj,
    RequestEnv,
    RequestView,
    Wait,
    cnr_node,
    each,
)
from nodeops.controllers.cycling.request.health import initial_health_checks
from nodeops.controllers.cycling.resources import CYCLENODESTATUSES
from nodeops.controllers.cycling.status import timestamp
from nodeops.kube import ReconcileContext, Request, Result, errors
from nodeops.kube import objects as o
from nodeops.kube.resources import NODES
from nodeops.providers.base import Lifecycle, NodeGroups, ProviderError

__all__ = ["pending", "selection_note"]


async def pending(
    env: RequestEnv,
    request: Request,
    view: RequestView,
    spec: CycleNodeRequestSpec,
    ctx: ReconcileContext,
) -> Result | None:
    if view.typed.equilibrium_wait_started is None:
        await env.status.commit(view, {"equilibriumWaitStarted": timestamp(env.time.now())})
    try:
        provider_name, provider, inventory = await env.inventory(request, spec, fresh=True)
    except InvalidResource as e:
        await env.fail(view, str(e), "InvalidSpec")
        return None
    missing = [g for g in spec.node_groups if g not in inventory.groups]
    if missing:
        field = (
            "spec.nodeGroupName"
            if missing[0] == spec.node_group_name
            else f"spec.nodeGroupsList[{(spec.node_groups_list or []).index(missing[0])}]"
        )
        await env.fail(
            view,
            f"{field}: node group {missing[0]!r} not found in provider {provider_name}",
            "NodeGroupNotFound",
        )
        return None
    groups = set(spec.node_groups)
    selected = [n for n in env.nodes.objects() if spec.selector.matches(o.labels(n))]
    valid: list[tuple[Obj, str]] = []
    problems: list[str] = []
    for node in selected:
        member = inventory.member(node)
        if member is not None:
            if member.instance.lifecycle_state is not Lifecycle.IN_SERVICE:
                problems.append(
                    f"instance {member.instance.id} of node {o.name(node)} is "
                    f"{member.instance.raw_state or member.instance.lifecycle_state}"
                )
            valid.append((node, member.group))
            continue
        origin = o.annotations_of(node).get(NODE_GROUP_ANNOTATION)
        if origin in groups and not env.claimed_elsewhere(view, o.name(node)):
            problems.append(await _repair_stray(env, view, node, origin, provider, ctx))
    for member in inventory.instances():
        known = env.node_by_pid(member.instance.provider_id)
        if known is None:
            problems.append(f"instance {member.instance.id} has no node yet")
        elif not node_is_ready(known):
            problems.append(f"node {o.name(known)} of instance {member.instance.id} is not Ready")
    if problems:
        env.cloud.invalidate(provider_name, groups)
        limit = env.settings.equilibrium_wait_limit
        waited = env.time.since(view.typed.equilibrium_wait_started)
        if waited > limit:
            raise Heal(
                f"the cloud and the cluster did not agree within {limit:g}s: "
                + "; ".join(problems[:10]),
                "NodeStateInvalid",
            )
        raise Wait(
            "waiting for the cloud and the cluster to agree: " + "; ".join(problems[:10]),
            after=min(env.settings.check_interval, max(1.0, limit - waited)),
            reason="NodeStateInvalid",
        )
    targets = _named(env, view, spec, valid)
    health = await initial_health_checks(env, view, spec, valid)
    nodes = [cnr_node(n, g) for n, g in targets]
    pods = sum(1 for n, _ in targets for p in env.pods.by_index(BY_NODE, o.name(n)) if movable(p))
    await _remove_leftover_children(env, view)
    by_group: dict[str, int] = {}
    for entry in nodes:
        by_group[entry.node_group_name] = by_group.get(entry.node_group_name, 0) + 1
    message = selection_note(spec, nodes)
    changes: Obj = {
        "provider": provider_name,
        "nodeGroups": spec.node_groups,
        "concurrency": spec.cycle_settings.concurrency_for(len(nodes)),
        "currentNodes": None,
        "podsToMove": pods,
        "selectedByGroup": dict(sorted(by_group.items())) or None,
        "selectionNote": message or None,
        "nodesToTerminate": None,
        "nodesAvailable": None,
    }
    if health is not None:
        changes["healthChecks"] = health
    if not nodes and not spec.node_names:
        env.event(view, "Warning", "NoNodeSelected", message)
    async with env.batch_lock:
        blocker = _blocking_request(env, view, [n for n, _ in targets])
        if blocker is not None:
            raise Wait(blocker, after=env.settings.check_interval * 3, reason="NodesInUse")
        # The claim: each selected node labelled before the status says Initialised, so the
        # queue is on the nodes before any batch is taken from it.
        await _label_selection(env, view, [n for n, _ in targets])
        changes.update(env.progress(env.children_of(view), view, changes, total=len(nodes)))
        await env.status.commit(
            view,
            changes,
            phase="Initialised",
            message=message,
            condition=("Blocked", "False", "Selected", f"{len(nodes)} nodes selected"),
        )
    if env.notifier is not None:
        await env.notifier.nodes_selected(view, [n.name for n in nodes])
    return None


def _named(
    env: RequestEnv, view: RequestView, spec: CycleNodeRequestSpec, valid: list[tuple[Obj, str]]
) -> list[tuple[Obj, str]]:
    """The nodes to replace: every selected one, or those of `nodeNames`."""
    if not spec.node_names:
        return valid
    by_name = {o.name(n): (n, g) for n, g in valid}
    skip = bool(spec.validation_options and spec.validation_options.skip_missing_named_nodes)
    targets = []
    for i, wanted in enumerate(spec.node_names):
        if wanted in by_name:
            targets.append(by_name[wanted])
        elif skip:
            env.event(
                view,
                "Warning",
                "SkipMissingNamedNode",
                f"node {wanted} skipped: not among the selected nodes of the node groups",
            )
        else:
            raise Heal(
                f"spec.nodeNames[{i}]: node {wanted!r} is not among the selected nodes "
                "of the node groups",
                "NamedNodeMissing",
            )
    return list({o.name(n): (n, g) for n, g in targets}.values())


def selection_note(spec: CycleNodeRequestSpec, nodes: Sequence[CycleNodeRequestNode]) -> str:
    """What a user should know about a request that replaces less than it names: a selector
    that selects no node of its groups, or named nodes skipped (skipMissingNamedNodes). Empty
    when it replaces what it was asked to. Written at selection and again at the end, so the
    Successful request still says it."""
    names = {n.name for n in nodes}
    if spec.node_names:
        skipped = [n for n in dict.fromkeys(spec.node_names) if n not in names]
        if not skipped:
            return ""
        shown = ", ".join(skipped[:10]) + (
            f" and {len(skipped) - 10} more" if len(skipped) > 10 else ""
        )
        return f"spec.nodeNames: {shown} skipped: not among the selected nodes of the node groups"
    if names:
        return ""
    return (
        f"spec.selector: {spec.selector.matcher()} selects no node of node groups "
        f"{', '.join(spec.node_groups)}: nothing to replace"
    )


async def _repair_stray(
    env: RequestEnv,
    view: RequestView,
    node: Obj,
    origin: str,
    provider: NodeGroups,
    ctx: ReconcileContext,
) -> str:
    """A node we detached earlier that is in none of the groups: re-attach its instance, or
    remove the Node when the instance is gone."""
    iid = instance_id(node)
    name = o.name(node)
    if iid is None:
        return f"node {name} has no provider ID"
    try:
        ctx.ensure_may_act(f"re-attach {iid}")
        await provider.attach_instance(origin, iid)
    except ProviderError as e:
        if (
            e.code not in ("NotFound", "InvalidInstanceID.NotFound", "IncorrectInstanceState")
            or e.retryable
        ):
            return f"re-attaching {iid} of node {name} to {origin}: {e}"
        # The instance is gone (or terminating): the Node is an orphan we held back.
        others = [f for f in o.meta(node).get("finalizers") or () if f != NODE_FINALIZER]
        if others:
            return f"node {name} has no instance but finalizers {others} hold it"
        ctx.ensure_may_act(f"delete orphaned node {name}")
        await edit_node(env.client, node, clear_cycle_marks())
        try:
            await env.client.delete(NODES, name)
        except errors.NotFound:
            pass
        env.event(
            view, "Normal", "OrphanRemoved", f"removed node {name}: its instance {iid} is gone"
        )
        return f"removed orphaned node {name}"
    await edit_node(env.client, node, clear_cycle_marks())
    env.event(
        view, "Normal", "Reattached", f"re-attached instance {iid} of node {name} to {origin}"
    )
    return f"re-attached instance {iid} of node {name} to {origin}"


def _blocking_request(env: RequestEnv, view: RequestView, nodes: Sequence[Obj]) -> str | None:
    """Another request that started and has not ended, and has selected some of `nodes` (as
    the cache shows them now, not as they were read before the batch lock was taken)."""
    others = {o.name(r): r for r in env.active_requests(view)}
    overlap: dict[str, list[str]] = {}
    for node in filter(None, (env.node(o.name(n)) for n in nodes)):
        owner = o.labels(node).get(SELECTED_LABEL)
        if owner in others and owner != view.name:
            overlap.setdefault(owner, []).append(o.name(node))
    for owner, names in sorted(overlap.items()):
        more = f" and {len(names) - 1} more of the selected nodes" if len(names) > 1 else ""
        return f"waiting for CycleNodeRequest {owner}, which cycles {sorted(names)[0]}{more}"
    return None


async def _label_selection(env: RequestEnv, view: RequestView, nodes: Sequence[Obj]) -> None:
    """The selection label on each of `nodes`, and off any node an earlier attempt of this
    selection labelled that is no longer selected."""
    wanted = {o.name(n) for n in nodes}
    await each(nodes, lambda node: edit_node(env.client, node, select_for(view.name)))
    stale = [n for n in env.selected(view) if o.name(n) not in wanted]
    await each(stale, lambda node: edit_node(env.client, node, clear_cycle_marks(view.name)))


async def _remove_leftover_children(env: RequestEnv, view: RequestView) -> None:
    """CycleNodeStatuses labelled with this request's name but owned by an earlier request of
    the same name (Cyclops deletes them too)."""
    for child in env.children.objects(view.namespace):
        if o.labels(child).get(REQUEST_LABEL) != view.name:
            continue
        owner = o.controller_ref(child)
        if owner is not None and owner.get("uid") == o.uid(view.obj):
            continue
        try:
            await env.client.delete(CYCLENODESTATUSES, o.name(child), view.namespace)
        except errors.NotFound:
            pass
