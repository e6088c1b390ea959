"""`nodeops demo`: replace every node of a simulated cluster while it serves traffic.

Starts a simulated cluster (cloud node groups, workloads with disruption budgets, a load
balancer with clients sending requests through it) and the cycling controllers in one process,
creates a CycleNodeRequest for every node group, shows the roll live, and ends with a summary.
The simulator's own record (not the operator's word) says whether a budget was violated, how
often pods moved and how many requests failed. Exit status 0 only when the request ends
Successful with nothing lost: no capacity, no request, no budget.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Mapping
from typing import Any

from nodeops import __version__

__all__ = ["add_arguments", "run"]

REQUEST = "demo-roll"


def add_arguments(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser(
        "demo",
        help="cycle every node of a simulated cluster and show it live",
        description="Start a simulated cluster and the cycling controllers in this process, "
        "replace every node of its node groups with a CycleNodeRequest while clients send "
        "requests through a load balancer, and summarise what happened.",
    )
    demo.add_argument("--nodes", type=int, default=12, help="worker nodes (default 12)")
    demo.add_argument("--groups", type=int, default=2, help="cloud node groups (default 2)")
    demo.add_argument(
        "--concurrency", type=int, default=3, help="nodes replaced at once (default 3)"
    )
    demo.add_argument(
        "--method", choices=("Drain", "Wait"), default="Drain", help="cycle method (Drain)"
    )
    demo.add_argument(
        "--time-scale",
        type=float,
        default=30.0,
        help="simulated seconds per wall second (default 30)",
    )
    demo.add_argument(
        "--faults",
        default=None,
        help="API faults for the operator, in `nodeops sim serve --faults` grammar, e.g. "
        "'error=500:0.05@*;watch-cut=seconds:10@*'",
    )
    demo.add_argument(
        "--boot-seconds", type=float, default=60.0, help="simulated boot time of an instance"
    )
    demo.add_argument("--seed", type=int, default=0, help="seed of the cluster and the faults")
    demo.add_argument(
        "--timeout", type=float, default=600.0, help="give up after this many wall seconds"
    )
    demo.add_argument(
        "--json",
        action="store_true",
        help="print the summary as one JSON object on the last line of stdout",
    )
    demo.add_argument(
        "--kubeconfig",
        help="roll on this cluster instead: the simulated nodes, cloud and load balancer "
        "attach to it (`nodeops sim attach`) and are removed at the end",
    )
    demo.add_argument("--context", help="with --kubeconfig: its context")
    demo.add_argument(
        "--sim-controllers",
        default="",
        metavar="LIST",
        help="with --kubeconfig: the simulator's control-plane loops to run there too, as "
        "`nodeops sim attach --controllers` (default none; a bare API server needs all)",
    )


def run(args: argparse.Namespace) -> int:
    for name in ("nodes", "groups", "concurrency"):
        if getattr(args, name) < 1:
            print(f"nodeops demo: --{name} must be at least 1", file=sys.stderr)
            return 2
    if args.time_scale <= 0:
        print("nodeops demo: --time-scale must be positive", file=sys.stderr)
        return 2
    if args.faults:
        from nodeops.sim.server.faults import FaultSpec, FaultSpecError

        try:
            FaultSpec.parse(args.faults)
        except FaultSpecError as e:
            print(f"nodeops demo: --faults: {e}", file=sys.stderr)
            return 2
    try:
        summary = asyncio.run(_demo(args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from nodeops.sim.attach import AttachError

        if isinstance(exc, AttachError):
            print(f"nodeops demo: {exc}", file=sys.stderr)
            return 1
        raise
    ok = _nothing_lost(summary)
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        _print_summary(summary)
    return 0 if ok else 1


async def _demo(args: argparse.Namespace) -> dict[str, Any]:
    from nodeops.controllers.cycling.pods import movable
    from nodeops.controllers.cycling.progress import RollView, roll_state
    from nodeops.controllers.cycling.resources import CYCLENODESTATUSES
    from nodeops.demo.scenario import demo_scenario, group_names
    from nodeops.demo.world import OPERATOR_NAMESPACE, World, WorldOptions
    from nodeops.kube.client import Client
    from nodeops.kube.logging import configure
    from nodeops.kube.resources import PODS
    from nodeops.sim.attach import parse_controllers

    configure("warning", "console")
    scenario = demo_scenario(
        args.nodes, groups=args.groups, boot_seconds=args.boot_seconds, seed=args.seed
    )
    world = World(
        WorldOptions(
            scenario=scenario,
            time_scale=args.time_scale,
            faults=args.faults,
            seed=args.seed,
            traffic={"web": "shop/web"},
            kubeconfig=args.kubeconfig,
            context=args.context,
            sim_controllers=parse_controllers(args.sim_controllers),
        )
    )
    wall_start = time.monotonic()
    view = RollView(sys.stderr, live=None if not args.json else False)
    watcher: Client | None = None
    try:
        await world.start()
        # The view reads through its own client, so its reads are not counted as the operator's.
        watcher = world.api_client(qps=0, user_agent=f"nodeops-demo/{__version__}")
        assert world.client is not None
        pods, _ = await watcher.list(PODS)
        pods_at_start = sum(1 for p in pods if movable(p))
        groups = group_names(args.groups)[: len(scenario.node_groups)]
        desired = {g: world.cloud.state.groups[g].desired for g in groups}
        nodes_before = sum(desired.values())
        print(
            _introduction(scenario, groups, pods_at_start, args, live=view.live),
            file=sys.stderr,
            flush=True,
        )
        sim_start = world.clock.now()
        await world.create_request(_request(groups, args.concurrency, args.method))
        deadline = time.monotonic() + args.timeout
        request: Mapping[str, Any] | None = None
        while time.monotonic() < deadline:
            request = await _get(watcher)
            children, _ = await watcher.list(
                CYCLENODESTATUSES, OPERATOR_NAMESPACE, label_selector=f"name={REQUEST}"
            )
            state = roll_state(
                request,
                children,
                pods_moved=world.record.evictions,
                requests_sent=world.requests_sent,
                requests_failed=world.requests_failed,
                simulated_seconds=(world.clock.now() - sim_start).total_seconds(),
            )
            view.show(state)
            if state.phase in ("Successful", "Failed"):
                break
            await asyncio.sleep(0.25)
        simulated = (world.clock.now() - sim_start).total_seconds()
        stats = world.stats.snapshot()
        status = (request or {}).get("status") or {}
        lost, orphaned = _capacity(world, desired)
        # The referee counts the pods the API server marks as evicted (DisruptionTarget,
        # kube-apiserver 1.26 and later); on an older attached server it sees none, and the
        # request's own count of the pods its drains moved is what there is.
        evictions, counted_by = world.record.evictions, "cluster"
        if not evictions and status.get("podMoves"):
            evictions, counted_by = int(status["podMoves"]), "request status"
        return {
            "nodes_before": nodes_before,
            "nodes_cycled": int((status.get("progress") or {}).get("cycled") or 0),
            "nodes_lost": lost,
            "instances_orphaned": orphaned,
            "pdb_violations": len(world.record.violations),
            "min_ready_replicas_ratio": round(world.record.min_ready_ratio, 4),
            "pod_moves_per_pod": round(evictions / pods_at_start, 4) if pods_at_start else 0.0,
            "pods": pods_at_start,
            "evictions": evictions,
            "evictions_counted_by": counted_by,
            "phase": status.get("phase") or "Pending",
            "message": status.get("message") or "",
            "simulated_seconds": round(simulated, 1),
            "wall_seconds": round(time.monotonic() - wall_start, 2),
            "api_requests": world.operator_requests,
            "cloud_requests": _cloud_requests(stats),
            "requests_sent": world.requests_sent,
            "requests_failed": world.requests_failed,
            "concurrency": args.concurrency,
            "time_scale": args.time_scale,
        }
    finally:
        view.close()
        if watcher is not None:
            await watcher.close()
        await world.stop()


def _introduction(
    scenario: Any, groups: list[str], pods: int, args: argparse.Namespace, *, live: bool
) -> str:
    """What is about to happen, so that what follows reads as a story: on a terminal one live
    view redrawn in place, elsewhere a line per change."""
    workloads = []
    for w in scenario.workloads:
        budget = ""
        if w.pdb is not None:
            limit, value = (
                ("maxUnavailable", w.pdb.max_unavailable)
                if w.pdb.max_unavailable is not None
                else ("minAvailable", w.pdb.min_available)
            )
            budget = f" (budget {limit} {value})"
        workloads.append(f"{w.kind} {w.namespace}/{w.name}{budget}")
    shown = (
        "Below, updated in place: a bar of nodes replaced per group, then the request's phase, "
        "nodes in progress, pods moved, requests failed and what the roll waits for."
        if live
        else "A line at each change: the simulated time, the request's phase, nodes replaced "
        "per group, nodes in progress, pods moved, requests failed, and below it what the roll "
        "waits for."
    )
    return (
        f"A simulated cluster: {sum(g.size for g in scenario.node_groups)} nodes in cloud node "
        f"groups {', '.join(groups)}; {pods} pods of {', '.join(workloads)}; clients sending "
        "100 requests a second through a load balancer to shop/web.\n"
        f"Replacing every node, {args.concurrency} at a time ({args.method}), with "
        f"CycleNodeRequest {REQUEST}; simulated time runs {args.time_scale:g} times as fast as "
        f"the wall clock. {shown}\n"
    )


async def _get(client: Any) -> Mapping[str, Any] | None:
    from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS
    from nodeops.demo.world import OPERATOR_NAMESPACE

    result: Mapping[str, Any] | None = await client.get_or_none(
        CYCLENODEREQUESTS, REQUEST, OPERATOR_NAMESPACE
    )
    return result


def _request(groups: list[str], concurrency: int, method: str) -> dict[str, Any]:
    return {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "CycleNodeRequest",
        "metadata": {"name": REQUEST},
        "spec": {
            "nodeGroupName": groups[0],
            "nodeGroupsList": groups[1:] or None,
            "selector": {"matchLabels": {"role": "worker"}},
            "cycleSettings": {"method": method, "concurrency": concurrency},
        },
    }


def _capacity(world: Any, desired: Mapping[str, int]) -> tuple[int, int]:
    """(nodes of capacity missing at the end, instances running outside every group)."""
    state = world.cloud.state
    in_service = 0
    for name in desired:
        group = state.groups[name]
        for iid in group.members:
            instance = state.instances[iid]
            if (
                instance.lifecycle == "InService"
                and instance.node_created
                and not instance.node_gone
            ):
                in_service += 1
    orphaned = sum(
        1 for i in state.instances.values() if i.group is None and i.lifecycle == "Detached"
    )
    return max(0, sum(desired.values()) - in_service), orphaned


def _cloud_requests(snapshot: Mapping[str, Any]) -> int:
    pairs = ((snapshot.get("by_agent") or {}).get("nodeops") or {}).get("by_verb_resource") or {}
    return sum(
        int(v.get("requests") or 0)
        for k, v in pairs.items()
        if k.split("/", 1)[-1].startswith("cloud/")
    )


def _nothing_lost(summary: Mapping[str, Any]) -> bool:
    """The roll's promise: every node replaced with no capacity, request or budget lost."""
    return (
        summary["phase"] == "Successful"
        and summary["nodes_lost"] == 0
        and summary["requests_failed"] == 0
        and summary["pdb_violations"] == 0
    )


