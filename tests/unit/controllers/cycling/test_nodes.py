"""Node edits as merge patches: nothing sent when nothing changes, only our own marks touched."""

from __future__ import annotations

from typing import Any

from nodeops.controllers.cycling.keys import (
    ANNOTATION_MANAGED,
    CYCLE_TAINT,
    NODE_FINALIZER,
    NODE_GROUP_ANNOTATION,
    SCALE_DOWN_DISABLED,
    TERMINATE_LABEL,
)
from nodeops.controllers.cycling.nodes import (
    add_scale_down_disabled,
    clear_cycle_marks,
    cordon,
    mark_for_detach,
    remove_scale_down_disabled,
    set_cycle_taint,
)
from nodeops.controllers.cycling.status import merge_patch


def node(**meta: Any) -> dict[str, Any]:
    spec = meta.pop("spec", {})
    return {"metadata": {"name": "n", **meta}, "spec": spec}


def test_mark_for_detach_is_idempotent() -> None:
    patch = mark_for_detach("g")(node(finalizers=["other"]))
    assert patch == {
        "metadata": {
            "finalizers": ["other", NODE_FINALIZER],
            "annotations": {NODE_GROUP_ANNOTATION: "g"},
        }
    }
    marked = node(finalizers=["other", NODE_FINALIZER], annotations={NODE_GROUP_ANNOTATION: "g"})
    assert mark_for_detach("g")(marked) is None


def test_taint_only_touches_ours() -> None:
    theirs = {"key": "x", "effect": "NoSchedule"}
    patch = set_cycle_taint("r", "PreferNoSchedule")(node(spec={"taints": [theirs]}))
    assert patch == {
        "spec": {
            "taints": [theirs, {"key": CYCLE_TAINT, "value": "r", "effect": "PreferNoSchedule"}]
        }
    }
    tainted = node(spec={"taints": patch["spec"]["taints"]})
    assert set_cycle_taint("r", "PreferNoSchedule")(tainted) is None
    assert set_cycle_taint("r", None)(tainted) == {"spec": {"taints": [theirs]}}


def test_clear_marks_leaves_other_requests_and_finalizers() -> None:
    n = node(
        finalizers=["other", NODE_FINALIZER],
        annotations={NODE_GROUP_ANNOTATION: "g", "keep": "1"},
        labels={TERMINATE_LABEL: "r"},
        spec={
            "unschedulable": True,
            "taints": [{"key": CYCLE_TAINT, "value": "r2", "effect": "NoSchedule"}],
        },
    )
    patch = clear_cycle_marks("r")(n)
    assert patch == {
        "metadata": {
            "finalizers": ["other"],
            "annotations": {NODE_GROUP_ANNOTATION: None},
            "labels": {TERMINATE_LABEL: None},
        },
        "spec": {"unschedulable": None},
    }
    assert clear_cycle_marks()(node()) is None


def test_cordon() -> None:
    assert cordon()(node()) == {"spec": {"unschedulable": True}}
    assert cordon()(node(spec={"unschedulable": True})) is None
    assert cordon(False)(node(spec={"unschedulable": True})) == {"spec": {"unschedulable": None}}


def test_scale_down_annotation_is_removed_only_when_ours() -> None:
    assert add_scale_down_disabled("r")(node()) == {
        "metadata": {"annotations": {SCALE_DOWN_DISABLED: "true", ANNOTATION_MANAGED: "r"}}
    }
    someone_elses = node(annotations={SCALE_DOWN_DISABLED: "true"})
    assert add_scale_down_disabled("r")(someone_elses) is None
    assert remove_scale_down_disabled("r")(someone_elses) is None
    ours = node(annotations={SCALE_DOWN_DISABLED: "true", ANNOTATION_MANAGED: "r"})
    assert remove_scale_down_disabled("other")(ours) is None
    assert remove_scale_down_disabled("r")(ours) == {
        "metadata": {"annotations": {SCALE_DOWN_DISABLED: None, ANNOTATION_MANAGED: None}}
    }


def test_merge_patch() -> None:
    old = {"a": 1, "b": {"x": 1, "y": 2}, "c": [1], "gone": 1}
    new = {"a": 1, "b": {"x": 1, "y": 3, "z": 4}, "c": [1, 2]}
    assert merge_patch(old, new) == {"gone": None, "b": {"y": 3, "z": 4}, "c": [1, 2]}
    assert merge_patch(old, old) == {}
