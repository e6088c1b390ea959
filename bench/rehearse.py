"""A rehearsal against the roll it predicts: `nodeops cycle --rehearse`, then the real roll.

    python -m bench.rehearse [--nodes 20,200] [--pods-per-node 30] [--rehearse-scale 2]
                             [--real-scale 1] [--real-clock scaled|warp]
                             [--live-clock warp|scaled] [--live-scale 0.1]
                             [--rehearse-only | --real-only] [--placeholders WAITING]

For each size: a simulated cluster (the demo's workloads, a Deployment pinned to one node by
hostname, one budget that allows no disruption, a drain deadline that forces past it) stands in
for the live cluster while `nodeops cycle NODEGROUP --rehearse --json` runs in a process of its
own against it (its wall time and peak memory are its own). Then the same cluster, built again
from the same seed, is rolled for real on the simulator by the cycling controllers, watched by
the same recorder. One JSON document on stdout:

- `duration_error`: predicted / real duration - 1 (target within +/-0.10);
- `budgets_missed`, `pending_missed`: blocking budgets and Pending pods of the real roll the
  rehearsal did not name (target: none); `false_alarms`: failures predicted that the real roll
  did not have (target: none);
- `rehearse_wall_seconds` (target <= 10 s at 200 nodes, <= 60 s at 1,000), `rehearse_max_rss_mib`,
  and `rehearse_clock`, how the rehearsal's clock ran (its loop skips idle waits);
  `rehearse_progress`: what it said on stderr as it went, as a CI log shows it;
- `real_clock`: how the real roll's ran. `scaled` (the default): the simulator's scaled wall
  clock, which it falls behind when its work outgrows the machine; `warp`: a loop that skips
  idle waits and counts no time for work, as the rehearsal's copy does, for sizes whose real
  roll two cores cannot keep up with (1,000 nodes). A warp real roll differs from the
  rehearsal only by what the rehearsal has to read or guess: the snapshot, boots and starts;
- `real_observed_boot_seconds`: the real roll's median simulated boot, against the scenario's
  60 s: more means its simulator lagged its clock and the real roll ran longer than the cluster
  it stands for would (then compare at a lower `--real-scale`);
- `real_observed_pod_start_seconds`: per workload, the median start of the pods the real roll
  made, read from their records as the rehearsal reads the live cluster's. The scenario's pods
  start in 2 s; more is the simulator lagging where drains wait on it, which a boot's one
  timer does not show;
- `rehearse_pod_start_seconds_observed`: each workload's pod start as the rehearsal read it
  from the live cluster's pods. The live cluster is built on a loop that skips idle waits and
  counts no time for work (`--live-clock warp`, the default), so its records show its
  kubelets' 2 s. Built on a scaled wall clock (`--live-clock scaled --live-scale S`) one
  process making thousands of pods at once lags its clock, its pods' records say so, and the
  rehearsal rolls its copy with starts the real roll does not have: at 1.0 half a minute for
  6,000 pods, at 0.1 and even 0.03 a second more for 31,000;
- `batches_*`, `budget_seconds_*` and `calls_differing`: where the two rolls went apart;
- `preempted_*`: per workload, the pods the scheduler preempted for the roll's;
- `pending_spare_*`: of the Pending pods, those of a negative priority, which the roll may
  leave waiting (with `--placeholders`: the cluster kept full of 1-CPU placeholder pods of
  priority -1, as an autoscaler's overprovisioning keeps it, and WAITING more Pending, in the
  live cluster and the real roll's alike; the roll's pods preempt them);
- the machine's load average at the start and end, because the machine may be shared.

On a real control plane:

    python -m bench.rehearse --kubeconfig K --nodes 20 [--sim-controllers LIST]
                             [--strip-new-crd-fields]

The simulator's kubelets and clouds attach to K's API server (`nodeops sim attach`); the
cluster's kube-controller-manager and kube-scheduler run the workloads, budgets and placement.
The cluster is built once at `--real-scale` (1: a real controller-manager judges the kubelets'
leases by its wall clock), rehearsed by `nodeops cycle --rehearse --kubeconfig K` as a user runs
it, then rolled there by the cycling controllers while the same recorder follows the roll
through watches. The JSON names the server's version; `api_calls_real` is missing, since the
server that counts them is not ours.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import median
from typing import Any

import yaml

from bench import attached_world
from bench.cycle import boot_seconds
from bench.placeholders import fill_with_placeholders
from nodeops import __version__
from nodeops.cli import _count, _positive, build_parser
from nodeops.controllers.cycling.command import plan_requests
from nodeops.controllers.cycling.resources import NODEGROUPS
from nodeops.demo.scenario import demo_scenario
from nodeops.demo.world import World, WorldOptions
from nodeops.kube import objects as o
from nodeops.kube.clientconfig import CLIENT_QPS
from nodeops.kube.resources import NODES, PODS, REPLICASETS
from nodeops.rehearse.rehearsal import OPERATOR_DEFAULTS, outcome, quiet_collector
from nodeops.rehearse.timings import Workloads, pod_start_seconds
from nodeops.rehearse.watch import RollRecorder
from nodeops.sim.attach.feed import WatchFeed
from nodeops.sim.objects import NODE_GROUP_LABEL
from nodeops.sim.scenario import Scenario
from nodeops.sim.warp import WarpLoop, run_apart

GROUP = "workers-a"
BOOT_SECONDS = 60.0
DRAIN_DEADLINE = "5m"


PLACEHOLDER_MILLIS = 1000
"""A placeholder's CPU in `--placeholders`: a few a node beside the workloads' thirty pods."""


def scenario(nodes: int, pods_per_node: float, seed: int) -> Scenario:
    base = demo_scenario(
        nodes, groups=1, boot_seconds=BOOT_SECONDS, pods_per_node=pods_per_node, seed=seed,
        web_budget="10%",
    )  # fmt: skip
    first = next(
        o["metadata"]["name"]
        for o in base.objects()
        if o.get("kind") == "Node" and o["metadata"]["labels"].get(NODE_GROUP_LABEL) == GROUP
    )
    data = base.model_dump(by_alias=True, exclude_none=True)
    # Thirty pods of 300m CPU each need more than the demo's m5.xlarge.
    data["nodeGroups"][0]["instanceType"] = "m5.4xlarge"
    data["workloads"] += [
        # Pinned to one node: once it is gone, its pods fit nowhere.
        {
            "kind": "Deployment", "name": "pinned", "namespace": "shop", "replicas": 2,
            "nodeSelector": {"kubernetes.io/hostname": first},
            "terminationGracePeriodSeconds": 5,
        },
        # A budget that allows no disruption: only the drain deadline moves its pods.
        {
            "kind": "Deployment", "name": "singleton", "namespace": "shop", "replicas": 2,
            "pdb": {"maxUnavailable": 0}, "terminationGracePeriodSeconds": 5,
        },
        # Only on nodes of the zone a: node affinity by selector.
        {
            "kind": "Deployment", "name": "zonal", "namespace": "shop",
            "replicas": max(2, nodes // 4),
            "nodeSelector": {"topology.kubernetes.io/zone": "eu-west-1a"},
            "pdb": {"maxUnavailable": 1}, "terminationGracePeriodSeconds": 5,
        },
        # Spread over the zones, never more than one replica apart: a drained node's pods
        # must go back to where the zones stay even.
        {
            "kind": "Deployment", "name": "spread", "namespace": "shop",
            "replicas": max(3, nodes // 4),
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "spread"}},
                }
            ],
            "pdb": {"maxUnavailable": 1}, "terminationGracePeriodSeconds": 5,
        },
        # One replica a node at most (required anti-affinity): every pod of theirs placed
        # keeps the others off its node.
        {
            "kind": "Deployment", "name": "solo", "namespace": "shop",
            "replicas": max(2, nodes // 10),
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"app": "solo"}},
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                }
            },
            "pdb": {"maxUnavailable": 1}, "terminationGracePeriodSeconds": 5,
        },
    ]  # fmt: skip
    return Scenario.model_validate(data)


def nodegroup(concurrency: int) -> dict[str, Any]:
    return {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "NodeGroup",
        "metadata": {"name": "workers"},
        "spec": {
            "nodeGroupName": GROUP,
            "nodeSelector": {"matchLabels": {"role": "worker"}},
            "cycleSettings": {
                "method": "Drain",
                "concurrency": concurrency,
                "drainDeadline": DRAIN_DEADLINE,
                "onDrainDeadline": "Force",
                # Pods pinned to a replaced node fit nowhere: go on and leave them Pending.
                "waitForCapacity": False,
            },
        },
    }


async def rehearsal(
    sc: Scenario,
    concurrency: int,
    scale: float | None,
    seed: int,
    live_scale: float,
    live_clock: str = "warp",
    placeholders: int | None = None,
) -> dict[str, Any]:
    """`nodeops cycle --rehearse` in a process of its own, against a live simulated cluster.

    A rehearsal reads each workload's pod start from the live cluster's records, so those
    records must show what its kubelets do, not how far one process building thousands of
    pods at once fell behind its clock. `live_clock` "warp" (the default) builds the live
    cluster on a loop that skips idle waits and counts no time for work, as a cluster of many
    machines would record it, then keeps real time while the rehearsal reads it. "scaled"
    builds it on a wall clock running at `live_scale`, where a slow clock makes the lag a small
    share of what the records show, but not none: at 1,000 nodes, even at 0.03, pods that
    start in 2 s were recorded as 3 s.
    """
    if live_clock == "warp":
        return await run_apart(
            lambda: _rehearse_live(
                sc, concurrency, scale, seed, live_scale, warped=True, placeholders=placeholders
            ),
            work_takes_time=False,
        )
    return await _rehearse_live(
        sc, concurrency, scale, seed, live_scale, warped=False, placeholders=placeholders
    )


async def _rehearse_live(
    sc: Scenario,
    concurrency: int,
    scale: float | None,
    seed: int,
    live_scale: float,
    *,
    warped: bool,
    placeholders: int | None = None,
) -> dict[str, Any]:
    live = World(WorldOptions(scenario=sc, time_scale=live_scale, seed=seed, controllers=False))
    await live.start(wait_ready=600)
    try:
        if placeholders is not None:
            await fill_with_placeholders(live, placeholders, PLACEHOLDER_MILLIS)
        if warped:
            loop = asyncio.get_running_loop()
            assert isinstance(loop, WarpLoop)
            # Built; from here another process reads it, which the loop cannot foresee.
            loop.keep_real_time()
        assert live.client is not None
        await live.client.create(NODEGROUPS, nodegroup(concurrency))
        with tempfile.TemporaryDirectory() as tmp:
            kubeconfig = live.sim.server.write_kubeconfig(Path(tmp) / "kubeconfig")
            providers = Path(tmp) / "providers.yaml"
            providers.write_text(
                yaml.safe_dump(
                    {
                        "providers": {
                            "sim": {
                                "url": live.sim.server.url,
                                "token": live.sim.server.admin_token,
                            }
                        }
                    }
                )
            )
            return await rehearse_process(kubeconfig, providers, scale)
    finally:
        await live.stop()


async def rehearse_process(
    kubeconfig: Path, providers: Path, scale: float | None, *extra: str
) -> dict[str, Any]:
    """`nodeops cycle workers --rehearse --json` as a user runs it, with its wall time, CPU and
    peak memory, which are the process's own."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "nodeops.cli", "cycle", "workers", "--rehearse", "--json",
        "--kubeconfig", str(kubeconfig), "--provider", "sim",
        "--provider-config", str(providers), "--boot-seconds", str(BOOT_SECONDS),
        *(["--time-scale", str(scale)] if scale is not None else []), *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"the rehearsal failed ({proc.returncode}): {err.decode()[-2000:]}")
    report: dict[str, Any] = json.loads(out)
    report["exit_code"] = proc.returncode
    report["wall_seconds_measured"] = round(wall, 2)
    report["cpu_seconds_measured"] = round(
        after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2
    )
    report["max_rss_mib"] = round(after.ru_maxrss / 1024, 1)
    report["progress"] = err.decode(errors="replace").splitlines()
    return report


