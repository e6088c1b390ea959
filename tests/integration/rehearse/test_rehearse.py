"""`nodeops cycle --rehearse` against a simulated cluster standing in for the live one: it reads
and never writes, and its report names what the roll would meet."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.placeholders import fill_with_placeholders
from nodeops.cli import build_parser
from nodeops.controllers.cycling.resources import NODEGROUPS
from nodeops.demo.scenario import demo_scenario
from nodeops.demo.world import World, WorldOptions
from nodeops.kube.resources import DEPLOYMENTS, NODES, PODS, PRIORITYCLASSES
from nodeops.rehearse.command import main_async
from nodeops.rehearse.snapshot import SNAPSHOT_RESOURCES
from nodeops.sim.clock import Clock
from nodeops.sim.server.app import SimServer
from nodeops.sim.server.auth import GROUP_ALL_AUTHENTICATED, UserInfo

SIM_AGENTS = {"nodeops-sim"}


def nodegroup(name: str, group: str, **settings: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "NodeGroup",
        "metadata": {"name": name},
        "spec": {
            "nodeGroupName": group,
            "nodeSelector": {"matchLabels": {"role": "worker"}},
            "cycleSettings": {"method": "Drain", "concurrency": 2, **settings},
        },
    }


@asynccontextmanager
async def live(web_budget: int | str = 1, **settings: Any) -> AsyncIterator[World]:
    """The "live" cluster: a simulator at wall-clock speed, no operator running."""
    scenario = demo_scenario(4, groups=1, stateful=False, boot_seconds=30, web_budget=web_budget)
    w = World(WorldOptions(scenario=scenario, time_scale=1.0, controllers=False))
    await w.start()
    assert w.client is not None
    await w.client.create(NODEGROUPS, nodegroup("workers", "workers-a", **settings))
    try:
        yield w
    finally:
        await w.stop()


async def rehearse(w: World, tmp: Path, *extra: str) -> tuple[int, str]:
    kubeconfig = w.sim.server.write_kubeconfig(tmp / "kubeconfig")
    providers = tmp / "providers.yaml"
    providers.write_text(
        yaml.safe_dump(
            {"providers": {"sim": {"url": w.sim.server.url, "token": w.sim.server.admin_token}}}
        )
    )
    argv = ["cycle", *extra, "--rehearse", "--kubeconfig", str(kubeconfig)]
    argv += ["--provider", "sim", "--provider-config", str(providers), "--time-scale", "60"]
    out = io.StringIO()
    code = await main_async(build_parser().parse_args(argv), out)
    return code, out.getvalue()


async def versions(w: World) -> dict[tuple[str, str, str], str]:
    assert w.client is not None
    seen = {}
    for res in SNAPSHOT_RESOURCES:
        try:
            items, _ = await w.client.list(res)
        except Exception:
            continue
        for obj in items:
            meta = obj["metadata"]
            seen[(res.plural, meta.get("namespace", ""), meta["name"])] = meta["resourceVersion"]
    return seen


# What the simulated cluster's own loops (kubelets, workload and disruption controllers) keep
# writing while a test runs, whoever else reads or writes: their resourceVersions may move.
LIVE_KINDS = {
    "pods",
    "nodes",
    "deployments",
    "replicasets",
    "statefulsets",
    "daemonsets",
    "poddisruptionbudgets",
}
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


def assert_nothing_written(
    w: World, before: dict[tuple[str, str, str], str], after: dict[tuple[str, str, str], str]
) -> None:
    """No write call from nodeops but its access review, and no resourceVersion moved except
    those the simulated cluster's own loops move."""
    pairs = (w.stats.snapshot()["by_agent"].get("nodeops") or {}).get("by_verb_resource") or {}
    writes = {k for k in pairs if k.split("/", 1)[0] in WRITE_VERBS}
    assert writes <= {"create/selfsubjectaccessreviews"}, writes
    assert set(after) == set(before)
    moved = {k for k in before if after[k] != before[k]}
    assert {kind for kind, _, _ in moved} <= LIVE_KINDS, moved


