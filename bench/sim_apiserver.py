"""Benchmark of the simulated API server: list throughput, watch fan-out and memory.

The server runs in a spawned process with a cluster of realistic objects bulk-loaded into its
store (nodes, Deployments, ReplicaSets and the pods they own, each pod ~9.6 KB of JSON as
`nodeops.sim.objects.make_pod` builds it). This process is the client: it talks to the server
over HTTP on 127.0.0.1 with aiohttp, as an informer would, and drives the server's bench-only
code paths (the event writer, memory readings) over a multiprocessing pipe, so that writing
watch events costs no HTTP request.

Run `python -m bench.sim_apiserver --json` for the full targets (150,000 pods on 5,000 nodes,
about four minutes on two cores) or add `--quick` for a run twenty times smaller. Progress goes
to stderr; the result is one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import multiprocessing
import os
import platform
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import aiohttp
import orjson

# Targets from the simulator's requirements.
LIST_TARGET_OBJECTS_PER_S = 50_000
WATCH_TARGET_EVENTS_PER_S = 20_000
MEMORY_TARGET_BYTES = 2 * 1024**3

NAMESPACES = (
    "payments",
    "checkout",
    "search",
    "catalog",
    "identity",
    "media",
    "analytics",
    "platform",
)
ZONES = ("eu-west-1a", "eu-west-1b", "eu-west-1c")
INSTANCE_TYPES = ("m5.xlarge", "m6i.xlarge", "c5.2xlarge", "r5.xlarge")
REPLICAS_PER_DEPLOYMENT = 30
LOAD_BATCH = 1_000
PAGE_LIMIT = 500
FULL_LIST_RUNS = 3
# Events the writer may run ahead of the slowest watcher before it yields: the writer measures
# delivery, so it must not just fill the watchers' buffers.
MAX_BACKLOG = 2_000
WRITE_BATCH = 100
# Watch events whose send time the client reads back in the transfer-only runs.
LATENCY_SAMPLE_EVERY = 16
PACED_RATE = 2_000
PACED_SECONDS = 3.0
PATCH_PATH_COUNT = 2_000

SEQ_LABEL = "bench.nodeops.io/seq"
SENT_ANNOTATION = "bench.nodeops.io/sent"
USER_AGENT = "nodeops-bench/0.1"

# Sentinels of the prototype pod each ReplicaSet's pods are cloned from (see `_PodCloner`).
_PROTO_SUFFIX = "zzzzz"
_PROTO_HOST_IP = "10.255.254.253"
_PROTO_POD_IP = "10.254.253.252"
_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

PHASE_TIMEOUT = 180.0


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class Params:
    pods: int = 150_000
    nodes: int = 5_000
    watchers: int = 20
    events: int = 100_000
    quick: bool = False
    seed: int = 1


# ============================================================================ server process


def _rss_bytes(pid: int | str = "self") -> dict[str, int]:
    """VmRSS and VmHWM of a process, in bytes."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out


@dataclass(frozen=True, slots=True)
class Usage:
    """CPU time and minor page faults of a process so far."""

    cpu_s: float
    faults: int

    @staticmethod
    def of(pid: int | str = "self") -> Usage:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rpartition(")")[2].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return Usage((int(fields[11]) + int(fields[12])) / ticks, int(fields[7]))

    def since(self, before: Usage) -> dict[str, float]:
        return {
            "cpu_s": round(self.cpu_s - before.cpu_s, 3),
            "page_faults": self.faults - before.faults,
        }


def _node_ip(i: int) -> str:
    return f"10.{1 + i // 64_000}.{(i // 250) % 256}.{2 + i % 250}"


def _pod_ip(i: int) -> str:
    return f"10.{100 + i // 64_000}.{(i // 250) % 256}.{2 + i % 250}"