async def real_roll(
    sc: Scenario,
    concurrency: int,
    scale: float,
    seed: int,
    clock: str = "scaled",
    placeholders: int | None = None,
) -> dict[str, Any]:
    """The roll itself, on the same cluster built again, watched by the rehearsal's recorder.

    `clock` "scaled": the simulator keeps its scaled wall clock, and falls behind it when its
    work is more than the machine does in the time (`observed_boot_seconds` shows it). "warp":
    the cluster and the manager run on a loop of their own that skips idle waits, and their
    work takes no simulated time, as the rehearsal's copy does; the roll then lasts what the
    cluster's waits make it last however busy the machine, which is what a cluster of many
    machines would do and what a 1,000-node roll on two cores cannot do on a scaled clock.
    """
    if clock == "warp":
        report = await run_apart(
            lambda: _real_roll(sc, concurrency, scale, seed, placeholders), work_takes_time=False
        )
    else:
        report = await _real_roll(sc, concurrency, scale, seed, placeholders)
    report["clock"] = clock
    return report


async def _real_roll(
    sc: Scenario, concurrency: int, scale: float, seed: int, placeholders: int | None = None
) -> dict[str, Any]:
    world = World(
        WorldOptions(
            scenario=sc,
            time_scale=scale,
            seed=seed,
            controllers=False,
            settings=dict(OPERATOR_DEFAULTS),
            manager_qps=CLIENT_QPS,
        )
    )
    recorder = RollRecorder(world.sim.server, world.clock, Workloads(()))
    started = time.monotonic()
    await world.start(wait_ready=600)
    try:
        assert world.client is not None
        if placeholders is not None:
            await fill_with_placeholders(world, placeholders, PLACEHOLDER_MILLIS)
        group = await world.client.create(NODEGROUPS, nodegroup(concurrency))
        # As the rehearsal's copy rolls: the collector's sweeps change nothing the roll does,
        # and took an eighth of a 200-node real roll's CPU (570 s against 499 s).
        with quiet_collector():
            report = await roll_and_record(world, sc, group, recorder)
    finally:
        await world.stop()
    report["wall_seconds"] = round(time.monotonic() - started, 1)
    report["time_scale"] = scale
    return report


