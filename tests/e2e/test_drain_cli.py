"""`nodeops drain|cordon|uncordon` as processes against `nodeops sim serve`, read like kubectl.

Scripts written around `kubectl drain` parse its lines and its exit code; these tests hold
`nodeops drain` to the same lines (`node/X cordoned`, `evicting pod ns/p`, `pod/p evicted`,
`node/X drained`), the same pre-flight refusal text and exit code, and check that the order
NodeDrainRules give shows in the order of the `evicting pod` lines.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from nodeops.drain import command

from .conftest import nodeops

NS = "default"
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="needs the kubectl binary")

UNMANAGED = (
    "cannot delete cannot delete Pods that declare no controller (use --force to override): "
    "default/bare"
)
PREFLIGHT_STDERR = (
    f'error: unable to drain node "node-0" due to error: {UNMANAGED}, continuing command...\n'
    "There are pending nodes to be drained:\n"
    " node-0\n"
    f"{UNMANAGED}\n"
)


# --------------------------------------------------------------------------- helpers


def run(kubeconfig: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`nodeops ARGS --kubeconfig K`, stdout and stderr kept apart as a script sees them."""
    return subprocess.run(
        [sys.executable, "-m", "nodeops.cli", *args, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_here(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The same command in this process (no interpreter start-up): for many short runs."""
    out, err = io.StringIO(), io.StringIO()
    code = command.main([*args, "--kubeconfig", str(kubeconfig)], out, err)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def kubectl(
    kubeconfig: Path, *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    # A discovery cache beside the kubeconfig: every simulated cluster has a new port.
    env = dict(os.environ, KUBECACHEDIR=str(kubeconfig.parent / "kube-cache"))
    return subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )


def kubectl_lines(stdout: str) -> list[str]:
    """stdout without blank lines: a refused drain prints one that kubectl does not (see the
    strict xfail below); every other line must be kubectl's."""
    return [line for line in stdout.splitlines() if line.strip()]


def api(
    kubeconfig: Path,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    content_type: str = "application/json",
) -> dict[str, Any]:
    cfg = yaml.safe_load(kubeconfig.read_text())
    server = cfg["clusters"][0]["cluster"]["server"]
    data = None if body is None else orjson.dumps(body)
    req = urllib.request.Request(server + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", content_type)
    token = cfg["users"][0]["user"].get("token")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=10) as resp:
        payload = resp.read()
    return orjson.loads(payload) if payload else {}


def wait_until(what: str, check: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def pods(kubeconfig: Path, **query: str) -> list[dict[str, Any]]:
    qs = urllib.parse.urlencode(query)
    items: list[dict[str, Any]] = api(kubeconfig, "GET", f"/api/v1/namespaces/{NS}/pods?{qs}")[
        "items"
    ]
    return items


def running(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get(
        "deletionTimestamp"
    )


def node(kubeconfig: Path, name: str) -> dict[str, Any]:
    return api(kubeconfig, "GET", f"/api/v1/nodes/{name}")


def set_unschedulable(kubeconfig: Path, name: str, value: bool) -> None:
    patch = {"spec": {"unschedulable": True if value else None}}
    api(kubeconfig, "PATCH", f"/api/v1/nodes/{name}", patch, "application/merge-patch+json")


def replicaset(name: str, replicas: int, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, **labels}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": "nginx:1.27"}],
                },
            },
        },
    }


def place_on_node_0(kubeconfig: Path, *sets: dict[str, Any]) -> list[str]:
    """Create ReplicaSets whose pods all run on node-0 (node-1 is cordoned meanwhile, then
    uncordoned so the replacements have somewhere to go); returns the pod names."""
    want = sum(int(rs["spec"]["replicas"]) for rs in sets)
    set_unschedulable(kubeconfig, "node-1", True)
    for rs in sets:
        api(kubeconfig, "POST", f"/apis/apps/v1/namespaces/{NS}/replicasets", rs)
    wait_until(
        f"{want} pods Running on node-0",
        lambda: sum(map(running, pods(kubeconfig, fieldSelector="spec.nodeName=node-0"))) == want,
    )
    set_unschedulable(kubeconfig, "node-1", False)
    return sorted(p["metadata"]["name"] for p in pods(kubeconfig))


def bare_pod(kubeconfig: Path, name: str, node_name: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "nginx:1.27"}]},
    }
    api(kubeconfig, "POST", f"/api/v1/namespaces/{NS}/pods", body)
    wait_until(
        f"pod {name} Running",
        lambda: running(api(kubeconfig, "GET", f"/api/v1/namespaces/{NS}/pods/{name}")),
    )


