"""The report as a person reads it on a terminal: failures first, then a table per finding."""

from __future__ import annotations

import io

import pytest

from nodeops.rehearse.command import INTERRUPTED, exit_status
from nodeops.rehearse.report import Blocked, Held, Preempted, Report, RequestOutcome, Stopped


def report(**changes: object) -> Report:
    base: dict[str, object] = {
        "predicted_seconds": 1500.0,
        "requests": [RequestOutcome("workers-x", "workers", "Successful", "", 1500.0)],
        "batches": [],
        "budgets": [],
        "capacity": [],
        "workloads": [],
        "pending": [],
        "api_calls": {},
        "cloud_calls": {},
        "failures": [],
        "inputs": {},
    }
    base.update(changes)
    return Report(**base)  # type: ignore[arg-type]


def table(r: Report) -> str:
    out = io.StringIO()
    r.write_table(out)
    return out.getvalue()


def test_capacity_holds_have_a_table_of_their_own() -> None:
    why = (
        "waiting for capacity: 1 of 8 pods do not fit on the ready nodes (first: shop/solo-1: "
        "node(s) didn't match pod anti-affinity rules)"
    )
    text = table(report(capacity=[Held("workers-x", "workers", 150.0, 90.0, 2, why)]))
    section = text.split("Batches the capacity check held\n", 1)[1].split("\n\n", 1)[0]
    header, row = section.splitlines()
    assert header.split() == ["NODEGROUP", "HELD", "LONGEST", "HOLDS", "REASON"]
    assert row.split()[:4] == ["workers", "2m30s", "1m30s", "2"]
    assert row.endswith("didn't match pod anti-affinity rules)")


def test_no_hold_says_none() -> None:
    text = table(report(budgets=[Blocked("shop/web", 30.0, 30.0, 1)]))
    assert "Batches the capacity check held\n  none\n" in text
    assert report().as_dict()["capacity"] == []


def test_pods_the_scheduler_preempted_are_listed_per_workload() -> None:
    text = table(report(preempted=[Preempted("Deployment/default/headroom", 6)]))
    section = text.split("Pods the scheduler preempted for the roll's\n", 1)[1]
    header, row = section.split("\n\n", 1)[0].splitlines()
    assert (header.split(), row.split()) == (
        ["WORKLOAD", "PODS"],
        ["Deployment/default/headroom", "6"],
    )
    assert "Pods the scheduler preempted for the roll's\n  none\n" in table(report())
    assert report().as_dict()["preempted"] == []


def test_a_stopped_rehearsal_says_so_first_and_is_no_verdict() -> None:
    cut = report(
        predicted_seconds=None,
        requests=[RequestOutcome("workers-x", "workers", "Draining", "", None)],
        stopped=Stopped("time limit of 10m00s", 40, 200, 464.0),
    )
    lines = table(cut).splitlines()
    assert lines[0] == (
        "Rehearsal stopped (time limit of 10m00s) after 7m44s of the roll, 40 of 200 nodes "
        "replaced: what follows is the roll so far; the rest was not rehearsed"
    )
    assert lines[1] == "Predicted duration: more than 7m44s"
    document = cut.as_dict()
    assert document["ok"] is False
    assert document["stopped"] == {
        "why": "time limit of 10m00s",
        "nodes_replaced": 40,
        "nodes_selected": 200,
        "simulated_seconds": 464.0,
    }
    assert report().as_dict()["stopped"] is None
    assert not table(report()).startswith("Rehearsal stopped")


@pytest.mark.parametrize(
    ("stopped", "failures", "status"),
    [
        (None, [], 0),
        (None, ["the request for NodeGroup workers would fail: x"], 1),
        ("time limit of 1m00s", [], 3),
        ("time limit of 1m00s", ["2 pods would be left Pending (a, b): no fit"], 1),
        (INTERRUPTED, [], 130),
        (INTERRUPTED, ["2 pods would be left Pending (a, b): no fit"], 130),
    ],
)
def test_exit_status(stopped: str | None, failures: list[str], status: int) -> None:
    cut = Stopped(stopped, 1, 2, 60.0) if stopped is not None else None
    assert exit_status(report(failures=failures, stopped=cut)) == status
