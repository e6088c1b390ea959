"""Healing: after a failure, put back what no CycleNodeStatus is still working on, then Failed.

Healing re-attaches each such node's instance to its group, uncordons the node and removes
our marks; nodes whose CycleNodeStatus is working are left to it, and the request becomes
Failed only when none is. The replacements the cloud launched for the batch stay: the group
ends one node larger per re-attached node, as with Cyclops, and its own scaling (or the
cluster autoscaler) brings it back to size.
"""

from __future__ import annotations

import structlog

from nodeops.api import InvalidResource
from nodeops.api.cyclenoderequest import CycleNodeRequestSpec
from nodeops.api.cycling import CycleNodeRequestNode
from nodeops.controllers.cycling.inventory import instance_id
from nodeops.controllers.cycling.keys import NODE_GROUP_ANNOTATION
from nodeops.controllers.cycling.metrics import FAILURES
from nodeops.controllers.cycling.nodes import clear_cycle_marks, edit_node
from nodeops.controllers.cycling.request.annotations import remove_annotations
from nodeops.controllers.cycling.request.env import (
    Children,
    RequestEnv,
    RequestView,
    Wait,
    cnr_node,
    phase_of,
)
from nodeops.controllers.cycling.status import timestamp
from nodeops.kube import ReconcileContext, Request, Result
from nodeops.kube import objects as o
from nodeops.providers.base import ProviderError

__all__ = ["heal_nodes", "healing", "to_healing"]

log = structlog.get_logger("nodeops.controllers.cycling.request")


async def to_healing(env: RequestEnv, view: RequestView, message: str, reason: str) -> None:
    FAILURES.labels("CycleNodeRequest", reason).inc()
    previous = view.typed.message
    text = f"{previous}, {message}" if previous and message not in previous else message
    await env.status.commit(
        view,
        phase="Healing",
        reason=reason,
        message=text,
        warning=True,
        condition=("Ready", "False", reason, message[:32768]),
    )


async def healing(
    env: RequestEnv,
    request: Request,
    view: RequestView,
    spec: CycleNodeRequestSpec,
    ctx: ReconcileContext,
) -> Result | None:
    remaining = await heal_nodes(env, request, view, spec, ctx)
    children = env.children_of(view)
    if remaining or children.active:
        busy = len(children.active)
        raise Wait(
            f"healing: waiting for {busy} nodes still being replaced"
            + (f"; {'; '.join(remaining[:5])}" if remaining else ""),
            reason="Healing",
        )
    await remove_annotations(env, view)
    changes = env.progress(children, view, {})
    changes["finishedTimestamp"] = timestamp(env.time.now())
    changes["currentNodes"] = None
    await env.status.commit(
        view,
        changes,
        phase="Failed",
        reason="Failed",
        warning=True,
        message=view.typed.message or "failed",
    )
    return None


async def heal_nodes(
    env: RequestEnv,
    request: Request,
    view: RequestView,
    spec: CycleNodeRequestSpec,
    ctx: ReconcileContext,
) -> list[str]:
    """Put back every node of the request that no CycleNodeStatus works on or finished:
    re-attach its instance to its group, uncordon it, remove our marks. Returns problems
    that need another attempt."""
    children = env.children_of(view)
    entries = _nodes_to_put_back(env, view, children)
    if not entries:
        return []
    try:
        _, provider, inventory = await env.inventory(request, spec, fresh=True)
    except (InvalidResource, ProviderError) as e:
        return [f"describing node groups: {e}"]
    problems = []
    for name, entry in entries.items():
        child = children.for_node(name)
        if child is not None and phase_of(child) != "Failed":
            continue  # being replaced, or replaced: not ours to undo
        node = env.node(name)
        iid = instance_id(entry.provider_id or "")
        origin = entry.node_group_name or (
            o.annotations_of(node).get(NODE_GROUP_ANNOTATION) if node else None
        )
        if child is not None and node is None:
            # Its CycleNodeStatus failed once the Node was gone (drained and deleted, or
            # deleted by someone else): re-attached, the instance would count as capacity
            # in its group with no node to run pods. It stays out; its group replaced it.
            if iid and inventory.member_by_instance(iid) is None:
                env.event(
                    view,
                    "Warning",
                    "InstanceLeftDetached",
                    f"instance {iid} of deleted node {name} could not be terminated and "
                    "is left out of its group: terminate it",
                )
            continue
        if iid and origin and inventory.member_by_instance(iid) is None:
            try:
                ctx.ensure_may_act(f"re-attach {iid}")
                await provider.attach_instance(str(origin), iid)
                log.info("re-attached", request=o.ref(view.obj), node=name, instance=iid)
            except ProviderError as e:
                if e.retryable or e.code not in ("NotFound", "IncorrectInstanceState"):
                    problems.append(f"re-attaching {iid}: {e}")
                    continue
        if node is not None:
            await edit_node(env.client, node, clear_cycle_marks())
    if not problems:
        env.cloud.invalidate(env.providers.name(spec.provider), spec.node_groups)
    return problems


def _nodes_to_put_back(
    env: RequestEnv, view: RequestView, children: Children
) -> dict[str, CycleNodeRequestNode]:
    """Every node the request touched and may have to put back: the batch (detached, its
    record in status), the nodes still labelled as selected, and the nodes of failed
    CycleNodeStatuses (recorded in the child, whose Node may be gone)."""
    entries: dict[str, CycleNodeRequestNode] = {e.name: e for e in view.current_nodes}
    for child in children.failed:
        recorded = (child.get("status") or {}).get("currentNode")
        spec = child.get("spec") or {}
        name = str(spec.get("nodeName") or "")
        if name and name not in entries:
            entries[name] = CycleNodeRequestNode.model_validate(
                recorded
                or {
                    "name": name,
                    "providerId": spec.get("providerId") or "",
                    "nodeGroupName": spec.get("nodeGroupName") or "",
                }
            )
    for node in env.selected(view):
        if o.name(node) not in entries:
            group = o.annotations_of(node).get(NODE_GROUP_ANNOTATION) or ""
            entries[o.name(node)] = cnr_node(node, str(group))
    return entries
