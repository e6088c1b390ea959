"""`nodeops demo --json`, as a user runs it: the roll succeeds and the summary says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_the_demo_rolls_every_node_and_reports_json() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nodeops.cli",
            "demo",
            "--json",
            "--nodes",
            "6",
            "--time-scale",
            "40",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in (
        "nodes_before",
        "nodes_cycled",
        "nodes_lost",
        "pdb_violations",
        "min_ready_replicas_ratio",
        "pod_moves_per_pod",
        "phase",
        "simulated_seconds",
        "wall_seconds",
        "api_requests",
    ):
        assert key in summary, key
    assert summary["phase"] == "Successful"
    assert summary["nodes_before"] == summary["nodes_cycled"] == 6
    assert summary["nodes_lost"] == 0
    assert summary["pdb_violations"] == 0
    assert summary["requests_failed"] == 0
    assert 0 < summary["min_ready_replicas_ratio"] <= 1
    assert summary["pod_moves_per_pod"] >= 1
    assert summary["api_requests"] > 0
    # The progress went to stderr, a line per change.
    assert "Successful" in proc.stderr


def test_bad_arguments_are_refused_before_starting() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nodeops.cli", "demo", "--faults", "error=999"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--faults" in proc.stderr