def _print_summary(summary: Mapping[str, Any]) -> None:
    lost = [
        f"{summary[key]} {what}"
        for key, what in (
            ("nodes_lost", "nodes of capacity lost"),
            ("requests_failed", "requests failed"),
            ("pdb_violations", "budget violations"),
        )
        if summary[key]
    ]
    lines = [
        "",
        f"{'Done' if _nothing_lost(summary) else 'Not done'}: the roll ended {summary['phase']}"
        + (f" ({summary['message']})" if summary.get("message") else "")
        + (f", but with {', '.join(lost)}" if lost else ""),
        f"  nodes replaced        {summary['nodes_cycled']} of {summary['nodes_before']}"
        f" ({summary['nodes_lost']} of capacity lost)",
        f"  budget violations     {summary['pdb_violations']} (from the simulator's record)",
        f"  lowest ready share    {summary['min_ready_replicas_ratio']:.0%} of a Deployment's "
        "replicas",
        f"  pod moves per pod     {summary['pod_moves_per_pod']:.2f}"
        f" ({summary['evictions']} evictions of {summary['pods']} pods)",
        f"  requests failed       {summary['requests_failed']} of {summary['requests_sent']}",
        f"  time                  {summary['simulated_seconds']:.0f}s simulated in "
        f"{summary['wall_seconds']:.1f}s",
        f"  API requests          {summary['api_requests']} (and {summary['cloud_requests']} "
        "to the cloud)",
    ]
    print("\n".join(lines))
