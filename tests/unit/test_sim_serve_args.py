"""`nodeops sim serve` refuses counts and time scales that would serve an empty or frozen
cluster, naming the flag."""

from __future__ import annotations

import pytest

from nodeops.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nodes", "-2"], "argument --nodes: must be 0 or more, got -2"),
        (["--pods-per-node", "-1"], "argument --pods-per-node: must be 0 or more, got -1"),
        (["--node-groups", "-1"], "argument --node-groups: must be 0 or more, got -1"),
        (["--nodes", "two"], "argument --nodes: not a whole number: 'two'"),
        (["--time-scale", "0"], "argument --time-scale: must be a number above 0, got 0"),
        (["--time-scale", "-5"], "argument --time-scale: must be a number above 0, got -5"),
    ],
)
def test_bad_sizes_are_refused_before_serving(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["sim", "serve", *argv])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"nodeops sim serve: error: {message}"