def evicting_index(lines: list[str], prefix: str) -> list[int]:
    return [i for i, line in enumerate(lines) if line.startswith(f"evicting pod {NS}/{prefix}-")]


# --------------------------------------------------------------------------- tests


def test_plain_drain_prints_kubectls_lines(sim_cluster: Path) -> None:
    names = place_on_node_0(sim_cluster, replicaset("web", 3))
    done = run(
        sim_cluster,
        "drain",
        "node-0",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout",
        "60s",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "node/node-0 cordoned"
    assert sorted(lines[1:4]) == [f"evicting pod default/{n}" for n in names]
    assert sorted(lines[4:7]) == [f"pod/{n} evicted" for n in names]
    assert lines[7:] == ["node/node-0 drained"]
    assert done.stderr == ""
    assert node(sim_cluster, "node-0")["spec"].get("unschedulable") is True
    assert pods(sim_cluster, fieldSelector="spec.nodeName=node-0") == []
    wait_until(
        "3 replacements Running on node-1",
        lambda: sum(map(running, pods(sim_cluster, fieldSelector="spec.nodeName=node-1"))) == 3,
    )


def test_unmanaged_pod_is_refused_before_anything_is_evicted(sim_cluster: Path) -> None:
    place_on_node_0(sim_cluster, replicaset("web", 2))
    bare_pod(sim_cluster, "bare", "node-0")
    before = {p["metadata"]["uid"] for p in pods(sim_cluster)}
    done = run(sim_cluster, "drain", "node-0", "--ignore-daemonsets", "--timeout", "60s")
    assert done.returncode == 1
    assert done.stderr == PREFLIGHT_STDERR
    assert kubectl_lines(done.stdout) == ["node/node-0 cordoned"]
    # All or nothing: the replicated pods were not evicted either.
    after = pods(sim_cluster)
    assert {p["metadata"]["uid"] for p in after} == before
    assert all(running(p) for p in after)
    # --force lets the drain through, deleting the unmanaged pod as kubectl does.
    done = run(sim_cluster, "drain", "node-0", "--ignore-daemonsets", "--force")
    assert done.returncode == 0, done.stderr
    assert "evicting pod default/bare" in kubectl_lines(done.stdout)
    assert "Warning: deleting Pods that declare no controller: default/bare" in done.stderr


@needs_kubectl
def test_preflight_refusal_reads_exactly_like_kubectls(sim_cluster: Path) -> None:
    place_on_node_0(sim_cluster, replicaset("web", 1))
    bare_pod(sim_cluster, "bare", "node-0")
    theirs = kubectl(sim_cluster, "drain", "node-0", "--ignore-daemonsets")
    set_unschedulable(sim_cluster, "node-0", False)
    ours = run(sim_cluster, "drain", "node-0", "--ignore-daemonsets")
    assert (theirs.returncode, ours.returncode) == (1, 1)
    assert ours.stderr == theirs.stderr == PREFLIGHT_STDERR
    assert kubectl_lines(ours.stdout) == kubectl_lines(theirs.stdout)


def test_stdout_of_a_drain_is_exactly_kubectls(sim_cluster: Path) -> None:
    done = run(sim_cluster, "drain", "node-1", "--ignore-daemonsets")
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        "node/node-1 cordoned\nnode/node-1 drained\n",
        "",
    )


