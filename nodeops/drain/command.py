"""`nodeops drain|cordon|uncordon NODE...`: kubectl's flags and words, nodeops' engine.

Output matches kubectl line for line where both say the same thing (`node/x cordoned`,
`evicting pod ns/p`, `pod/p evicted`, `node/x drained`, kubectl's error lines and exit code 1),
so scripts written around kubectl keep working; on a terminal a live status line shows which
order is draining and which pods block, and why.

Every input is checked before the first request and every node is read before the first write:
a bad flag, selector or node name changes nothing. Nodes are named or selected with
`-l/--selector`, cordoned first, then drained one after another as kubectl does, or up to
`--parallel N` at a time sharing one view of the PodDisruptionBudgets.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TextIO

from nodeops.common.cliargs import (
    ArgumentError,
    check_pod_selector,
    check_selector,
    parse_dry_run,
    parse_duration,
    parse_int,
    resource_name,
)
from nodeops.drain.engine import Drainer
from nodeops.drain.errors import DrainError
from nodeops.drain.options import DrainOptions
from nodeops.drain.results import DrainProgress
from nodeops.drain.sources import WatchedCluster
from nodeops.drain.targets import select_nodes
from nodeops.kube import errors
from nodeops.kube import objects as o
from nodeops.kube.oneshot import KubeconfigError, OneShotClient, describe, load_client

COMMANDS = ("drain", "cordon", "uncordon")
NODE_KINDS = ("node", "nodes", "no")
_PARSERS: dict[str, argparse.ArgumentParser] = {}


# ---------------------------------------------------------------------------- arguments


def add_arguments(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    drain = sub.add_parser(
        "drain",
        help="cordon nodes and evict their pods, in the order rules give",
        description="Drain nodes like kubectl drain, with NodeDrainRules, pod labels and "
        "deletion priorities deciding order, and evictions sent the moment a "
        "PodDisruptionBudget allows.",
        allow_abbrev=False,
    )
    _common(drain)
    drain.add_argument("--force", action="store_true", help="also delete pods with no controller")
    drain.add_argument("--ignore-daemonsets", action="store_true")
    drain.add_argument("--delete-emptydir-data", action="store_true")
    drain.add_argument("--grace-period", default="-1", metavar="SECONDS")
    drain.add_argument("--timeout", default="0s", help="give up after this long (0: never)")
    drain.add_argument("--pod-selector", default="")
    drain.add_argument("--disable-eviction", action="store_true", help="delete, bypassing PDBs")
    drain.add_argument("--skip-wait-for-delete-timeout", default="0", metavar="SECONDS")
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
    drain.add_argument(
        "--parallel",
        default="1",
        metavar="N",
        help="drain up to N nodes at once (default 1: one after another, as kubectl)",
    )
    _PARSERS["drain"] = drain
    for verb in ("cordon", "uncordon"):
        p = sub.add_parser(
            verb,
            help=f"mark nodes {'un' if verb == 'cordon' else ''}schedulable",
            allow_abbrev=False,
        )
        _common(p)
        _PARSERS[verb] = p
    for verb, p in _PARSERS.items():
        _kubectl_errors(p, verb)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("nodes", nargs="*", metavar="NODE")
    p.add_argument("-l", "--selector", default="", help="label selector of the nodes")
    p.add_argument("--chunk-size", default="500", help="nodes listed per request with -l")
    # A bare --dry-run means client and takes no value from the next argument, as in kubectl
    # (pflag's NoOptDefVal): `parse` spells it --dry-run=client before argparse sees it.
    p.add_argument("--dry-run", default="none", metavar="none|client|server")
    p.add_argument("--kubeconfig")
    p.add_argument("--context")


def _kubectl_errors(parser: argparse.ArgumentParser, verb: str) -> None:
    """Argument errors end with kubectl's words and exit code 1, not argparse's 2."""

    def error(message: str) -> NoReturn:
        raise ArgumentError(_translate(message), "usage")

    parser.error = error  # type: ignore[method-assign]


def _translate(message: str) -> str:
    """argparse's complaint in cobra's words where cobra has them."""
    for prefix in ("unrecognized arguments: ", "ambiguous option: "):
        if message.startswith(prefix):
            flag = message[len(prefix) :].split()[0].split("=", 1)[0]
            if flag.startswith("--"):
                return f"unknown flag: {flag}"
            if flag.startswith("-"):
                return f"unknown shorthand flag: '{flag[1:2]}' in {flag}"
            return f"unexpected argument {flag!r}"
    if message.startswith("argument ") and ": expected one argument" in message:
        flag = message[len("argument ") :].split(":", 1)[0].split("/")[-1]
        return f"flag needs an argument: {flag}"
    return message


@dataclass(frozen=True)
class NodeCommand:
    """A command line checked in full: what to do to which nodes, nothing left to parse."""

    verb: str
    names: tuple[str, ...]
    selector: str
    chunk_size: int
    dry_run: str
    kubeconfig: str | None
    context: str | None
    parallel: int = 1
    options: DrainOptions | None = None


def parse(argv: Sequence[str]) -> NodeCommand:
    """`argv` without the program name (`["drain", "node-1", "--force"]`), checked; raises
    `ArgumentError` with kubectl's message for anything wrong."""
    if not argv or argv[0] not in COMMANDS:
        raise ArgumentError(f"unknown command {argv[0] if argv else ''!r}")
    verb = argv[0]
    parser = _PARSERS.get(verb)
    if parser is None:
        _build()
        parser = _PARSERS[verb]
    rest = ["--dry-run=client" if token == "--dry-run" else token for token in argv[1:]]
    args, extra = parser.parse_known_intermixed_args(rest)
    if extra:
        raise ArgumentError(_translate("unrecognized arguments: " + " ".join(extra)), "usage")
    return validate(verb, args)