async def test_rehearsal_reads_only_and_predicts_the_roll(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with live() as w:
        before = await versions(w)
        cloud_before = {g: len(s.members) for g, s in w.cloud.state.groups.items()}
        w.stats.reset()
        code, out = await rehearse(w, tmp_path, "workers", "--json")
        calls = w.stats.snapshot()["by_agent"]
        assert set(calls) <= {"nodeops", *SIM_AGENTS}, set(calls)
        assert_nothing_written(w, before, await versions(w))
        assert {g: len(s.members) for g, s in w.cloud.state.groups.items()} == cloud_before
    report = json.loads(out)
    assert code == 0, report["failures"]
    assert report["ok"] is True
    # The copy ran on a loop of its own that skipped its idle waits, and its work took no time.
    clock = report["inputs"]["clock"]
    assert clock["mode"] == "warp" and clock["work_takes_time"] is False
    assert clock["skipped_loop_seconds"] > 0
    # The copy was loaded as the cluster stood, running pods running, before its controllers
    # started: none of them made or removed a pod before the roll.
    assert report["inputs"]["settling"] == {"pods_created": 0, "pods_deleted": 0}
    # The live simulator's own loops (kubelets, controllers) speak under their own names.
    verbs = set(calls["nodeops"]["by_verb_resource"])
    writes = {p for p in verbs if not p.startswith(("get/", "list/", "watch/"))}
    assert writes == {"create/selfsubjectaccessreviews"}, verbs
    assert any(p.startswith("list/cloud/") or p.startswith("get/cloud/") for p in verbs)
    # Four nodes, two at a time: two batches, each at least a boot (30 s) long.
    assert [len(b["nodes"]) for b in report["batches"]] == [2, 2]
    assert report["predicted_seconds"] >= 60
    (request,) = report["requests"]
    assert request["phase"] == "Successful"
    assert report["cloud_calls"] and report["api_calls"].get("create/pods/eviction", 0) >= 1
    assert report["pending"] == []
    web = next(d for d in report["workloads"] if d["workload"] == "Deployment/shop/web")
    assert 0 < web["lowest_ready_share"] <= 1
    # Its progress went to stderr, a line a step and one per node replaced (4 nodes: each a
    # tenth or more), never to stdout, which is the report's. (The manager's log may share
    # stderr when another test configured logging.)
    steps = ("loading the copy", "copy loaded", "copy settled", "rolling the copy", "roll ended")
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith(steps)]
    assert err[0].startswith("loading the copy: 4 nodes, ") and err[0].endswith(" pods"), err
    assert err[1].startswith("copy loaded in ") and err[2].startswith("copy settled in "), err
    rolled = [line for line in err if line.startswith("rolling the copy: ")]
    assert rolled[-1].startswith("rolling the copy: 4 of 4 nodes replaced, "), rolled
    assert [line.split(" of ")[0][-1] for line in rolled] == ["0", "1", "2", "3", "4"], rolled
    assert err[-1].startswith("roll ended after ") and "stay Pending" in err[-1], err


async def test_a_budget_that_allows_nothing_fails_at_the_drain_deadline(tmp_path: Path) -> None:
    async with live(web_budget=0, drainDeadline="2m") as w:
        code, out = await rehearse(w, tmp_path, "workers", "--json")
    report = json.loads(out)
    assert code == 1
    blocked = next(b for b in report["budgets"] if b["budget"] == "shop/web")
    assert blocked["longest_seconds"] >= 100
    assert any("shop/web" in f and "drain deadline" in f for f in report["failures"])


class _CtrlCAfter(io.StringIO):
    """stderr that presses Ctrl-C (SIGINT to this process) once `line` has been written."""

    def __init__(self, line: str) -> None:
        super().__init__()
        self.line = line
        self.pressed = False

    def write(self, text: str) -> int:
        n = super().write(text)
        if not self.pressed and self.line in self.getvalue():
            self.pressed = True
            os.kill(os.getpid(), signal.SIGINT)
        return n


