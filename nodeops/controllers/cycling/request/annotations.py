"""The cluster-autoscaler's scale-down-disabled annotation on a batch's replacements.

A replacement that the autoscaler removes while old nodes still drain onto it undoes the
batch (Cyclops PRs #134, #142). Each batch's new nodes carry the annotation while it runs, with
a marker saying it is ours, and `status.annotatedNodes` records them, so it is removed exactly
where it was put: per batch, on failure, on deletion, and never from a node we did not mark.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from nodeops.api.cyclenoderequest import CycleNodeRequestSpec
from nodeops.controllers.cycling.inventory import Inventory
from nodeops.controllers.cycling.keys import DISABLE_ANNOTATION_MANAGEMENT
from nodeops.controllers.cycling.nodes import (
    NodeEdit,
    add_scale_down_disabled,
    edit_node,
    remove_scale_down_disabled,
)
from nodeops.controllers.cycling.request.env import Obj, RequestEnv, RequestView, each
from nodeops.controllers.cycling.request.indexes import BY_ANNOTATED_FOR
from nodeops.kube import objects as o

__all__ = ["annotate_new_nodes", "remove_annotations"]


async def annotate_new_nodes(
    env: RequestEnv, view: RequestView, spec: CycleNodeRequestSpec, inventory: Inventory
) -> None:
    """Put the autoscaler annotation on this batch's new nodes, and take it off the
    previous batch's: between batches the removal would be one more round of writes
    before the next batch could start, here it overlaps the scale-up."""
    annotated = set(view.typed.annotated_nodes or ())
    batch_groups = {e.node_group_name for e in view.current_nodes}
    batch_groups -= _opted_out(env, spec)
    started = view.typed.scale_up_started
    born_after = started - timedelta(seconds=1) if started is not None else None
    fresh = [
        node
        for node, _ in env.new_nodes(
            view, inventory, batch_groups, skip=annotated, born_after=born_after
        )
        if _created_this_batch(view, node)
    ]
    edits = [(node, add_scale_down_disabled(view.name)) for node in fresh]
    edits += [
        (node, remove_scale_down_disabled(view.name))
        for node in _annotated_by(env, view)
        if not _created_this_batch(view, node)
    ]
    await each(edits, lambda job: _edit(env, job))
    if fresh:
        added = {o.name(node) for node in fresh}
        await env.status.commit(view, {"annotatedNodes": sorted(annotated | added)})


async def remove_annotations(env: RequestEnv, view: RequestView) -> None:
    """Every annotation this request put on, off; and the record of them."""
    remove = remove_scale_down_disabled(view.name)
    await each([(node, remove) for node in _annotated_by(env, view)], lambda j: _edit(env, j))
    if view.typed.annotated_nodes:
        await env.status.commit(view, {"annotatedNodes": None})


def _annotated_by(env: RequestEnv, view: RequestView) -> list[Obj]:
    """Nodes carrying the autoscaler annotation this request put on them (by their marker)."""
    return env.nodes.by_index(BY_ANNOTATED_FOR, view.name)


async def _edit(env: RequestEnv, job: tuple[Obj, NodeEdit]) -> None:
    node, edit = job
    await edit_node(env.client, node, edit)


def _created_this_batch(view: RequestView, node: Mapping[str, Any]) -> bool:
    """A node registered after this batch was detached (a second of slack for clocks
    rounded to seconds)."""
    created = o.parse_time(o.meta(node).get("creationTimestamp"))
    started = view.typed.scale_up_started
    return created is None or started is None or (created - started).total_seconds() >= -1


def _opted_out(env: RequestEnv, spec: CycleNodeRequestSpec) -> set[str]:
    """The request's cloud groups whose NodeGroup keeps the autoscaler annotation off their
    nodes; the request's other groups still get it."""
    groups = set(spec.node_groups)
    out: set[str] = set()
    for obj in env.nodegroups.objects():
        annotations = o.annotations_of(obj)
        if not any(annotations.get(k) == "true" for k in DISABLE_ANNOTATION_MANAGEMENT):
            continue
        ng_spec = obj.get("spec") or {}
        names = {ng_spec.get("nodeGroupName"), *(ng_spec.get("nodeGroupsList") or ())}
        out |= {str(n) for n in names if n} & groups
    return out
