"""`nodeops cycle` (and `kubectl cycle`): CycleNodeRequests from NodeGroups, on demand.

    nodeops cycle system workers           # the NodeGroups named
    nodeops cycle -l team=platform         # the NodeGroups with these labels
    nodeops cycle --all --concurrency 2    # every NodeGroup, overriding its concurrency

Everything is checked before the first write: the NodeGroups exist and are valid, the nodes
named with `--nodes` are theirs, every request the NodeGroups make is one the controller
accepts. When anything is wrong nothing is created and each problem is printed with the field
at fault. `--dry` asks the API server to check the requests without storing them; `-o yaml`
prints them instead. After creating, it prints what it created and how to watch it, or with
`--watch` shows the roll live until the requests finish.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from nodeops import __version__

__all__ = ["add_arguments", "kubectl_main", "plan_requests", "run"]

DEFAULT_NAMESPACE = os.environ.get("NODEOPS_NAMESPACE", "nodeops-system")


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("nodegroups", nargs="*", metavar="NODEGROUP", help="NodeGroups to cycle")
    parser.add_argument("-l", "--selector", help="cycle the NodeGroups with these labels")
    parser.add_argument("--all", action="store_true", help="cycle every NodeGroup")
    parser.add_argument(
        "--name", help="name of the request (a prefix, completed per NodeGroup; default: its name)"
    )
    parser.add_argument("--nodes", help="comma-separated nodes to cycle (default: all)")
    parser.add_argument("--concurrency", type=int, help="override the NodeGroups' concurrency")
    parser.add_argument("--method", choices=("Drain", "Wait"), help="override the method")
    parser.add_argument("--cycling-timeout", help="override cyclingTimeout (e.g. 2h)")
    parser.add_argument("--skip-initial-health-checks", action="store_true", default=None)
    parser.add_argument("--skip-pre-termination-checks", action="store_true", default=None)
    parser.add_argument(
        "--dry", action="store_true", help="check the requests with the API server, store none"
    )
    parser.add_argument(
        "-o", "--output", choices=("yaml", "json"), help="print the requests instead of creating"
    )
    parser.add_argument("--watch", action="store_true", help="show the roll live until it ends")
    parser.add_argument(
        "-n", "--namespace", default=DEFAULT_NAMESPACE, help="namespace of the requests"
    )
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube)")
    parser.add_argument("--context", help="kubeconfig context")
    _rehearse_arguments(parser)


# The options of the rehearsal group, which mean nothing to a real roll.
REHEARSAL_ONLY = (
    "json",
    "boot_seconds",
    "pod_start_seconds",
    "time_scale",
    "horizon",
    "time_limit",
    "provider",
    "provider_config",
    "memory_limit",
)


def _rehearse_arguments(parser: argparse.ArgumentParser) -> None:
    rehearse = parser.add_argument_group(
        "rehearsal", "predict the roll on a simulated copy of a read-only snapshot"
    )
    rehearse.add_argument(
        "--rehearse", action="store_true", help="predict the roll; write nothing anywhere"
    )
    rehearse.add_argument("--json", action="store_true", help="the report as one JSON document")
    rehearse.add_argument(
        "--boot-seconds", type=float, help="an instance's boot when no past roll recorded one"
    )
    rehearse.add_argument(
        "--pod-start-seconds",
        type=float,
        help="a pod's start when its workload's pods show none",
    )
    rehearse.add_argument(
        "--time-scale",
        type=float,
        help="simulated seconds per second of the copy's clock (default 1)",
    )
    rehearse.add_argument("--horizon", help="give up on a roll not done by then (default 6h)")
    rehearse.add_argument(
        "--time-limit",
        help="wall-clock time the rehearsal may take (e.g. 10m); then report the roll so far",
    )
    rehearse.add_argument("--provider", help="cloud provider to describe the groups with")
    rehearse.add_argument("--provider-config", help="YAML file with a providers: block")
    rehearse.add_argument(
        "--memory-limit", type=int, help="bytes the copy may use (default: what is available)"
    )


def add_arguments(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cycle = sub.add_parser(
        "cycle",
        help="create CycleNodeRequests from NodeGroups",
        description="Create a CycleNodeRequest for each NodeGroup selected by name, label "
        "selector or --all, checking everything before anything is created.",
    )
    _arguments(cycle)


@dataclass
class Plan:
    requests: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _selection_problems(args: argparse.Namespace) -> list[str]:
    from nodeops.api.duration import parse_duration
    from nodeops.common.selectors import SelectorError, parse_label_selector

    problems = []
    ways = sum((bool(args.nodegroups), args.selector is not None, bool(args.all)))
    if ways != 1:
        problems.append("select NodeGroups one way: by name, with -l, or with --all")
    if args.selector is not None:
        try:
            parse_label_selector(args.selector)
        except SelectorError as e:
            problems.append(f"-l: {e}")
    if args.concurrency is not None and args.concurrency < 1:
        problems.append("--concurrency: must be at least 1")
    if args.cycling_timeout is not None:
        try:
            # Its sign is the model's to judge (below), as the API server's and the
            # controller's: 0 means the manager's default, a negative value is refused.
            parse_duration(args.cycling_timeout)
        except ValueError as e:
            problems.append(f"--cycling-timeout: {e}")
    if args.watch and args.output:
        problems.append("--watch and -o exclude each other")
    return problems


def plan_requests(
    args: argparse.Namespace,
    nodegroups: Sequence[dict[str, Any]],
    nodes: Sequence[dict[str, Any]],
) -> Plan:
    """The requests to create, or every reason not to create any: the one place that decides."""
    from nodeops.api import InvalidResource, NodeGroup
    from nodeops.common.selectors import parse_label_selector
    from nodeops.controllers.cycling.generation import (
        GenerationOptions,
        nodegroup_problems,
        request_from_nodegroup,
        validate_request,
    )
    from nodeops.kube import objects as o

    plan = Plan(problems=_selection_problems(args))
    if plan.problems:
        return plan
    by_name = {o.name(ng): ng for ng in nodegroups}
    if args.nodegroups:
        missing = [n for n in args.nodegroups if n not in by_name]
        plan.problems += [f"NodeGroup {n!r} not found" for n in missing]
        chosen = [by_name[n] for n in dict.fromkeys(args.nodegroups) if n in by_name]
    elif args.selector is not None:
        selector = parse_label_selector(args.selector)
        chosen = [ng for ng in nodegroups if selector.matches(o.labels(ng))]
        if not chosen:
            plan.problems.append(f"no NodeGroup matches -l {args.selector}")
    else:
        chosen = list(nodegroups)
        if not chosen:
            plan.problems.append("there are no NodeGroups")
    wanted_nodes = [n.strip() for n in (args.nodes or "").split(",") if n.strip()]
    covered: set[str] = set()
    for obj in chosen:
        name = o.name(obj)
        try:
            group = NodeGroup.parse_spec(obj)
        except InvalidResource as e:
            plan.problems.append(f"NodeGroup {name}: {e}")
            continue
        problems = [
            p
            for p in nodegroup_problems(group, nodes)
            # An explicit --concurrency switches a group with concurrency 0 on for this request.
            if not (args.concurrency and p.startswith("spec.cycleSettings.concurrency"))
        ]
        plan.problems += [f"NodeGroup {name}: {p}" for p in problems]
        mine = [n for n in nodes if group.spec.node_selector.matches(o.labels(n))]
        node_names = [n for n in wanted_nodes if n in {o.name(m) for m in mine}]
        covered.update(node_names)
        if wanted_nodes and not node_names:
            continue  # --nodes names none of this group's nodes: nothing to cycle here
        prefix = args.name or name
        body = request_from_nodegroup(
            group,
            args.namespace,
            GenerationOptions(
                generate_name=f"{prefix}-",
                node_names=node_names or None,
                concurrency=args.concurrency,
                method=args.method,
                cycling_timeout=args.cycling_timeout,
                skip_initial_health_checks=args.skip_initial_health_checks,
                skip_pre_termination_checks=args.skip_pre_termination_checks,
                reason="cli",
                labels={"name": prefix},
            ),
        )
        try:
            validate_request(body)
        except InvalidResource as e:
            plan.problems.append(f"NodeGroup {name}: the request would be invalid: {e}")
            continue
        plan.requests.append(body)
    strays = [n for n in wanted_nodes if n not in covered]
    plan.problems += [f"--nodes: {n} is not a node of the selected NodeGroups" for n in strays]
    if not plan.problems and not plan.requests:
        plan.problems.append("nothing to cycle")
    return plan


async def _main(args: argparse.Namespace) -> int:
    from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS, NODEGROUPS
    from nodeops.kube import errors
    from nodeops.kube.oneshot import (
        KubeconfigError,
        OneShotClient,
        describe,
        load_client,
        say_retry_on_terminal,
    )
    from nodeops.kube.resources import NODES

    problems = _selection_problems(args)
    if problems:
        for p in problems:
            print(f"error: {p}", file=sys.stderr)
        return 2
    try:
        client = await load_client(
            args.kubeconfig, args.context, cls=OneShotClient, qps=0, on_retry=say_retry_on_terminal
        )
    except KubeconfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        try:
            nodegroups, _ = await client.list(NODEGROUPS)
            nodes, _ = await client.list(NODES)
        except errors.NotFound:
            print(
                "error: the API server does not serve NodeGroups: install the CRDs "
                "(nodeops crds | kubectl apply -f -)",
                file=sys.stderr,
            )
            return 2
        except errors.KubeError as e:
            print(describe(e, client.base_url), file=sys.stderr)
            return 1
        plan = plan_requests(args, nodegroups, nodes)
        if plan.problems:
            for p in plan.problems:
                print(f"error: {p}", file=sys.stderr)
            print("nothing was created", file=sys.stderr)
            return 2
        if args.output:
            docs = plan.requests
            if args.output == "json":
                print(
                    json.dumps(
                        docs[0]
                        if len(docs) == 1
                        else {"apiVersion": "v1", "kind": "List", "items": docs},
                        indent=2,
                    )
                )
            else:
                print(yaml.safe_dump_all(docs, sort_keys=False), end="")
            return 0
        created = []
        for body in plan.requests:
            try:
                obj = await client.create(CYCLENODEREQUESTS, body, args.namespace, dry_run=args.dry)
            except errors.KubeError as e:
                print(
                    f"error: creating the request for {body['metadata']['generateName']}: {e}",
                    file=sys.stderr,
                )
                return 1
            created.append(obj)
            suffix = " (server dry run)" if args.dry else ""
            print(f"cyclenoderequest.nodeops.dev/{obj['metadata']['name']} created{suffix}")
        if args.dry:
            return 0
        labels = sorted(
            {(o.get("metadata") or {}).get("labels", {}).get("name", "") for o in created}
        )
        selector = f"name={labels[0]}" if len(labels) == 1 else f"name in ({','.join(labels)})"
        if not args.watch:
            print(
                "\nWatch the requests with:\n"
                f"  kubectl -n {args.namespace} get cnr -l '{selector}' -w\n"
                f"  kubectl -n {args.namespace} get cns -l '{selector}'"
            )
            return 0
        return await _watch(client, args.namespace, [o["metadata"]["name"] for o in created])
    finally:
        await client.close()


async def _watch(client: Any, namespace: str, names: list[str]) -> int:
    """Show every request's roll until all have ended; 0 when all are Successful."""
    from nodeops.controllers.cycling.progress import RollView, roll_state
    from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS, CYCLENODESTATUSES

    views = {name: RollView(sys.stderr) for name in names}
    phases: dict[str, str] = {}
    try:
        while True:
            for name in names:
                request = await client.get_or_none(CYCLENODEREQUESTS, name, namespace)
                children, _ = await client.list(
                    CYCLENODESTATUSES,
                    namespace,
                    label_selector=f"name={(request or {}).get('metadata', {}).get('labels', {}).get('name', name)}",
                )
                mine = [
                    c
                    for c in children
                    if any(
                        r.get("name") == name for r in c["metadata"].get("ownerReferences") or ()
                    )
                ]
                state = roll_state(
                    request,
                    mine,
                    pods_moved=int(((request or {}).get("status") or {}).get("podMoves") or 0),
                )
                views[name].show(state)
                phases[name] = state.phase
            if all(p in ("Successful", "Failed") for p in phases.values()):
                break
            await asyncio.sleep(1.0)
    finally:
        for view in views.values():
            view.close()
    for name in names:
        print(f"cyclenoderequest.nodeops.dev/{name} {phases.get(name)}")
    return 0 if all(p == "Successful" for p in phases.values()) else 1


