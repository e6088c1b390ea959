"""`nodeops drain` against `kubectl drain`: wall time and API requests on the simulator.

    python -m bench.drain --json [--quick] [--pods 110] [--repeats 3] [--start-seconds 1]
    python -m bench.drain --json --kubeconfig K ...   # on a cluster of one's own: bench/external.py

One node (`node-0`) carries every pod of a ReplicaSet (110 by default, a node's pod capacity);
the other nodes take the replacements. Three scenarios:

- `no_pdb`: no PodDisruptionBudget; the instant kubelet removes each pod as soon as it is evicted.
- `pdb`: a PodDisruptionBudget with maxUnavailable=10 over the pods; the simulated ReplicaSet
  controller creates each replacement on another node and the instant kubelet makes it Ready.
- `pdb_slow_start`: the same budget, but each replacement starts (and is Ready) only
  `--start-seconds` after it is bound to a node, as real containers take a while; evicted pods
  still go at once (grace period 0). The budget refuses most of kubectl's evictions, which it
  retries every 5 s; nodeops waits for the watched budget instead.

The simulated API server behaves as kube-apiserver does where it matters here: an eviction
writes the budget's status and its watchers see it before the pod is touched and before the
answer; evictions racing on one budget conflict and retry after 500 ms; the disruption
controller drops a pod from `disruptedPods` as soon as it is terminating.

Each run gets a freshly created simulated cluster (in a child process, so the server never shares
a core's event loop with the client being measured), the workload is placed on `node-0` by
cordoning the other nodes while it is created, and then the tool runs as a subprocess, so process
start-up is counted for both: `python -m nodeops.cli drain ...` and the `kubectl` on the PATH,
with the same arguments (kubectl with its discovery cache warm, as on a machine that has used it
against the cluster before). Requests are the tool's own (`/sim/requests` by user agent, reset just
before the tool starts; the simulated controllers' requests and this harness's are excluded); the
counts are read after the cluster is stopped, so a watch still open when the tool exits is
counted too. The end state (node cordoned, no workload pod left on it, all replicas Running
elsewhere) is checked after every run and must be the same for both tools.

Targets, comparing medians: nodeops' wall time <= 0.5x kubectl's (<= 0.25x with slow starts),
nodeops' requests <= kubectl's, and no eviction of nodeops refused. All traffic stays on
127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

START_SECONDS = "sim.nodeops.dev/start-seconds"  # the simulated kubelet's start delay of a pod
NAMESPACE = "default"
APP = "web"
TARGET = "node-0"
BENCH_AGENT = "drain-bench/1"
TOOL_AGENTS = {"nodeops": "nodeops", "kubectl": "kubectl"}
DRAIN_ARGS = ["--ignore-daemonsets", "--delete-emptydir-data"]
SCENARIOS = ("no_pdb", "pdb", "pdb_slow_start")
TARGET_WALL_RATIO = {"no_pdb": 0.5, "pdb": 0.5, "pdb_slow_start": 0.25}
TOOL_TIMEOUT = 240.0

Obj = dict[str, Any]


# --------------------------------------------------------------------------- simulator process


def _sim_child(conn: Connection, nodes: int) -> None:
    """Serve one fresh simulated cluster at a time, on the parent's commands.

    `{"op": "start", "kubeconfig": path}` starts a cluster and answers its URL;
    `{"op": "stop"}` stops it and answers the request counters, taken after every watch has been
    closed (a watch is counted when it ends); `{"op": "exit"}` returns.
    """
    from nodeops.sim.serve import SimCluster, SimOptions

    async def main() -> None:
        loop = asyncio.get_running_loop()
        commands: asyncio.Queue[Obj] = asyncio.Queue()
        loop.add_reader(conn.fileno(), lambda: commands.put_nowait(conn.recv()))
        cluster: SimCluster | None = None
        while True:
            cmd = await commands.get()
            op = cmd["op"]
            if op == "start":
                cluster = SimCluster(
                    SimOptions(nodes=nodes, instant=cmd.get("instant", True), host="127.0.0.1")
                )
                await cluster.start()
                cluster.server.write_kubeconfig(cmd["kubeconfig"])
                conn.send({"url": cluster.server.url})
            elif op == "stop":
                stats: Obj = {}
                if cluster is not None:
                    await cluster.stop()
                    stats = cluster.server.stats.snapshot()
                    cluster = None
                conn.send(stats)
            else:
                if cluster is not None:
                    await cluster.stop()
                conn.send({})
                return

    asyncio.run(main())


class SimProcess:
    """A child process that creates a fresh simulated cluster per run."""

    def __init__(self, nodes: int) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_sim_child, args=(child, nodes), daemon=True)

    def __enter__(self) -> SimProcess:
        self._proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc.is_alive():
            try:
                self._conn.send({"op": "exit"})
                if self._conn.poll(20):
                    self._conn.recv()
            except (EOFError, OSError):
                pass  # the child is gone already
            self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()

    def _call(self, cmd: Obj, timeout: float = 120) -> Obj:
        self._conn.send(cmd)
        if not self._conn.poll(timeout):
            raise RuntimeError(f"the simulator did not answer {cmd['op']!r}")
        answer: Obj = self._conn.recv()
        return answer

    def start(self, kubeconfig: Path, *, instant: bool = True) -> str:
        cmd = {"op": "start", "kubeconfig": str(kubeconfig), "instant": instant}
        return str(self._call(cmd)["url"])

    def stop(self) -> Obj:
        return self._call({"op": "stop"})


# --------------------------------------------------------------------------- API helpers


class Api:
    """Just enough HTTP for preparing and checking a cluster, with the harness's user agent."""

    def __init__(
        self,
        url: str,
        *,
        namespace: str = NAMESPACE,
        ssl_context: ssl.SSLContext | None = None,
        token: str | None = None,
    ) -> None:
        self.url = url
        self.namespace = namespace
        self.ssl_context = ssl_context
        self.token = token

    def open(
        self, method: str, path: str, body: Obj | None = None, ctype: str = "", timeout: float = 30
    ) -> Any:
        """The response, unread: a watch is read line by line as it arrives."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("User-Agent", BENCH_AGENT)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", ctype or "application/json")
        return urllib.request.urlopen(req, timeout=timeout, context=self.ssl_context)

    def call(self, method: str, path: str, body: Obj | None = None, ctype: str = "") -> Obj:
        with self.open(method, path, body, ctype) as resp:
            payload = resp.read()
        return json.loads(payload) if payload else {}

    def pods(self, **query: str) -> list[Obj]:
        qs = urllib.parse.urlencode(query)
        items: list[Obj] = self.call("GET", f"/api/v1/namespaces/{self.namespace}/pods?{qs}")[
            "items"
        ]
        return items

    def set_unschedulable(self, node: str, value: bool) -> None:
        body = {"spec": {"unschedulable": True if value else None}}
        self.call("PATCH", f"/api/v1/nodes/{node}", body, "application/merge-patch+json")


def _wait(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _running(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get(
        "deletionTimestamp"
    )


def _replicaset(
    pods: int,
    start_seconds: float | None = None,
    *,
    namespace: str = NAMESPACE,
    labels: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
) -> Obj:
    """The workload; with `start_seconds`, pods start (and are Ready) that long after binding
    and stop at once (grace 0), for the kubelet that is not instant. `labels` go on the
    ReplicaSet and its pods besides `app`, `node_selector` keeps the pods on chosen nodes."""
    meta: Obj = {"labels": {**(labels or {}), "app": APP}}
    grace = 30
    if start_seconds is not None:
        meta["annotations"] = {START_SECONDS: f"{start_seconds:g}"}
        grace = 0
    pod_spec: Obj = {
        "terminationGracePeriodSeconds": grace,
        "containers": [{"name": "c", "image": "nginx:1.27"}],
    }
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": APP, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {
            "replicas": pods,
            "selector": {"matchLabels": {"app": APP}},
            "template": {"metadata": meta, "spec": pod_spec},
        },
    }


def _pdb(
    max_unavailable: int, *, namespace: str = NAMESPACE, labels: dict[str, str] | None = None
) -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": APP, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": {"app": APP}}},
    }


def prepare(
    api: Api, nodes: int, pods: int, scenario: str, start_seconds: float | None = None
) -> None:
    """Every workload pod Running on node-0, the other nodes schedulable again, PDB settled."""
    others = [f"node-{i}" for i in range(1, nodes)]
    for node in others:
        api.set_unschedulable(node, True)
    api.call(
        "POST",
        f"/apis/apps/v1/namespaces/{NAMESPACE}/replicasets",
        _replicaset(pods, start_seconds),
    )
    _wait(
        f"{pods} pods Running on {TARGET}",
        lambda: sum(map(_running, api.pods(fieldSelector=f"spec.nodeName={TARGET}"))) == pods,
    )
    if scenario != "no_pdb":
        api.call("POST", f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets", _pdb(10))

        def settled() -> bool:
            pdb = api.call(
                "GET", f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets/{APP}"
            )
            status = pdb.get("status") or {}
            return (
                status.get("observedGeneration") == pdb["metadata"].get("generation")
                and status.get("currentHealthy") == pods
                and status.get("disruptionsAllowed") == min(10, pods)
            )

        _wait("the PodDisruptionBudget's status", settled)
    for node in others:
        api.set_unschedulable(node, False)


def end_state(api: Api, pods: int) -> Obj:
    """What the drain left behind, once the replacements have had time to start."""
    node = api.call("GET", f"/api/v1/nodes/{TARGET}")

    def snapshot() -> tuple[int, int]:
        workload = api.pods(labelSelector=f"app={APP}")
        on_node = sum(1 for p in workload if p["spec"].get("nodeName") == TARGET)
        elsewhere = sum(1 for p in workload if _running(p) and p["spec"].get("nodeName") != TARGET)
        return on_node, elsewhere

    deadline = time.monotonic() + 30
    on_node, elsewhere = snapshot()
    while (on_node or elsewhere != pods) and time.monotonic() < deadline:
        time.sleep(0.1)
        on_node, elsewhere = snapshot()
    return {
        "node_cordoned": bool((node.get("spec") or {}).get("unschedulable")),
        "workload_pods_on_node": on_node,
        "replicas_running_elsewhere": elsewhere,
    }


# --------------------------------------------------------------------------- one measured run


def _program(tool: str) -> list[str]:
    if tool == "nodeops":
        return [sys.executable, "-m", "nodeops.cli"]
    return [shutil.which("kubectl") or "kubectl"]


def run_drainer(
    tool: str, command: list[str], env: dict[str, str]
) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run one drainer to its end: its wall seconds and what it printed; a failure raises."""
    started = time.perf_counter()
    done = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=TOOL_TIMEOUT, check=False
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{tool} drain failed ({done.returncode}): {done.stderr[-2000:]}")
    return wall, done


