"""A roll rehearsed: the snapshot copied into a simulated cluster, rolled by the cycling
controllers on a fast clock, and what happened turned into a report.

The copy runs the operator's own defaults (check and cloud poll intervals, and the rate its
client may call the API server at, as `nodeops run` has them), so the timeline is the one the
real manager would follow, not the demo's brisker one.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import gc
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeops.api.duration import parse_duration
from nodeops.controllers.cycling.fit import SPARE_BELOW
from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS
from nodeops.demo.world import OPERATOR_NAMESPACE, World, WorldOptions
from nodeops.kube.clientconfig import CLIENT_QPS
from nodeops.kube.resources import NODES, PODS, REPLICASETS
from nodeops.rehearse.progress import ProgressLine, RollPace, duration
from nodeops.rehearse.report import (
    Batch,
    Blocked,
    Dip,
    Held,
    Pending,
    Preempted,
    Report,
    RequestOutcome,
    Stopped,
)
from nodeops.rehearse.seed import Copied, StartTimes, copy_snapshot
from nodeops.rehearse.snapshot import Snapshot
from nodeops.rehearse.timings import Workloads, boot_seconds_from_history, pod_start_seconds
from nodeops.rehearse.watch import PENDING_SETTLE_SECONDS, RollRecorder
from nodeops.sim.scenario import Scenario
from nodeops.sim.serve import SimCluster
from nodeops.sim.warp import WarpLoop, run_apart

__all__ = [
    "OPERATOR_DEFAULTS",
    "Rehearsal",
    "RehearsalOptions",
    "RehearseError",
    "estimate_memory",
    "quiet_collector",
    "rehearse",
]

OPERATOR_DEFAULTS: Mapping[str, Any] = {
    "check_interval": 10.0,
    "cloud_poll_interval": 10.0,
    "cloud_max_backoff": 120.0,
}
"""`nodeops run`'s own cycling settings where the demo's world sets brisker ones."""

BASE_BYTES = 150 * 2**20
BYTES_PER_SNAPSHOT_BYTE = 40
"""Resident memory of the copy (store, the simulator's and the manager's caches) per byte of
the snapshot's JSON, for small clusters, where the copy's fixed costs weigh most."""
LARGE_BASE_BYTES = 850 * 2**20
LARGE_BYTES_PER_SNAPSHOT_BYTE = 17
LARGE_MARGIN = 1.15
"""Per byte, the copy costs less as the cluster grows (its watch histories are bounded, its
fixed costs shared). Measured with `bench/rehearse.py` (peak resident memory against snapshot
JSON): 610 MiB for 12.8 MiB at 50 nodes, 1,685 for 50.9 at 200, 2,974 for 127.2 at 500 and
4,915 for 254.2 at 1,000. The estimate is the lower of the two lines, each above every
measured point: the small clusters' (within 9% at 50 nodes) and the large ones', with a
margin for clusters of other shapes (16 to 21% above from 200 to 1,000 nodes)."""
BATCH_GAP_SECONDS = 5.0
"""Replacements started within this many simulated seconds of a batch's first are its own."""


class RehearseError(Exception):
    """Input the rehearsal cannot work with; the message is the one line to print."""


@dataclass
class RehearsalOptions:
    time_scale: float = 1.0
    """Simulated seconds per second of the copy's loop. With `warp` and work that takes no
    time, the prediction does not depend on it: every wait the operator and the simulator
    make is counted in the cluster's seconds (at 50 nodes, 1,345.0 s predicted at 1 and
    1,344.9 s at 2). 1 keeps any wait that is not as long as in a live cluster."""
    warp: bool = True
    """Skip the copy's idle waits (`nodeops.sim.warp`): its loop's clock jumps to the next
    timer whenever nothing else is left to do, so wall time is the work's, not the waits'."""
    work_takes_time: bool = False
    """With `warp`: True, the copy's work (API calls, reconciles) takes the wall time it takes
    on this machine, times `time_scale`; False, it takes none and only the waits count, so the
    prediction does not depend on how fast or how busy the machine is (a live roll's API calls
    and reconciles are short beside the waits for boots, starts and budgets)."""
    boot_seconds: float = 60.0
    """An instance's boot when no past roll recorded one."""
    pod_start_seconds: float | None = None
    """A pod's start when its workload's pods show none; None: the simulator's default."""
    horizon_seconds: float = 6 * 3600.0
    """Give up on a roll that has not ended after this many simulated seconds."""
    settings: dict[str, Any] = field(default_factory=lambda: dict(OPERATOR_DEFAULTS))
    memory_limit: int | None = None
    """Bytes the copy may use; None: what the system says is available."""
    warmup_seconds: float = 300.0
    """Wall seconds the copy's pods get to run before the roll begins."""
    time_limit_seconds: float | None = None
    """Wall seconds the rehearsal may take; past them the roll is cut short and the report
    covers it so far (`Report.stopped`). None: until the roll ends or the horizon."""
    seed: int = 0