def run(
    args: argparse.Namespace, rehearse: Callable[[argparse.Namespace], int] | None = None
) -> int:
    """`rehearse` runs `--rehearse`; it lives above the controllers (it needs the simulator),
    so the command that can reach it passes it in."""
    if getattr(args, "rehearse", False):
        if rehearse is None:
            print("error: --rehearse: run it as `nodeops cycle --rehearse`", file=sys.stderr)
            return 2
        return rehearse(args)
    stray = [f"--{name.replace('_', '-')}" for name in REHEARSAL_ONLY if getattr(args, name, None)]
    if stray:
        # Silently ignored, `--json` would create the requests the user meant only to rehearse.
        print(f"error: {', '.join(stray)}: only with --rehearse", file=sys.stderr)
        return 2
    from nodeops.kube.logging import configure

    configure("warning", "console")
    try:
        return asyncio.run(_main(args))
    except KeyboardInterrupt:
        return 130


def kubectl_main(
    argv: Sequence[str] | None = None,
    rehearse: Callable[[argparse.Namespace], int] | None = None,
) -> int:
    """`kubectl cycle ...`: kubectl runs `kubectl-cycle` from PATH with the remaining arguments."""
    parser = argparse.ArgumentParser(
        prog="kubectl cycle",
        description=f"Create CycleNodeRequests from NodeGroups (nodeops {__version__}).",
    )
    _arguments(parser)
    args = parser.parse_args(argv)
    return run(args, rehearse)


if __name__ == "__main__":
    sys.exit(kubectl_main())
