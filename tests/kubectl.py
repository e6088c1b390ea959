"""The real kubectl, run against a simulated cluster's kubeconfig."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path


async def kubectl(config: Path, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    """Exit code, stdout and stderr, from a test's event loop."""
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        str(config),
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(
        proc.communicate(stdin.encode() if stdin is not None else None), timeout=60
    )
    return proc.returncode or 0, out.decode(), err.decode()


def kubectl_ok(config: Path, *args: str, stdin: str | None = None) -> str:
    """stdout of a kubectl command that must succeed (its stderr is the failure's message)."""
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(config), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