async def test_ctrl_c_stops_the_roll_and_still_reports_it_so_far(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stderr = _CtrlCAfter("rolling the copy: 1 of 4 nodes replaced")
    monkeypatch.setattr("sys.stderr", stderr)
    handler = signal.getsignal(signal.SIGINT)
    async with live(concurrency=1) as w:
        before = await versions(w)
        w.stats.reset()
        code, out = await rehearse(w, tmp_path, "workers", "--json")
        assert_nothing_written(w, before, await versions(w))
    lines = stderr.getvalue().splitlines()
    report = json.loads(out)
    assert stderr.pressed
    assert code == 130
    # One node a batch, each batch waiting on a boot: the stop lands long before the last.
    stopped = report["stopped"]
    assert stopped["why"] == "interrupted"
    assert 1 <= stopped["nodes_replaced"] < stopped["nodes_selected"] == 4, stopped
    assert stopped["simulated_seconds"] > 0
    assert report["inputs"]["time_limit_seconds"] is None
    assert report["ok"] is False and report["predicted_seconds"] is None
    # A request cut short is no request that would not finish.
    assert report["failures"] == [], report["failures"]
    assert [r["phase"] for r in report["requests"]] != ["Successful"]
    assert 1 <= len(report["batches"]) < 4
    assert report["api_calls"].get("create/pods/eviction", 0) >= 1
    assert any(line.startswith("stopping: the report will cover") for line in lines), lines
    assert any(
        line.startswith("roll stopped (interrupted) with ") and " of 4 nodes replaced" in line
        for line in lines
    ), lines
    # The handler went with the rehearsal: Ctrl-C does again what it did before.
    assert signal.getsignal(signal.SIGINT) == handler


async def test_a_time_limit_reached_reports_what_was_rehearsed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with live() as w:
        code, out = await rehearse(w, tmp_path, "workers", "--time-limit", "1ms")
    err = capsys.readouterr().err
    assert code == 3
    first = out.splitlines()[0]
    assert first.startswith("Rehearsal stopped (time limit of 0.001s) after 0s of the roll"), out
    assert "the rest was not rehearsed" in first
    assert "Predicted duration: more than 0s" in out
    assert "copy not rolled: stopped (time limit of 0.001s)" in err, err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("nosuchgroup",), "NodeGroup 'nosuchgroup' not found"),
        (("workers", "--memory-limit", "1000"), "needs about"),
        (("workers", "--time-limit", "0"), "--time-limit: must be positive"),
        (("workers", "--time-limit", "soon"), "--time-limit: invalid duration"),
    ],
)
async def test_bad_input_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], message: str
) -> None:
    async with live() as w:
        before = await versions(w)
        w.stats.reset()
        code, out = await rehearse(w, tmp_path, *extra)
        assert_nothing_written(w, before, await versions(w))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert out == ""
    assert len(err) == 1 and message in err[0], err


async def test_a_missing_read_permission_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = SimServer(clock=Clock(1.0), auth=True, rbac=True)
    await server.start()
    try:
        assert server.authn is not None
        server.authn.add_static_token("viewer", UserInfo("viewer", (GROUP_ALL_AUTHENTICATED,)))
        rules = [
            {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"]},
            {"apiGroups": ["nodeops.dev"], "resources": ["nodegroups"], "verbs": ["list"]},
        ]
        server.create(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "some-reader"},
                "rules": rules,
            }
        )
        server.create(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "viewer"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "some-reader",
                },
                "subjects": [{"kind": "User", "name": "viewer"}],
            }
        )
        config = server.write_kubeconfig(tmp_path / "kubeconfig", token="viewer")
        server.stats.reset()
        argv = ["cycle", "workers", "--rehearse", "--kubeconfig", str(config)]
        code = await main_async(build_parser().parse_args(argv), io.StringIO())
        asked = set(server.stats.snapshot()["by_verb_resource"])
    finally:
        await server.stop()
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "cannot list deployments.apps" in err[0], err
    # Asked, and nothing else: no list was tried before the check said no.
    assert asked == {"create/selfsubjectaccessreviews"}, asked


