"""End-to-end fixtures: `nodeops` processes started the way users start them."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def nodeops(*args: str, env: dict[str, str] | None = None, **kw: object) -> subprocess.Popen[str]:
    env = dict(env if env is not None else os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "nodeops.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        **kw,  # type: ignore[arg-type]
    )


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM, timeout: float = 15) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode


@pytest.fixture
def sim_cluster(tmp_path: Path) -> Iterator[Path]:
    """A `nodeops sim serve` process; yields its kubeconfig path."""
    with simulated_cluster(tmp_path) as kubeconfig:
        yield kubeconfig


@contextlib.contextmanager
def simulated_cluster(tmp_path: Path) -> Iterator[Path]:
    """`sim_cluster` for fixtures of a wider scope."""
    kubeconfig = tmp_path / "sim.kubeconfig"
    proc = nodeops("sim", "serve", "--nodes", "2", "--instant", "--kubeconfig-out", str(kubeconfig))
    deadline = time.monotonic() + 60
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "serving at" in line:
            break
        if proc.poll() is not None:
            raise AssertionError(f"sim serve exited: {proc.stdout.read()}")
    else:
        raise AssertionError("sim serve did not start")
    try:
        yield kubeconfig
    finally:
        stop(proc)