def _build() -> None:
    parser = argparse.ArgumentParser(prog="nodeops")
    add_arguments(parser.add_subparsers(dest="command"))


def validate(verb: str, args: argparse.Namespace) -> NodeCommand:
    """Every value of a parsed command line checked, in kubectl's order and words."""
    if not args.nodes and not args.selector:
        raise ArgumentError(f"USAGE: {verb} NODE [flags]", "help")
    if args.nodes and args.selector:
        raise ArgumentError("cannot specify both a node name and a --selector option", "help")
    chunk_size = parse_int(args.chunk_size, "--chunk-size")
    dry_run = parse_dry_run(args.dry_run)
    names = tuple(resource_name(n, NODE_KINDS).name for n in args.nodes)
    if verb != "drain":
        check_selector(args.selector)
        return NodeCommand(
            verb, names, args.selector, chunk_size, dry_run, args.kubeconfig, args.context
        )
    grace = parse_int(args.grace_period, "--grace-period")
    skip_wait = parse_int(args.skip_wait_for_delete_timeout, "--skip-wait-for-delete-timeout")
    timeout = parse_duration(args.timeout, "--timeout")
    volume_timeout = parse_duration(args.volume_timeout, "--volume-timeout")
    parallel = parse_int(args.parallel, "--parallel")
    check_pod_selector(args.pod_selector)
    check_selector(args.selector)
    if timeout < 0:
        raise ArgumentError("--timeout must not be negative")
    if volume_timeout < 0:
        raise ArgumentError("--volume-timeout must not be negative")
    if volume_timeout and not args.wait_for_volumes:
        raise ArgumentError("--volume-timeout needs --wait-for-volumes")
    if parallel < 1:
        raise ArgumentError("--parallel must be at least 1")
    try:
        options = DrainOptions(
            force=args.force,
            ignore_daemonsets=args.ignore_daemonsets,
            delete_emptydir_data=args.delete_emptydir_data,
            grace_period=grace,
            timeout=timeout,
            pod_selector=args.pod_selector,
            disable_eviction=args.disable_eviction,
            skip_wait_for_delete_timeout=skip_wait,
            dry_run=dry_run,
            respect_rules=args.respect_rules,
            wait_for_volumes=args.wait_for_volumes,
            volume_timeout=volume_timeout,
            evict_daemonsets=args.evict_daemonsets,
            force_delete_stuck=args.force_delete_stuck,
        )
    except ValueError as exc:
        raise ArgumentError(str(exc)) from None
    return NodeCommand(
        verb,
        names,
        args.selector,
        chunk_size,
        dry_run,
        args.kubeconfig,
        args.context,
        parallel,
        options,
    )


# ---------------------------------------------------------------------------- output


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

    def error(self, text: str) -> None:
        self.clear()
        print(text, file=self.err, flush=True)

    def retry(self, text: str) -> None:
        """A passing API error being retried: said on a terminal, silent in a script."""
        if self.tty:
            self.error(f"Retrying: {text}")

    def progress(self, progress: DrainProgress) -> None:
        if not self.tty or progress.complete:
            return
        plan = progress.plan
        blocking = progress.blocking
        order = "" if plan.min_order is None else f"order {plan.min_order}: "
        first = next(iter(blocking.items()), None)
        why = f" — {first[0]}: {first[1]}" if first else ""
        self.clear()
        self.status = f"{progress.node}: {order}{len(blocking)} pod(s) pending{why}"[:200]
        self.err.write(self.status)
        self.err.flush()

    def clear(self) -> None:
        if self.tty and self.status:
            self.err.write("\r" + " " * len(self.status) + "\r")
            self.status = ""


# ---------------------------------------------------------------------------- running


