"""The library example in docs/library.md runs against the simulator and does its job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .test_leader_handover import _api

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "library_reconciler.py"


def test_library_example_labels_nodes(sim_cluster: Path) -> None:
    for i in range(2):
        for j in range(3):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"p{i}{j}", "namespace": "default"},
                "spec": {"nodeName": f"node-{i}", "containers": [{"name": "c", "image": "x:1"}]},
            }
            _post(sim_cluster, "/api/v1/namespaces/default/pods", pod)
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--kubeconfig", str(sim_cluster), "--seconds", "3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    for i in range(2):
        _, node = _api(sim_cluster, f"/api/v1/nodes/node-{i}")
        labels = node["metadata"]["labels"]  # type: ignore[index]
        assert labels["example.nodeops.dev/pods"] == "3"


def _post(kubeconfig: Path, path: str, body: dict) -> None:  # type: ignore[type-arg]
    import urllib.request

    import orjson
    import yaml

    cfg = yaml.safe_load(kubeconfig.read_text())
    server = cfg["clusters"][0]["cluster"]["server"]
    req = urllib.request.Request(
        server + path, data=orjson.dumps(body), headers={"Content-Type": "application/json"}
    )
    token = cfg["users"][0]["user"].get("token")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 201
