"""`nodeops maintenance explain` is a one-shot command: a bad kubeconfig is one line, exit 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeops.cli import main

CONFIG = "profiles: []\n"


def test_a_missing_kubeconfig_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "maintenance.yaml"
    config.write_text(CONFIG)
    missing = tmp_path / "missing"
    argv = ["maintenance", "explain", "node-0", "--config", str(config)]
    assert main([*argv, "--kubeconfig", str(missing)]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"error: stat {missing}: no such file or directory\n"
    assert captured.out == ""
