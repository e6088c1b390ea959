"""Edits of Node objects: each one idempotent, guarded by resourceVersion, retried on conflict.

Taints and finalizers are lists that other controllers write too (the node lifecycle controller
taints, the cloud controller adds finalizers), so a write is computed from the object as read,
sent with that object's resourceVersion, and recomputed on a fresh read after a 409. A write
that would change nothing is not sent. Our finalizer is edited here only together with other
marks, in one write (intent recorded at once); on its own it goes through
`nodeops.kube.finalizers`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from nodeops.controllers.cycling.keys import (
    ANNOTATION_MANAGED,
    CYCLE_TAINT,
    NODE_FINALIZER,
    NODE_GROUP_ANNOTATION,
    SCALE_DOWN_DISABLED,
    SELECTED_LABEL,
    TERMINATE_LABEL,
)
from nodeops.kube import errors
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.resources import NODES

__all__ = [
    "NodeEdit",
    "add_scale_down_disabled",
    "both",
    "clear_cycle_marks",
    "cordon",
    "edit_node",
    "mark_for_detach",
    "mark_terminating",
    "remove_scale_down_disabled",
    "select_for",
    "set_cycle_taint",
]

Obj = dict[str, Any]
NodeEdit = Callable[[Mapping[str, Any]], Obj | None]
"""Given the node as it is, the merge patch to send, or None when nothing needs changing."""

_ATTEMPTS = 8


class NodeKeptChanging(errors.KubeError):
    """Every attempt to write a node met a newer version of it; the caller retries later."""


async def edit_node(client: Client, node: Mapping[str, Any] | str, edit: NodeEdit) -> Obj | None:
    """Apply `edit` to a node (given as read, or by name); the node as written, or None when it
    no longer exists."""
    current: Mapping[str, Any] | None
    name = node if isinstance(node, str) else o.name(node)
    current = None if isinstance(node, str) else node
    for _ in range(_ATTEMPTS):
        if current is None:
            try:
                current = await client.get(NODES, name)
            except errors.NotFound:
                return None
        patch = edit(current)
        if patch is None:
            return dict(current)
        patch.setdefault("metadata", {})["resourceVersion"] = o.meta(current).get("resourceVersion")
        try:
            return await client.patch(NODES, name, patch, patch_type="merge")
        except errors.Conflict:
            current = None
        except errors.NotFound:
            return None
    raise NodeKeptChanging(f"node {name} kept changing; giving up this attempt")


def _finalizers(node: Mapping[str, Any], *, add: bool) -> list[str] | None:
    names = list(o.meta(node).get("finalizers") or ())
    if (NODE_FINALIZER in names) == add:
        return None
    return [*names, NODE_FINALIZER] if add else [f for f in names if f != NODE_FINALIZER]


def mark_for_detach(group: str) -> NodeEdit:
    """The finalizer and the origin group, written before the instance is detached."""

    def edit(node: Mapping[str, Any]) -> Obj | None:
        patch: Obj = {"metadata": {}}
        if o.deletion_timestamp(node) is None:
            names = _finalizers(node, add=True)
            if names is not None:
                patch["metadata"]["finalizers"] = names
        if o.annotations_of(node).get(NODE_GROUP_ANNOTATION) != group:
            patch["metadata"]["annotations"] = {NODE_GROUP_ANNOTATION: group}
        return patch if patch["metadata"] else None

    return edit


def both(*edits: NodeEdit) -> NodeEdit:
    """Several edits in one write (each sees the node as read; their patches are merged)."""

    def edit(node: Mapping[str, Any]) -> Obj | None:
        merged: Obj = {}
        for one in edits:
            patch = one(node)
            for section, fields in (patch or {}).items():
                merged.setdefault(section, {})
                for key, value in fields.items():
                    if isinstance(value, dict) and isinstance(merged[section].get(key), dict):
                        merged[section][key] = {**merged[section][key], **value}
                    else:
                        merged[section][key] = value
        return merged or None

    return edit


def _label(key: str, value: str) -> NodeEdit:
    def edit(node: Mapping[str, Any]) -> Obj | None:
        if o.labels(node).get(key) == value:
            return None
        return {"metadata": {"labels": {key: value}}}

    return edit


def select_for(request: str) -> NodeEdit:
    """The selection label: the node is in `request`'s queue."""
    return _label(SELECTED_LABEL, request)


