"""The library example in docs/library.md runs against the simulator and does its job."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .conftest import free_port, stop
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


GREETER = Path(__file__).resolve().parents[2] / "examples" / "greeting_controller.py"
GREETINGS = "/apis/example.nodeops.dev/v1/namespaces/default/greetings"
FINALIZER = "example.nodeops.dev/published"


def _request(kubeconfig: Path, method: str, path: str, body: object = None, ctype: str = "") -> int:
    import urllib.error
    import urllib.request

    import orjson
    import yaml

    cfg = yaml.safe_load(kubeconfig.read_text())
    server = cfg["clusters"][0]["cluster"]["server"]
    data = orjson.dumps(body) if body is not None else None
    req = urllib.request.Request(server + path, data=data, method=method)
    req.add_header("Content-Type", ctype or "application/json")
    token = cfg["users"][0]["user"].get("token")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def _eventually(check: Callable[[], object], what: str, timeout: float = 60) -> object:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def _board(port: int) -> dict[str, str]:
    import urllib.request

    import orjson

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/greetings", timeout=5) as resp:
            return dict(orjson.loads(resp.read()))
    except OSError:
        return {}


def test_greeting_controller_finalizer_child_status_and_runnable(sim_cluster: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(GREETER),
            "--kubeconfig",
            str(sim_cluster),
            "--install-crd",
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _eventually(
            lambda: _api(sim_cluster, GREETINGS)[0] == 200 or proc.poll() is not None,
            "the CRD to be served",
        )
        greeting = {
            "apiVersion": "example.nodeops.dev/v1",
            "kind": "Greeting",
            "metadata": {"name": "hello", "namespace": "default"},
            "spec": {"message": "hello, world"},
        }
        assert _request(sim_cluster, "POST", GREETINGS, greeting) == 201

        def published() -> dict[str, object] | None:
            code, obj = _api(sim_cluster, f"{GREETINGS}/hello")
            status = obj.get("status") or {}
            return obj if code == 200 and status.get("phase") == "Published" else None

        obj = _eventually(published, "the Greeting's status")
        assert isinstance(obj, dict)
        assert obj["metadata"]["finalizers"] == [FINALIZER]
        assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
        code, child = _api(sim_cluster, "/api/v1/namespaces/default/configmaps/hello-greeting")
        assert code == 200 and child["data"] == {"message": "hello, world"}
        owner = child["metadata"]["ownerReferences"][0]  # type: ignore[index]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("Greeting", "hello", True)
        assert _eventually(lambda: _board(port).get("default/hello") == "hello, world", "board")

        # A new message: child, board and status follow.
        patch = {"spec": {"message": "hi again"}}
        assert (
            _request(
                sim_cluster, "PATCH", f"{GREETINGS}/hello", patch, "application/merge-patch+json"
            )
            == 200
        )
        _eventually(lambda: _board(port).get("default/hello") == "hi again", "the new message")
        _eventually(
            lambda: (published() or {}).get("status", {}).get("observedGeneration") == 2,
            "status of the new generation",
        )

        # Deleting it: the finalizer holds it until the message is withdrawn, then it goes.
        assert _request(sim_cluster, "DELETE", f"{GREETINGS}/hello") == 200
        _eventually(lambda: _api(sim_cluster, f"{GREETINGS}/hello")[0] == 404, "deletion")
        assert "default/hello" not in _board(port)
    finally:
        assert stop(proc) == 0, proc.stdout.read() if proc.stdout else ""
