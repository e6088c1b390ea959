"""What the workload controllers share: pod state tests, expectations, creating and deleting pods.

Expectations are the reason this exists. A controller that created three pods will see its cache
without them for a moment; reconciling in that moment would create three more. Like
kube-controller-manager, a controller waits until its own creates and deletes have shown up in the
cache (or a timeout passed) before it counts pods again.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeops.common.looptime import loop_time
from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import PODS, ApiClient, NotFound, Obj, Resource
from nodeops.sim.cluster.informer import Key, key_of
from nodeops.sim.cluster.podstatus import pod_ready
from nodeops.sim.cluster.scheduling import is_deleting, is_terminal
from nodeops.sim.cluster.timeutil import epoch
from nodeops.sim.objects import pod_from_template, strip_for_create

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Pod state


def is_active(pod: Mapping[str, Any]) -> bool:
    """Counted by a controller: neither finished nor being deleted."""
    return not is_terminal(pod) and not is_deleting(pod)


def ready_since(pod: Mapping[str, Any]) -> float | None:
    """Epoch seconds at which the pod last became ready, or None if it is not ready."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            if c.get("status") != "True":
                return None
            at = c.get("lastTransitionTime")
            return epoch(at) if at else 0.0
    return None


def is_available(pod: Mapping[str, Any], min_ready_seconds: float, now: float) -> bool:
    since = ready_since(pod)
    if since is None:
        return False
    return min_ready_seconds <= 0 or since + min_ready_seconds <= now


def available_after(
    pods: Iterable[Mapping[str, Any]], min_ready_seconds: float, now: float
) -> float | None:
    """Seconds until the next ready-but-not-yet-available pod becomes available."""
    if min_ready_seconds <= 0:
        return None
    waits = []
    for p in pods:
        since = ready_since(p)
        if since is not None and since + min_ready_seconds > now:
            waits.append(since + min_ready_seconds - now)
    return min(waits) + 0.01 if waits else None


def _restarts(pod: Mapping[str, Any]) -> int:
    return sum(
        int(cs.get("restartCount") or 0)
        for cs in (pod.get("status") or {}).get("containerStatuses") or []
    )


def deletion_order(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Pods in the order a ReplicaSet scales them down (`ActivePods` sort, cheapest first):
    unscheduled before scheduled, pending before running, unready before ready, recently ready
    before long ready, more restarts first, newer before older.
    """
    phase_rank = {"Pending": 0, "Unknown": 1, "Running": 2}

    def rank(pod: Mapping[str, Any]) -> tuple[Any, ...]:
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        since = ready_since(pod)
        created = (pod.get("metadata") or {}).get("creationTimestamp") or ""
        return (
            1 if spec.get("nodeName") else 0,
            phase_rank.get(status.get("phase") or "Pending", 0),
            1 if pod_ready(pod) else 0,
            -(since or 0.0),
            -_restarts(pod),
            _Reverse(created),
        )

    return sorted(pods, key=rank)


class _Reverse:
    """Sorts strings descending inside an ascending tuple sort."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __lt__(self, other: _Reverse) -> bool:
        return self.value > other.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reverse) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


def int_or_percent(value: Any, total: int, *, round_up: bool, default: int | str = 0) -> int:
    """An IntOrString resolved against `total` (`GetScaledValueFromIntOrPercent`)."""
    if value is None:
        value = default
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if text.endswith("%"):
        try:
            pct = int(text[:-1])
        except ValueError:
            return 0
        exact = pct * total / 100
        whole = int(exact)
        return whole + 1 if round_up and exact > whole else whole
    try:
        return int(text)
    except ValueError:
        return 0


# ---------------------------------------------------------------------------------------------
# Expectations


@dataclass(slots=True)
class _Pending:
    adds: int = 0
    deletes: set[Key] = field(default_factory=set)
    since: float = field(default_factory=loop_time)


class Expectations:
    """Creates and deletes issued per owner (by uid) that the cache has not shown yet."""

    def __init__(self, ttl: float = 30.0) -> None:
        self._pending: dict[str, _Pending] = {}
        self._ttl = ttl

    def expect(self, owner: str, adds: int = 0, deletes: Iterable[Key] = ()) -> None:
        p = self._pending.setdefault(owner, _Pending())
        p.adds += adds
        p.deletes.update(deletes)
        p.since = loop_time()

    def added(self, owner: str) -> None:
        p = self._pending.get(owner)
        if p is not None and p.adds > 0:
            p.adds -= 1
            self._tidy(owner, p)

    def deleted(self, owner: str, key: Key) -> None:
        p = self._pending.get(owner)
        if p is not None and key in p.deletes:
            p.deletes.discard(key)
            self._tidy(owner, p)

    def satisfied(self, owner: str) -> bool:
        p = self._pending.get(owner)
        if p is None:
            return True
        if loop_time() - p.since > self._ttl:
            log.debug("expectations of %s expired: %s adds, %s deletes", owner, p.adds, p.deletes)
            del self._pending[owner]
            return True
        return False

    def forget(self, owner: str) -> None:
        self._pending.pop(owner, None)

    def _tidy(self, owner: str, p: _Pending) -> None:
        if p.adds <= 0 and not p.deletes:
            del self._pending[owner]

    def observe(self, old: Obj | None, new: Obj | None, owner: str) -> None:
        """Feed a pod event of a pod controlled by `owner`."""
        if old is None and new is not None:
            self.added(owner)
        elif new is None and old is not None:
            self.deleted(owner, key_of(old))
        elif new is not None and is_deleting(new):
            self.deleted(owner, key_of(new))


# ---------------------------------------------------------------------------------------------
# Creating and deleting pods


