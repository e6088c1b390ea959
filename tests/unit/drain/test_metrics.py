"""The drains-in-progress gauges: what a scrape shows while a drain runs, and that nothing is
left once it is over (completed, stopped, or abandoned without a word). Clocks are injected."""

from __future__ import annotations

import contextvars
from datetime import UTC, datetime, timedelta

import structlog
from prometheus_client import CollectorRegistry

from nodeops.drain.metrics import DEFAULT_CONTROLLER, DrainsInProgress, controller_in_context

T0 = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)


class Clocks:
    def __init__(self) -> None:
        self.wall = T0
        self.mono = 1000.0

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.mono += seconds


def scrape(drains: DrainsInProgress) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(drains)
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
    }


def make() -> tuple[DrainsInProgress, Clocks]:
    clocks = Clocks()
    drains = DrainsInProgress(
        clock=lambda: clocks.wall, monotonic=lambda: clocks.mono, stale_after=600
    )
    return drains, clocks


def test_waiting_pods_per_node_and_the_oldest_drain_per_controller() -> None:
    drains, clocks = make()
    drains.passed("kubernikus", "node-a", T0, 2)
    clocks.advance(300)
    drains.passed("kubernikus", "node-b", T0 + timedelta(seconds=200), 0)
    drains.passed("maintenance", "node-c", T0 + timedelta(seconds=290), 1)
    assert scrape(drains) == {
        ("nodeops_drain_pods_waiting_on_budget", (("controller", "kubernikus"), ("node", "node-a"))): 2,
        ("nodeops_drain_pods_waiting_on_budget", (("controller", "kubernikus"), ("node", "node-b"))): 0,
        ("nodeops_drain_pods_waiting_on_budget", (("controller", "maintenance"), ("node", "node-c"))): 1,
        ("nodeops_drain_in_progress", (("controller", "kubernikus"),)): 2,
        ("nodeops_drain_in_progress", (("controller", "maintenance"),)): 1,
        ("nodeops_drain_oldest_in_progress_seconds", (("controller", "kubernikus"),)): 300,
        ("nodeops_drain_oldest_in_progress_seconds", (("controller", "maintenance"),)): 10,
    }  # fmt: skip


def test_a_completed_or_stopped_drain_leaves_no_series() -> None:
    drains, clocks = make()
    drains.passed("detacher", "node-a", T0, 3)
    drains.passed("detacher", "node-b", T0, 0)
    drains.finished("detacher", "node-a")
    clocks.advance(60)
    assert scrape(drains) == {
        ("nodeops_drain_pods_waiting_on_budget", (("controller", "detacher"), ("node", "node-b"))): 0,
        ("nodeops_drain_in_progress", (("controller", "detacher"),)): 1,
        ("nodeops_drain_oldest_in_progress_seconds", (("controller", "detacher"),)): 60,
    }  # fmt: skip
    drains.finished("detacher", "node-b")
    drains.finished("detacher", "node-b")  # twice is harmless: a pass after completion
    assert scrape(drains) == {}


def test_a_drain_nobody_steps_any_more_goes_stale() -> None:
    drains, clocks = make()
    drains.passed("cyclenodestatus", "node-a", T0, 1)
    clocks.advance(590)
    drains.passed("cyclenodestatus", "node-b", T0 + timedelta(seconds=590), 0)
    clocks.advance(20)  # node-a's last pass was 610 s ago, node-b's 20 s ago
    assert scrape(drains) == {
        ("nodeops_drain_pods_waiting_on_budget", (("controller", "cyclenodestatus"), ("node", "node-b"))): 0,
        ("nodeops_drain_in_progress", (("controller", "cyclenodestatus"),)): 1,
        ("nodeops_drain_oldest_in_progress_seconds", (("controller", "cyclenodestatus"),)): 20,
    }  # fmt: skip


def test_a_pass_that_could_not_tell_keeps_the_last_count() -> None:
    drains, _ = make()
    drains.passed("maintenance", "node-a", T0, None)
    drains.passed("maintenance", "node-b", T0, 2)
    drains.passed("maintenance", "node-b", T0, None)
    waiting = {
        dict(labels)["node"]: value
        for (name, labels), value in scrape(drains).items()
        if name == "nodeops_drain_pods_waiting_on_budget"
    }
    assert waiting == {"node-a": 0, "node-b": 2}


def test_an_unnamed_drainer_is_labelled_with_the_reconciling_controller() -> None:
    def check() -> None:
        structlog.contextvars.clear_contextvars()
        assert controller_in_context() == DEFAULT_CONTROLLER
        # What the manager binds around each reconcile.
        with structlog.contextvars.bound_contextvars(controller="cyclenodestatus"):
            assert controller_in_context() == "cyclenodestatus"
        assert controller_in_context() == DEFAULT_CONTROLLER

    contextvars.copy_context().run(check)


def test_families_are_described_without_samples() -> None:
    drains, _ = make()
    described = {f.name: f.samples for f in drains.describe()}
    assert described == {
        "nodeops_drain_pods_waiting_on_budget": [],
        "nodeops_drain_in_progress": [],
        "nodeops_drain_oldest_in_progress_seconds": [],
    }
