"""CordoningNode: each old node of the batch is cordoned, checked, labelled and handed to a
CycleNodeStatus, which drains, deletes and terminates it.

A child has a deterministic name, so finding it already there (created before a crash) is
success; finding one that is not ours is a conflict the request heals from.
"""

from __future__ import annotations

from nodeops.api.cyclenoderequest import CycleNodeRequestSpec
from nodeops.api.cycling import CycleNodeRequestNode
from nodeops.controllers.cycling.keys import CYCLOPS_NAME_LABEL, REQUEST_LABEL
from nodeops.controllers.cycling.nodes import both, cordon, edit_node, mark_terminating
from nodeops.controllers.cycling.request.env import (
    Heal,
    Obj,
    RequestEnv,
    RequestView,
    Wait,
    child_name,
    each,
)
from nodeops.controllers.cycling.request.health import pre_termination
from nodeops.controllers.cycling.resources import CYCLENODESTATUSES
from nodeops.kube import ReconcileContext, Request, Result, errors
from nodeops.kube import objects as o

__all__ = ["cordoning"]


async def cordoning(
    env: RequestEnv,
    request: Request,
    view: RequestView,
    spec: CycleNodeRequestSpec,
    ctx: ReconcileContext,
) -> Result | None:
    del request, ctx
    children = env.children_of(view)
    current = view.current_nodes
    pending: list[str] = []
    checked = bool(spec.pre_termination_checks) and not spec.skip_pre_termination_checks

    async def hand_over(entry: CycleNodeRequestNode) -> None:
        if children.for_node(entry.name) is not None:
            return
        node = env.node(entry.name)
        if node is None:
            return
        if checked:
            cordoned = await edit_node(env.client, node, cordon())
            if cordoned is None:
                return
            waiting = await pre_termination(env, view, spec, cordoned, entry)
            if waiting:
                pending.append(waiting)
                return
            node = cordoned
        # Cordoned and labelled in one write; the child follows (a crash in between is
        # repaired on the next pass, which finds no child and creates it).
        if await edit_node(env.client, node, both(cordon(), mark_terminating(view.name))):
            await _create_child(env, view, spec, entry)

    if checked:
        # Check results go into this request's status one node at a time.
        for entry in current:
            await hand_over(entry)
    else:
        await each(current, hand_over)
    if pending:
        raise Wait(
            "pre-termination checks: " + "; ".join(pending[:5]),
            after=env.settings.check_interval,
            reason="PreTerminationChecks",
        )
    await env.commit_progress(
        view,
        env.children_of(view),
        {"currentNodes": None},
        phase="WaitingTermination",
        message="",
    )
    return None


async def _create_child(
    env: RequestEnv, view: RequestView, spec: CycleNodeRequestSpec, entry: CycleNodeRequestNode
) -> None:
    body: Obj = {
        "apiVersion": CYCLENODESTATUSES.api_version,
        "kind": CYCLENODESTATUSES.kind,
        "metadata": {
            "name": child_name(view.name, entry.name),
            "namespace": view.namespace,
            "labels": {CYCLOPS_NAME_LABEL: view.name, REQUEST_LABEL: view.name},
            "ownerReferences": [o.owner_reference(view.obj, controller=True)],
        },
        "spec": {
            "nodeName": entry.name,
            "cycleSettings": spec.cycle_settings.to_dict(),
            "nodeGroupName": entry.node_group_name or None,
            "providerId": entry.provider_id or None,
            "provider": view.typed.provider or spec.provider,
        },
    }
    body["spec"] = {k: v for k, v in body["spec"].items() if v is not None}
    try:
        await env.client.create(CYCLENODESTATUSES, body, view.namespace)
    except errors.Conflict as e:  # AlreadyExists: created before a crash or a conflict
        existing = await env.client.get_or_none(
            CYCLENODESTATUSES, body["metadata"]["name"], view.namespace
        )
        if existing is None or not o.is_controlled_by(existing, view.obj):
            raise Heal(
                f"CycleNodeStatus {body['metadata']['name']} exists and is not ours: {e}",
                "ChildConflict",
            ) from None