class PodControl:
    """Creates pods from templates the way the real controllers do, and deletes them."""

    def __init__(self, clock: Clock, client: ApiClient) -> None:
        self.clock = clock
        self.client = client
        self.rng = random.Random()

    def build(
        self,
        template: Mapping[str, Any],
        owner: Mapping[str, Any],
        *,
        name: str | None = None,
        node_name: str | None = None,
    ) -> Obj:
        """The pod as POSTed: a fixed `name`, or `generateName` "<owner>-" when None."""
        meta = owner.get("metadata") or {}
        pod = pod_from_template(
            template,
            name=name or f"{meta.get('name')}-placeholder",
            namespace=meta.get("namespace") or "",
            owner=owner,
            node_name=node_name,
            rng=self.rng,
            now=self.clock.now(),
        )
        pod = strip_for_create(pod)  # built for this create alone: no copy needed
        spec, asked = pod["spec"], template.get("spec") or {}
        for key in ("priority", "preemptionPolicy"):
            # The API server's Priority admission writes these from the template's class.
            if key not in asked:
                spec.pop(key, None)
        if name is None:
            del pod["metadata"]["name"]
            pod["metadata"]["generateName"] = f"{meta.get('name')}-"
        return pod

    async def create(self, pod: Obj) -> Obj:
        return await self.client.create(PODS, pod, pod["metadata"]["namespace"])

    async def create_many(
        self,
        pods: Sequence[Obj],
        expectations: Expectations,
        owner_uid: str,
        *,
        max_batch: int = 500,
    ) -> int:
        """Create in slow-start batches (1, 2, 4...) that stop at the first failure, like
        `slowStartBatch`: a quota or admission error costs one request, not hundreds."""
        created = 0
        batch = 1
        remaining = list(pods)
        while remaining:
            chunk, remaining = remaining[:batch], remaining[batch:]
            expectations.expect(owner_uid, adds=len(chunk))
            results = await asyncio.gather(*(self.create(p) for p in chunk), return_exceptions=True)
            failed: BaseException | None = None
            for r in results:
                if isinstance(r, BaseException):
                    expectations.added(owner_uid)
                    failed = failed or r
                else:
                    created += 1
            if failed is not None:
                raise failed
            batch = min(batch * 2, max_batch)
        return created

    async def delete(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        try:
            await self.client.delete(PODS, meta["name"], meta["namespace"], uid=meta.get("uid"))
        except NotFound:
            pass

    async def delete_many(
        self, pods: Sequence[Mapping[str, Any]], expectations: Expectations, owner_uid: str
    ) -> None:
        keys = [key_of(dict(p)) for p in pods]
        expectations.expect(owner_uid, deletes=keys)
        results = await asyncio.gather(*(self.delete(p) for p in pods), return_exceptions=True)
        failed: BaseException | None = None
        for key, r in zip(keys, results, strict=True):
            if isinstance(r, BaseException):
                expectations.deleted(owner_uid, key)
                failed = failed or r
        if failed is not None:
            raise failed


# ---------------------------------------------------------------------------------------------
# Status writes


class WrittenStatuses:
    """The statuses a controller wrote, for as long as its cache does not show them yet.

    A controller that reconciles an object again before the watch event of its own last status
    write has reached its cache would otherwise write with the old resourceVersion and be
    refused (409), or write a status the object already has. Read back from here, the newer
    of the two is the base, as client-go's mutation cache gives its users: resourceVersions
    compared as integers, which the simulator's are.
    """

    LIMIT = 50_000
    """Entries kept at most: objects deleted before their cache caught up leave theirs."""

    def __init__(self) -> None:
        self._by_uid: dict[str, tuple[int, Obj]] = {}

    def newest(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        """`obj`, or what this controller last wrote of it when that is newer."""
        meta = obj.get("metadata") or {}
        uid = meta.get("uid") or ""
        entry = self._by_uid.get(uid)
        if entry is None:
            return obj
        written_rv, written = entry
        if written_rv <= _rv(meta):
            del self._by_uid[uid]  # the cache has caught up
            return obj
        return written

    def wrote(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        rv = _rv(meta)
        if rv < 0 or not meta.get("uid"):
            return
        if len(self._by_uid) >= self.LIMIT:
            self._by_uid.clear()
        # As the cache keeps it: managedFields, which nothing here reads, left out.
        kept = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
        self._by_uid[meta["uid"]] = (rv, kept)


def _rv(meta: Mapping[str, Any]) -> int:
    try:
        return int(meta.get("resourceVersion") or -1)
    except ValueError:
        return -1


async def write_status(
    client: ApiClient,
    resource: Resource,
    obj: Mapping[str, Any],
    status: Mapping[str, Any],
    written: WrittenStatuses | None = None,
) -> bool:
    """PUT the status subresource if it changed, guarded by the cached resourceVersion (or,
    with `written`, that of this controller's own last write when the cache is behind it)."""
    base = written.newest(obj) if written is not None else obj
    if dict(base.get("status") or {}) == dict(status):
        return False
    body = {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": base.get("metadata") or {},
        "spec": obj.get("spec") or {},
        "status": dict(status),
    }
    stored = await client.update_status(resource, body)
    if written is not None:
        written.wrote(stored)
    return True


def merge_status(current: Mapping[str, Any] | None, managed: Iterable[str], computed: Obj) -> Obj:
    """`current` with the `managed` keys replaced by `computed` (zero values omitted, as Go's
    omitempty does), keeping fields other writers own such as conditions."""
    out = {k: v for k, v in (current or {}).items() if k not in set(managed)}
    for k, v in computed.items():
        if v or k == "replicas":
            out[k] = v
    return out
