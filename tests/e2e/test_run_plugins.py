"""A controller plugin installed beside nodeops runs under `nodeops run --controllers`."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests import toyctl

from .conftest import nodeops, stop
from .test_leader_handover import _api

CONFIGMAP = "/api/v1/namespaces/default/configmaps/toy"


def test_plugin_runs_with_its_settings(sim_cluster: Path, tmp_path: Path) -> None:
    paths = toyctl.install(tmp_path / "site")
    env = dict(os.environ, NODEOPS_TOY_NAMES="a,b", NODEOPS_TOY_GREETING="from-env")
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    proc = nodeops(
        "run",
        "--kubeconfig",
        str(sim_cluster),
        "--namespace",
        "default",
        "--controllers",
        "toy",
        "--toy-greeting",
        "hi",
        "--toy-loud",
        "--toy-replicas",
        "2",
        "--provider",
        "sim",
        "--metrics-addr",
        "0",
        "--health-addr",
        "0",
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            code, cm = _api(sim_cluster, CONFIGMAP)
            if code == 200:
                break
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "the plugin never wrote its ConfigMap"
            time.sleep(0.1)
        assert cm["data"] == {
            "greeting": "HI",  # the flag beat the environment
            "replicas": "2",
            "names": "a,b",
            "provider": "sim",
        }
    finally:
        assert stop(proc) == 0


def test_plugin_refusing_its_configuration_stops_startup(sim_cluster: Path, tmp_path: Path) -> None:
    paths = toyctl.install(tmp_path / "site")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]))
    proc = nodeops(
        "run",
        "--kubeconfig",
        str(sim_cluster),
        "--controllers",
        "toy",
        "--toy-refuse",
        "--metrics-addr",
        "0",
        "--health-addr",
        "0",
        env=env,
    )
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert out.strip().splitlines()[-1] == "nodeops run: toy: told to refuse (--toy-refuse)"