class _PodCloner:
    """Pods of one ReplicaSet, built from one `make_pod` result by replacing its identities.

    `make_pod` takes ~1 ms a pod, too slow for 150,000. Pods of one ReplicaSet differ only in
    name, uid, node, IPs, container IDs and the service account token volume's suffix, so the
    prototype is built with sentinel values for those and each pod's JSON is the prototype's
    with the sentinels replaced, everywhere they occur (including `managedFields`).
    """

    def __init__(self, proto: Mapping[str, Any], node_name: str) -> None:
        meta = proto["metadata"]
        spec = proto["spec"]
        self.raw = orjson.dumps(proto)
        self.name = b'"' + meta["name"].encode() + b'"'
        self.prefix = meta["name"][: -len(_PROTO_SUFFIX)]
        self.uid = meta["uid"].encode()
        self.node = node_name.encode()
        self.host_ip = b'"' + _PROTO_HOST_IP.encode() + b'"'
        self.pod_ip = _PROTO_POD_IP.encode()
        self.container_ids = [
            cs["containerID"].encode() for cs in proto["status"].get("containerStatuses", [])
        ]
        self.token_volume = next(
            (
                v["name"].encode()
                for v in spec.get("volumes", [])
                if v["name"].startswith("kube-api-access-")
            ),
            None,
        )

    def clone(self, rng: random.Random, name: str, node: str, host_ip: str, pod_ip: str) -> bytes:
        raw = self.raw.replace(self.name, b'"' + name.encode() + b'"')
        raw = raw.replace(self.uid, str(uuid.UUID(int=rng.getrandbits(128), version=4)).encode())
        raw = raw.replace(self.node, node.encode())
        raw = raw.replace(self.host_ip, b'"' + host_ip.encode() + b'"')
        raw = raw.replace(self.pod_ip, pod_ip.encode())
        for cid in self.container_ids:
            raw = raw.replace(cid, f"containerd://{rng.getrandbits(256):064x}".encode())
        if self.token_volume is not None:
            suffix = "".join(rng.choice(_SAFE_ALPHABET) for _ in range(5))
            raw = raw.replace(self.token_volume, b"kube-api-access-" + suffix.encode())
        return raw


