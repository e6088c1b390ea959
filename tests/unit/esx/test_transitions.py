"""The maintenance flow's decisions, every step against every fact that matters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nodeops.controllers.esx.transitions import (
    Action,
    Facts,
    Progress,
    ProgressError,
    Step,
    next_action,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def facts(**changes: bool) -> Facts:
    base = {
        "host_in_maintenance": True,
        "all_reboot_ok": True,
        "vm_on": True,
        "node_ready": False,
        "shutdown_overdue": False,
    }
    return Facts(**{**base, **changes})


def at(step: Step) -> Progress:
    return Progress(step, T0, T0, cordoned=True)


@pytest.mark.parametrize(
    ("in_maintenance", "all_ok", "expected"),
    [(True, True, Action.START), (True, False, Action.NONE), (False, True, Action.NONE)],
)
def test_a_flow_starts_only_in_maintenance_with_every_node_reboot_ok(
    in_maintenance: bool, all_ok: bool, expected: Action
) -> None:
    assert (
        next_action(facts(host_in_maintenance=in_maintenance, all_reboot_ok=all_ok), None)
        == expected
    )


def test_draining_continues_in_maintenance_and_is_cancelled_when_the_host_leaves() -> None:
    assert next_action(facts(), at(Step.DRAINING)) is Action.DRAIN
    assert next_action(facts(host_in_maintenance=False), at(Step.DRAINING)) is Action.CANCEL
    # reboot-ok withdrawn mid-drain does not matter: the host decides
    assert next_action(facts(all_reboot_ok=False), at(Step.DRAINING)) is Action.DRAIN


def test_the_guest_gets_its_timeout_then_the_vm_is_powered_off() -> None:
    assert next_action(facts(), at(Step.SHUTTING_DOWN)) is Action.WAIT_FOR_SHUTDOWN
    assert next_action(facts(shutdown_overdue=True), at(Step.SHUTTING_DOWN)) is Action.POWER_OFF
    assert next_action(facts(vm_on=False), at(Step.SHUTTING_DOWN)) is Action.RECORD_OFF
    assert next_action(facts(), at(Step.POWERING_OFF)) is Action.POWER_OFF
    assert next_action(facts(vm_on=False), at(Step.POWERING_OFF)) is Action.RECORD_OFF


def test_off_until_the_host_leaves_then_on_ready_and_finished() -> None:
    assert next_action(facts(vm_on=False), at(Step.OFF)) is Action.STAY_OFF
    left = {"host_in_maintenance": False}
    assert next_action(facts(vm_on=False, **left), at(Step.OFF)) is Action.POWER_ON
    assert next_action(facts(vm_on=False, **left), at(Step.POWERING_ON)) is Action.POWER_ON
    assert next_action(facts(**left), at(Step.POWERING_ON)) is Action.WAIT_FOR_READY
    assert next_action(facts(node_ready=True, **left), at(Step.POWERING_ON)) is Action.FINISH


def test_a_vm_found_on_after_a_crash_is_not_powered_on_again() -> None:
    # Recorded PoweringOn, the power-on went through, then the crash: the VM is on.
    assert (
        next_action(facts(host_in_maintenance=False), at(Step.POWERING_ON)) is not Action.POWER_ON
    )


def test_progress_round_trips_and_garbage_is_refused() -> None:
    progress = Progress(Step.OFF, T0, T0 + timedelta(seconds=5), cordoned=False)
    assert Progress.from_annotation(progress.to_annotation()) == progress
    assert progress.to(Step.POWERING_ON, T0 + timedelta(minutes=1)).since == T0 + timedelta(
        minutes=1
    )
    for text in ("", "{}", '{"step":"Nope","started":"2026-01-01T00:00:00Z"}', "[1]"):
        with pytest.raises(ProgressError):
            Progress.from_annotation(text)
