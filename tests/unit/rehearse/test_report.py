"""The report as a person reads it on a terminal: failures first, then a table per finding."""

from __future__ import annotations

import io

from nodeops.rehearse.report import Blocked, Held, Report, RequestOutcome


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
