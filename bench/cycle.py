"""A 200-node roll on the simulator: how close to the ideal time, at what cost, moving each pod once.

    python -m bench.cycle --json [--nodes 200] [--concurrency 20] [--time-scale 5]
    python -m bench.cycle --json --nodes 1000 --concurrency 50 --compare 200:20 --taint-only

`--compare N:C` first rolls a smaller cluster in the same run (same machine load, same time
scale) and reports how the per-node costs grew from it (`growth_over_baseline`, 1.0 = flat).
Each roll reports the manager's resident memory at the end and at its peak, and the load
average, since the machine the simulator shares decides how far its clock can be trusted.

The cluster is the demo's (four cloud node groups, about two pods per node in two Deployments
with disruption budgets (25% unavailable) that let a batch's pods move together, a DaemonSet), with simulated boot
(60 s), drain (pods' 10 s termination grace) and shutdown (20 s) times. The simulator runs in
this process at `--time-scale` (5 by default: at 200 nodes a faster clock outruns the
simulator's own loops on a small machine, and its lag would be counted against the operator). The manager runs as `nodeops run --controllers
cycling` in a process of its own, so its CPU time is its own. The same roll runs twice in one
run, in fresh clusters built from the same seed: with the taint that keeps evicted pods off
nodes still to be replaced (the default), and with it off.

Figures (from the first roll unless said):

- `duration_ratio`: simulated duration / the ideal bound ceil(N/c) x (boot + drain + shutdown),
  target <= 1.10;
- `api_requests_per_node`: Kubernetes API requests the manager made per node cycled (cloud
  calls are reported apart);
- `cpu_seconds_per_node`: the manager process's CPU seconds (user + system, start-up and cache
  sync included) per node cycled;
- `pod_moves_per_pod`: evictions / pods, from the simulator's record, target <= 1.05, and the
  same for the roll without the taint.

Each run also reports where the time went: the request's seconds per phase, and the median
simulated seconds the simulated cloud took from launching a replacement to its Node
(`observed_boot_seconds`, 60 s when the simulator keeps up) and a node took from the start of
its drain to the end of its CycleNodeStatus (`observed_drain_seconds`). On a loaded machine the
simulator falls behind its clock and both grow; the operator's own share is what is left.

Every run is also checked: Successful, no budget violated, no capacity lost.

On a real control plane:

    python -m bench.cycle --json --kubeconfig K --time-scale 2 --taint-only \
        [--strip-new-crd-fields] [--sim-controllers LIST] [--pending-node-taint NoSchedule]

The same roll with the simulator's kubelets and clouds attached to K's API server
(`nodeops sim attach`); the cluster's own kube-controller-manager and kube-scheduler schedule,
run the ReplicaSets, the disruption budgets and the garbage collector (`--sim-controllers` adds
the simulator's loops for a cluster without them). The CRDs are installed first by server-side
apply; `--strip-new-crd-fields` drops the validation rules' `fieldPath` and `reason`, which
servers older than 1.28 refuse. What the simulated server counted is taken from outside the
operator instead (`bench.attached_world`): pod moves are the workload pods a watch saw stop,
API requests the manager's own client's count, a Node's birth when a watch first saw it. The
JSON names the server's version, and counts the nodes that went not-Ready while schedulable (the
cluster judges the kubelets' leases by its wall clock: keep the time scale low, 1-2, beside a
real kube-controller-manager) and whatever the detach after each roll left behind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import resource
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import attached_world
from nodeops import __version__
from nodeops.controllers.cycling.pods import movable
from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS
from nodeops.demo.scenario import demo_scenario, group_names
from nodeops.demo.world import OPERATOR_NAMESPACE, World, WorldOptions, api_requests
from nodeops.kube.client import Client
from nodeops.kube.resources import PODS

BOOT_SECONDS = 60.0
GRACE_SECONDS = 10
TARGET_DURATION_RATIO = 1.10
TARGET_POD_MOVES = 1.05


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class Ground:
    """Where the roll runs: the simulator (no kubeconfig), or a cluster the simulator's
    kubelets and clouds attach to."""

    kubeconfig: str | None = None
    context: str | None = None
    sim_controllers: frozenset[str] = frozenset()
    strip_new_crd_fields: bool = False
    pods_per_node: float = 2.0

    @property
    def attached(self) -> bool:
        return self.kubeconfig is not None


async def roll(
    nodes: int,
    concurrency: int,
    groups: int,
    time_scale: float,
    taint: str,
    seed: int,
    manager_log: Path | None = None,
    manager_log_level: str = "info",
    profile: Path | None = None,
    ground: Ground = Ground(),
) -> dict[str, Any]:
    scenario = demo_scenario(
        nodes,
        groups=groups,
        boot_seconds=BOOT_SECONDS,
        grace_seconds=GRACE_SECONDS,
        pods_per_node=ground.pods_per_node,
        web_budget="25%",
        stateful=False,
        seed=seed,
    )
    world = World(
        WorldOptions(
            scenario=scenario,
            time_scale=time_scale,
            seed=seed,
            controllers=False,
            kubeconfig=ground.kubeconfig,
            context=ground.context,
            sim_controllers=ground.sim_controllers,
            attach_id="bench-cycle",
        )
    )
    referee: attached_world.Referee | None = None
    result: dict[str, Any] = {}
    if world.attachment is not None:
        async with world.api_client(qps=0, user_agent="cycle-bench/1") as installer:
            await attached_world.apply_crds(installer, strip_new_fields=ground.strip_new_crd_fields)
    try:
        await world.start(wait_ready=600)
    except BaseException:
        await world.stop()
        raise
    watcher = world.api_client(qps=0, user_agent="cycle-bench/1")
    shutdown = world.cloud.settings.shutdown_seconds
    try:
        selector = None
        if world.attachment is not None:
            selector = ",".join(f"{k}={v}" for k, v in world.attachment.labels.items())
            referee = attached_world.Referee(world)
            await referee.start()
        pods, _ = await watcher.list(PODS, label_selector=selector)
        pods_at_start = sum(1 for p in pods if movable(p))
        names = group_names(groups)
        if world.attachment is None:
            world.sim.server.stats.reset()
        with tempfile.TemporaryDirectory() as tmp:
            cpu_before = _children_cpu()
            port = _free_port()
            metrics_port = _free_port()
            if world.attachment is not None:
                assert ground.kubeconfig is not None
                command = attached_world.manager_command(
                    world,
                    Path(tmp),
                    kubeconfig=ground.kubeconfig,
                    context=ground.context,
                    metrics_port=metrics_port,
                    health_port=port,
                )
            else:
                command = world.manager_command(Path(tmp))
                command[command.index("--health-addr") + 1] = f"127.0.0.1:{port}"
            if profile is not None:
                command[1:1] = ["-m", "cProfile", "-o", str(profile)]
            log_file = None
            if manager_log is not None:
                command[command.index("--log-level") + 1] = manager_log_level
                log_file = manager_log.open("w", encoding="utf-8")
            proc = await asyncio.create_subprocess_exec(
                *command,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=log_file if log_file is not None else asyncio.subprocess.DEVNULL,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )
            if log_file is not None:
                log_file.close()  # the manager has its own descriptor now
            # The roll is timed from a manager that is up (caches synced), not from its start.
            await _until_ready(port)
            if referee is not None:
                referee.recording = True
            start = world.clock.now()
            wall = time.monotonic()
            labels = world.attachment.labels if world.attachment is not None else {}
            await watcher.create(
                CYCLENODEREQUESTS,
                {
                    "apiVersion": "nodeops.dev/v1alpha1",
                    "kind": "CycleNodeRequest",
                    "metadata": {"name": "bench", "labels": labels},
                    "spec": {
                        "nodeGroupName": names[0],
                        "nodeGroupsList": names[1:],
                        "selector": {"matchLabels": {"role": "worker"}},
                        "cycleSettings": {
                            "method": "Drain",
                            "concurrency": concurrency,
                            "pendingNodeTaint": taint,
                        },
                    },
                },
                OPERATOR_NAMESPACE,
            )
            status: dict[str, Any] = {}
            phases: dict[str, float] = {}
            seen = world.clock.now()
            while True:
                obj = await watcher.get(CYCLENODEREQUESTS, "bench", OPERATOR_NAMESPACE)
                status = obj.get("status") or {}
                now = world.clock.now()
                phase = str(status.get("phase") or "Pending")
                phases[phase] = phases.get(phase, 0.0) + (now - seen).total_seconds()
                seen = now
                if phase in ("Successful", "Failed"):
                    break
                await asyncio.sleep(0.5)
            simulated = (world.clock.now() - start).total_seconds()
            wall_seconds = time.monotonic() - wall
            if referee is not None:
                referee.recording = False
                assert world.attachment is not None
                requests = await attached_world.operator_requests(
                    metrics_port, world.attachment.target.server
                )
            else:
                requests = api_requests(world.sim.server.stats.snapshot())
            memory = _memory_mib(proc.pid)
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
            cpu = _children_cpu() - cpu_before
        cycled = int((status.get("progress") or {}).get("cycled") or 0)
        lost = sum(g.desired for g in world.cloud.state.groups.values()) - sum(
            1
            for i in world.cloud.state.instances.values()
            if i.group is not None and i.lifecycle == "InService"
        )
        ideal = math.ceil(nodes / concurrency) * (BOOT_SECONDS + GRACE_SECONDS + shutdown)
        # Evictions as the server marks them where it can (the simulator, kube-apiserver 1.26
        # and later); on an attached cluster, the workload pods the referee saw stop.
        moved = len(referee.moved) if referee is not None else world.record.evictions
        moves = moved / pods_at_start if pods_at_start else 0.0
        boots, drains = await _observed(world, watcher, referee)
        extra: dict[str, Any] = {}
        if referee is not None:
            extra = {
                "pod_moves_counted_by": "workload pods seen stopping by a watch",
                "evictions_marked_by_server": world.record.evictions,
                "pod_moves_by_request_status": status.get("podMoves"),
                "nodes_not_ready_while_schedulable": len(referee.not_ready),
                "pods_moved_twice": referee.moved_twice,
                "api_requests_counted_by": "the manager's rest_client_requests_total",
            }
        result = {
            **extra,
            "phase": status.get("phase"),
            "nodes_cycled": cycled,
            "nodes_lost": lost,
            "pdb_violations": len(world.record.violations),
            "pods": pods_at_start,
            "evictions": moved,
            "pod_moves_per_pod": round(moves, 4),
            "simulated_seconds": round(simulated, 1),
            "ideal_seconds": ideal,
            "duration_ratio": round(simulated / ideal, 3),
            "wall_seconds": round(wall_seconds, 1),
            "api_requests": requests,
            "api_requests_per_node": round(requests / max(1, cycled), 2),
            "manager_cpu_seconds": round(cpu, 2),
            "cpu_seconds_per_node": round(cpu / max(1, cycled), 4),
            "manager_rss_mib": memory.get("VmRSS"),
            "manager_peak_rss_mib": memory.get("VmHWM"),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "min_ready_replicas_ratio": round(world.record.min_ready_ratio, 4),
            "seconds_by_phase": {k: round(v, 1) for k, v in sorted(phases.items())},
            "observed_boot_seconds": boots,
            "observed_drain_seconds": drains,
        }
        return result
    finally:
        if referee is not None:
            await referee.stop()
        await watcher.close()
        await world.stop()
        if world.attachment is not None:
            # Detach removed what the attach created; what is left is counted, not hidden.
            async with world.api_client(qps=0, user_agent="cycle-bench/1") as checker:
                left = await attached_world.leftovers(checker, world.attachment.instance)
            if result:
                result["left_behind"] = left


def _memory_mib(pid: int) -> dict[str, float]:
    """The manager's resident memory now and at its peak (MiB), from /proc where there is one."""
    out: dict[str, float] = {}
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _until_ready(port: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /readyz HTTP/1.0\r\nHost: x\r\n\r\n")
            await writer.drain()
            line = await reader.readline()
            writer.close()
            if b" 200 " in line:
                return
        except OSError:
            pass
        await asyncio.sleep(0.1)
    raise TimeoutError("the manager did not become ready")


async def _observed(
    world: World, client: Client, referee: attached_world.Referee | None = None
) -> tuple[float, float]:
    """Median simulated seconds from a replacement's launch to its Node, and from a node's
    drain start to its CycleNodeStatus ending: what the simulated cloud and workloads took,
    against which the operator's overhead shows. An attached cluster stamps its Nodes by the
    wall clock, so there a Node's birth is when the referee first saw it (simulated clock)."""
    from statistics import median

    from nodeops.controllers.cycling.resources import CYCLENODESTATUSES
    from nodeops.kube import objects as o
    from nodeops.kube.resources import NODES

    created: dict[str, float] = {}
    if referee is not None:
        created = dict(referee.node_seen)
    else:
        nodes, _ = await client.list(NODES)
        for n in nodes:
            stamp = o.parse_time(o.meta(n).get("creationTimestamp"))
            if stamp is not None:
                created[o.name(n)] = stamp.timestamp()
    boots = boot_seconds(world, created)
    children, _ = await client.list(CYCLENODESTATUSES, OPERATOR_NAMESPACE)
    drains = []
    for child in children:
        status = child.get("status") or {}
        start = o.parse_time(status.get("drainStartedTimestamp"))
        end = o.parse_time(status.get("phaseTimestamp"))
        if start is not None and end is not None:
            drains.append((end - start).total_seconds())
    return (
        round(median(boots), 1) if boots else 0.0,
        round(median(drains), 1) if drains else 0.0,
    )


def boot_seconds(world: World, created: dict[str, float]) -> list[float]:
    """Simulated seconds from each replacement's launch to its Node's creation (`created`, by
    node name): the scenario's boot when the simulator keeps its clock, longer when it lags."""
    origin = world.clock.origin.timestamp()
    return [
        created[instance.node_name] - instance.launched_at
        for instance in world.cloud.state.instances.values()
        if instance.node_name in created and instance.launched_at > origin + 1
    ]


def _growth(small: dict[str, Any], large: dict[str, Any]) -> dict[str, Any]:
    """The large roll's per-node costs against the small one's: above 1 is growth with N."""
    keys = ("api_requests_per_node", "cpu_seconds_per_node", "duration_ratio")
    return {k: round(large[k] / small[k], 3) if small[k] else None for k in keys}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    logs: dict[str, Path | None] = {"taint": None, "no_taint": None, "baseline": None}
    if args.manager_logs is not None:
        args.manager_logs.mkdir(parents=True, exist_ok=True)
        logs = {name: args.manager_logs / f"{name}.log" for name in logs}
    ground = Ground(
        kubeconfig=args.kubeconfig,
        context=args.context,
        sim_controllers=args.sim_controllers,
        strip_new_crd_fields=args.strip_new_crd_fields,
        pods_per_node=args.pods_per_node,
    )
    where: dict[str, Any] = {"ground": "simulator"}
    if ground.attached:
        where = {
            "ground": "attached",
            "server_version": await _server_version(ground),
            "sim_controllers": sorted(ground.sim_controllers),
            "crd_fields_stripped": list(attached_world.CRD_FIELDS_SINCE_1_28)
            if ground.strip_new_crd_fields
            else [],
        }
    baseline: dict[str, Any] | None = None
    if args.compare is not None:
        small_nodes, small_concurrency = args.compare
        baseline = await roll(
            small_nodes,
            small_concurrency,
            args.groups,
            args.time_scale,
            "PreferNoSchedule",
            args.seed,
            logs["baseline"],
            args.manager_log_level,
            ground=ground,
        )
        baseline["nodes"], baseline["concurrency"] = small_nodes, small_concurrency
    with_taint = await roll(
        args.nodes,
        args.concurrency,
        args.groups,
        args.time_scale,
        args.pending_node_taint,
        args.seed,
        logs["taint"],
        args.manager_log_level,
        args.profile_manager,
        ground=ground,
    )
    without = None
    if not args.taint_only:
        without = await roll(
            args.nodes,
            args.concurrency,
            args.groups,
            args.time_scale,
            "Off",
            args.seed,
            logs["no_taint"],
            ground=ground,
        )
    runs = {"taint": with_taint}
    if without is not None:
        runs["no_taint"] = without
    if baseline is not None:
        runs["baseline"] = baseline
    ok = all(
        r["phase"] == "Successful"
        and r["nodes_lost"] == 0
        and r["pdb_violations"] == 0
        and not r.get("left_behind")
        and not r.get("nodes_not_ready_while_schedulable")
        for r in runs.values()
    )
    extra: dict[str, Any] = {}
    if baseline is not None:
        extra["growth_over_baseline"] = _growth(baseline, with_taint)
    return {
        **extra,
        **where,
        "pods_per_node": args.pods_per_node,
        "pending_node_taint": args.pending_node_taint,
        "benchmark": "cycle",
        "version": __version__,
        "python": platform.python_version(),
        "nodes": args.nodes,
        "concurrency": args.concurrency,
        "time_scale": args.time_scale,
        "boot_seconds": BOOT_SECONDS,
        "drain_seconds": GRACE_SECONDS,
        "duration_ratio": with_taint["duration_ratio"],
        "api_requests_per_node": with_taint["api_requests_per_node"],
        "cpu_seconds_per_node": with_taint["cpu_seconds_per_node"],
        "pod_moves_per_pod": with_taint["pod_moves_per_pod"],
        "pod_moves_per_pod_without_taint": without["pod_moves_per_pod"] if without else None,
        "targets": {
            "duration_ratio": TARGET_DURATION_RATIO,
            "pod_moves_per_pod": TARGET_POD_MOVES,
            "duration_met": with_taint["duration_ratio"] <= TARGET_DURATION_RATIO,
            "pod_moves_met": with_taint["pod_moves_per_pod"] <= TARGET_POD_MOVES,
        },
        "all_runs_correct": ok,
        "manager_peak_rss_mib": with_taint["manager_peak_rss_mib"],
        "runs": runs,
    }


async def _server_version(ground: Ground) -> str:
    from nodeops.sim.attach.kubeconfig import load_target

    assert ground.kubeconfig is not None
    target = load_target(ground.kubeconfig, ground.context)
    async with Client(
        target.server, token=target.token, ssl_context=target.ssl_context, qps=0
    ) as client:
        return await attached_world.server_version(client)


def _nodes_at(text: str) -> tuple[int, int]:
    nodes, sep, concurrency = text.partition(":")
    try:
        pair = (int(nodes), int(concurrency))
    except ValueError:
        pair = (0, 0)
    if not sep or pair[0] < 1 or pair[1] < 1:
        raise argparse.ArgumentTypeError(f"--compare: {text!r} is not NODES:CONCURRENCY (200:20)")
    return pair


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.cycle", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--time-scale", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--compare",
        type=_nodes_at,
        metavar="NODES:CONCURRENCY",
        default=None,
        help="first roll this smaller cluster (with the taint), in the same run and on the same "
        "machine load, and report how the per-node costs grow from it",
    )
    parser.add_argument(
        "--profile-manager",
        type=Path,
        metavar="FILE",
        default=None,
        help="run the manager of the roll with the taint under cProfile, its stats written to "
        "FILE (its CPU figures then include the profiler's cost)",
    )
    parser.add_argument(
        "--pending-node-taint",
        choices=["PreferNoSchedule", "NoSchedule"],
        default="PreferNoSchedule",
        help="the taint of the first roll on nodes still to be replaced (default "
        "PreferNoSchedule; NoSchedule keeps every scheduler off them, where a scheduler that "
        "weighs a preference against other scores puts some pods there anyway)",
    )
    parser.add_argument(
        "--taint-only",
        action="store_true",
        help="skip the second roll (the one without the pending-node taint)",
    )
    parser.add_argument(
        "--manager-logs",
        type=Path,
        metavar="DIR",
        default=None,
        help="write each roll's manager log to DIR/taint.log and DIR/no_taint.log",
    )
    parser.add_argument(
        "--manager-log-level",
        default="info",
        choices=["debug", "info", "warning"],
        help="with --manager-logs; debug adds each reconcile's duration and each wait's reason",
    )
    attached_world.add_cluster_arguments(
        parser,
        "roll on this cluster instead of the simulator: the simulator's kubelets and "
        "clouds attach to its API server (`nodeops sim attach`), its own control plane "
        "schedules, runs the ReplicaSets and the disruption budgets, and everything attached "
        "is removed after each roll",
    )
    parser.add_argument(
        "--pods-per-node",
        type=float,
        default=2.0,
        help="workload pods per node (default 2; fewer for a small machine carrying a real "
        "control plane)",
    )
    args = parser.parse_args(argv)
    attached_world.check_cluster_arguments(parser, args)
    if args.pods_per_node <= 0:
        parser.error("--pods-per-node must be positive")
    from nodeops.kube.logging import configure

    configure("warning", "console")
    result = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print(json.dumps(result, indent=2, sort_keys=True))
    return 0 if result["all_runs_correct"] else 1


if __name__ == "__main__":
    sys.exit(main())