def available_memory() -> int:
    """What the kernel says a new process may still use: MemAvailable, or less under a cgroup
    limit."""
    available = 0
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except OSError:
        return 2**62
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as f:
            used = int(f.read().strip())
        if limit != "max":
            available = min(available, int(limit) - used)
    except (OSError, ValueError):
        pass
    return available or 2**62


def estimate_memory(snapshot: Snapshot) -> int:
    size = snapshot.json_bytes
    small = BASE_BYTES + BYTES_PER_SNAPSHOT_BYTE * size
    large = LARGE_MARGIN * (LARGE_BASE_BYTES + LARGE_BYTES_PER_SNAPSHOT_BYTE * size)
    return int(min(small, large))


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


class Rehearsal:
    """One rehearsal; `run` returns its report. Also usable around a real roll on a simulator
    (the benchmark does), through `RollRecorder` and `outcome`."""

    def __init__(
        self,
        snapshot: Snapshot,
        options: RehearsalOptions,
        progress: ProgressLine | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.options = options
        self.progress = progress
        self.world: World | None = None
        self.recorder: RollRecorder | None = None
        self.copied = Copied()
        self.stopped: str | None = None
        """Why the roll was cut short, as the copy's loop learnt it; None while it runs on."""
        self._stop_lock = threading.Lock()
        self._stop_wanted: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def stop(self, why: str) -> None:
        """Cut the roll short: the copy's operator stops, and the report covers the roll so
        far. Safe from any thread (a signal handler on the caller's loop, a timer); the first
        reason given is kept."""
        with self._stop_lock:
            if self._stop_wanted is not None:
                return
            self._stop_wanted = why
            loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the copy's loop closed: nothing to stop
                loop.call_soon_threadsafe(self._stop_here)

    def _stop_here(self) -> None:
        """On the copy's loop: what `stop` asked for, seen by the waits of `_roll`."""
        if self.stopped is None:
            self.stopped = self._stop_wanted
            if self.recorder is not None:
                self.recorder.wake()

    def check_memory(self) -> None:
        need = estimate_memory(self.snapshot)
        have = (
            self.options.memory_limit
            if self.options.memory_limit is not None
            else available_memory()
        )
        if need > have:
            nodes, pods = len(self.snapshot.of(NODES)), len(self.snapshot.of(PODS))
            raise RehearseError(
                f"the cluster ({nodes} nodes, {pods} pods) needs about {_mib(need)} to "
                f"rehearse and {_mib(have)} is available"
            )

    async def run(
        self, requests: Sequence[Mapping[str, Any]], nodegroup_of: Mapping[str, str]
    ) -> Report:
        """Roll `requests` (CycleNodeRequest bodies as `nodeops cycle` would create them) on
        the copy. `nodegroup_of` maps each body's generateName to its NodeGroup.

        With `warp` the copy runs on a loop of its own that skips its idle waits, in a thread
        of its own unless the caller's loop already is such a loop: the copy talks only to
        itself, while the caller's loop may still be talking to the live cluster, whose
        answers a skipping clock would time out.
        """
        self.check_memory()
        limit = self.options.time_limit_seconds
        timer: threading.Timer | None = None
        if limit is not None:
            # A thread's timer: the copy's loop skips its waits, so its clock is no wall clock.
            shown = duration(limit) if limit >= 1 else f"{limit:g}s"
            timer = threading.Timer(limit, self.stop, (f"time limit of {shown}",))
            timer.daemon = True
            timer.start()
        try:
            if self.options.warp and not isinstance(asyncio.get_running_loop(), WarpLoop):
                return await run_apart(
                    lambda: self._roll(requests, nodegroup_of),
                    work_takes_time=self.options.work_takes_time,
                )
            return await self._roll(requests, nodegroup_of)
        finally:
            if timer is not None:
                timer.cancel()

    async def _roll(
        self, requests: Sequence[Mapping[str, Any]], nodegroup_of: Mapping[str, str]
    ) -> Report:
        wall_start = time.monotonic()
        cpu_start = time.process_time()
        with self._stop_lock:
            self._loop = asyncio.get_running_loop()
            if self._stop_wanted is not None:
                self._stop_here()
        snapshot, options = self.snapshot, self.options
        workloads = Workloads(snapshot.of(REPLICASETS))
        observed = pod_start_seconds(
            snapshot.of(PODS), workloads, crowd_limit=_starts_at_once(requests, snapshot)
        )
        history = boot_seconds_from_history(snapshot.of(CYCLENODEREQUESTS), snapshot.of(NODES))
        boot = history if history is not None else options.boot_seconds

        def load(sim: SimCluster) -> None:
            # Before the copy's control loops start: they list it as they come up.
            self.copied = copy_snapshot(
                sim.server,
                sim.cloud,
                snapshot,
                boot_seconds=boot,
                start_times=StartTimes(observed.seconds, options.pod_start_seconds),
                workloads=workloads,
            )
            recorder.loaded()

        self._step(
            f"loading the copy: {len(snapshot.of(NODES)):,} nodes, {len(snapshot.of(PODS)):,} pods"
        )
        world = self.world = World(
            WorldOptions(
                scenario=Scenario(),
                time_scale=options.time_scale,
                seed=options.seed,
                settings=dict(options.settings),
                controllers=False,
                populate=load,
                record=False,
                manager_qps=CLIENT_QPS,
            )
        )
        recorder = RollRecorder(world.sim.server, world.clock, workloads)
        self.recorder = recorder
        stack = contextlib.ExitStack()
        try:
            await world.start()
            _patient_node_lifecycle(world)
            self._step(f"copy loaded in {duration(time.monotonic() - wall_start)}; settling")
            settling = time.monotonic()
            await self._warm_up()
            self._step(
                f"copy settled in {duration(time.monotonic() - settling)}; rolling"
                if self.stopped is None
                else f"copy not rolled: stopped ({self.stopped})"
            )
            stack.enter_context(quiet_collector())
            names: dict[str, str] = {}
            for body in requests:
                mine = copy.deepcopy(dict(body))
                mine["metadata"]["namespace"] = OPERATOR_NAMESPACE
                mine["spec"].pop("provider", None)
                created = await world.create_request(mine)
                names[created["metadata"]["name"]] = nodegroup_of.get(
                    str(body["metadata"].get("generateName", "")), ""
                )
            world.stats.reset()
            recorder.start(self.copied.desired)
            self._follow(recorder)
            if self.stopped is None:
                world.start_manager()
                await recorder.until(
                    lambda: recorder.all_ended(names) or self.stopped is not None,
                    world.clock.wall_seconds(options.horizon_seconds),
                )
            ended = recorder.all_ended(names)
            stopped = None if ended else self.stopped
            recorder.finish()
            recorder.on_roll_change = None
            if stopped is not None:
                # The copy's operator stops where it is; what it started runs on as a cluster
                # would (evicted pods placed, new nodes up) while Pending pods are judged.
                await world.stop_manager()
            replaced, _, selected = recorder.nodes_replaced()
            simulated = recorder.simulated_seconds()
            if ended:
                how = "ended"
            elif stopped is not None:
                how = f"stopped ({stopped}) with {replaced} of {selected or '?'} nodes replaced"
            else:
                how = "given up at the horizon"
            self._step(
                f"roll {how} after {duration(simulated)} simulated; "
                f"{duration(PENDING_SETTLE_SECONDS)} more to see which pods stay Pending"
            )
            stats = world.stats.snapshot()
            await recorder.settle()
        finally:
            await world.stop()
            stack.close()
        report = outcome(recorder, names, requests, stats, cut_short=stopped is not None)
        if stopped is not None:
            report.stopped = Stopped(stopped, replaced, selected, round(simulated, 1))
        report.notes = observed.notes()
        report.inputs = {
            "boot_seconds": boot,
            "boot_seconds_from": "past rolls" if history is not None else "--boot-seconds",
            "pod_start_seconds_observed": {
                k: round(v, 1) for k, v in sorted(observed.seconds.items())
            },
            "pod_start_crowded": observed.crowded,
            "pod_start_seconds_default": options.pod_start_seconds,
            "time_scale": options.time_scale,
            "time_limit_seconds": options.time_limit_seconds,
            "clock": _clock_mode(),
            "nodes": self.copied.nodes,
            "pods": self.copied.pods,
            "left_out": self.copied.left_out,
            "settling": dict(recorder.settling),
            "not_served": snapshot.not_served,
            "wall_seconds": round(time.monotonic() - wall_start, 2),
            "cpu_seconds": round(time.process_time() - cpu_start, 2),
            "memory_estimate_bytes": estimate_memory(snapshot),
        }
        return report

    def _step(self, text: str) -> None:
        if self.progress is not None:
            self.progress.step(text)

    def _follow(self, recorder: RollRecorder) -> None:
        """The roll's progress line, drawn as replacements end."""
        progress = self.progress
        if progress is None:
            return
        pace = RollPace()

        def changed() -> None:
            ended, failed, selected = recorder.nodes_replaced()
            line = pace.line(ended, selected, recorder.simulated_seconds(), failed)
            progress.roll(line, ended, selected)

        recorder.on_roll_change = changed

    async def _warm_up(self) -> None:
        """Until the copy's pods run as the snapshot's did."""
        assert self.recorder is not None
        want = self.copied.pods_to_start - sum(
            1
            for p in self.snapshot.of(PODS)
            if (p.get("status") or {}).get("phase") == "Running"
            and not any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (p.get("status") or {}).get("conditions") or ()
            )
        )
        recorder = self.recorder
        settled = await recorder.until(
            lambda: recorder.ready_pods() >= want or self.stopped is not None,
            self.options.warmup_seconds,
        )
        if not settled and self.stopped is None:
            raise RehearseError(
                f"the simulated copy did not settle: {recorder.ready_pods()} of "
                f"{want} pods Ready after {self.options.warmup_seconds:g}s"
            )


