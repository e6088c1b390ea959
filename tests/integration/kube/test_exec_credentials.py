"""Kubeconfig exec plugins: tokens fetched again when they expire or are refused.

The plugin here is a real program speaking the ExecCredential protocol (a Python script), run
by the client as kubectl would run `aws eks get-token`; the server is the simulated API server
checking tokens over TLS.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeops.common.apierrors import KubeError, Unauthorized
from nodeops.common.exectoken import EARLY_SECONDS, ExecTokenSource
from nodeops.kube.client import Client
from nodeops.kube.resources import NAMESPACES
from nodeops.sim.attach import load_target
from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import NAMESPACES as SIM_NAMESPACES
from nodeops.sim.cluster.apiclient import ApiClient
from nodeops.sim.server.app import SimServer

PLUGIN = """\
import json, os, sys
state, token, stale_runs, expires = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
runs = int(open(state).read()) if os.path.exists(state) else 0
open(state, "w").write(str(runs + 1))
status = {"token": "stale-token" if runs < stale_runs else token}
if expires:
    status["expirationTimestamp"] = expires
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}))
"""


@pytest.fixture
async def server() -> AsyncIterator[SimServer]:
    srv = SimServer(clock=Clock(1.0), auth=True, tls=True)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


def _exec(tmp_path: Path, token: str, *, stale_runs: int = 0, expires: str = "") -> dict[str, Any]:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(PLUGIN, encoding="utf-8")
    return {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": sys.executable,
        "args": [str(plugin), str(tmp_path / "runs"), token, str(stale_runs), expires],
        "interactiveMode": "Never",
    }


def _runs(tmp_path: Path) -> int:
    return int((tmp_path / "runs").read_text())


def _kubeconfig(server: SimServer, tmp_path: Path, exec_config: dict[str, Any]) -> Path:
    config = server.kubeconfig()
    config["users"][0]["user"] = {"exec": exec_config}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


async def test_a_refused_token_is_fetched_again_and_the_request_goes_through(
    server: SimServer, tmp_path: Path
) -> None:
    assert server.admin_token is not None
    # The first two tokens the plugin gives are ones the server refuses: the loader's and the
    # client's first request's.
    path = _kubeconfig(server, tmp_path, _exec(tmp_path, server.admin_token, stale_runs=2))
    client = await Client.from_kubeconfig(str(path))
    try:
        listed = await client.list(NAMESPACES)
    finally:
        await client.close()
    items, _ = listed
    assert {n["metadata"]["name"] for n in items} >= {"default"}
    assert _runs(tmp_path) == 3


async def test_a_token_refused_again_after_a_fresh_one_is_an_error(
    server: SimServer, tmp_path: Path
) -> None:
    path = _kubeconfig(server, tmp_path, _exec(tmp_path, "never-valid"))
    client = await Client.from_kubeconfig(str(path))
    try:
        with pytest.raises(Unauthorized):
            await client.list(NAMESPACES)
    finally:
        await client.close()
    assert _runs(tmp_path) == 3  # the loader's, the first request's, the one retry's


async def test_the_plugin_runs_again_before_the_token_it_gave_expires(tmp_path: Path) -> None:
    expiry = datetime(2030, 1, 1, tzinfo=UTC)
    now = [expiry.timestamp() - 600]
    source = ExecTokenSource(
        _exec(tmp_path, "t", expires=expiry.isoformat().replace("+00:00", "Z")),
        wall=lambda: now[0],
    )
    assert await source() == "t"
    assert await source() == "t"
    assert source.runs == 1
    now[0] = expiry.timestamp() - EARLY_SECONDS - 1
    await source()
    assert source.runs == 1
    now[0] = expiry.timestamp() - EARLY_SECONDS + 1  # inside the margin: fetched again
    await source()
    assert source.runs == 2
    assert _runs(tmp_path) == 2


async def test_a_plugin_that_fails_is_named(tmp_path: Path) -> None:
    source = ExecTokenSource(
        {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": ["-c", "import sys; sys.exit('no credentials for this account')"],
        }
    )
    with pytest.raises(KubeError, match=r"exec plugin .*no credentials for this account"):
        await source()


async def test_the_simulators_loops_attach_with_an_exec_plugin(
    server: SimServer, tmp_path: Path
) -> None:
    """`nodeops sim attach` reads the same kubeconfigs: its clients ask the plugin too."""
    assert server.admin_token is not None
    path = _kubeconfig(server, tmp_path, _exec(tmp_path, server.admin_token, stale_runs=0))
    target = load_target(path)
    assert target.token is None and target.token_source is not None
    client = ApiClient(
        target.server, None, ssl_context=target.ssl_context, token_source=target.token_source
    )
    try:
        listed = await client.list(SIM_NAMESPACES)
    finally:
        await client.close()
    assert any(n["metadata"]["name"] == "default" for n in listed.items)
    assert json.loads((tmp_path / "runs").read_text()) == 1