async def roll_and_record(
    world: World,
    sc: Scenario,
    group: dict[str, Any],
    recorder: RollRecorder,
    also: Sequence[RollRecorder] = (),
) -> dict[str, Any]:
    """Create the requests `nodeops cycle workers` would, start the manager, and record the
    roll until every request has ended. Recorders in `also` are started with `recorder` and
    finished once they too have seen every request end; the report is `recorder`'s."""
    assert world.client is not None
    nodes, _ = await world.client.list(NODES)
    args = build_parser().parse_args(["cycle", "workers", "-n", "nodeops-system"])
    plan = plan_requests(args, [group], nodes)
    assert not plan.problems, plan.problems
    names = {}
    for body in plan.requests:
        created = await world.create_request(body)
        names[created["metadata"]["name"]] = "workers"
    desired = {
        f"{w.kind}/{w.namespace}/{w.name}": w.replica_count
        for w in sc.workloads
        if w.kind != "DaemonSet"
    }
    world.stats.reset()
    for each in (recorder, *also):
        each.start(desired)
    roll_started = world.clock.timestamp()
    world.start_manager()
    for each in (recorder, *also):
        await _until_ended(each, names)
    stats = world.stats.snapshot()
    await recorder.settle()  # the rehearsal's rule for pods left Pending
    nodes, _ = await world.client.list(NODES)
    created = {
        o.name(n): stamp.timestamp()
        for n in nodes
        if (stamp := o.parse_time(o.meta(n).get("creationTimestamp"))) is not None
    }
    boots = boot_seconds(world, created)
    starts = await _pod_starts_since(world, roll_started)
    report = outcome(recorder, names, plan.requests, stats).as_dict()
    # The scenario's boot is BOOT_SECONDS: more here means the simulator lagged its clock, and
    # the real roll ran longer than the cluster it stands for would.
    report["observed_boot_seconds"] = round(median(boots), 1) if boots else None
    report["observed_pod_start_seconds"] = {k: round(v, 1) for k, v in sorted(starts.items())}
    return report