def _command(tool: str, kubeconfig: Path, node: str = TARGET) -> list[str]:
    return [*_program(tool), "drain", node, *DRAIN_ARGS, "--kubeconfig", str(kubeconfig)]


def _by_verb(pairs: dict[str, Obj]) -> dict[str, int]:
    out: dict[str, int] = {}
    for pair, bucket in pairs.items():
        verb = pair.split("/", 1)[0]
        out[verb] = out.get(verb, 0) + int(bucket["requests"])
    return dict(sorted(out.items()))


def run_once(
    sim: SimProcess,
    workdir: Path,
    tool: str,
    scenario: str,
    nodes: int,
    pods: int,
    start_seconds: float,
) -> Obj:
    kubeconfig = workdir / f"{tool}-{scenario}.kubeconfig"
    slow = scenario == "pdb_slow_start"
    api = Api(sim.start(kubeconfig, instant=not slow))
    try:
        prepare(api, nodes, pods, scenario, start_seconds if slow else None)
        # kubectl keeps API discovery in a cache on disk; warm a private one, as a machine that
        # has used kubectl against the cluster before has (the port is new for every cluster).
        env = dict(os.environ, KUBECONFIG=str(kubeconfig), KUBECACHEDIR=str(workdir / "kube"))
        if tool == "kubectl":
            subprocess.run(
                [shutil.which("kubectl") or "kubectl", "api-resources", "-o", "name"],
                capture_output=True,
                env=env,
                timeout=60,
                check=True,
            )
        api.call("DELETE", "/sim/requests")
        wall, done = run_drainer(tool, _command(tool, kubeconfig), env)
        state = end_state(api, pods)
    finally:
        stats = sim.stop()
    agent = (stats.get("by_agent") or {}).get(TOOL_AGENTS[tool]) or {}
    pairs: dict[str, Obj] = agent.get("by_verb_resource") or {}
    # Only evictions are ever answered 429 here, and only the tool evicts.
    refused = int(((stats.get("by_code") or {}).get("429") or {}).get("requests") or 0)
    return {
        "wall_seconds": round(wall, 3),
        "requests": int(agent.get("requests") or 0),
        "requests_by_verb": _by_verb(pairs),
        "requests_by_verb_resource": {k: int(v["requests"]) for k, v in pairs.items()},
        "evictions_refused": refused,
        "stdout_lines": len(done.stdout.splitlines()),
        "end_state": state,
    }