def main(argv: Sequence[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run `nodeops drain|cordon|uncordon ...`; returns the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        command = parse(argv)
    except ArgumentError as exc:
        print(exc.lines(f"nodeops {argv[0] if argv else ''}".strip()), file=err)
        return 1
    return asyncio.run(execute(command, out, err))


async def execute(command: NodeCommand, out: TextIO, err: TextIO) -> int:
    printer = _Printer(out, err, command.dry_run)
    try:
        client = await load_client(
            command.kubeconfig, command.context, cls=OneShotClient, qps=0, on_retry=printer.retry
        )
    except KubeconfigError as exc:
        printer.error(f"error: {exc}")
        return 1
    assert isinstance(client, OneShotClient)
    async with client:
        try:
            return await client.run(_execute(command, client, printer))
        except errors.KubeError as exc:
            printer.error(describe(exc, client.base_url))
            return 1


async def _execute(command: NodeCommand, client: OneShotClient, printer: _Printer) -> int:
    nodes = await select_nodes(client, command.names, command.selector, command.chunk_size)
    if command.verb == "drain":
        assert command.options is not None
        return await _drain(command, command.options, client, printer, nodes)
    return await _cordon_all(client, printer, nodes, command.verb == "cordon", command.dry_run)


async def _cordon_all(
    client: OneShotClient,
    printer: _Printer,
    nodes: list[dict[str, Any]],
    unschedulable: bool,
    dry_run: str,
) -> int:
    """kubectl's `RunCordonOrUncordon`: each node in turn, an error reported and the next one
    done; the exit code says whether any failed."""
    drainer = Drainer(client, DrainOptions(dry_run=dry_run))
    verb = "cordon" if unschedulable else "uncordon"
    failed = 0
    for node in nodes:
        name = o.name(node)
        try:
            _, changed = await drainer.cordon(name, unschedulable, node=node)
        except errors.ApiError as exc:
            printer.error(f'error: unable to {verb} node "{name}": {exc.message}')
            failed += 1
            continue
        done = f"{verb}ed" if changed else f"already {verb}ed"
        printer.line(f"node/{name} {done}{printer.suffix}")
    return 1 if failed else 0


async def _drain(
    command: NodeCommand,
    options: DrainOptions,
    client: OneShotClient,
    printer: _Printer,
    nodes: list[dict[str, Any]],
) -> int:
    """kubectl's `RunDrain`: cordon every node, then drain them one after another (or up to
    `--parallel` at once), each failure reported and the others still drained."""
    cordoned: dict[str, dict[str, Any]] = {}
    failures: dict[str, list[str]] = {}
    drainer = Drainer(client, options)
    for node in nodes:
        name = o.name(node)
        try:
            cordoned[name], changed = await drainer.cordon(name, node=node)
        except errors.ApiError as exc:
            printer.error(f'error: unable to cordon node "{name}": {exc.message}')
            failures[name] = [describe(exc, client.base_url)]
            continue
        printer.line(f"node/{name} {'cordoned' if changed else 'already cordoned'}{printer.suffix}")
    sources = WatchedCluster(client, options)
    limit = asyncio.Semaphore(command.parallel)

    def evicting(pod: dict[str, Any]) -> None:
        if not options.disable_eviction:  # kubectl's delete path only reports deletions
            printer.line(f"evicting pod {o.namespace(pod)}/{o.name(pod)}{printer.suffix}")

    def gone(pod: dict[str, Any]) -> None:
        printer.line(f"pod/{o.name(pod)} {'deleted' if options.disable_eviction else 'evicted'}")

    def warn(warnings: list[str]) -> None:
        if warnings:  # kubectl prints them before evicting, one line
            printer.error(f"Warning: {'; '.join(warnings)}")

    async def one(name: str) -> None:
        async with limit:
            node_drainer = Drainer(
                client,
                options,
                sources=sources,
                on_progress=printer.progress,
                on_evicting=evicting,
                on_gone=gone,
                on_warnings=warn,
            )
            try:
                await node_drainer.drain(name, cordoned[name])
            except (DrainError, errors.ApiError) as exc:
                reasons = exc.reasons if isinstance(exc, DrainError) else [str(exc)]
                if isinstance(exc, errors.ApiError):
                    reasons = [describe(exc, client.base_url)]
                summary = reasons[0] if len(reasons) == 1 else f"[{', '.join(reasons)}]"
                printer.error(
                    f'error: unable to drain node "{name}" due to error: {summary}, '
                    "continuing command..."
                )
                failures[name] = reasons
                return
            printer.line(f"node/{name} drained{printer.suffix}")

    try:
        await asyncio.gather(*(one(name) for name in cordoned))
    finally:
        await sources.close()
    if not failures:
        return 0
    printer.error(
        "There are pending nodes to be drained:\n"
        + "\n".join(f" {name}" for name in (o.name(n) for n in nodes) if name in failures)
    )
    for name in (o.name(n) for n in nodes):
        for reason in failures.get(name, ()):
            printer.error(reason)
    return 1
