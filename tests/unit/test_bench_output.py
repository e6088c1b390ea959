"""A benchmark's stdout is its result alone: the operator's logs go to stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import bench
import structlog
from nodeops.kube.informer import Informer  # any module of the operator that logs
structlog.get_logger("nodeops.kube.informer").debug("a debug line")
structlog.get_logger("nodeops.kube.informer").warning("list/watch failed, retrying")
print('{"benchmark": "x"}')
"""


def test_logs_never_reach_a_benchmarks_stdout() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == '{"benchmark": "x"}\n'
    assert "list/watch failed, retrying" in done.stderr
    assert "a debug line" not in done.stderr + done.stdout
