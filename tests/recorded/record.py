"""Record what an API server answers to the cases, as a JSON file of data.

    python -m tests.recorded.record --kubeconfig K [--out FILE] [--case NAME]...

The server needs kube-controller-manager beside it for the cases that say so. Everything the
cases create carries the run's token in its name and is deleted at the end of the case.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
from pathlib import Path
from typing import Any

import aiohttp

from nodeops.sim.attach.kubeconfig import AttachError, load_target
from tests.recorded.cases import CASES, normalise, wall_clock
from tests.recorded.client import Http

ANSWERS = Path(__file__).parent / "answers"


async def record(kubeconfig: str, only: list[str]) -> dict[str, Any]:
    target = load_target(kubeconfig)
    async with aiohttp.ClientSession() as session:
        http = Http(session, target.server, target.token, target.ssl_context)
        version = await http.must("GET", "/version")
        answers: dict[str, Any] = {}
        for case in CASES:
            if only and case.name not in only:
                continue
            token = secrets.token_hex(3)
            print(f"recording: {case.name}", file=sys.stderr, flush=True)
            steps = await case.run(http, token, wall_clock)
            answers[case.name] = normalise(steps, token)
    return {
        "server": {
            "gitVersion": version.get("gitVersion"),
            "major": version.get("major"),
            "minor": version.get("minor"),
        },
        "cases": answers,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--out", help="default: answers/kube-apiserver-<version>.json")
    parser.add_argument("--case", action="append", default=[], help="only this case (repeatable)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.case) - {case.name for case in CASES})
    if unknown:
        parser.error(f"--case: no case named {', '.join(map(repr, unknown))}")
    try:
        load_target(args.kubeconfig)
    except AttachError as exc:
        parser.error(str(exc))
    result = asyncio.run(record(args.kubeconfig, args.case))
    out = Path(args.out or ANSWERS / f"kube-apiserver-{result['server']['gitVersion']}.json")
    if out.exists() and args.case:
        merged = json.loads(out.read_text(encoding="utf-8"))
        merged["cases"].update(result["cases"])
        merged["server"] = result["server"]
        result = merged
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(out, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