async def _racked(w: World) -> None:
    """Labels set by hand on each node (no part of the group's launch, so the new nodes come
    without them), and two pods spread over that label (DoNotSchedule)."""
    assert w.client is not None
    nodes, _ = await w.client.list(NODES)
    for i, n in enumerate(nodes):
        body = {"metadata": {"labels": {"example.com/rack": f"r{i}"}}}
        await w.client.patch(NODES, n["metadata"]["name"], body)
    spread = {
        "maxSkew": 1,
        "topologyKey": "example.com/rack",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "racked"}},
    }
    container = {"name": "app", "image": "nginx:1.27"}
    await _two_placed(
        w, "racked", {"containers": [container], "topologySpreadConstraints": [spread]}
    )


async def _two_placed(w: World, name: str, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """A Deployment of two pods in "shop" (label `app=<name>`), once both are placed."""
    assert w.client is not None
    labels = {"app": name}
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }
    await w.client.create(DEPLOYMENTS, body)
    async with asyncio.timeout(30):
        while True:  # the live cluster's own pace; nothing to watch for but its pods
            pods, _ = await w.client.list(PODS, "shop", label_selector=f"app={name}")
            if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods):
                return pods
            await asyncio.sleep(0.1)


async def test_pods_spread_over_a_label_the_new_nodes_lack_hold_the_last_batch(
    tmp_path: Path,
) -> None:
    """Once only new nodes would be left, the capacity check finds no place for pods spread
    over a label those nodes lack: the last batch is not drained, and the request fails at
    the scale-up limit, naming the pods and kube-scheduler's reason. Nothing is stranded."""
    async with live() as w:
        await _racked(w)
        code, out = await rehearse(w, tmp_path, "workers", "--json")
    report = json.loads(out)
    assert code == 1, report["failures"]
    assert report["pending"] == [], report["pending"]
    assert [b["index"] for b in report["batches"]] == [1], report["batches"]
    (failure,) = report["failures"]
    assert "scale-up did not finish within 1200s: waiting for capacity: 2 of " in failure
    assert "shop/racked-" in failure
    assert (
        "node(s) didn't match pod topology spread constraints (missing required label)" in failure
    ), failure
    # The hold itself: from the batch's capacity check to the scale-up limit.
    (held,) = report["capacity"]
    assert held["nodegroup"] == "workers" and held["holds"] == 1, held
    assert 1000 <= held["held_seconds"] == held["longest_seconds"] <= 1200, held
    assert "shop/racked-" in held["reason"] and "missing required label" in held["reason"]