def mark_terminating(request: str) -> NodeEdit:
    """The terminate label: the node is handed to one of `request`'s CycleNodeStatuses."""
    return _label(TERMINATE_LABEL, request)


def cordon(unschedulable: bool = True) -> NodeEdit:
    def edit(node: Mapping[str, Any]) -> Obj | None:
        if bool((node.get("spec") or {}).get("unschedulable")) == unschedulable:
            return None
        return {"spec": {"unschedulable": True if unschedulable else None}}

    return edit


def _taints(node: Mapping[str, Any]) -> list[Obj]:
    return [dict(t) for t in (node.get("spec") or {}).get("taints") or ()]


def set_cycle_taint(request: str, effect: str | None) -> NodeEdit:
    """Put our taint on (effect given) or take it off (None); only our own taint is touched."""

    def edit(node: Mapping[str, Any]) -> Obj | None:
        taints = _taints(node)
        ours = [t for t in taints if t.get("key") == CYCLE_TAINT]
        rest = [t for t in taints if t.get("key") != CYCLE_TAINT]
        if effect is None:
            if not ours:
                return None
            return {"spec": {"taints": rest or None}}
        wanted = {"key": CYCLE_TAINT, "value": request, "effect": effect}
        if ours == [wanted]:
            return None
        return {"spec": {"taints": [*rest, wanted]}}

    return edit


def clear_cycle_marks(request: str | None = None) -> NodeEdit:
    """Put a node back: uncordoned, without our finalizer, annotations, labels and taint.

    With `request`, only marks that request left (its taint, its selection and terminate
    labels) count as its own; the finalizer and the origin group are cycling's, whoever set them.
    """

    def edit(node: Mapping[str, Any]) -> Obj | None:
        patch: Obj = {"metadata": {}, "spec": {}}
        names = _finalizers(node, add=False)
        if names is not None:
            patch["metadata"]["finalizers"] = names or None
        if NODE_GROUP_ANNOTATION in o.annotations_of(node):
            patch["metadata"]["annotations"] = {NODE_GROUP_ANNOTATION: None}
        labels = {
            key: None
            for key in (TERMINATE_LABEL, SELECTED_LABEL)
            if (value := o.labels(node).get(key)) is not None
            and (request is None or value == request)
        }
        if labels:
            patch["metadata"]["labels"] = labels
        if (node.get("spec") or {}).get("unschedulable"):
            patch["spec"]["unschedulable"] = None
        taints = _taints(node)
        kept = [
            t
            for t in taints
            if not (t.get("key") == CYCLE_TAINT and (request is None or t.get("value") == request))
        ]
        if len(kept) != len(taints):
            patch["spec"]["taints"] = kept or None
        patch = {k: v for k, v in patch.items() if v}
        return patch or None

    return edit


def add_scale_down_disabled(request: str) -> NodeEdit:
    """The cluster-autoscaler annotation with our marker; an annotation someone else set is left
    as it is (and never removed by us)."""

    def edit(node: Mapping[str, Any]) -> Obj | None:
        annotations = o.annotations_of(node)
        if SCALE_DOWN_DISABLED in annotations:
            return None
        return {
            "metadata": {"annotations": {SCALE_DOWN_DISABLED: "true", ANNOTATION_MANAGED: request}}
        }

    return edit


def remove_scale_down_disabled(request: str) -> NodeEdit:
    def edit(node: Mapping[str, Any]) -> Obj | None:
        if o.annotations_of(node).get(ANNOTATION_MANAGED) != request:
            return None
        return {"metadata": {"annotations": {SCALE_DOWN_DISABLED: None, ANNOTATION_MANAGED: None}}}

    return edit


def has_marks(node: Mapping[str, Any]) -> bool:
    """Whether cycling left anything on the node."""
    return bool(clear_cycle_marks()(copy.deepcopy(dict(node))))
