"""The node gauges, counted from what the nodes carry: outdated labels and progress records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from nodeops.controllers.kubernikus.keys import keys_for
from nodeops.controllers.kubernikus.metrics import NodeGauges
from nodeops.controllers.kubernikus.progress import Progress, Step
from nodeops.kube.errors import NotSynced

T0 = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)
KEYS = keys_for()


def node(name: str, *, outdated: bool = False, record: str | None = None) -> dict[str, Any]:
    labels = {KEYS.needs_update: "true"} if outdated else {}
    annotations = {KEYS.delete_progress: record} if record is not None else {}
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations}}


def scrape(gauges: NodeGauges) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(gauges)
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
    }


def test_outdated_nodes_replacements_by_step_and_the_oldest() -> None:
    draining = Progress.begin(T0, cordoned=True)
    deleting = Progress.begin(T0 - timedelta(minutes=30), cordoned=True).to(
        Step.WAITING_FOR_SERVER, T0
    )
    nodes = [
        node("a", outdated=True, record=draining.to_annotation()),
        node("b", outdated=True),
        node("c", record=deleting.to_annotation()),
        node("d", record="{not a record"),  # discarded by the controller: not counted
        node("e"),
    ]
    gauges = NodeGauges()
    gauges.watch(lambda: nodes, KEYS, clock=lambda: T0 + timedelta(minutes=5))
    assert scrape(gauges) == {
        ("nodeops_kubernikus_nodes_outdated", ()): 2,
        ("nodeops_kubernikus_replacements_in_progress", (("step", "Draining"),)): 1,
        ("nodeops_kubernikus_replacements_in_progress", (("step", "WaitingForServer"),)): 1,
        ("nodeops_kubernikus_oldest_replacement_seconds", ()): 35 * 60,
    }


def test_no_samples_before_the_informer_synced_or_without_one() -> None:
    gauges = NodeGauges()
    assert scrape(gauges) == {}

    def not_synced() -> list[dict[str, Any]]:
        raise NotSynced("nodes")

    gauges.watch(not_synced, KEYS)
    assert scrape(gauges) == {}
    gauges.watch(lambda: [node("a")], KEYS)
    assert scrape(gauges) == {("nodeops_kubernikus_nodes_outdated", ()): 0}
