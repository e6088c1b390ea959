"""`nodeops cycle NODEGROUP... --rehearse`: what the roll would do, without doing it.

Checks as `nodeops cycle` does (the NodeGroups exist and make valid requests), asks the API
server whether the credentials may read everything a roll depends on, reads it once, estimates
the memory a copy needs, and then rehearses the roll on a simulated copy. Bad input is one
line and exit status 2 with nothing read beyond what the check needed and nothing written; a
predicted failure is exit status 1. A rehearsal cut short (`--time-limit`, or Ctrl-C) still
reports the roll so far: exit status 3 at the time limit with no failure so far, 130 when
interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from nodeops.api.duration import parse_duration
from nodeops.controllers.cycling.command import plan_requests
from nodeops.controllers.cycling.resources import NODEGROUPS
from nodeops.kube import errors
from nodeops.kube.client import Client
from nodeops.kube.resources import NODES
from nodeops.providers.base import Instance, Lifecycle, NodeGroup, NodeGroups, Provider
from nodeops.rehearse.progress import ProgressLine
from nodeops.rehearse.rehearsal import Rehearsal, RehearsalOptions, RehearseError
from nodeops.rehearse.report import Report
from nodeops.rehearse.snapshot import (
    SNAPSHOT_RESOURCES,
    AccessDenied,
    check_read_access,
    take_snapshot,
)

__all__ = ["INTERRUPTED", "exit_status", "main_async", "run"]

_GROUP_LABEL = "eks.amazonaws.com/nodegroup"


def options_from(args: argparse.Namespace) -> RehearsalOptions:
    options = RehearsalOptions()
    if args.time_scale is not None:
        options.time_scale = args.time_scale
    if args.boot_seconds is not None:
        options.boot_seconds = args.boot_seconds
    options.pod_start_seconds = args.pod_start_seconds
    if args.horizon is not None:
        options.horizon_seconds = parse_duration(args.horizon)
    if args.time_limit is not None:
        options.time_limit_seconds = parse_duration(args.time_limit)
    options.memory_limit = args.memory_limit
    return options


def _input_problems(args: argparse.Namespace) -> list[str]:
    problems = []
    for name in ("time_scale", "boot_seconds", "pod_start_seconds", "memory_limit"):
        value = getattr(args, name)
        if (value is not None and value < 0) or (name == "time_scale" and value == 0):
            problems.append(f"--{name.replace('_', '-')}: must be positive")
    for name in ("horizon", "time_limit"):
        text = getattr(args, name)
        if text is None:
            continue
        flag = f"--{name.replace('_', '-')}"
        try:
            if parse_duration(text) <= 0:
                problems.append(f"{flag}: must be positive")
        except ValueError as e:
            problems.append(f"{flag}: {e}")
    if args.output or args.watch or args.dry:
        problems.append("--rehearse writes nothing: -o, --watch and --dry do not apply")
    if args.provider_config and not args.provider:
        problems.append("--provider-config needs --provider")
    return problems


def _provider(args: argparse.Namespace) -> Provider | None:
    if not args.provider:
        return None
    from nodeops.providers.registry import create_provider
    from nodeops.run import load_provider_config

    config: Mapping[str, Any] | None = None
    if args.provider_config:
        block = load_provider_config(args.provider_config)
        config = (block.get("providers") or {}).get(args.provider)
    return create_provider(args.provider, config)


def _groups_from_nodes(
    names: Sequence[str], nodes: Sequence[Mapping[str, Any]], requests: Sequence[Mapping[str, Any]]
) -> list[NodeGroup]:
    """Without a provider: the cloud groups as their nodes show them (each node of a request's
    selection in the group its node-group label names, else the request's first group)."""
    from nodeops.common.selectors import label_selector_from_object

    members: dict[str, list[Mapping[str, Any]]] = {n: [] for n in names}
    for body in requests:
        spec = body.get("spec") or {}
        groups = [spec.get("nodeGroupName"), *(spec.get("nodeGroupsList") or ())]
        groups = [g for g in groups if g]
        selector = label_selector_from_object(spec.get("selector"))
        for node in nodes:
            labels = (node.get("metadata") or {}).get("labels") or {}
            if not groups or not selector.matches(labels):
                continue
            group = labels.get(_GROUP_LABEL) if labels.get(_GROUP_LABEL) in groups else groups[0]
            members.setdefault(str(group), []).append(node)
    out = []
    for name, group_nodes in members.items():
        instances = [
            Instance(
                id=str(n["metadata"]["name"]),
                provider_id=str((n.get("spec") or {}).get("providerID") or ""),
                zone=None,
                lifecycle_state=Lifecycle.IN_SERVICE,
                healthy=True,
                launch_version=None,
                out_of_date=False,
            )
            for n in group_nodes
            if (n.get("spec") or {}).get("providerID")
        ]
        size = len(instances)
        out.append(NodeGroup(name, size, 0, max(2 * size, size + 1), instances))
    return out


async def main_async(args: argparse.Namespace, out: Any = None) -> int:
    """The rehearsal behind the flag; `out` receives the report (stdout by default)."""
    from nodeops.kube.oneshot import KubeconfigError, OneShotClient, describe, load_client

    out = out or sys.stdout
    progress = ProgressLine(sys.stderr)

    def fail(line: str, code: int = 2) -> int:
        progress.close(clear=True)
        print(f"error: {line}", file=sys.stderr)
        return code

    problems = _input_problems(args)
    if problems:
        return fail(problems[0])
    try:
        client: Client = await load_client(args.kubeconfig, args.context, cls=OneShotClient, qps=0)
    except KubeconfigError as e:
        return fail(str(e))
    provider: Provider | None = None
    try:
        try:
            await check_read_access(client, SNAPSHOT_RESOURCES)
            nodegroups, _ = await client.list(NODEGROUPS)
            nodes, _ = await client.list(NODES)
        except AccessDenied as e:
            return fail(str(e))
        except errors.NotFound:
            return fail("the API server does not serve NodeGroups: install the CRDs")
        except errors.KubeError as e:
            return fail(describe(e, client.base_url), 1)
        plan = plan_requests(args, nodegroups, nodes)
        if plan.problems:
            return fail(plan.problems[0])
        names = list(
            dict.fromkeys(
                g
                for body in plan.requests
                for g in (
                    body["spec"].get("nodeGroupName"),
                    *(body["spec"].get("nodeGroupsList") or ()),
                )
                if g
            )
        )
        try:
            provider = _provider(args)
        except (ValueError, OSError) as e:  # ProviderConfigError and a config file's problems
            return fail(str(e))
        cloud = provider if isinstance(provider, NodeGroups) else None
        if provider is not None and cloud is None:
            return fail(f"--provider {args.provider}: it does not describe node groups")
        progress.meanwhile(f"reading the cluster for {', '.join(names)}")
        try:
            snapshot = await take_snapshot(
                client, cloud, names, already={"nodegroups": nodegroups, "nodes": nodes}
            )
        except errors.KubeError as e:
            return fail(describe(e, client.base_url), 1)
        if cloud is None:
            snapshot.cloud_groups = _groups_from_nodes(names, nodes, plan.requests)
        rehearsal = Rehearsal(snapshot, options_from(args), progress)
        nodegroup_of = {
            str(body["metadata"].get("generateName", "")): str(
                (body["metadata"].get("labels") or {}).get("name", "")
            )
            for body in plan.requests
        }
        try:
            rehearsal.check_memory()
            with _interrupt_stops(rehearsal, progress):
                report = await rehearsal.run(plan.requests, nodegroup_of)
        except RehearseError as e:
            return fail(str(e))
    finally:
        progress.close()
        if provider is not None:
            await provider.close()
        await client.close()
    if args.json:
        print(json.dumps(report.as_dict(), indent=2), file=out)
    else:
        report.write_table(out)
    return exit_status(report)


INTERRUPTED = "interrupted"


def exit_status(report: Report) -> int:
    """0: the roll would succeed; 1: it would fail (as far as it was rehearsed); 3: the
    rehearsal reached its time limit first, with no failure so far, which is no verdict;
    130: interrupted (the report of the roll so far is still written)."""
    if report.stopped is not None and report.stopped.why == INTERRUPTED:
        return 130
    if report.failed:
        return 1
    return 3 if report.stopped is not None else 0


@contextlib.contextmanager
def _interrupt_stops(rehearsal: Rehearsal, progress: ProgressLine) -> Iterator[None]:
    """The first Ctrl-C cuts the roll short and still gets its report (a large cluster's
    rehearsal takes many minutes, and what its first batches met is worth having); a second
    one quits at once."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    previous = signal.getsignal(signal.SIGINT)
    pressed = 0

    def interrupted() -> None:
        nonlocal pressed
        pressed += 1
        if pressed == 1:
            progress.step("stopping: the report will cover the roll so far (Ctrl-C again to quit)")
            rehearsal.stop(INTERRUPTED)
        elif task is not None:
            task.cancel()

    try:
        loop.add_signal_handler(signal.SIGINT, interrupted)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, previous)


def run(args: argparse.Namespace) -> int:
    from nodeops.kube.logging import configure

    configure("error", "console")
    try:
        return asyncio.run(main_async(args))
    except (KeyboardInterrupt, asyncio.CancelledError):
        return 130
