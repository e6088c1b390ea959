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