def _median_run(runs: list[Obj]) -> Obj:
    """The run whose wall time is the median (runs are odd in number by default)."""
    ordered = sorted(runs, key=lambda r: r["wall_seconds"])
    return ordered[(len(ordered) - 1) // 2]


def summarise(runs: list[Obj]) -> Obj:
    median = _median_run(runs)
    return {
        "wall_seconds": round(statistics.median(r["wall_seconds"] for r in runs), 3),
        "requests": int(statistics.median(r["requests"] for r in runs)),
        "requests_by_verb": median["requests_by_verb"],
        "requests_by_verb_resource": median["requests_by_verb_resource"],
        "evictions_refused": int(statistics.median(r["evictions_refused"] for r in runs)),
        "stdout_lines": int(statistics.median(r["stdout_lines"] for r in runs)),
        "runs": [
            {
                "wall_seconds": r["wall_seconds"],
                "requests": r["requests"],
                "evictions_refused": r["evictions_refused"],
            }
            for r in runs
        ],
        "end_state": median["end_state"],
        "end_states_identical": all(r["end_state"] == runs[0]["end_state"] for r in runs),
    }


def _kubectl_version() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return ""
    out = subprocess.run(
        [kubectl, "version", "--client", "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    try:
        return str(json.loads(out.stdout)["clientVersion"]["gitVersion"])
    except (ValueError, KeyError):
        return out.stdout.strip()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=None, help="workload pods (default 110)")
    parser.add_argument("--nodes", type=int, default=4, help="nodes, node-0 included")
    parser.add_argument("--repeats", type=int, default=None, help="runs per tool (default 3)")
    parser.add_argument("--quick", action="store_true", help="30 pods, 1 run per tool")
    parser.add_argument("--scenario", choices=SCENARIOS, action="append", help="default: all")
    parser.add_argument(
        "--start-seconds",
        type=float,
        default=1.0,
        help="pdb_slow_start: seconds from binding until a pod runs and is Ready",
    )
    parser.add_argument(
        "--kubeconfig",
        help="measure on this cluster, the simulator's kubelets attached to it, rather than on "
        "a simulated cluster per run (see bench/external.py)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON (the only output form)")
    args = parser.parse_args(argv)
    if args.kubeconfig is not None:
        from nodeops.sim.attach.kubeconfig import AttachError, load_target

        try:
            load_target(args.kubeconfig, None)
        except AttachError as exc:
            parser.error(str(exc))
    pods = args.pods or (30 if args.quick else 110)
    repeats = args.repeats or (1 if args.quick else 3)
    scenarios = args.scenario or list(SCENARIOS)
    if shutil.which("kubectl") is None:
        print("kubectl is not on the PATH", file=sys.stderr)
        return 2
    if pods > 110 or (args.nodes - 1) * 110 < pods:
        print("node-0 holds at most 110 pods, and the others must hold them all", file=sys.stderr)
        return 2
    if args.kubeconfig:
        from bench.external import run_external

        return run_external(
            args.kubeconfig, args.nodes, pods, repeats, scenarios, args.start_seconds
        )
    started = time.perf_counter()
    results: dict[str, Obj] = {}
    with tempfile.TemporaryDirectory(prefix="drain-bench-") as tmp, SimProcess(args.nodes) as sim:
        workdir = Path(tmp)
        for scenario in scenarios:
            runs: dict[str, list[Obj]] = {"nodeops": [], "kubectl": []}
            # Alternate the tools so that drift of the machine over time hits both alike.
            for i in range(repeats):
                for tool in ("nodeops", "kubectl") if i % 2 == 0 else ("kubectl", "nodeops"):
                    run = run_once(
                        sim, workdir, tool, scenario, args.nodes, pods, args.start_seconds
                    )
                    runs[tool].append(run)
                    print(
                        f"{scenario} {tool} run {i + 1}: {run['wall_seconds']}s "
                        f"{run['requests']} requests, {run['evictions_refused']} refused",
                        file=sys.stderr,
                    )
            nodeops, kubectl = summarise(runs["nodeops"]), summarise(runs["kubectl"])
            wall_ratio = nodeops["wall_seconds"] / kubectl["wall_seconds"]
            request_ratio = nodeops["requests"] / max(1, kubectl["requests"])
            all_states = [r["end_state"] for tool_runs in runs.values() for r in tool_runs]
            expected = {
                "node_cordoned": True,
                "workload_pods_on_node": 0,
                "replicas_running_elsewhere": pods,
            }
            results[scenario] = {
                "nodeops": nodeops,
                "kubectl": kubectl,
                "ratios": {
                    "wall_seconds": round(wall_ratio, 3),
                    "requests": round(request_ratio, 3),
                },
                "end_states_identical": all(s == all_states[0] for s in all_states),
                "end_state_as_expected": all(s == expected for s in all_states),
                "targets": {
                    "wall_ratio_max": TARGET_WALL_RATIO[scenario],
                    "wall_met": wall_ratio <= TARGET_WALL_RATIO[scenario],
                    "requests_ratio_max": 1.0,
                    "requests_met": nodeops["requests"] <= kubectl["requests"],
                    "refused_max": 0,
                    "refused_met": all(r["evictions_refused"] == 0 for r in runs["nodeops"]),
                },
            }
    out = {
        "benchmark": "drain",
        "command": f"drain {TARGET} {' '.join(DRAIN_ARGS)}",
        "machine": {
            "cpus": os.cpu_count(),
            "cpu_model": _cpu_model(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "kubectl": _kubectl_version(),
        },
        "cluster": {
            "nodes": args.nodes,
            "workload_pods": pods,
            "kubelet": "instant, or with pdb_slow_start pods Ready "
            f"{args.start_seconds:g} s after binding and stopping at once",
            "pdb_max_unavailable": 10,
        },
        "repeats": repeats,
        "scenarios": results,
        "targets_met": all(
            r["targets"]["wall_met"]
            and r["targets"]["requests_met"]
            and r["targets"]["refused_met"]
            for r in results.values()
        ),
        "end_states_ok": all(
            r["end_states_identical"] and r["end_state_as_expected"] for r in results.values()
        ),
        "total_seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