def test_stdout_of_a_refused_drain_is_exactly_kubectls(sim_cluster: Path) -> None:
    bare_pod(sim_cluster, "bare", "node-0")
    done = run(sim_cluster, "drain", "node-0", "--ignore-daemonsets")
    assert done.returncode == 1
    assert done.stdout == "node/node-0 cordoned\n"


@pytest.mark.parametrize(("mode", "suffix"), [("client", "dry run"), ("server", "server dry run")])
def test_dry_run_changes_nothing(sim_cluster: Path, mode: str, suffix: str) -> None:
    names = place_on_node_0(sim_cluster, replicaset("web", 3))
    before = {p["metadata"]["uid"] for p in pods(sim_cluster)}
    done = run(sim_cluster, "drain", "node-0", f"--dry-run={mode}", "--ignore-daemonsets")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"node/node-0 cordoned ({suffix})",
        *(f"evicting pod default/{n} ({suffix})" for n in names),
        f"node/node-0 drained ({suffix})",
    ]
    assert not node(sim_cluster, "node-0")["spec"].get("unschedulable")
    time.sleep(0.5)  # an eviction that did go through would show by now (instant kubelet)
    after = pods(sim_cluster)
    assert {p["metadata"]["uid"] for p in after} == before
    assert all(running(p) and p["spec"]["nodeName"] == "node-0" for p in after)


def test_cordon_and_uncordon_are_kubectls_and_idempotent(sim_cluster: Path) -> None:
    steps = [
        ("cordon", "node/node-0 cordoned", True),
        ("cordon", "node/node-0 already cordoned", True),
        ("uncordon", "node/node-0 uncordoned", False),
        ("uncordon", "node/node-0 already uncordoned", False),
    ]
    for verb, line, unschedulable in steps:
        done = run(sim_cluster, verb, "node-0")
        assert (done.returncode, done.stdout, done.stderr) == (0, line + "\n", "")
        assert bool(node(sim_cluster, "node-0")["spec"].get("unschedulable")) is unschedulable
    done = run(sim_cluster, "cordon", "node-0", "--dry-run=client")
    assert (done.returncode, done.stdout) == (0, "node/node-0 cordoned (dry run)\n")
    assert not node(sim_cluster, "node-0")["spec"].get("unschedulable")
    for verb in ("cordon", "uncordon", "drain"):
        done = run(sim_cluster, verb, "node-9")
        assert done.returncode == 1
        assert done.stderr == 'Error from server (NotFound): nodes "node-9" not found\n'


RULES = """\
apiVersion: nodeops.dev/v1alpha1
kind: NodeDrainRule
metadata:
  name: databases-last
spec:
  drain:
    behavior: Drain
    order: 100
  pods:
  - selector:
      matchLabels:
        tier: db
---
apiVersion: nodeops.dev/v1alpha1
kind: NodeDrainRule
metadata:
  name: frontends-first
spec:
  drain:
    behavior: Drain
    order: -10
  nodes:
  - selector:
      matchLabels:
        kubernetes.io/hostname: node-0
  pods:
  - selector:
      matchLabels:
        tier: frontend
"""


@needs_kubectl
def test_node_drain_rules_order_the_evictions(sim_cluster: Path) -> None:
    proc = nodeops("crds")
    crds, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, crds
    applied = kubectl(sim_cluster, "apply", "-f", "-", stdin=crds)
    assert applied.returncode == 0, applied.stderr

    def rules_applied() -> bool:
        return kubectl(sim_cluster, "apply", "-f", "-", stdin=RULES).returncode == 0

    wait_until("the NodeDrainRules to be accepted", rules_applied, timeout=30)
    place_on_node_0(
        sim_cluster,
        replicaset("postgres", 1, tier="db"),
        replicaset("backend", 2),
        replicaset("frontend", 2, tier="frontend"),
    )
    done = run(sim_cluster, "drain", "node-0", "--ignore-daemonsets", "--timeout", "60s")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    frontend = evicting_index(lines, "frontend")
    backend = evicting_index(lines, "backend")
    db = evicting_index(lines, "postgres")
    assert (len(frontend), len(backend), len(db)) == (2, 2, 1), lines
    # frontends-first (order -10), then the pods no rule selects (0), then databases-last (100).
    assert max(frontend) < min(backend)
    assert max(backend) < min(db)
    assert lines[-1] == "node/node-0 drained"
    assert pods(sim_cluster, fieldSelector="spec.nodeName=node-0") == []


