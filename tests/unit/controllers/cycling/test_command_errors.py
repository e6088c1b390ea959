"""`nodeops cycle` is a one-shot command: a kubeconfig problem is one line and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeops.cli import main


def test_a_missing_kubeconfig_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing"
    assert main(["cycle", "--all", "--kubeconfig", str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: stat {missing}: no such file or directory\n"
    assert captured.out == ""


def test_a_malformed_kubeconfig_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "config"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    assert main(["cycle", "--all", "--kubeconfig", str(broken)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    assert captured.out == ""


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--json", None),
        ("--boot-seconds", "90"),
        ("--provider", "aws"),
        ("--horizon", "2h"),
        ("--time-limit", "10m"),
    ],
)
def test_a_rehearsal_option_without_rehearse_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str | None
) -> None:
    """`--json` alone would not print a report: it would create the requests. Refused before
    the kubeconfig is even read (this one does not exist)."""
    argv = ["cycle", "--all", "--kubeconfig", str(tmp_path / "missing"), option]
    assert main(argv if value is None else [*argv, value]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {option}: only with --rehearse\n"
    assert captured.out == ""