async def _until_ended(recorder: RollRecorder, names: Mapping[str, str]) -> None:
    await recorder.until(lambda: recorder.all_ended(names), 3600)
    recorder.finish()


async def on_cluster(nodes: int, args: argparse.Namespace) -> dict[str, Any]:
    """Rehearse, then roll, one cluster on a real control plane: the simulator's kubelets and
    clouds attached to the API server of `--kubeconfig`, whose own controller-manager and
    scheduler do their part. The cluster is built once, on the clock the roll runs on (a real
    controller-manager judges the kubelets' leases by its wall clock); the rehearsal reads it
    as it reads any cluster, and the recorder follows the roll through watches."""
    sc = scenario(nodes, args.pods_per_node, args.seed)
    concurrency = max(2, nodes // 10)
    world = World(
        WorldOptions(
            scenario=sc,
            time_scale=args.real_scale,
            seed=args.seed,
            controllers=False,
            settings=dict(OPERATOR_DEFAULTS),
            manager_qps=CLIENT_QPS,
            kubeconfig=args.kubeconfig,
            context=args.context,
            sim_controllers=args.sim_controllers,
            attach_id="bench-rehearse",
        )
    )
    async with world.api_client(qps=0, user_agent="rehearse-bench/1") as installer:
        await attached_world.apply_crds(installer, strip_new_fields=args.strip_new_crd_fields)
        version = await attached_world.server_version(installer)
    started = time.monotonic()
    await world.start(wait_ready=600)
    feed: WatchFeed | None = None
    try:
        assert world.client is not None and world.attachment is not None
        body = nodegroup(concurrency)
        body["metadata"]["labels"] = dict(world.attachment.labels)
        group = await world.client.create(NODEGROUPS, body)
        try:
            with tempfile.TemporaryDirectory() as tmp:
                providers = world.attachment.write_provider_config(Path(tmp) / "providers.yaml")
                context = ["--context", args.context] if args.context else []
                predicted = await rehearse_process(
                    Path(args.kubeconfig), providers, args.rehearse_scale, *context
                )
            recorder = RollRecorder(None, world.clock, Workloads(()))
            feed = attached_world.roll_feed(world.attachment.new_client("rehearse-bench"), recorder)
            await feed.start()
            real = await roll_and_record(world, sc, group, recorder)
        finally:
            await world.client.delete(NODEGROUPS, "workers")
    finally:
        if feed is not None:
            await feed.stop()
        await world.stop()
    real["wall_seconds"] = round(time.monotonic() - started, 1)
    real["time_scale"] = args.real_scale
    real["clock"] = "real control plane"
    return {
        "nodes": nodes,
        "pods": predicted["inputs"]["pods"],
        "concurrency": concurrency,
        "server_version": version,
        **compare(predicted, real, api_calls_counted=False),
        **_cost(predicted, args),
        **_real_roll_figures(real),
        "api_calls_predicted": sum(predicted["api_calls"].values()),
        "cloud_calls_predicted": sum(predicted["cloud_calls"].values()),
        "cloud_calls_real": sum(real["cloud_calls"].values()),
    }


async def _pod_starts_since(world: World, since: str) -> dict[str, float]:
    """Per workload, the median start of the pods the roll made, read from their records as a
    rehearsal reads them. Every pod of the scenario starts in the kubelet's two seconds, so more
    is the simulator lagging its clock, and the drains that waited on those pods with it."""
    assert world.client is not None
    pods, _ = await world.client.list(PODS)
    replicasets, _ = await world.client.list(REPLICASETS)
    made = [p for p in pods if str(o.meta(p).get("creationTimestamp") or "") >= since]
    return pod_start_seconds(made, Workloads(replicasets)).seconds


def compare(
    predicted: dict[str, Any], real: dict[str, Any], *, api_calls_counted: bool = True
) -> dict[str, Any]:
    """Where the rehearsal and the real roll agree. `api_calls_counted` False: the real roll's
    Kubernetes API calls were not counted (a server not ours), and only cloud calls compare."""

    def kinds(failures: list[str]) -> set[str]:
        return {
            "deadline" if "drain deadline" in f else "pending" if "Pending" in f else "request"
            for f in failures
        }

    p, r = predicted.get("predicted_seconds"), real.get("predicted_seconds")
    real_budgets = {b["budget"] for b in real["budgets"] if b["longest_seconds"] >= 30}
    real_pending = {x["pod"].rsplit("-", 2)[0] for x in real["pending"]}
    return {
        "predicted_seconds": p,
        "real_seconds": r,
        "duration_error": round(p / r - 1, 4) if p and r else None,
        "budgets_blocking_real": sorted(real_budgets),
        "budgets_predicted": sorted(b["budget"] for b in predicted["budgets"]),
        "budgets_missed": sorted(real_budgets - {b["budget"] for b in predicted["budgets"]}),
        "pending_real": len(real["pending"]),
        "pending_predicted": len(predicted["pending"]),
        "pending_spare_real": sum(1 for x in real["pending"] if x.get("spare")),
        "pending_spare_predicted": sum(1 for x in predicted["pending"] if x.get("spare")),
        "preempted_real": {x["workload"]: x["pods"] for x in real.get("preempted") or ()},
        "preempted_predicted": {x["workload"]: x["pods"] for x in predicted.get("preempted") or ()},
        "pending_missed": sorted(
            real_pending - {x["pod"].rsplit("-", 2)[0] for x in predicted["pending"]}
        ),
        "failures_predicted": predicted["failures"],
        "failures_real": real["failures"],
        "false_alarms": sorted(kinds(predicted["failures"]) - kinds(real["failures"])),
        "lowest_ready_predicted": {d["workload"]: d["lowest_ready_share"] for d in predicted["workloads"]},
        "lowest_ready_real": {d["workload"]: d["lowest_ready_share"] for d in real["workloads"]},
        # Where the two rolls went apart: each batch's start and end, each budget's blocked
        # time, and the calls whose counts differ by more than a fifth.
        "batches_predicted": _batches(predicted),
        "batches_real": _batches(real),
        "budget_seconds_predicted": _budget_seconds(predicted),
        "budget_seconds_real": _budget_seconds(real),
        "calls_differing": _calls_differing(
            predicted, real, ("api_calls", "cloud_calls") if api_calls_counted else ("cloud_calls",)
        ),
    }  # fmt: skip


def _batches(report: dict[str, Any]) -> list[list[float | None]]:
    return [[b["start_seconds"], b["end_seconds"]] for b in report["batches"]]


def _budget_seconds(report: dict[str, Any]) -> dict[str, float]:
    return {b["budget"]: b["blocked_seconds"] for b in report["budgets"]}


def _calls_differing(
    predicted: dict[str, Any], real: dict[str, Any], sides: Sequence[str]
) -> dict[str, list[int]]:
    """`call: [predicted, real]` for the calls whose counts differ by more than a fifth."""
    out: dict[str, list[int]] = {}
    for side in sides:
        p, r = predicted[side], real[side]
        for call in sorted(set(p) | set(r)):
            a, b = int(p.get(call, 0)), int(r.get(call, 0))
            if abs(a - b) > 0.2 * max(a, b, 1) and max(a, b) >= 10:
                out[call] = [a, b]
    return out


async def one(nodes: int, args: argparse.Namespace) -> dict[str, Any]:
    sc = scenario(nodes, args.pods_per_node, args.seed)
    concurrency = max(2, nodes // 10)
    if args.real_only:
        real = await real_roll(
            sc, concurrency, args.real_scale, args.seed, args.real_clock, args.placeholders
        )
        return {
            "nodes": nodes,
            "concurrency": concurrency,
            "real_seconds": real.get("predicted_seconds"),
            "batches_real": _batches(real),
            "budget_seconds_real": _budget_seconds(real),
            "failures_real": real["failures"],
            **_real_roll_figures(real),
        }
    predicted = await rehearsal(
        sc,
        concurrency,
        args.rehearse_scale,
        args.seed,
        args.live_scale,
        args.live_clock,
        args.placeholders,
    )
    cost = _cost(predicted, args)
    if args.rehearse_only:
        return {
            "nodes": nodes,
            "pods": predicted["inputs"]["pods"],
            "concurrency": concurrency,
            "predicted_seconds": predicted.get("predicted_seconds"),
            "failures_predicted": predicted["failures"],
            **cost,
        }
    real = await real_roll(
        sc, concurrency, args.real_scale, args.seed, args.real_clock, args.placeholders
    )
    return {
        "nodes": nodes,
        "pods": predicted["inputs"]["pods"],
        "concurrency": concurrency,
        **compare(predicted, real),
        **cost,
        **_real_roll_figures(real),
        "api_calls_predicted": sum(predicted["api_calls"].values()),
        "api_calls_real": sum(real["api_calls"].values()),
        "cloud_calls_predicted": sum(predicted["cloud_calls"].values()),
        "cloud_calls_real": sum(real["cloud_calls"].values()),
    }  # fmt: skip


def _real_roll_figures(real: dict[str, Any]) -> dict[str, Any]:
    """How the real roll ran: its clock, its wall time, and the boots and pod starts it saw."""
    return {
        "real_time_scale": real["time_scale"],
        "real_clock": real["clock"],
        "real_roll_wall_seconds": real["wall_seconds"],
        "real_observed_boot_seconds": real["observed_boot_seconds"],
        "real_observed_pod_start_seconds": real["observed_pod_start_seconds"],
    }


def _cost(predicted: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    return {
        "rehearse_wall_seconds": predicted["wall_seconds_measured"],
        "rehearse_cpu_seconds": predicted["cpu_seconds_measured"],
        "rehearse_max_rss_mib": predicted["max_rss_mib"],
        "rehearse_memory_estimate_mib": round(
            predicted["inputs"]["memory_estimate_bytes"] / 2**20, 1
        ),
        "rehearse_time_scale": predicted["inputs"]["time_scale"],
        "rehearse_clock": predicted["inputs"].get("clock"),
        "rehearse_exit_code": predicted["exit_code"],
        "rehearse_progress": predicted["progress"],
        "live_time_scale": args.live_scale if args.kubeconfig is None else args.real_scale,
        "live_clock": args.live_clock if args.kubeconfig is None else "real control plane",
        # What the rehearsal read from the live cluster's history: a live cluster built at once
        # on a busy simulator shows its pods' starts slowed by that build.
        "rehearse_pod_start_seconds_observed": predicted["inputs"].get(
            "pod_start_seconds_observed"
        ),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    load_start = os.getloadavg()
    run = one if args.kubeconfig is None else on_cluster
    runs = [await run(n, args) for n in args.nodes]
    return {
        "bench": "rehearse",
        "nodeops": __version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "runs": runs,
    }


def _sizes(text: str) -> list[int]:
    """`--nodes`: positive cluster sizes, comma-separated."""
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of node counts: {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"node counts must be 1 or more: {text!r}")
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--nodes", type=_sizes, default="20,200", help="comma-separated cluster sizes"
    )
    parser.add_argument("--pods-per-node", type=_positive, default=30.0)
    parser.add_argument(
        "--rehearse-scale", type=_positive, default=None, help="default: the rehearsal's own"
    )
    parser.add_argument(
        "--real-scale",
        type=_positive,
        default=1.0,
        help="the real roll's time scale: faster, and the simulator lags its clock, which "
        "lengthens the real roll (the rehearsal's work takes no simulated time); at 200 nodes "
        "on two cores, 2 made it 25%% longer than 1",
    )
    parser.add_argument(
        "--real-clock",
        choices=("scaled", "warp"),
        default="scaled",
        help="the real roll's clock: scaled wall time (its simulator may lag it), or a loop that "
        "skips idle waits and counts no time for work, for sizes the machine cannot keep up "
        "with on a scaled clock",
    )
    parser.add_argument(
        "--live-clock",
        choices=("warp", "scaled"),
        default="warp",
        help="the clock the live cluster the rehearsal reads is built on: a loop that skips "
        "idle waits and counts no time for work, so that its pods' recorded starts are its "
        "kubelets' (then it keeps real time while read), or a scaled wall clock (--live-scale)",
    )
    parser.add_argument(
        "--live-scale",
        type=_positive,
        default=0.1,
        help="the live cluster's time scale; on the scaled clock, slow, so that building it at "
        "once lags its clock by as little as can be",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--placeholders",
        type=_count,
        default=None,
        metavar="WAITING",
        help="keep the cluster full of placeholder pods (priority -1, 1 CPU each), as an "
        "autoscaler's overprovisioning does, with WAITING more Pending for room: the roll's "
        "pods then preempt them",
    )
    attached_world.add_cluster_arguments(
        parser,
        "rehearse and roll on this cluster instead of the simulator: the simulator's "
        "kubelets and clouds attach to its API server, its own control plane schedules and "
        "runs the workloads, the cluster is built once, rehearsed, then rolled at --real-scale "
        "(keep 1 beside a real kube-controller-manager), and everything attached is removed",
    )
    parser.add_argument(
        "--rehearse-only",
        action="store_true",
        help="skip the real roll: the rehearsal's own cost and prediction, for sizes whose real "
        "roll would take hours",
    )
    parser.add_argument(
        "--real-only",
        action="store_true",
        help="skip the rehearsal: the real roll alone, to see how much the simulator standing "
        "in for the cluster lags its clock at a given --real-scale",
    )
    args = parser.parse_args(argv)
    if args.real_only and args.rehearse_only:
        parser.error("--real-only and --rehearse-only exclude each other")
    if args.kubeconfig is not None and args.placeholders is not None:
        parser.error(
            "--placeholders fills the simulated clusters; it does not apply with --kubeconfig"
        )
    attached_world.check_cluster_arguments(parser, args)
    if args.kubeconfig is not None and (
        args.real_only or args.rehearse_only or args.real_clock != "scaled"
    ):
        parser.error(
            "with --kubeconfig the cluster is rehearsed and rolled on the cluster's own clock: "
            "--real-only, --rehearse-only and --real-clock do not apply"
        )
    from nodeops.kube.logging import configure

    configure("error", "console")
    result = asyncio.run(main_async(args))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
