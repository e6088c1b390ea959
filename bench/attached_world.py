"""What a benchmark needs to measure a roll on a cluster of its own choosing rather than on the
simulator: the simulator's kubelets and clouds attached to that cluster's API server
(`World(WorldOptions(kubeconfig=...))`), the manager pointed at it, and a referee of its own.

On a real control plane the simulator's server no longer sees every write, so the figures it
gave for free are taken another way, from outside the operator:

- pod moves are the workload pods (not DaemonSet pods) a watch sees stop during the roll, each
  counted once: an eviction, a pod deleted with its node, a pod evicted by the node lifecycle
  controller all force a replacement. (Before kube-apiserver 1.26 an evicted pod carries no
  `DisruptionTarget` condition, so the evictions themselves cannot be told apart on the server.)
- the manager's API requests are its own client's count (`rest_client_requests_total` on its
  metrics endpoint, requests to the API server's host only, the cloud's apart);
- a node of the attach that goes not-Ready while nobody cordoned it is counted: that is the
  cluster's node lifecycle controller judging the simulated kubelets' leases by its own wall
  clock, and a roll on such a cluster measures the machine, not the operator;
- what a rehearsal's recorder reads from the simulator's store comes from watches (`RollFeed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from nodeops.api import all_crds
from nodeops.controllers.cycling.nodes import CYCLE_TAINT
from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS, CYCLENODESTATUSES
from nodeops.demo.world import OPERATOR_NAMESPACE, World
from nodeops.kube import errors
from nodeops.kube.client import Client
from nodeops.kube.requestcore import PATCH_CONTENT_TYPES
from nodeops.kube.resources import CRDS
from nodeops.rehearse.watch import RollRecorder
from nodeops.sim.attach.labels import ATTACH_LABEL, selector
from nodeops.sim.cluster.apiclient import (
    NODES,
    PDBS,
    PODS,
    RELISTED,
    REPLICASETS,
    ApiClient,
    Resource,
)

__all__ = [
    "CRD_FIELDS_SINCE_1_28",
    "Referee",
    "apply_crds",
    "leftovers",
    "manager_command",
    "operator_requests",
    "server_version",
    "strip_new_crd_fields",
]

CRD_FIELDS_SINCE_1_28 = ("fieldPath", "reason")
"""Keys of an `x-kubernetes-validations` rule that kube-apiserver before 1.28 does not know, and
refuses under strict field validation (server-side apply, kubectl's default)."""

FIELD_MANAGER = "nodeops-bench"


def strip_new_crd_fields(crd: Mapping[str, Any]) -> dict[str, Any]:
    """`crd` with `fieldPath` and `reason` removed from every validation rule, for API servers
    older than 1.28. The rules still run there; their errors name the object rather than the
    field, with the default reason."""
    out = copy.deepcopy(dict(crd))

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            rules = node.get("x-kubernetes-validations")
            if isinstance(rules, list):
                for rule in rules:
                    if isinstance(rule, dict):
                        for key in CRD_FIELDS_SINCE_1_28:
                            rule.pop(key, None)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(out)
    return out


async def apply_crds(client: Client, *, strip_new_fields: bool) -> None:
    """Install the CRDs as the install guide does (server-side apply, strict field validation),
    so the roll runs on the definitions of this version, whatever an earlier install left."""
    for crd in all_crds():
        body = strip_new_crd_fields(crd) if strip_new_fields else crd
        name = str(body["metadata"]["name"])
        try:
            await client.request(
                "PATCH",
                CRDS.path(None, name),
                params={
                    "fieldManager": FIELD_MANAGER,
                    "force": "true",
                    "fieldValidation": "Strict",
                },
                body=body,
                content_type=PATCH_CONTENT_TYPES["apply"],
            )
        except errors.ApiError as exc:
            hint = (
                ""
                if strip_new_fields
                else " (an API server older than 1.28 refuses the validation rules' "
                "fieldPath/reason: see --strip-new-crd-fields)"
            )
            raise SystemExit(
                f"python -m bench.cycle: the CRD {name} was refused: {exc}{hint}"
            ) from None
    for crd in all_crds():
        await _until_established(client, str(crd["metadata"]["name"]))


async def _until_established(client: Client, name: str, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        crd = await client.get(CRDS, name)
        conditions = (crd.get("status") or {}).get("conditions") or ()
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            return
        if loop.time() > deadline:
            raise TimeoutError(f"the CRD {name} is not Established after {timeout:g}s")
        await asyncio.sleep(0.2)


async def server_version(client: Client) -> str:
    version = await client.request("GET", "/version")
    return str(version.get("gitVersion") or "unknown")


def manager_command(
    world: World,
    directory: Path,
    *,
    kubeconfig: str,
    context: str | None,
    metrics_port: int,
    health_port: int,
) -> list[str]:
    """`nodeops run --controllers cycling` against the attached cluster and clouds, on the
    attach's simulated clock, with its metrics served (its request count is read there)."""
    assert world.attachment is not None
    providers = world.attachment.write_provider_config(directory / "providers.yaml")
    args = [
        sys.executable, "-m", "nodeops.cli", "run",
        "--kubeconfig", kubeconfig,
        "--namespace", OPERATOR_NAMESPACE,
        "--controllers", "cycling",
        "--provider", "sim",
        "--provider-config", str(providers),
        "--metrics-addr", f"127.0.0.1:{metrics_port}",
        "--health-addr", f"127.0.0.1:{health_port}",
        "--log-level", "warning",
    ]  # fmt: skip
    if context:
        args += ["--context", context]
    flags = {
        "time_scale": world.clock.time_scale,
        "time_origin": world.clock.origin.isoformat(),
        "check_interval": 5,
        "cloud_poll_interval": 5,
    }
    for name, value in flags.items():
        args += [f"--cycling-{name.replace('_', '-')}", str(value)]
    return args


async def operator_requests(metrics_port: int, server: str) -> int:
    """The manager's requests to the API server at `server`, from its own client's counter."""
    reader, writer = await asyncio.open_connection("127.0.0.1", metrics_port)
    writer.write(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
    await writer.drain()
    body = (await reader.read()).decode("utf-8", "replace")
    writer.close()
    host = urlsplit(server).netloc
    total = 0.0
    for line in body.splitlines():
        if line.startswith("rest_client_requests_total{") and f'host="{host}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def _owner_kind(pod: Mapping[str, Any]) -> str:
    owners = (pod.get("metadata") or {}).get("ownerReferences") or ()
    for ref in owners:
        if ref.get("controller"):
            return str(ref.get("kind") or "")
    return ""


def _ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


class Referee:
    """Watches the attach's pods and nodes: workload pods that stop (moves), when each node was
    first seen (on the simulated clock), and nodes that went not-Ready while schedulable."""

    def __init__(self, world: World) -> None:
        assert world.attachment is not None
        self.world = world
        self.client: ApiClient = world.attachment.new_client("referee")
        self.selector = selector(world.attachment.instance)
        self.recording = False
        self.moved: set[str] = set()
        self.placed_during_roll: dict[str, bool] = {}
        """Pods bound during the roll: whether their node then carried the pending-node taint
        (or was cordoned). A pod that moves twice was placed where the roll had yet to go."""
        self.node_marked: dict[str, bool] = {}
        self.node_seen: dict[str, float] = {}
        self._present: set[str] = set()
        self.ready_once: set[str] = set()
        self.not_ready: set[str] = set()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for resource, handle in ((PODS, self._pod), (NODES, self._node)):
            listed = await self.client.list(resource, label_selector=self.selector)
            for obj in listed.items:
                handle("ADDED", obj)
            self._tasks.append(
                asyncio.create_task(
                    self._follow(resource, listed.resource_version, handle),
                    name=f"referee-{resource.plural}",
                )
            )

    async def _follow(self, resource: Resource, version: str, handle: Any) -> None:
        async for event in self.client.watch(
            resource, resource_version=version, label_selector=self.selector
        ):
            if event.type == RELISTED:
                for obj in event.items or ():
                    handle("MODIFIED", obj)
                continue
            handle(event.type, event.object)

    def _pod(self, event: str, pod: Mapping[str, Any]) -> None:
        if not self.recording or _owner_kind(pod) in ("DaemonSet", "Node"):
            return
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid"))
        if event == "DELETED" or meta.get("deletionTimestamp"):
            self.moved.add(uid)
            return
        node = (pod.get("spec") or {}).get("nodeName")
        if node and uid not in self.placed_during_roll:
            self.placed_during_roll[uid] = self.node_marked.get(str(node), False)

    @property
    def moved_twice(self) -> dict[str, int]:
        """Pods placed during the roll that moved again, by what their node looked like when
        they were placed on it."""
        again = [
            self.placed_during_roll[uid] for uid in self.moved if uid in self.placed_during_roll
        ]
        return {
            "placed_on_a_marked_node": sum(again),
            "placed_on_an_unmarked_node": len(again) - sum(again),
        }

    def _node(self, event: str, node: Mapping[str, Any]) -> None:
        name = str((node.get("metadata") or {}).get("name"))
        if event == "DELETED":
            self._present.discard(name)
            return
        if name not in self._present:
            # Names come from addresses, which the cloud hands out again: a Node is born when
            # its name appears again, not when it first did.
            self._present.add(name)
            self.node_seen[name] = self.world.clock.now().timestamp()
        spec = node.get("spec") or {}
        self.node_marked[name] = bool(spec.get("unschedulable")) or any(
            t.get("key") == CYCLE_TAINT for t in spec.get("taints") or ()
        )
        if _ready(node):
            self.ready_once.add(name)
        elif (
            self.recording
            and name in self.ready_once
            and not (node.get("spec") or {}).get("unschedulable")
        ):
            self.not_ready.add(name)

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.client.close()


async def leftovers(client: Client, instance: str, timeout: float = 180.0) -> dict[str, int]:
    """What is still labelled as the attach's after it stopped (nothing, when detach worked).

    Deleted namespaces take the cluster's namespace controller a while to empty; they are
    waited for up to `timeout` seconds, then counted if still there."""
    from nodeops.kube import resources

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        left: dict[str, int] = {}
        for resource in (resources.NODES, resources.PODS, resources.NAMESPACES):
            items, _ = await client.list(resource, label_selector=f"{ATTACH_LABEL}={instance}")
            if items:
                left[resource.plural] = len(items)
        if not left or loop.time() > deadline:
            return left
        await asyncio.sleep(1.0)


class RollFeed:
    """Feeds a `RollRecorder` from watches of the attached cluster, whose store is not ours: the
    recorder then judges a roll on a real control plane by the rule it judges the simulator's.

    A watch that expired comes back as a full list; what the list no longer holds was deleted
    in the gap, and is reported so, from the last copy seen.
    """

    def __init__(self, client: ApiClient, recorder: RollRecorder) -> None:
        self.client = client
        self.recorder = recorder
        self._last: dict[tuple[str, str], dict[tuple[str, str], Mapping[str, Any]]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """List, report and follow each resource the recorder reads."""
        for resource in (REPLICASETS, PDBS, NODES, PODS, CYCLENODEREQUESTS, CYCLENODESTATUSES):
            listed = await self.client.list(resource)
            for obj in listed.items:
                self._report(resource, "ADDED", obj)
            self._tasks.append(
                asyncio.create_task(
                    self._follow(resource, listed.resource_version),
                    name=f"roll-feed-{resource.plural}",
                )
            )

    async def _follow(self, resource: Resource, version: str) -> None:
        async for event in self.client.watch(resource, resource_version=version):
            if event.type == RELISTED:
                items = event.items or []
                fresh = {_object_key(obj) for obj in items}
                for key, last in list(self._last.get(_resource_key(resource), {}).items()):
                    if key not in fresh:
                        self._report(resource, "DELETED", last)
                for obj in items:
                    self._report(resource, "MODIFIED", obj)
                continue
            self._report(resource, event.type, event.object)

    def _report(self, resource: Resource, event: str, obj: Mapping[str, Any]) -> None:
        kind = _resource_key(resource)
        last = self._last.setdefault(kind, {})
        if event == "DELETED":
            last.pop(_object_key(obj), None)
        else:
            last[_object_key(obj)] = obj
        self.recorder.observe(kind, event, dict(obj))

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.client.close()


def _resource_key(resource: Resource) -> tuple[str, str]:
    return (resource.group, resource.plural)


def _object_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
