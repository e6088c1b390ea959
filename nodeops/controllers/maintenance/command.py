"""`nodeops maintenance validate FILE` and `nodeops maintenance explain NODE`.

`validate` loads the file exactly as the controller does and prints every problem as
FILE:LINE: message (exit 1) or a one-line summary (exit 0); warnings go to stderr either way.
`explain` evaluates a node's profiles against the live cluster without acting (no triggers, no
reservations, no writes) and says, for each transition, what every check answered and why it
does not fire; `-o json` prints the same as the manager's `/api/v1/info`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime
from typing import Any

EXIT_INVALID = 1
EXIT_USAGE = 2


def add_arguments(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("maintenance", help="the maintenance controller's tools")
    msub = parser.add_subparsers(dest="maintenance_command", required=True)
    validate = msub.add_parser(
        "validate",
        help="check a maintenance.yaml",
        description="Load a maintenance.yaml as the controller would; print each problem as "
        "FILE:LINE: message.",
    )
    validate.add_argument("file")
    explain = msub.add_parser(
        "explain",
        help="why a node is (not) moving",
        description="Evaluate a node's maintenance profiles against the cluster without acting.",
    )
    explain.add_argument("node")
    explain.add_argument("--config", default="./config/maintenance.yaml", help="maintenance.yaml")
    explain.add_argument("--compat", choices=["sapcc"], help="use the reference's cloud.sap/ keys")
    explain.add_argument("--key-prefix", help="label/annotation prefix (default nodeops.dev/)")
    explain.add_argument("--kubeconfig")
    explain.add_argument("--context")
    explain.add_argument("-o", "--output", choices=["text", "json"], default="text")


def run(args: argparse.Namespace) -> int:
    if args.maintenance_command == "validate":
        return validate(args.file)
    return asyncio.run(explain(args))


def validate(path: str) -> int:
    from nodeops.controllers.maintenance.config import ConfigError, load_file

    try:
        config = load_file(path)
    except ConfigError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return EXIT_INVALID
    for warning in config.warnings:
        print(f"{warning} (warning)", file=sys.stderr)
    profiles = [p for p in config.profiles if p != "default"]
    print(
        f"{path}: ok: {len(config.checks)} checks, {len(config.triggers)} triggers, "
        f"{len(config.notifications)} notifications, profiles: {', '.join(profiles) or 'none'}"
    )
    return 0


async def explain(args: argparse.Namespace) -> int:
    from nodeops.controllers.maintenance.cluster import SnapshotView
    from nodeops.controllers.maintenance.config import ConfigError, load_file
    from nodeops.controllers.maintenance.engine import Engine
    from nodeops.controllers.maintenance.info import node_info
    from nodeops.controllers.maintenance.keys import Keys
    from nodeops.kube import errors
    from nodeops.kube.oneshot import (
        KubeconfigError,
        OneShotClient,
        describe,
        load_client,
        say_retry_on_terminal,
    )
    from nodeops.kube.resources import NODES

    try:
        config = load_file(args.config)
        keys = Keys.for_compat(args.compat, args.key_prefix)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return EXIT_INVALID
    except ValueError as exc:
        print(f"nodeops maintenance explain: {exc}", file=sys.stderr)
        return EXIT_USAGE

    try:
        client = await load_client(
            args.kubeconfig, args.context, cls=OneShotClient, on_retry=say_retry_on_terminal
        )
    except KubeconfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    try:
        nodes, _ = await client.list(NODES)
        node = next((n for n in nodes if n["metadata"]["name"] == args.node), None)
        if node is None:
            print(f'Error from server (NotFound): nodes "{args.node}" not found', file=sys.stderr)
            return EXIT_INVALID
        view = SnapshotView(client, nodes, keys)
        now = datetime.now(UTC)
        try:
            outcome = await Engine(config, keys, view).evaluate(node, now, act=False)
        finally:
            await view.close()
    except errors.KubeError as exc:
        print(describe(exc, client.base_url), file=sys.stderr)
        return EXIT_INVALID
    finally:
        await client.close()
    info = node_info(outcome, node, config.label_filter, now)
    if args.output == "json":
        print(json.dumps(info, indent=2, sort_keys=True, default=str))
    else:
        sys.stdout.write(render_text(info))
    return 0


def render_text(info: dict[str, Any]) -> str:
    lines = [f"Node {info['node']}: {info['state']}"]
    if info.get("error"):
        lines.append(f"  error: {info['error']}")
    for p in info["profiles"]:
        head = f"  profile {p['name']}: {p['state']}"
        if p.get("enter") == "pending":
            head += " (enter chain not completed yet)"
        lines.append(head)
        if p["applied"]["error"]:
            lines.append(f"    {p['applied']['error']}")
        transitions = p["applied"]["transitions"]
        if not transitions:
            lines.append("    no transitions out of this state")
        for i, t in enumerate(transitions, 1):
            verdict = "would fire" if t["passed"] else "blocked"
            lines.append(
                f"    transition {i} -> {t['target']} [{t['chain']['expression']}]: {verdict}"
            )
            for name, check in t["chain"]["info"].items():
                mark = "ok  " if check["passed"] else "FAIL"
                detail = check.get("error") or check["info"].get("reason") or ""
                extra = {k: v for k, v in check["info"].items() if k != "reason"}
                text = f"      {mark} {name} ({check['id']})"
                if detail:
                    text += f": {detail}"
                if extra:
                    text += f" {json.dumps(extra, sort_keys=True, default=str)}"
                lines.append(text)
            for reason in t["reasons"]:
                lines.append(f"      why: {reason}")
    return "\n".join(lines) + "\n"