async def test_a_replica_waiting_in_turn_is_no_new_pending_pod(tmp_path: Path) -> None:
    """One pod per node (required anti-affinity on the hostname), one replica more than the
    nodes: one waits before the roll. It takes the first new node, and a replica evicted
    later waits in its place: the same workload as short as before, which the roll did not
    make worse. The report says so and predicts no failure."""
    async with live(waitForCapacity=False) as w:
        assert w.client is not None
        nodes, _ = await w.client.list(NODES)
        labels = {"app": "one-per-node"}
        term = {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}
        spec = {
            "containers": [{"name": "app", "image": "nginx:1.27"}],
            "affinity": {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
            },
        }
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "one-per-node", "namespace": "shop"},
            "spec": {
                "replicas": len(nodes) + 1,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": spec},
            },
        }
        await w.client.create(DEPLOYMENTS, body)
        async with asyncio.timeout(30):
            while True:  # the live cluster's own pace; nothing to watch for but its pods
                pods, _ = await w.client.list(PODS, "shop", label_selector="app=one-per-node")
                if (
                    len(pods) == len(nodes) + 1
                    and sum(not p["spec"].get("nodeName") for p in pods) == 1
                ):
                    break
                await asyncio.sleep(0.1)
        waiting_before = next(p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName"))
        code, out = await rehearse(w, tmp_path, "workers", "--json")
    report = json.loads(out)
    assert code == 0, report["failures"]
    mine = [p for p in report["pending"] if p["pod"].startswith("shop/one-per-node-")]
    assert len(mine) == 1, report["pending"]
    assert mine[0]["already_pending"] is True
    # Not the pod that waited before: it was placed, and an evicted replica waits instead.
    assert mine[0]["pod"] != f"shop/{waiting_before}"


async def test_pods_spread_over_a_label_the_new_nodes_lack_are_predicted_pending(
    tmp_path: Path,
) -> None:
    """Without the capacity check (`waitForCapacity: false`) the last batch is drained all the
    same, and the pods spread over a label the new nodes lack have nowhere to go. The
    rehearsal says so, with kube-scheduler's reason."""
    async with live(waitForCapacity=False) as w:
        await _racked(w)
        code, out = await rehearse(w, tmp_path, "workers", "--json")
    report = json.loads(out)
    assert code == 1, report["failures"]
    racked = [p for p in report["pending"] if p["pod"].startswith("shop/racked-")]
    assert len(racked) == 2, report["pending"]
    for p in racked:
        assert p["already_pending"] is False
        # Judged once the scheduler has retried them after the roll: the old nodes, cordoned
        # when it last tried during the roll, are gone from its count.
        assert p["reason"] == (
            "0/4 nodes are available: 4 node(s) didn't match pod topology spread constraints "
            "(missing required label). preemption: 0/4 nodes are available: 4 Preemption is "
            "not helpful for scheduling."
        ), p["reason"]
    assert any("Pending" in f and "shop/racked-" in f for f in report["failures"])


async def test_pods_keep_the_priority_of_their_class_in_the_copy(tmp_path: Path) -> None:
    """The copy's API server resolves each pod's priority from its PriorityClass, as the live
    one did: the classes are copied, and one deleted since its pods were made is made again
    at their priority. Without them the copy would refuse every pod that names a class."""
    async with live() as w:
        assert w.client is not None
        for name, value in (("placeholder", -10), ("serving", 1000)):
            body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass"}
            await w.client.create(
                PRIORITYCLASSES, {**body, "metadata": {"name": name}, "value": value}
            )
        container = {"name": "app", "image": "registry.k8s.io/pause:3.10"}
        spec = {"priorityClassName": "placeholder", "containers": [container]}
        pods = await _two_placed(w, "balloon", spec)
        assert {p["spec"]["priority"] for p in pods} == {-10}
        await w.client.delete(PRIORITYCLASSES, "placeholder")
        code, out = await rehearse(w, tmp_path, "workers", "--json")
    report = json.loads(out)
    assert code == 0, report["failures"]
    assert report["pending"] == []
    assert any(d["workload"] == "Deployment/shop/balloon" for d in report["workloads"])


async def test_placeholders_left_waiting_are_no_failure(tmp_path: Path) -> None:
    """A cluster kept full of placeholders (priority -1): the rehearsal predicts the roll
    succeeds, and lists the placeholders it leaves waiting as spare, not as a failure."""
    async with live() as w:
        await fill_with_placeholders(w)
        code, out = await rehearse(w, tmp_path, "workers", "--json")
    report = json.loads(out)
    assert code == 0, report["failures"]
    assert [r["phase"] for r in report["requests"]] == ["Successful"]
    assert report["pending"], "the placeholders that were waiting still wait"
    for p in report["pending"]:
        assert p["pod"].startswith("default/headroom-") and p["spare"] is True, p
    # The roll's pods took the placeholders' room: the report says whose and how many, since
    # an autoscaler may add nodes for them.
    assert [p["workload"] for p in report["preempted"]] == ["Deployment/default/headroom"]
    assert report["preempted"][0]["pods"] >= 1
