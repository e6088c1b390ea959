"""Leader handover between real `nodeops run` processes, with and without the Lease watch.

    python -m bench.handover --json [--runs 5] [--lease-duration 15 --renew-deadline 10
                                     --retry-period 2]

One `nodeops sim serve` process serves the API; every run starts two fresh `nodeops run
--leader-elect` replicas on a Lease of its own, with the given timing (client-go's 15/10/2 s by
default) and the watch on (`watch`) or off (`poll`, client-go's algorithm alone). Per run:

- `sigterm`: once both replicas run and the follower has seen the leader, the leader gets SIGTERM
  at a random moment within the follower's retry cycle (retry period plus jitter); the figure is
  the time from the signal until the Lease names the follower. The leader releases
  the Lease on its way out; a polling follower takes it at its next jittered retry, a watching
  one as soon as the release reaches it.
- `kill`: a third replica is started and waits until it has seen the new leader; then, at a
  random moment within a retry cycle (so the kill falls anywhere between two renewals), the
  leader gets SIGKILL; the figure is the time from the kill until the Lease names the third
  replica. Nobody releases: the lease must expire by the candidate's own observation first.

Who holds the Lease is read by this harness's own watch on it, the same observer for both modes.
Modes alternate run by run, so a machine that slows down during the run slows both. Targets (on
the medians, with the watch): `sigterm` <= 0.5 s, `kill` <= lease duration + 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NAMESPACE = "default"
JITTER_FACTOR = 1.2  # client-go's, as the elector uses it
MODES = ("watch", "poll")
TARGET_SIGTERM = 0.5
TARGET_KILL_MARGIN = 1.0
STEP_TIMEOUT = 120.0

Obj = dict[str, Any]


@dataclass
class Replica:
    """One `nodeops run` process and what its JSON log lines said so far."""

    identity: str
    proc: asyncio.subprocess.Process
    lines: list[Obj] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    reader: asyncio.Task[None] | None = None

    def saw_leader(self, leader: str) -> bool:
        return any(
            (line.get("msg") or line.get("event")) == "new leader elected"
            and line.get("leader") == leader
            for line in self.lines
        )

    async def wait_saw_leader(self, leader: str) -> None:
        while not self.saw_leader(leader):
            if self.proc.returncode is not None:
                raise RuntimeError(f"{self.identity} exited: {self.lines[-5:]}")
            self.changed.clear()
            await self.changed.wait()


async def _read_lines(replica: Replica) -> None:
    assert replica.proc.stdout is not None
    async for raw in replica.proc.stdout:
        with contextlib.suppress(ValueError):
            replica.lines.append(json.loads(raw))
            replica.changed.set()
    replica.changed.set()


async def start_replica(
    kubeconfig: Path, lease: str, identity: str, timing: list[str], watch: bool
) -> Replica:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nodeops.cli",
        "run",
        "--kubeconfig",
        str(kubeconfig),
        "--leader-elect",
        "--leader-election-id",
        lease,
        "--leader-election-namespace",
        NAMESPACE,
        "--leader-election-identity",
        identity,
        "--leader-election-watch" if watch else "--no-leader-election-watch",
        "--health-addr",
        "0",
        "--metrics-addr",
        "0",
        "--log-format",
        "json",
        *timing,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    replica = Replica(identity, proc)
    replica.reader = asyncio.create_task(_read_lines(replica))
    return replica


async def stop_replica(replica: Replica) -> None:
    if replica.proc.returncode is None:
        replica.proc.kill()
    await replica.proc.wait()
    if replica.reader is not None:
        await replica.reader


class LeaseWatch:
    """This harness's view of who holds the Lease, from a watch on it."""

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.name = name
        self.holder = ""
        self.changed = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        from nodeops.kube.resources import LEASES

        while True:
            with contextlib.suppress(Exception):
                async for event in self.client.watch(
                    LEASES, NAMESPACE, field_selector=f"metadata.name={self.name}"
                ):
                    if event.type in ("ADDED", "MODIFIED"):
                        spec = event.object.get("spec") or {}
                        self.holder = spec.get("holderIdentity") or ""
                        self.changed.set()
            await asyncio.sleep(0.05)

    async def wait_holder(self, wanted: set[str]) -> str:
        while self.holder not in wanted:
            self.changed.clear()
            await self.changed.wait()
        return self.holder

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def one_run(
    client: Any, kubeconfig: Path, run: int, mode: str, timing: list[str], retry_period: float
) -> dict[str, float]:
    lease = f"handover-{mode}-{run}"
    watch = mode == "watch"
    names = [f"{mode}{run}-a", f"{mode}{run}-b", f"{mode}{run}-c"]
    observer = LeaseWatch(client, lease)
    replicas: dict[str, Replica] = {}
    try:
        async with asyncio.timeout(STEP_TIMEOUT):
            for name in names[:2]:
                replicas[name] = await start_replica(kubeconfig, lease, name, timing, watch)
            leader = await observer.wait_holder(set(names[:2]))
            follower = names[1] if leader == names[0] else names[0]
            await replicas[follower].wait_saw_leader(leader)

            # At a random moment of the follower's retry cycle, as a real stop would come.
            await asyncio.sleep(random.uniform(0, retry_period * (1 + JITTER_FACTOR)))
            started = time.monotonic()
            replicas[leader].proc.send_signal(signal.SIGTERM)
            await observer.wait_holder({follower})
            sigterm = time.monotonic() - started
            await replicas[leader].proc.wait()

            third = names[2]
            replicas[third] = await start_replica(kubeconfig, lease, third, timing, watch)
            await replicas[third].wait_saw_leader(follower)
            await asyncio.sleep(random.uniform(0, retry_period * (1 + JITTER_FACTOR)))
            started = time.monotonic()
            replicas[follower].proc.kill()
            await observer.wait_holder({third})
            kill = time.monotonic() - started
    finally:
        await observer.close()
        for replica in replicas.values():
            await stop_replica(replica)
    return {"sigterm": sigterm, "kill": kill}


