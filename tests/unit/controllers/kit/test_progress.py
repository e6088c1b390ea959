"""A node's progress record: the same wire format for every flow, bound to each flow's steps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from enum import StrEnum

import pytest

from nodeops.controllers.kit import NodeProgress, ProgressError

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class Walk(StrEnum):
    OUT = "Out"
    BACK = "Back"


class Swim(StrEnum):
    IN = "In"
    OUT = "Out"


class WalkProgress(NodeProgress[Walk]):
    __slots__ = ()
    steps = Walk
    first = Walk.OUT
    what = "a walk record"


class SwimProgress(NodeProgress[Swim]):
    __slots__ = ()
    steps = Swim
    first = Swim.IN
    what = "a swim record"


def test_begin_records_the_first_step_and_to_moves_only_since() -> None:
    begun = WalkProgress.begin(T0, cordoned=True)
    assert (begun.step, begun.started, begun.since, begun.cordoned) == (Walk.OUT, T0, T0, True)
    later = T0 + timedelta(minutes=3)
    moved = begun.to(Walk.BACK, later)
    assert type(moved) is WalkProgress
    assert (moved.step, moved.started, moved.since, moved.cordoned) == (Walk.BACK, T0, later, True)


def test_round_trip_keeps_the_class_and_every_field() -> None:
    record = SwimProgress(Swim.OUT, T0, T0 + timedelta(seconds=5), cordoned=False)
    again = SwimProgress.from_annotation(record.to_annotation())
    assert again == record
    assert type(again) is SwimProgress


def test_a_record_without_since_counts_the_step_from_the_start() -> None:
    again = WalkProgress.from_annotation('{"step":"Back","started":"2026-01-02T03:04:05Z"}')
    assert again == WalkProgress(Walk.BACK, T0, T0, cordoned=False)


def test_a_step_of_another_flow_is_refused_with_the_flow_named() -> None:
    text = SwimProgress.begin(T0, cordoned=False).to_annotation()  # step "In"
    with pytest.raises(ProgressError, match="not a walk record"):
        WalkProgress.from_annotation(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        '{"step":"Out"}',
        '{"step":"Out","started":"yesterday"}',
        '{"step":"Out","started":"2026-01-02T03:04:05Z","cordoned":"yes"}',
    ],
)
def test_garbage_is_a_progress_error(text: str) -> None:
    with pytest.raises(ProgressError, match="not a swim record"):
        SwimProgress.from_annotation(text)


def test_of_node_reads_the_named_annotation() -> None:
    record = WalkProgress.begin(T0, cordoned=False)
    node = {"metadata": {"annotations": {"example.com/walk": record.to_annotation()}}}
    assert WalkProgress.of_node(node, "example.com/walk") == record
    assert WalkProgress.of_node(node, "example.com/other") is None
    assert WalkProgress.of_node({"metadata": {}}, "example.com/walk") is None