# --------------------------------------------------------------------------- input and surface

BAD_INPUT = [
    ["drain"],
    ["uncordon"],
    ["drain", "node-0", "-l", "a=b"],
    ["cordon", "node-0", "--selector", "a=b"],
    ["drain", "node-0", "--pod-selector", "a in (b"],
    ["drain", "-l", "a in (b"],
    ["drain", "node-1", "node-9"],
    ["uncordon", "node-0", "node-9"],
    ["drain", "node-0", "--timeout", "1s2"],
    ["drain", "node-0", "--grace-period", "x"],
    ["drain", "node-0", "--chunk-size", "abc"],
    ["drain", "node-0", "--dry-run=bogus"],
    ["drain", "node-0", "--no-such-flag"],
    ["drain", "a/b/c"],
]


@needs_kubectl
def test_bad_input_reads_like_kubectl_and_changes_nothing(sim_cluster: Path) -> None:
    """Every input is checked before the first write, with kubectl's message and exit code."""
    for args in BAD_INPUT:
        theirs = kubectl(sim_cluster, *args)
        ours = run_here(sim_cluster, *args)
        expected = theirs.stderr.replace("kubectl", "nodeops")
        assert (ours.returncode, ours.stderr) == (theirs.returncode, expected), args
        assert ours.returncode == 1 and ours.stdout == "", args
        for name in ("node-0", "node-1"):
            assert not node(sim_cluster, name)["spec"].get("unschedulable"), args


@needs_kubectl
def test_several_nodes_and_selectors_print_what_kubectl_prints(sim_cluster: Path) -> None:
    for name in ("node-0", "node-1"):
        patch = {"metadata": {"labels": {"role": "worker"}}}
        api(sim_cluster, "PATCH", f"/api/v1/nodes/{name}", patch, "application/merge-patch+json")
    sequences = [
        ["cordon", "-l", "role=worker"],
        ["uncordon", "node-0", "node/node-1"],
        ["drain", "-l", "role=worker", "--ignore-daemonsets", "--chunk-size", "1"],
        ["uncordon", "-l", "role=worker", "--dry-run=client"],
        ["drain", "-l", "role=nobody"],
    ]
    for tool in ("kubectl", "nodeops"):
        outputs = []
        for args in sequences:
            done = (
                kubectl(sim_cluster, *args) if tool == "kubectl" else run_here(sim_cluster, *args)
            )
            outputs.append((done.returncode, done.stdout, done.stderr))
        for name in ("node-0", "node-1"):
            set_unschedulable(sim_cluster, name, False)
        if tool == "kubectl":
            theirs = outputs
    assert outputs == theirs
    assert outputs[2][1] == (
        "node/node-0 cordoned\nnode/node-1 cordoned\nnode/node-0 drained\nnode/node-1 drained\n"
    )


def test_a_failing_node_does_not_stop_the_others(sim_cluster: Path) -> None:
    bare_pod(sim_cluster, "bare", "node-0")
    done = run(sim_cluster, "drain", "node-0", "node-1", "--ignore-daemonsets")
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "node/node-0 cordoned",
        "node/node-1 cordoned",
        "node/node-1 drained",
    ]
    assert done.stderr == PREFLIGHT_STDERR


def test_kubeconfig_problems_are_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    for args in (["drain", "node-0"], ["cordon", "node-0"]):
        done = run(missing, *args)
        assert (done.returncode, done.stdout) == (1, "")
        assert done.stderr == f"error: stat {missing}: no such file or directory\n"
    proc = nodeops("run", "--kubeconfig", str(missing))
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert out == f"nodeops run: stat {missing}: no such file or directory\n"
