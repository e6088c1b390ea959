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
- what a rehearsal's recorder reads from the simulator's store comes from watches
  (`roll_feed`).
"""

from __future__ import annotations

import argparse
import asyncio
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
from nodeops.sim.attach.feed import WatchFeed
from nodeops.sim.attach.labels import ATTACH_LABEL, selector
from nodeops.sim.cluster.apiclient import (
    NODES,
    PDBS,
    PODS,
    REPLICASETS,
    ApiClient,
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
        self._feed = WatchFeed(
            world.attachment.new_client("referee"),
            self._observe,
            (PODS, NODES),
            label_selector=selector(world.attachment.instance),
            name="referee",
        )
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

    async def start(self) -> None:
        await self._feed.start()

    def _observe(self, key: tuple[str, str], event: str, obj: Mapping[str, Any]) -> None:
        if key == (PODS.group, PODS.plural):
            self._pod(event, obj)
        else:
            self._node(event, obj)

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
        await self._feed.stop()


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


def roll_feed(client: ApiClient, recorder: RollRecorder) -> WatchFeed:
    """Feeds a `RollRecorder` from watches of the attached cluster, whose store is not ours: the
    recorder then judges a roll on a real control plane by the rule it judges the simulator's."""
    return WatchFeed(client, recorder.observe, ROLL_RESOURCES, name="roll-feed")


ROLL_RESOURCES = (REPLICASETS, PDBS, NODES, PODS, CYCLENODEREQUESTS, CYCLENODESTATUSES)
"""What the roll recorder follows, in the order it is listed (owners and budgets before pods)."""


def add_cluster_arguments(parser: argparse.ArgumentParser, kubeconfig_help: str) -> None:
    """`--kubeconfig` (what the benchmark does on that cluster: `kubeconfig_help`), and the
    options that only mean something with it."""
    parser.add_argument("--kubeconfig", default=None, help=kubeconfig_help)
    parser.add_argument("--context", default=None, help="with --kubeconfig: its context")
    parser.add_argument(
        "--sim-controllers",
        type=_sim_controllers,
        default=frozenset(),
        metavar="LIST",
        help="with --kubeconfig: the simulator's control-plane loops to run there too, as "
        "`nodeops sim attach --controllers` (default none: the cluster's kube-controller-manager "
        "and kube-scheduler do that work)",
    )
    parser.add_argument(
        "--strip-new-crd-fields",
        action="store_true",
        help="with --kubeconfig, for API servers older than 1.28: install the CRDs without the "
        "validation rules' fieldPath and reason, which those servers refuse",
    )


def check_cluster_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Options that need `--kubeconfig` are refused without it, and a kubeconfig that cannot be
    used is refused before anything starts (argparse's one line and exit 2)."""
    if args.kubeconfig is None:
        for flag in ("context", "sim_controllers", "strip_new_crd_fields"):
            if getattr(args, flag):
                parser.error(f"--{flag.replace('_', '-')} needs --kubeconfig")
        return
    from nodeops.sim.attach.kubeconfig import AttachError, load_target

    try:
        load_target(args.kubeconfig, args.context)
    except AttachError as exc:
        parser.error(str(exc))


def _sim_controllers(text: str) -> frozenset[str]:
    from nodeops.sim.attach import AttachError, parse_controllers

    try:
        return parse_controllers(text)
    except AttachError as exc:
        raise argparse.ArgumentTypeError(f"--sim-controllers: {exc}") from None
