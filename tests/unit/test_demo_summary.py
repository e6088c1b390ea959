"""`nodeops demo` succeeds only when the roll lost nothing: no capacity, request or budget."""

from __future__ import annotations

from typing import Any

import pytest

from nodeops.demo.command import _nothing_lost

CLEAN: dict[str, Any] = {
    "phase": "Successful",
    "nodes_lost": 0,
    "requests_failed": 0,
    "pdb_violations": 0,
}


def test_a_clean_roll() -> None:
    assert _nothing_lost(CLEAN)


@pytest.mark.parametrize(
    "change",
    [{"phase": "Failed"}, {"nodes_lost": 1}, {"requests_failed": 3}, {"pdb_violations": 1}],
)
def test_anything_lost_fails_it(change: dict[str, Any]) -> None:
    assert not _nothing_lost({**CLEAN, **change})


@pytest.mark.parametrize("live", [True, False])
def test_the_introduction_describes_what_this_output_shows(live: bool) -> None:
    """A terminal shows one view redrawn in place; a file or pipe a line per change."""
    import argparse

    from nodeops.demo.command import _introduction
    from nodeops.demo.scenario import demo_scenario, group_names

    args = argparse.Namespace(concurrency=3, method="Drain", time_scale=30.0)
    text = _introduction(demo_scenario(4, groups=1), group_names(1), 12, args, live=live)
    assert ("line" in text.lower()) is not live
    assert ("updated in place" in text) is live
