"""Pending: which nodes the request replaces, and its claim on them.

The cloud and the cluster must agree first (every selected node's instance in service in one
of the groups, every instance of the groups a Ready node); a node we detached earlier and lost
track of is put back, an orphaned Node removed. Then the selected nodes are written to status,
which is the claim: another request waits for a node claimed here, and a request never starts
on a node another one has claimed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from nodeops.api import InvalidResource
from nodeops.api.cyclenoderequest import CycleNodeRequestSpec
from nodeops.api.cycling import CycleNodeRequestNode
from nodeops.controllers.cycling.fit import node_is_ready
from nodeops.controllers.cycling.inventory import instance_id
from nodeops.controllers.cycling.keys import NODE_FINALIZER, NODE_GROUP_ANNOTATION, REQUEST_LABEL
from nodeops.controllers.cycling.nodes import clear_cycle_marks, edit_node
from nodeops.controllers.cycling.pods import movable
from nodeops.controllers.cycling.request.env import (
    BY_NODE,
    Heal,
    Obj,
    RequestEnv,
    RequestView,
    Wait,
    cnr_node,
    node_dicts,
    status_of,
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
    changes: Obj = {
        "provider": provider_name,
        "nodeGroups": spec.node_groups,
        "concurrency": spec.cycle_settings.concurrency_for(len(nodes)),
        "nodesToTerminate": node_dicts(nodes),
        "nodesAvailable": node_dicts(nodes),
        "currentNodes": None,
        "podsToMove": pods,
        "selectedNodes": {n.name: True for n in nodes} or None,
    }
    if health is not None:
        changes["healthChecks"] = health
    changes.update(env.progress(env.children_of(view), view.typed, changes))
    message = selection_note(spec, nodes)
    if not nodes and not spec.node_names:
        env.event(view, "Warning", "NoNodeSelected", message)
    async with env.batch_lock:
        blocker = _blocking_request(env, view, [n.name for n in nodes])
        if blocker is not None:
            raise Wait(blocker, after=env.settings.check_interval * 3, reason="NodesInUse")
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


def _blocking_request(env: RequestEnv, view: RequestView, names: Iterable[str]) -> str | None:
    wanted = set(names)
    for other in env.active_requests(view):
        theirs = {n.name for n in status_of(other).nodes_to_terminate or ()}
        overlap = wanted & theirs
        if overlap:
            more = f" and {len(overlap) - 1} more of the selected nodes" if len(overlap) > 1 else ""
            return (
                f"waiting for CycleNodeRequest {o.name(other)}, which cycles "
                f"{sorted(overlap)[0]}{more}"
            )
    return None


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
