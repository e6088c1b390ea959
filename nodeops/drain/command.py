"""`nodeops drain|cordon|uncordon NODE`: kubectl's flags and words, nodeops' engine.

Output matches kubectl drain line for line where both say the same thing (`node/x cordoned`,
`evicting pod ns/p`, `pod/p evicted`, `node/x drained`, kubectl's error lines and exit code 1),
so scripts written around kubectl keep working; on a terminal a live status line shows which
order is draining and which pods block, and why.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, TextIO

from nodeops.drain.engine import Drainer, DrainError, DrainProgress
from nodeops.drain.options import DrainOptions
from nodeops.drain.sources import InvalidRule
from nodeops.kube import errors
from nodeops.kube.client import Client


def add_arguments(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    drain = sub.add_parser(
        "drain",
        help="cordon a node and evict its pods, in the order rules give",
        description="Drain NODE like kubectl drain, with NodeDrainRules, pod labels and "
        "deletion priorities deciding order, and evictions retried the moment a "
        "PodDisruptionBudget allows.",
    )
    drain.add_argument("node")
    _common(drain)
    drain.add_argument("--force", action="store_true", help="also delete pods with no controller")
    drain.add_argument("--ignore-daemonsets", action="store_true")
    drain.add_argument("--delete-emptydir-data", action="store_true")
    drain.add_argument("--grace-period", type=int, default=-1)
    drain.add_argument("--timeout", default="0s", help="give up after this long (0: never)")
    drain.add_argument("--pod-selector", default="")
    drain.add_argument("--disable-eviction", action="store_true", help="delete, bypassing PDBs")
    drain.add_argument("--skip-wait-for-delete-timeout", type=int, default=0)
    drain.add_argument(
        "--dry-run", nargs="?", const="client", default="none", choices=["none", "client", "server"]
    )
    drain.add_argument(
        "--respect-rules",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="apply NodeDrainRules, the nodeops.dev/drain label and deletion priorities",
    )
    drain.add_argument("--wait-for-volumes", action="store_true")
    drain.add_argument("--volume-timeout", default="0s")
    drain.add_argument(
        "--evict-daemonsets",
        action="store_true",
        help="stop DaemonSet pods too, in their order, after tainting the node against them",
    )
    drain.add_argument(
        "--force-delete-stuck",
        action="store_true",
        help="force-delete pods still terminating 30s past their grace period",
    )
    for verb in ("cordon", "uncordon"):
        p = sub.add_parser(verb, help=f"mark a node {'un' if verb == 'cordon' else ''}schedulable")
        p.add_argument("node")
        _common(p)
        p.add_argument(
            "--dry-run",
            nargs="?",
            const="client",
            default="none",
            choices=["none", "client", "server"],
        )


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig")
    p.add_argument("--context")


def parse_duration(text: str) -> float:
    """kubectl's durations: 90, 90s, 5m, 1h30m, 500ms."""
    text = text.strip()
    if not text:
        return 0.0
    try:
        return float(text)
    except ValueError:
        pass
    total = 0.0
    number = ""
    i = 0
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    while i < len(text):
        ch = text[i]
        if ch.isdigit() or ch == ".":
            number += ch
            i += 1
            continue
        unit = "ms" if text[i : i + 2] == "ms" else ch
        if unit not in units or not number:
            raise ValueError(f'invalid duration "{text}"')
        total += float(number) * units[unit]
        number = ""
        i += len(unit)
    if number:
        raise ValueError(f'invalid duration "{text}": missing unit')
    return total


class _Printer:
    def __init__(self, out: TextIO, err: TextIO, dry_run: str) -> None:
        self.out = out
        self.err = err
        self.suffix = {"none": "", "client": " (dry run)", "server": " (server dry run)"}[dry_run]
        self.tty = err.isatty()
        self.status = ""

    def line(self, text: str) -> None:
        self.clear()
        print(text, file=self.out, flush=True)

    def progress(self, progress: DrainProgress) -> None:
        if not self.tty or progress.complete:
            return
        plan = progress.plan
        blocking = progress.blocking
        order = "" if plan.min_order is None else f"order {plan.min_order}: "
        first = next(iter(blocking.items()), None)
        why = f" — {first[0]}: {first[1]}" if first else ""
        self.clear()
        self.status = f"{order}{len(blocking)} pod(s) pending{why}"[:200]
        self.err.write(self.status)
        self.err.flush()

    def clear(self) -> None:
        if self.tty and self.status:
            self.err.write("\r" + " " * len(self.status) + "\r")
            self.status = ""