YOUNG_COLLECTION_EVERY = 50_000
"""Allocations between two collections of the youngest generation during the roll (the
interpreter's default is 700)."""


def _starts_at_once(requests: Sequence[Mapping[str, Any]], snapshot: Snapshot) -> int:
    """The most pods the roll starts at once: every request's batch of the busiest nodes (a
    concurrency of 0 takes every node)."""
    per_node = Counter(str((p.get("spec") or {}).get("nodeName")) for p in snapshot.of(PODS))
    busiest = max(per_node.values(), default=1)
    nodes = len(snapshot.of(NODES)) or 1
    batch = 0
    for body in requests:
        settings = (body.get("spec") or {}).get("cycleSettings") or {}
        batch += int(settings.get("concurrency") or 0) or nodes
    return max(1, min(batch, nodes)) * busiest


@contextlib.contextmanager
def quiet_collector() -> Iterator[None]:
    """The cyclic garbage collector kept from the copy while it rolls.

    The copy is millions of long-lived containers (the caches of the simulator's loops and of
    the manager, decoded objects all), and the roll allocates fast: left to the default
    thresholds, collections of the older generations walk all of it again and again and took
    a fifth of the rehearsal's time at 50 nodes. What exists once the copy has settled is moved out of the
    collector's reach (`gc.freeze`, still freed by reference counting), and young collections
    run less often; what the roll leaves as cyclic garbage is collected at the end.
    """
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, thresholds[1], thresholds[2])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def _clock_mode() -> dict[str, Any]:
    """How the copy's clock ran: scaled wall time (`scaled`), or skipping idle waits (`warp`:
    whether the work between them took time, and the loop seconds skipped)."""
    loop = asyncio.get_running_loop()
    if isinstance(loop, WarpLoop):
        return {
            "mode": "warp",
            "work_takes_time": loop.work_takes_time,
            "skipped_loop_seconds": round(loop.skipped_seconds, 1),
        }
    return {"mode": "scaled"}


