"""The scenarios of `tests/e2e/external`, which judge nodeops on a real control plane, run in
CI against a bare simulated API server standing in for a bare kube-apiserver: no scheduler and
no controllers of its own (the attach brings them all, `NODEOPS_E2E_SIM_CONTROLLERS=all`), and,
as kube-apiserver's RBAC authorizer would, refusing every request its roles do not allow. So a
scenario that could not pass on an external cluster fails here first, and none is skipped.

The demo's roll (`test_demo_roll.py`) is left out: `test_sim_attach.py` runs the same
`nodeops demo --kubeconfig` on the same kind of server.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from nodeops.sim.clock import Clock
from nodeops.sim.server.app import SimServer
from tests.repo import ROOT

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")

# Run on this server by `test_sim_attach.py` already; a third of the time budget here.
DEMO = "tests/e2e/external/test_demo_roll.py::test_the_demo_rolls_the_cluster_and_leaves_nothing_behind"


async def test_the_external_scenarios_pass_on_a_bare_api_server(tmp_path: Path) -> None:
    server = SimServer(clock=Clock(1.0), rbac=True, tls=True)
    await server.start()
    try:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        env = dict(
            os.environ,
            NODEOPS_E2E_KUBECONFIG=str(kubeconfig),
            NODEOPS_E2E_SIM_CONTROLLERS="all",
            NODEOPS_E2E_TIME_SCALE="20",
            KUBECACHEDIR=str(tmp_path / "kube-cache"),
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "pytest", "tests/e2e/external", "--deselect", DEMO,
            "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:randomly",
            cwd=str(ROOT), env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(proc.communicate(), 600)
        text = out.decode()
        assert proc.returncode == 0, text[-6000:]
        summary = text.strip().splitlines()[-1]
        assert "skipped" not in summary and "1 deselected" in summary, summary
        passed = re.search(r"(\d+) passed", summary)
        assert passed is not None and int(passed.group(1)) >= 11, summary
    finally:
        await server.stop()
