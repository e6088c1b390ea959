"""The progress lines of a roll (`nodeops demo`, `nodeops cycle --watch`) shorten a long reason
between words, never in the middle of one."""

from __future__ import annotations

from nodeops.controllers.cycling.progress import roll_state

REASON = (
    "ip-10-13-20-70.eu-west-1.compute.internal (DrainingPods): Pods "
    + ", ".join(f"shop/web-7fc6bd9bdc-pod{i:02d}" for i in range(12))
    + ": waiting for PodDisruptionBudget shop/web to allow a disruption"
)


def test_a_long_reason_is_cut_between_words() -> None:
    request = {"status": {"phase": "WaitingTermination", "message": REASON}}
    state = roll_state(request, [], pods_moved=0)
    assert len(REASON) > 250
    assert len(state.message) <= 200
    assert state.message.endswith(" ...")
    kept = state.message.removesuffix(" ...").split()
    assert kept == REASON.split()[: len(kept)]  # whole words, in order
    line = state.line().splitlines()[-1]
    assert line.strip() == state.message


def test_a_short_reason_is_kept_whole() -> None:
    request = {"status": {"phase": "Failed", "message": "node-1: drain timed out"}}
    assert roll_state(request, [], pods_moved=0).message == "node-1: drain timed out"