NODE_GRACE_SECONDS = 3600.0
HEARTBEAT_SECONDS = NODE_GRACE_SECONDS / 4
"""How often the copy's kubelets renew their leases and post their nodes' status: nothing in
the roll reads a heartbeat, and at the simulator's 10 s they were the copy's largest single
kind of write (a fifth of all at 20 nodes, more at 200, whose roll lasts longer)."""


def _patient_node_lifecycle(world: World) -> None:
    """Every kubelet of the copy is simulated and healthy, so a node of the copy that misses
    its heartbeats only shows a clock the machine could not keep up with; marking it NotReady
    would predict a failure the real roll cannot have. Since no node is ever found silent, the
    kubelets beat rarely (`HEARTBEAT_SECONDS`); a new node still reports at once."""
    loops = world.sim.loops
    if loops is not None and loops.nodelifecycle is not None:
        loops.nodelifecycle.grace_seconds = NODE_GRACE_SECONDS
        loops.nodelifecycle.startup_grace_seconds = NODE_GRACE_SECONDS
    if loops is not None and loops.kubelet is not None:
        loops.kubelet.heartbeat_seconds = HEARTBEAT_SECONDS


def outcome(
    recorder: RollRecorder,
    names: Mapping[str, str],
    requests: Sequence[Mapping[str, Any]],
    stats: Mapping[str, Any],
    *,
    cut_short: bool = False,
) -> Report:
    """The report of a roll a recorder watched (a rehearsal's or a real one on a simulator).

    `cut_short`: the roll was stopped before its end, so a request still running is not one
    that would not finish; only what went wrong up to then is a failure."""
    start = recorder.started_at
    failures: list[str] = []
    outcomes: list[RequestOutcome] = []
    ends: list[float] = []
    deadline: float | None = None
    for body in requests:
        text = ((body.get("spec") or {}).get("cycleSettings") or {}).get("drainDeadline")
        if text:
            limit = parse_duration(str(text))
            deadline = limit if deadline is None else min(deadline, limit)
    for name, nodegroup in names.items():
        r = recorder.requests.get(name)
        phase = r.phase if r is not None else ""
        seconds = (r.ended - start) if r is not None and r.ended is not None else None
        if seconds is not None:
            ends.append(seconds)
        message = r.message if r is not None else ""
        outcomes.append(RequestOutcome(name, nodegroup, phase, message, seconds))
        if phase == "Failed":
            failures.append(f"the request for NodeGroup {nodegroup} would fail: {message}")
        elif phase != "Successful" and not cut_short:
            failures.append(f"the request for NodeGroup {nodegroup} would not finish in time")
    children = sorted(recorder.children.values(), key=lambda c: c.created)
    batches: list[Batch] = []
    for child in children:
        if not batches or child.created - start - batches[-1].start_seconds > BATCH_GAP_SECONDS:
            batches.append(Batch(len(batches) + 1, [], round(child.created - start, 1), None))
        batch = batches[-1]
        batch.nodes.append(child.node)
        if child.ended is not None:
            end = round(child.ended - start, 1)
            batch.end_seconds = max(batch.end_seconds or 0.0, end)
        if child.phase == "Failed":
            batch.failed.append(child.node)
    blocked = [
        Blocked(name, round(total, 1), round(longest, 1), stalls)
        for name, (total, longest, stalls) in sorted(recorder.budgets().items())
    ]
    for b in blocked:
        if deadline is not None and b.longest_seconds >= deadline:
            failures.append(
                f"PodDisruptionBudget {b.budget} would hold a drain for {b.longest_seconds:.0f}s, "
                f"past the drain deadline of {deadline:.0f}s"
            )
    dips = sorted(
        (
            Dip(workload, recorder.desired[workload], round(share, 4))
            for workload, share in recorder.lowest_ready.items()
        ),
        key=lambda d: (d.lowest_ready_share, d.workload),
    )
    pending = [
        Pending(pod, reason, before, spare=priority < SPARE_BELOW)
        for pod, reason, before, priority in recorder.pending()
    ]
    # Placeholders of a negative priority may wait, as the capacity check lets them.
    new_pending = [p for p in pending if not p.already_pending and not p.spare]
    if new_pending:
        shown = ", ".join(p.pod for p in new_pending[:3])
        more = f" and {len(new_pending) - 3} more" if len(new_pending) > 3 else ""
        failures.append(
            f"{len(new_pending)} pods would be left Pending ({shown}{more}): "
            f"{new_pending[0].reason}"
        )
    held = [
        Held(
            name,
            nodegroup,
            round(r.held_seconds, 1),
            round(r.longest_hold, 1),
            r.holds,
            r.hold_message,
        )
        for name, nodegroup in names.items()
        if (r := recorder.requests.get(name)) is not None and r.holds
    ]
    api, cloud = calls(stats)
    preempted = [Preempted(w, n) for w, n in sorted(recorder.preempted().items())]
    return Report(
        predicted_seconds=round(max(ends), 1) if ends and len(ends) == len(names) else None,
        requests=outcomes,
        batches=batches,
        budgets=blocked,
        capacity=held,
        workloads=dips,
        pending=pending,
        api_calls=api,
        cloud_calls=cloud,
        failures=failures,
        inputs={},
        preempted=preempted,
    )


def calls(
    stats: Mapping[str, Any], agent: str = "nodeops"
) -> tuple[dict[str, int], dict[str, int]]:
    """The operator's Kubernetes API and cloud calls, by verb and resource."""
    pairs = ((stats.get("by_agent") or {}).get(agent) or {}).get("by_verb_resource") or {}
    api: dict[str, int] = {}
    cloud: dict[str, int] = {}
    for pair, bucket in pairs.items():
        n = int(bucket.get("requests") or 0)
        target = cloud if pair.split("/", 1)[-1].startswith("cloud/") else api
        target[pair] = target.get(pair, 0) + n
    return api, cloud


async def rehearse(
    snapshot: Snapshot,
    requests: Sequence[Mapping[str, Any]],
    nodegroup_of: Mapping[str, str],
    options: RehearsalOptions | None = None,
) -> Report:
    return await Rehearsal(snapshot, options or RehearsalOptions()).run(requests, nodegroup_of)