async def _client(args: argparse.Namespace) -> Client:
    return await Client.from_kubeconfig(args.kubeconfig, args.context, qps=0)


async def _drain(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        options = DrainOptions(
            force=args.force,
            ignore_daemonsets=args.ignore_daemonsets,
            delete_emptydir_data=args.delete_emptydir_data,
            grace_period=args.grace_period,
            timeout=parse_duration(args.timeout),
            pod_selector=args.pod_selector,
            disable_eviction=args.disable_eviction,
            skip_wait_for_delete_timeout=args.skip_wait_for_delete_timeout,
            dry_run=args.dry_run,
            respect_rules=args.respect_rules,
            wait_for_volumes=args.wait_for_volumes,
            volume_timeout=parse_duration(args.volume_timeout),
            evict_daemonsets=args.evict_daemonsets,
            force_delete_stuck=args.force_delete_stuck,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=err)
        return 1
    printer = _Printer(out, err, options.dry_run)

    def evicting(pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        if not options.disable_eviction:  # kubectl's delete path only reports deletions
            printer.line(f"evicting pod {meta['namespace']}/{meta['name']}{printer.suffix}")

    async with await _client(args) as client:

        def gone(pod: dict[str, Any]) -> None:
            verb = "deleted" if options.disable_eviction else "evicted"
            printer.line(f"pod/{pod['metadata']['name']} {verb}")

        def warn(warnings: list[str]) -> None:
            if warnings:  # kubectl prints them before evicting, one line
                printer.clear()
                print(f"Warning: {'; '.join(warnings)}", file=err, flush=True)

        drainer = Drainer(
            client,
            options,
            on_progress=printer.progress,
            on_evicting=evicting,
            on_gone=gone,
            on_warnings=warn,
        )
        try:
            node, changed = await drainer.cordon(args.node)
            printer.line(
                f"node/{args.node} {'cordoned' if changed else 'already cordoned'}{printer.suffix}"
            )
            await drainer.drain(args.node, node)
        except errors.NotFound as exc:
            print(f"Error from server (NotFound): {exc.message}", file=err)
            return 1
        except (DrainError, InvalidRule, errors.KubeError) as exc:
            printer.clear()
            reasons = exc.reasons if isinstance(exc, DrainError) else [str(exc)]
            summary = reasons[0] if len(reasons) == 1 else f"[{', '.join(reasons)}]"
            print(
                f'error: unable to drain node "{args.node}" due to error: {summary}, continuing '
                f"command...\nThere are pending nodes to be drained:\n {args.node}",
                file=err,
            )
            for reason in reasons:
                print(reason, file=err)
            return 1
        printer.line(f"node/{args.node} drained{printer.suffix}")
    return 0


async def _cordon(args: argparse.Namespace, unschedulable: bool, out: TextIO, err: TextIO) -> int:
    verb = "cordoned" if unschedulable else "uncordoned"
    async with await _client(args) as client:
        drainer = Drainer(client, DrainOptions(dry_run=args.dry_run))
        try:
            _, changed = await drainer.cordon(args.node, unschedulable)
        except errors.NotFound as exc:
            print(f"Error from server (NotFound): {exc.message}", file=err)
            return 1
        except errors.KubeError as exc:
            print(f"error: {exc}", file=err)
            return 1
    suffix = "" if args.dry_run == "none" else " (dry run)"
    print(f"node/{args.node} {verb if changed else 'already ' + verb}{suffix}", file=out)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.command == "drain":
        return asyncio.run(_drain(args, sys.stdout, sys.stderr))
    return asyncio.run(_cordon(args, args.command == "cordon", sys.stdout, sys.stderr))
