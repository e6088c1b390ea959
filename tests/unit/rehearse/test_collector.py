"""The garbage collector is held back while a rehearsal's copy rolls, and let go after."""

from __future__ import annotations

import gc

import pytest

from nodeops.rehearse.rehearsal import YOUNG_COLLECTION_EVERY, quiet_collector


def test_collector_is_quiet_during_the_roll_and_restored_after() -> None:
    before = gc.get_threshold()
    settled = [{"cached": i} for i in range(1000)]  # what the copy holds once it has settled
    with quiet_collector():
        assert gc.get_threshold() == (YOUNG_COLLECTION_EVERY, before[1], before[2])
        assert gc.get_freeze_count() >= len(settled)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_collector_is_restored_when_the_roll_fails() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), quiet_collector():
        raise RuntimeError("the roll broke")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
