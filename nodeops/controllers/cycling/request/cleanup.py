"""Successful, Failed and deleted requests: what is left to clean up once a request has ended.

Successful and Failed stay so; their reconciles clean up, once, and never change the phase. A
Successful request unblocks its groups: the Failed requests of the same groups made before it
are marked superseded (the observer no longer counts them) and kept, with their reasons, until
`--cycling-delete-cnr-expiry` after they failed. A deleted request first puts back its nodes no
CycleNodeStatus is past draining, then lets go of its finalizer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeops.api import CycleNodeRequest, InvalidResource
from nodeops.api.cycling import TERMINAL_PHASES
from nodeops.controllers.cycling.keys import REQUEST_FINALIZER, SUPERSEDED_LABEL
from nodeops.controllers.cycling.nodes import clear_cycle_marks, edit_node
from nodeops.controllers.cycling.request.annotations import remove_annotations
from nodeops.controllers.cycling.request.env import (
    Obj,
    RequestEnv,
    RequestView,
    phase_of,
    status_of,
)
from nodeops.controllers.cycling.request.healing import heal_nodes
from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS
from nodeops.controllers.cycling.status import View
from nodeops.controllers.kit import remove_finalizer
from nodeops.kube import ReconcileContext, Request, Result, errors
from nodeops.kube import objects as o

__all__ = ["deleted", "terminal"]


async def terminal(env: RequestEnv, view: RequestView) -> Result | None:
    """Successful and Failed stay so; their reconciles clean up, once."""
    if not _cleaned(view):
        if view.phase == "Successful":
            await _clean_up_success(env, view)
        else:
            await remove_annotations(env, view)
            await env.status.commit(
                view, condition=("CleanedUp", "True", "CleanedUp", "annotations removed")
            )
    if view.phase == "Successful" and not env.settings.delete_cnr:
        return None
    if view.phase == "Failed" and not o.labels(view.obj).get(SUPERSEDED_LABEL):
        return None
    # A Successful request (with --cycling-delete-cnr) or a superseded Failed one goes once
    # its expiry has passed.
    age = env.time.since(view.typed.finished_timestamp)
    if age >= env.settings.delete_cnr_expiry:
        try:
            await env.client.delete(CYCLENODEREQUESTS, view.name, view.namespace)
        except errors.NotFound:
            pass
        return None
    return Result(requeue_after=env.time.wall(env.settings.delete_cnr_expiry - age + 1))


async def _clean_up_success(env: RequestEnv, view: RequestView) -> None:
    await remove_annotations(env, view)
    for node in env.selected(view):
        await edit_node(env.client, node, clear_cycle_marks(view.name))
    # Failed requests of the same node groups made before this one no longer block the
    # observer: the groups are healthy again. Cyclops deletes them; they are kept, marked,
    # so their reasons stay where a user looks.
    mine = _node_groups_of(view.obj)
    created = o.parse_time(o.meta(view.obj).get("creationTimestamp"))
    for other in env.requests.objects(view.namespace):
        if phase_of(other) != "Failed" or o.uid(other) == o.uid(view.obj):
            continue
        if o.labels(other).get(SUPERSEDED_LABEL):
            continue
        theirs = _node_groups_of(other)
        when = o.parse_time(o.meta(other).get("creationTimestamp"))
        if theirs and theirs == mine and created and when and when < created:
            await _mark_superseded(env, other, view.name)
    await env.status.commit(
        view, condition=("CleanedUp", "True", "CleanedUp", "nodes and annotations cleaned up")
    )


async def _mark_superseded(env: RequestEnv, failed: Obj, by: str) -> None:
    env.event(
        View(failed),
        "Normal",
        "Superseded",
        f"CycleNodeRequest {by} replaced the nodes of the same node groups; this request "
        f"is kept until {env.settings.delete_cnr_expiry:g}s after it failed",
    )
    try:
        await env.client.patch(
            CYCLENODEREQUESTS,
            o.name(failed),
            {
                "metadata": {
                    "labels": {SUPERSEDED_LABEL: by},
                    "resourceVersion": o.meta(failed).get("resourceVersion"),
                }
            },
            o.namespace(failed),
        )
    except errors.NotFound:
        pass


def _node_groups_of(request: Mapping[str, Any]) -> set[str]:
    """The cloud groups a request cycles: as it recorded them, or as its spec names them (a
    request that failed before recording them, such as one naming a missing node, is still
    the groups')."""
    recorded = status_of(request).node_groups
    if recorded:
        return set(recorded)
    spec = request.get("spec") or {}
    return {g for g in [spec.get("nodeGroupName"), *(spec.get("nodeGroupsList") or ())] if g}


def _cleaned(view: RequestView) -> bool:
    return any(c.type == "CleanedUp" and c.status == "True" for c in view.typed.conditions or ())


async def deleted(
    env: RequestEnv, request: Request, view: RequestView, ctx: ReconcileContext
) -> Result | None:
    """A deleted request first puts back its nodes no CycleNodeStatus is past draining."""
    if REQUEST_FINALIZER not in (o.meta(view.obj).get("finalizers") or ()):
        return None
    if view.phase not in TERMINAL_PHASES and view.phase:
        try:
            spec = CycleNodeRequest.parse_spec(view.obj).spec
        except InvalidResource:
            spec = None
        if spec is not None:
            children = env.children_of(view)
            if children.active:
                # Children past draining finish (their nodes are drained already); the
                # others stop, and their nodes are put back with the rest once they have.
                for child in children.active:
                    if phase_of(child) not in ("DeletingNode", "TerminatingNode"):
                        await _stop_child(env, child)
                return Result(requeue_after=env.time.wall(env.settings.check_interval))
            problems = await heal_nodes(env, request, view, spec, ctx)
            if problems:
                return Result(requeue_after=env.time.wall(env.settings.check_interval))
    await remove_annotations(env, view)
    await remove_finalizer(env.client, CYCLENODEREQUESTS, view.obj, REQUEST_FINALIZER)
    env.forget(request)
    return None


async def _stop_child(env: RequestEnv, child: Obj) -> None:
    """Fail a child that is still waiting or draining, through the same writer as its own
    transitions: its Event and metrics say it stopped, and why."""
    try:
        await env.child_status.commit(
            View(child),
            phase="Failed",
            reason="RequestDeleted",
            message="its CycleNodeRequest was deleted",
            warning=True,
        )
    except (errors.NotFound, errors.Conflict):
        pass