def populate(server: Any, params: Params) -> dict[str, Any]:
    """Load namespaces, nodes, Deployments, ReplicaSets and pods into the server's store."""
    from nodeops.sim import objects

    registry = server.registry
    store = server.store
    rng = random.Random(params.seed)
    started = time.perf_counter()

    def rt_of(group: str, plural: str) -> Any:
        return registry.lookup(group, "v1", plural)

    for ns in NAMESPACES:
        server.create(objects.for_create(objects.make_namespace(ns, rng=params.seed)))

    node_rt = rt_of("", "nodes")
    node_names: list[tuple[str, str]] = []
    raws: list[bytes] = []
    for i in range(params.nodes):
        ip = _node_ip(i)
        zone = ZONES[i % len(ZONES)]
        itype = INSTANCE_TYPES[(i // len(ZONES)) % len(INSTANCE_TYPES)]
        name = objects.aws_node_name(ip, zone)
        node = objects.make_node(
            name,
            group=f"ng-{itype.replace('.', '-')}",
            zone=zone,
            instance_type=itype,
            rng=rng,
            with_server_fields=True,
        )
        raws.append(orjson.dumps(node))
        node_names.append((name, ip))
    store.load(node_rt.storage_key, raws, registry.storage_type(node_rt).field_set)
    del raws
    log(f"server: {params.nodes} nodes loaded ({time.perf_counter() - started:.1f}s)")

    pod_rt = rt_of("", "pods")
    dep_rt = registry.lookup("apps", "v1", "deployments")
    rs_rt = registry.lookup("apps", "v1", "replicasets")
    pod_fields = registry.storage_type(pod_rt).field_set
    dep_fields = registry.storage_type(dep_rt).field_set
    rs_fields = registry.storage_type(rs_rt).field_set
    deployments: list[bytes] = []
    replicasets: list[bytes] = []
    batch: list[bytes] = []
    pod_index = 0
    d = 0
    while pod_index < params.pods:
        replicas = min(REPLICAS_PER_DEPLOYMENT, params.pods - pod_index)
        ns = NAMESPACES[d % len(NAMESPACES)]
        dep = objects.make_deployment(
            f"{ns}-svc-{d:04d}", ns, replicas=replicas, rng=rng, with_server_fields=True
        )
        rs = objects.replicaset_for_deployment(dep, rng=rng, with_server_fields=True)
        deployments.append(orjson.dumps(dep))
        replicasets.append(orjson.dumps(rs))
        rs_name = rs["metadata"]["name"]
        proto_node = objects.aws_node_name(_PROTO_HOST_IP, ZONES[0])
        proto = objects.make_pod(
            f"{rs_name}-{_PROTO_SUFFIX}",
            ns,
            node_name=proto_node,
            owner=rs,
            pod_ip=_PROTO_POD_IP,
            rng=rng,
            with_server_fields=True,
        )
        cloner = _PodCloner(proto, proto_node)
        used: set[str] = set()
        for _ in range(replicas):
            suffix = "".join(rng.choice(_SAFE_ALPHABET) for _ in range(5))
            while suffix in used:
                suffix = "".join(rng.choice(_SAFE_ALPHABET) for _ in range(5))
            used.add(suffix)
            node_name, host_ip = node_names[pod_index % len(node_names)]
            batch.append(
                cloner.clone(rng, cloner.prefix + suffix, node_name, host_ip, _pod_ip(pod_index))
            )
            pod_index += 1
        d += 1
        if len(batch) >= LOAD_BATCH or pod_index >= params.pods:
            # Small batches: what a batch leaves behind when it is freed is soon reused, so the
            # generator does not fragment the heap the measured RSS includes.
            store.load(pod_rt.storage_key, batch, pod_fields)
            store.load(dep_rt.storage_key, deployments, dep_fields)
            store.load(rs_rt.storage_key, replicasets, rs_fields)
            batch, deployments, replicasets = [], [], []
            if pod_index % 50_000 < LOAD_BATCH:
                log(f"server: {pod_index} pods loaded ({time.perf_counter() - started:.1f}s)")
    _check_pods(server, params)
    seconds = time.perf_counter() - started
    log(f"server: {pod_index} pods of {d} ReplicaSets loaded in {seconds:.1f}s")
    return {"seconds": seconds, "deployments": d, "replicasets": d, "namespaces": len(NAMESPACES)}


def _check_pods(server: Any, params: Params) -> None:
    """The cloned pods are well-formed and distinct where they must be."""
    bucket = server.store.bucket(("", "pods"))
    if bucket.count != params.pods:
        raise RuntimeError(f"expected {params.pods} pods, store has {bucket.count}")
    seen_uids: set[str] = set()
    for i, entry in enumerate(bucket.entries()):
        if i >= 200:
            break
        pod = entry.decode()
        meta, spec, status = pod["metadata"], pod["spec"], pod["status"]
        if meta["name"] != entry.name or meta["uid"] in seen_uids:
            raise RuntimeError(f"bad clone {entry.namespace}/{entry.name}")
        seen_uids.add(meta["uid"])
        node_ip = spec["nodeName"].split(".")[0].removeprefix("ip-").replace("-", ".")
        if status["hostIP"] != node_ip or _PROTO_POD_IP in entry.raw.decode():
            raise RuntimeError(f"bad clone {entry.namespace}/{entry.name}")
        if _PROTO_SUFFIX in meta["name"] or meta["ownerReferences"][0]["kind"] != "ReplicaSet":
            raise RuntimeError(f"bad clone {entry.namespace}/{entry.name}")


def _malloc_trim() -> bool:
    """Return free heap memory to the OS (glibc only); whether that was possible."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        return False
    return True


def _stored_bytes(server: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for (group, plural), bucket in server.store.buckets.items():
        total = sum(len(e.raw) for e in bucket.entries())
        if total:
            out[f"{group}/{plural}" if group else plural] = total
    return out


class BenchServer:
    """The server process: a `SimServer` plus the bench-only control commands."""

    def __init__(self, conn: Connection, params: Params) -> None:
        from nodeops.sim.server.app import SimServer

        self.conn = conn
        self.params = params
        self.server = SimServer()
        self.pool: list[dict[str, Any]] = []
        self.seq = 0

    async def run(self) -> None:
        gc.collect()
        baseline = _rss_bytes()["VmRSS"]
        await self.server.start()
        load = populate(self.server, self.params)
        gc.collect()
        rss = _rss_bytes()
        stored = _stored_bytes(self.server)
        memory: dict[str, Any] = {
            "baseline_rss_bytes": baseline,
            "rss_bytes": rss["VmRSS"],
            "peak_rss_bytes": rss["VmHWM"],
            "stored_json_bytes": sum(stored.values()),
            "stored_json_bytes_by_resource": stored,
        }
        # Diagnostic: how much of the RSS is memory malloc holds free (fragmentation).
        trimmed = _malloc_trim()
        if trimmed:
            memory["rss_after_malloc_trim_bytes"] = _rss_bytes()["VmRSS"]
        self._make_pool()
        self.conn.send({"port": self.server.port, "load": load, "memory": memory})
        loop = asyncio.get_running_loop()
        commands: dict[str, Callable[..., Any]] = {
            "write": self.write_events,
            "patch_rate": self.patch_rate,
        }
        while True:
            cmd, kwargs = await loop.run_in_executor(None, self.conn.recv)
            if cmd == "stop":
                break
            try:
                result = commands[cmd](**kwargs)
                if asyncio.iscoroutine(result):
                    result = await result
                self.conn.send(("ok", result))
            except Exception as exc:
                self.conn.send(("error", f"{type(exc).__name__}: {exc}"))
        await self.server.stop()
        self.conn.send(("ok", None))

    def _make_pool(self) -> None:
        """Pods the writer modifies, decoded once: one per ReplicaSet, up to 1,000."""
        bucket = self.server.store.bucket(("", "pods"))
        stride = max(1, bucket.count // 1000)
        for i, entry in enumerate(bucket.entries()):
            if i % stride == 0:
                pod = entry.decode()
                pod["metadata"].setdefault("labels", {})
                pod["metadata"].setdefault("annotations", {})
                self.pool.append(pod)
            if len(self.pool) >= 1000:
                break

    async def write_events(self, count: int, rate: float = 0.0) -> dict[str, Any]:
        """MODIFIED pod events written straight to the store, as fast as watchers take them.

        Each event changes a label and stamps the send time into an annotation. Unpaced
        (`rate=0`) the writer yields every `WRITE_BATCH` writes and waits while any watcher is
        more than `MAX_BACKLOG` events behind; paced it writes `rate` events a second.
        """
        store = self.server.store
        rt = self.server.registry.lookup("", "v1", "pods")
        key = rt.storage_key
        fields = self.server.registry.storage_type(rt).field_set
        bucket = store.bucket(key)
        pool = self.pool
        usage = Usage.of()
        started = time.time()
        deadline = time.monotonic() + PHASE_TIMEOUT
        written = 0
        stalled = 0.0
        while written < count and time.monotonic() < deadline:
            if rate:
                due = min(count, int((time.time() - started) * rate) + 1)
                n = due - written
            else:
                n = min(WRITE_BATCH, count - written)
            for _ in range(n):
                obj = pool[self.seq % len(pool)]
                meta = obj["metadata"]
                meta["labels"][SEQ_LABEL] = str(self.seq)
                meta["annotations"][SENT_ANNOTATION] = f"{time.time():.6f}"
                store.write(key, obj, fields)
                self.seq += 1
            written += n
            if rate:
                await asyncio.sleep(0.001)
                continue
            await asyncio.sleep(0)
            t0 = time.monotonic()
            await _wait_for_watchers(bucket, deadline)
            stalled += time.monotonic() - t0
        seconds = time.time() - started
        return {
            "written": written,
            "started": started,
            "seconds": seconds,
            "waiting_for_watchers_s": stalled,
            "server": Usage.of().since(usage),
        }

    def patch_rate(self, count: int) -> dict[str, Any]:
        """Label merge patches through `Registry.patch`, the path of an HTTP PATCH minus HTTP."""
        registry = self.server.registry
        rt = registry.lookup("", "v1", "pods")
        targets = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in self.pool]
        started = time.perf_counter()
        for i in range(count):
            ns, name = targets[i % len(targets)]
            registry.patch(rt, ns, name, "merge", {"metadata": {"labels": {SEQ_LABEL: str(i)}}})
        seconds = time.perf_counter() - started
        return {"patches": count, "seconds": seconds, "patches_per_s": count / seconds}


async def _wait_for_watchers(bucket: Any, deadline: float) -> None:
    """Wait while some watcher is more than `MAX_BACKLOG` events behind the writer."""
    while time.monotonic() < deadline:
        if not any(len(w.pending) > MAX_BACKLOG for w in bucket.watchers if not w.closed):
            return
        await asyncio.sleep(0.0005)


def serve(conn: Connection, params: Params) -> None:
    """Entry point of the server process."""
    asyncio.run(BenchServer(conn, params).run())


# ============================================================================ client side


class ServerProcess:
    """The spawned server process and its control pipe."""

    def __init__(self, params: Params) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=serve, args=(child, params), name="sim-apiserver")
        self.proc.start()
        child.close()
        self.ready: dict[str, Any] = {}

    @property
    def pid(self) -> int:
        pid = self.proc.pid
        assert pid is not None
        return pid

    async def wait_ready(self, timeout: float) -> dict[str, Any]:
        self.ready = await asyncio.to_thread(self._recv, timeout)
        return self.ready

    def _recv(self, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while not self.conn.poll(0.5):
            if not self.proc.is_alive():
                raise RuntimeError(f"the server process exited with code {self.proc.exitcode}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server process did not answer within {timeout:.0f}s")
        return self.conn.recv()

    async def call(self, cmd: str, timeout: float = PHASE_TIMEOUT, **kwargs: Any) -> Any:
        self.conn.send((cmd, kwargs))
        status, result = await asyncio.to_thread(self._recv, timeout + 10)
        if status != "ok":
            raise RuntimeError(f"server command {cmd} failed: {result}")
        return result

    async def stop(self) -> None:
        try:
            if self.proc.is_alive():
                await self.call("stop", timeout=20)
        except (OSError, EOFError, TimeoutError, RuntimeError) as exc:
            log(f"server did not stop cleanly: {exc}")
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


def _rate(count: float, seconds: float) -> float:
    return round(count / seconds, 1) if seconds > 0 else 0.0


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def pick(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)

    return {"p50_ms": pick(0.5), "p90_ms": pick(0.9), "p99_ms": pick(0.99), "max_ms": pick(1.0)}


def _mem_available() -> int:
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


@dataclass(slots=True)
class ListRun:
    transfer_s: float
    bytes: int
    server: dict[str, float]
    items: int = 0
    decode_s: float | None = None


async def full_list(
    session: aiohttp.ClientSession, base: str, server_pid: int, decode: bool
) -> ListRun:
    """One unpaginated list of all pods: the whole body read, then optionally decoded."""
    usage = Usage.of(server_pid)
    t0 = time.perf_counter()
    async with session.get(f"{base}/api/v1/pods") as resp:
        resp.raise_for_status()
        body = await resp.read()
    run = ListRun(time.perf_counter() - t0, len(body), Usage.of(server_pid).since(usage))
    run.items = body.count(b'"kind":"Pod"')
    if decode:
        # The decoded list holds every pod at once (~65 KB of Python objects a pod); the
        # cyclic collector would scan it again and again while it grows, so it is paused for
        # the decode, as a client holding such a list must.
        gc.disable()
        try:
            t1 = time.perf_counter()
            doc = orjson.loads(body)
            run.decode_s = time.perf_counter() - t1
            run.items = len(doc["items"])
        finally:
            del body
            doc = None
            gc.enable()
    return run


async def paginated_list(
    session: aiohttp.ClientSession, base: str, server_pid: int, limit: int
) -> dict[str, Any]:
    """An informer's list: pages of `limit`, each decoded (and dropped) before the next."""
    usage = Usage.of(server_pid)
    transfer = decode = 0.0
    items = pages = size = 0
    token = ""
    started = time.perf_counter()
    while True:
        url = f"{base}/api/v1/pods?limit={limit}"
        if token:
            url += f"&continue={token}"
        t0 = time.perf_counter()
        async with session.get(url) as resp:
            resp.raise_for_status()
            body = await resp.read()
        t1 = time.perf_counter()
        page = orjson.loads(body)
        t2 = time.perf_counter()
        transfer += t1 - t0
        decode += t2 - t1
        items += len(page["items"])
        pages += 1
        size += len(body)
        token = page["metadata"].get("continue", "")
        del page, body
        if not token or time.perf_counter() - started > PHASE_TIMEOUT:
            break
    wall = time.perf_counter() - started
    return {
        "limit": limit,
        "pages": pages,
        "items": items,
        "bytes": size,
        "transfer_s": round(transfer, 3),
        "decode_s": round(decode, 3),
        "wall_s": round(wall, 3),
        "objects_per_s_transfer": _rate(items, transfer),
        "objects_per_s_transfer_decode": _rate(items, wall),
        "decode_us_per_object": round(decode / max(1, items) * 1e6, 1),
        "server": Usage.of(server_pid).since(usage),
        "complete": not token,
    }


async def list_phase(
    session: aiohttp.ClientSession, base: str, server_pid: int, pods: int
) -> dict[str, Any]:
    runs: list[ListRun] = []
    for i in range(FULL_LIST_RUNS):
        run = await full_list(session, base, server_pid, decode=False)
        runs.append(run)
        log(
            f"list: full list {i + 1}: {run.items} pods, {run.bytes / 1e6:.0f} MB in "
            f"{run.transfer_s:.2f}s ({_rate(run.items, run.transfer_s):.0f}/s)"
        )
        if run.items != pods:
            raise RuntimeError(f"full list returned {run.items} pods, expected {pods}")
    # The decoded list takes ~7 bytes of Python objects per byte of JSON: only decode it when
    # that fits with room to spare.
    decoded: ListRun | None = None
    if _mem_available() > runs[0].bytes * 8 + 2 * 1024**3:
        decoded = await full_list(session, base, server_pid, decode=True)
        assert decoded.decode_s is not None
        log(
            f"list: full list + decode: transfer {decoded.transfer_s:.2f}s, decode "
            f"{decoded.decode_s:.2f}s"
        )
    else:
        log("list: not enough free memory to hold the decoded full list; decode skipped")
    gc.collect()
    n = runs[0].items
    transfer_times = [r.transfer_s for r in runs]
    median = statistics.median(transfer_times)
    full: dict[str, Any] = {
        "items": n,
        "bytes": runs[0].bytes,
        "bytes_per_object": round(runs[0].bytes / max(1, n)),
        "runs": len(runs),
        "transfer_s": [round(t, 3) for t in transfer_times],
        "objects_per_s_transfer_best": _rate(n, min(transfer_times)),
        "objects_per_s_transfer_median": _rate(n, median),
        "megabytes_per_s_median": round(runs[0].bytes / median / 1e6, 1),
        "server_cpu_s_per_list": statistics.median(r.server["cpu_s"] for r in runs),
        "server_page_faults_per_list": statistics.median(r.server["page_faults"] for r in runs),
    }
    if decoded is not None and decoded.decode_s is not None:
        full |= {
            "decode_s": round(decoded.decode_s, 3),
            "objects_per_s_decode_only": _rate(decoded.items, decoded.decode_s),
            "objects_per_s_transfer_decode": _rate(
                decoded.items, decoded.transfer_s + decoded.decode_s
            ),
        }
    else:
        full["decode_skipped"] = "not enough free memory to hold the decoded list"
    log(f"list: paginated, limit={PAGE_LIMIT}")
    paged = await paginated_list(session, base, server_pid, PAGE_LIMIT)
    log(
        f"list: paginated: {paged['objects_per_s_transfer']:.0f}/s transfer, "
        f"{paged['objects_per_s_transfer_decode']:.0f}/s with decode"
    )
    return {"full": full, "paginated": paged}


@dataclass(slots=True)
class WatchStream:
    expected: int
    decode_every: int
    received: int = 0
    first: float = 0.0
    last: float = 0.0
    bytes: int = 0
    decode_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    error: str = ""


async def _read_watch(resp: aiohttp.ClientResponse, stream: WatchStream) -> None:
    buf = b""
    decode_every = stream.decode_every
    async for chunk in resp.content.iter_any():
        now = time.time()
        stream.bytes += len(chunk)
        if not stream.first:
            stream.first = now
        if b"\n" not in chunk:
            buf += chunk
            continue
        lines = (buf + chunk).split(b"\n")
        buf = lines.pop()
        for line in lines:
            stream.received += 1
            if decode_every and stream.received % decode_every == 0:
                t0 = time.perf_counter()
                ev = orjson.loads(line)
                stream.decode_s += time.perf_counter() - t0
                if ev["type"] != "MODIFIED":
                    raise RuntimeError(f"unexpected watch event {ev['type']}")
                sent = ev["object"]["metadata"]["annotations"][SENT_ANNOTATION]
                stream.latencies.append(now - float(sent))
        stream.last = now
        if stream.received >= stream.expected:
            return


async def watch_run(
    session: aiohttp.ClientSession,
    base: str,
    server: ServerProcess,
    *,
    watchers: int,
    events: int,
    decode_every: int,
    rate: float = 0.0,
) -> dict[str, Any]:
    """Open `watchers` pod watches, have the server write `events` MODIFIED events, and time
    how fast each watcher receives them."""
    async with session.get(f"{base}/api/v1/pods?limit=1") as resp:
        rv = (await resp.json(loads=orjson.loads))["metadata"]["resourceVersion"]
    streams = [WatchStream(events, decode_every) for _ in range(watchers)]
    responses: list[aiohttp.ClientResponse] = []
    readers: list[asyncio.Task[None]] = []
    url = f"{base}/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds={int(PHASE_TIMEOUT)}"
    try:
        for _ in range(watchers):
            # The server registers the watcher before it sends the response headers.
            responses.append(await session.get(url))
        for r in responses:
            r.raise_for_status()
        client_cpu0 = time.process_time()
        usage = Usage.of(server.pid)
        readers = [
            asyncio.create_task(_read_watch(r, s)) for r, s in zip(responses, streams, strict=True)
        ]
        writer = await server.call("write", count=events, rate=rate)
        done, pending = await asyncio.wait(readers, timeout=30)
        for task in pending:
            task.cancel()
        for task, stream in zip(readers, streams, strict=True):
            if task in done and task.exception() is not None:
                stream.error = repr(task.exception())
            elif task not in done:
                stream.error = "timed out"
        client_cpu = time.process_time() - client_cpu0
        server_usage = Usage.of(server.pid).since(usage)
    finally:
        for task in readers:
            task.cancel()
        for r in responses:
            r.close()
    started = writer["started"]
    rates = [_rate(s.received, s.last - started) for s in streams]
    total = sum(s.received for s in streams)
    end = max(s.last for s in streams)
    latencies = [x for s in streams for x in s.latencies]
    out: dict[str, Any] = {
        "watchers": watchers,
        "events_written": writer["written"],
        "events_received_total": total,
        "complete": all(s.received >= events and not s.error for s in streams),
        "writer_s": round(writer["seconds"], 3),
        "writer_waiting_for_watchers_s": round(writer["waiting_for_watchers_s"], 3),
        "delivery_s": round(end - started, 3),
        "events_per_s_per_watcher_min": min(rates),
        "events_per_s_per_watcher_median": statistics.median(rates),
        "events_per_s_aggregate": _rate(total, end - started),
        "megabytes_per_s_aggregate": _rate(sum(s.bytes for s in streams) / 1e6, end - started),
        "bytes_per_event": round(sum(s.bytes for s in streams) / max(1, total)),
        "client_decodes": "every event" if decode_every == 1 else f"1 in {decode_every}",
        "latency_samples": len(latencies),
        "latency": _percentiles(latencies),
        "server_cpu_s": server_usage["cpu_s"],
        "server_page_faults": server_usage["page_faults"],
        "client_cpu_s": round(client_cpu, 3),
    }
    if rate:
        out["paced_rate_per_s"] = rate
    if decode_every == 1:
        decode_s = sum(s.decode_s for s in streams)
        out["client_decode_s"] = round(decode_s, 3)
    errors = [s.error for s in streams if s.error]
    if errors:
        out["errors"] = errors[:5]
    return out


async def watch_phase(
    session: aiohttp.ClientSession, base: str, server: ServerProcess, params: Params
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    log(f"watch: 1 watcher, {params.events} events (transfer)")
    out["one_watcher"] = await watch_run(
        session, base, server, watchers=1, events=params.events, decode_every=LATENCY_SAMPLE_EVERY
    )
    log(f"watch: 1 watcher: {out['one_watcher']['events_per_s_per_watcher_min']:.0f} events/s")
    log(f"watch: 1 watcher, {params.events} events (every event decoded)")
    out["one_watcher_decoding"] = await watch_run(
        session, base, server, watchers=1, events=params.events, decode_every=1
    )
    log(
        f"watch: 1 decoding watcher: "
        f"{out['one_watcher_decoding']['events_per_s_per_watcher_min']:.0f} events/s"
    )
    fan_events = max(1, params.events // 4)
    log(f"watch: {params.watchers} watchers, {fan_events} events")
    out["fan_out"] = await watch_run(
        session,
        base,
        server,
        watchers=params.watchers,
        events=fan_events,
        decode_every=LATENCY_SAMPLE_EVERY,
    )
    log(
        f"watch: {params.watchers} watchers: "
        f"{out['fan_out']['events_per_s_per_watcher_median']:.0f} events/s each, "
        f"{out['fan_out']['events_per_s_aggregate']:.0f} aggregate"
    )
    paced = max(10, int(PACED_RATE * PACED_SECONDS) // (20 if params.quick else 1))
    log(f"watch: latency at {PACED_RATE} events/s, 1 decoding watcher")
    out["latency_paced"] = await watch_run(
        session, base, server, watchers=1, events=paced, decode_every=1, rate=PACED_RATE
    )
    log(f"watch: paced latency {out['latency_paced']['latency']}")
    out["server_patch_path"] = await server.call("patch_rate", count=PATCH_PATH_COUNT)
    log(f"watch: registry.patch: {out['server_patch_path']['patches_per_s']:.0f} patches/s")
    return out


async def run(params: Params) -> dict[str, Any]:
    started = time.perf_counter()
    load_before = os.getloadavg()
    log(f"starting server process: {params.nodes} nodes, {params.pods} pods")
    server = ServerProcess(params)
    result: dict[str, Any] = {
        "benchmark": "sim_apiserver",
        "machine": {
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "platform": platform.platform(),
            "aiohttp": aiohttp.__version__,
            "orjson": orjson.__version__,
            "loadavg_at_start": [round(x, 2) for x in load_before],
        },
        "parameters": asdict(params)
        | {
            "namespaces": len(NAMESPACES),
            "replicas_per_replicaset": REPLICAS_PER_DEPLOYMENT,
            "page_limit": PAGE_LIMIT,
            "full_list_runs": FULL_LIST_RUNS,
            "fan_out_events": max(1, params.events // 4),
            "writer_max_backlog": MAX_BACKLOG,
        },
    }
    try:
        ready = await server.wait_ready(timeout=600)
        base = f"http://127.0.0.1:{ready['port']}"
        memory = ready["memory"]
        rss, stored = memory["rss_bytes"], memory["stored_json_bytes"]
        memory |= {
            "rss_mib": round(rss / 1024**2, 1),
            "stored_json_mib": round(stored / 1024**2, 1),
            "rss_to_json_ratio": round(rss / stored, 3),
            "rss_over_baseline_to_json_ratio": round(
                (rss - memory["baseline_rss_bytes"]) / stored, 3
            ),
        }
        result["setup"] = ready["load"]
        result["memory"] = memory
        log(f"memory: RSS {rss / 1024**2:.0f} MiB for {stored / 1024**2:.0f} MiB of JSON")
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=60)
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
            result["list"] = await list_phase(session, base, server.pid, params.pods)
            result["watch"] = await watch_phase(session, base, server, params)
    finally:
        await server.stop()
    full = result["list"]["full"]
    one = result["watch"]["one_watcher"]
    result["targets"] = {
        "list_objects_per_s": {
            "target": LIST_TARGET_OBJECTS_PER_S,
            "measured": full["objects_per_s_transfer_median"],
            "what": "full unpaginated pod list, transfer, median of runs",
            "met": full["objects_per_s_transfer_median"] >= LIST_TARGET_OBJECTS_PER_S,
        },
        "watch_events_per_s_one_watcher": {
            "target": WATCH_TARGET_EVENTS_PER_S,
            "measured": one["events_per_s_per_watcher_min"],
            "what": "MODIFIED pod events delivered to one watcher",
            "met": one["complete"]
            and one["events_per_s_per_watcher_min"] >= WATCH_TARGET_EVENTS_PER_S,
        },
        "memory_rss_bytes": {
            "target": MEMORY_TARGET_BYTES,
            "measured": result["memory"]["rss_bytes"],
            "what": f"server RSS with {params.nodes} nodes and {params.pods} pods, after gc",
            "met": result["memory"]["rss_bytes"] < MEMORY_TARGET_BYTES,
        },
    }
    if params.quick or params.pods < 150_000 or params.nodes < 5_000:
        result["targets_note"] = "scaled-down run: the targets are defined for the full size"
    result["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["runtime_s"] = round(time.perf_counter() - started, 1)
    return result


def _summary(result: dict[str, Any]) -> str:
    lines = [f"sim_apiserver benchmark ({result['runtime_s']}s)"]
    for name, t in result["targets"].items():
        lines.append(
            f"  {name}: {t['measured']} (target {t['target']}): {'met' if t['met'] else 'NOT met'}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> tuple[Params, bool]:
    """The run's parameters and whether to print JSON."""
    defaults = Params()
    parser = argparse.ArgumentParser(
        description="Benchmark the simulated API server: pod list throughput, watch fan-out and "
        "memory, with the server in its own process."
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--pods", type=int, default=None, help=f"default {defaults.pods}")
    parser.add_argument("--nodes", type=int, default=None, help=f"default {defaults.nodes}")
    parser.add_argument(
        "--watchers", type=int, default=None, help=f"fan-out watchers, default {defaults.watchers}"
    )
    parser.add_argument(
        "--events",
        type=int,
        default=None,
        help="events per one-watcher run (a quarter of that for the fan-out), "
        f"default {defaults.events}",
    )
    parser.add_argument(
        "--quick", action="store_true", help="pods, nodes and events 20 times fewer (smoke test)"
    )
    parser.add_argument("--seed", type=int, default=defaults.seed)
    args = parser.parse_args(argv)
    scale = 20 if args.quick else 1
    params = Params(
        pods=args.pods if args.pods is not None else defaults.pods // scale,
        nodes=args.nodes if args.nodes is not None else defaults.nodes // scale,
        watchers=args.watchers if args.watchers is not None else defaults.watchers,
        events=args.events if args.events is not None else defaults.events // scale,
        quick=args.quick,
        seed=args.seed,
    )
    if min(params.pods, params.nodes, params.watchers, params.events) < 1:
        parser.error("--pods, --nodes, --watchers and --events must be positive")
    return params, bool(args.json)


def main(argv: list[str] | None = None) -> int:
    params, as_json = parse_args(argv)
    result = asyncio.run(run(params))
    if as_json:
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(_summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