def _summary(values: list[float]) -> Obj:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "runs": [round(v, 3) for v in values],
    }


async def bench(args: argparse.Namespace) -> Obj:
    from nodeops.kube.client import Client

    timing = [
        "--lease-duration",
        str(args.lease_duration),
        "--renew-deadline",
        str(args.renew_deadline),
        "--retry-period",
        str(args.retry_period),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "sim.kubeconfig"
        sim = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "nodeops.cli",
            "sim",
            "serve",
            "--nodes",
            "1",
            "--instant",
            "--kubeconfig-out",
            str(kubeconfig),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            assert sim.stdout is not None
            async with asyncio.timeout(STEP_TIMEOUT):
                while b"serving at" not in await sim.stdout.readline():
                    if sim.returncode is not None:
                        raise RuntimeError("nodeops sim serve exited")
            drain = asyncio.create_task(sim.stdout.read())
            client = await Client.from_kubeconfig(str(kubeconfig))
            results: dict[str, dict[str, list[float]]] = {
                m: {"sigterm": [], "kill": []} for m in MODES
            }
            try:
                for run in range(args.runs):
                    for mode in MODES if run % 2 == 0 else MODES[::-1]:
                        figures = await one_run(
                            client, kubeconfig, run, mode, timing, args.retry_period
                        )
                        for key, value in figures.items():
                            results[mode][key].append(value)
                        print(
                            f"run {run + 1}/{args.runs} {mode:5}: sigterm "
                            f"{figures['sigterm']:.3f}s, kill -9 {figures['kill']:.3f}s",
                            file=sys.stderr,
                        )
            finally:
                await client.close()
        finally:
            if sim.returncode is None:
                sim.send_signal(signal.SIGTERM)
            await sim.wait()
            with contextlib.suppress(Exception):
                await drain
    summary = {mode: {k: _summary(v) for k, v in figs.items()} for mode, figs in results.items()}
    kill_target = args.lease_duration + TARGET_KILL_MARGIN
    watch = summary["watch"]
    return {
        "benchmark": "handover",
        "python": platform.python_version(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "timing": {
            "lease_duration": args.lease_duration,
            "renew_deadline": args.renew_deadline,
            "retry_period": args.retry_period,
        },
        "runs": args.runs,
        "seconds": summary,
        "targets": {
            "sigterm_median_max": TARGET_SIGTERM,
            "kill_median_max": kill_target,
            "sigterm_met": watch["sigterm"]["median"] <= TARGET_SIGTERM,
            "kill_met": watch["kill"]["median"] <= kill_target,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--runs", type=int, default=5, help="runs per mode (default 5)")
    parser.add_argument("--lease-duration", type=float, default=15.0)
    parser.add_argument("--renew-deadline", type=float, default=10.0)
    parser.add_argument("--retry-period", type=float, default=2.0)
    args = parser.parse_args()
    result = asyncio.run(bench(args))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for mode in MODES:
        figs = result["seconds"][mode]
        print(
            f"{mode:5}: sigterm median {figs['sigterm']['median']:.3f}s, "
            f"kill -9 median {figs['kill']['median']:.3f}s"
        )
    print(json.dumps(result["targets"]))


if __name__ == "__main__":
    main()
