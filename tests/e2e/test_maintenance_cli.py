"""`nodeops run --controllers maintenance` and `nodeops maintenance validate|explain`, as users
run them, against `nodeops sim serve`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

from nodeops.kube.client import Client
from nodeops.kube.resources import NODES
from tests.waiting import until

from .conftest import free_port, nodeops, stop

EXAMPLES = Path(__file__).parents[2] / "examples" / "maintenance"
CONFIG = """\
instances:
  check:
  - {type: hasLabel, name: go, config: {key: go}}
  - {type: hasLabel, name: approved, config: {key: approved}}
profiles:
- name: p
  operational:
    transitions: [{check: go, next: maintenance-required}]
  maintenance-required:
    transitions: [{check: approved, next: in-maintenance}]
"""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeops.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_validate(tmp_path: Path) -> None:
    ok = cli("maintenance", "validate", str(EXAMPLES / "kubernikus.yaml"))
    assert ok.returncode == 0, ok.stderr
    assert "profiles: kubelet, flatcar" in ok.stdout
    assert "intervals.notify: legacy key ignored" in ok.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(CONFIG.replace("check: approved", "check: 'approved &&'"))
    out = cli("maintenance", "validate", str(bad))
    assert out.returncode == 1
    assert out.stderr.startswith(f"{bad}:10: profiles[0].maintenance-required.transitions[0].check")


def test_bad_config_stops_startup(tmp_path: Path, sim_cluster: Path) -> None:
    bad = tmp_path / "maintenance.yaml"
    bad.write_text(CONFIG.replace("type: hasLabel, name: go", "type: hasLable, name: go"))
    proc = nodeops(
        "run", "--kubeconfig", str(sim_cluster), "--controllers", "maintenance",
        "--maintenance-config", str(bad), "--metrics-addr", "0", "--health-addr", "0",
    )  # fmt: skip
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert f"{bad}:3: instances.check[0].type: unknown check plugin type 'hasLable'" in out


async def test_run_explain_and_info(tmp_path: Path, sim_cluster: Path) -> None:
    config = tmp_path / "maintenance.yaml"
    config.write_text(CONFIG)
    port = free_port()
    proc = nodeops(
        "run", "--kubeconfig", str(sim_cluster), "--controllers", "maintenance",
        "--maintenance-config", str(config), "--maintenance-api-addr", f"127.0.0.1:{port}",
        "--metrics-addr", "0", "--health-addr", "0",
    )  # fmt: skip
    try:
        async with await Client.from_kubeconfig(str(sim_cluster)) as client:
            await client.patch(
                NODES,
                "node-0",
                {"metadata": {"labels": {"nodeops.dev/maintenance-profile": "p", "go": "1"}}},
            )

            async def required() -> bool:
                node = await client.get(NODES, "node-0")
                state = node["metadata"]["labels"].get("nodeops.dev/maintenance-state")
                return state == "maintenance-required"

            await until(required, timeout=60, what="node-0 maintenance-required")

        def info() -> list[dict[str, object]]:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/info", timeout=5) as r:
                return list(json.load(r))

        async def explained() -> list[dict[str, object]] | None:
            try:
                items = await asyncio.to_thread(info)
            except OSError:
                return None
            found = any(
                i["node"] == "node-0" and i["state"] == "maintenance-required" for i in items
            )
            return items if found else None

        await until(explained, timeout=60, what="node-0 in /api/v1/info")

        text = cli(
            "maintenance", "explain", "node-0", "--config", str(config),
            "--kubeconfig", str(sim_cluster),
        )  # fmt: skip
        assert text.returncode == 0, text.stderr
        assert "profile p: maintenance-required" in text.stdout
        assert "transition 1 -> in-maintenance [approved]: blocked" in text.stdout
        assert "FAIL approved (hasLabel): approved is not set" in text.stdout
        js = cli(
            "maintenance", "explain", "node-0", "--config", str(config),
            "--kubeconfig", str(sim_cluster), "-o", "json",
        )  # fmt: skip
        parsed = json.loads(js.stdout)
        assert parsed["profiles"][0]["applied"]["transitions"][0]["passed"] is False
        assert "blockedByProfileNote" not in parsed  # one profile: nothing else can block it
    finally:
        assert stop(proc) == 0, proc.stdout.read() if proc.stdout else ""
