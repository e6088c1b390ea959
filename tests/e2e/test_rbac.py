"""The RBAC of manifests/ proven against the simulated API server in RBAC mode.

A scenario runs `nodeops run` authenticated as a ServiceAccount that holds exactly the roles of
the base plus those of the components the scenario names, and passes when the scenario's goal is
reached with no request refused (any 403 fails it). Then every rule is removed in turn: each
removal must make some scenario fail, or the rule is not needed.

The runtime's scenario is here; each controller adds one that runs its e2e behaviour with
`--controllers=<name>` and its component, to `SCENARIOS`.
"""

from __future__ import annotations

import asyncio
import copy
import shutil
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nodeops.sim.serve import SimCluster, SimOptions
from tests.kustomize import BASE, COMPONENTS, needs_kubectl, render, with_components

pytestmark = needs_kubectl

NAMESPACE, ACCOUNT = "nodeops-system", "nodeops"
RBAC_KINDS = ("Role", "ClusterRole")
SETUP_KINDS = (
    "Namespace",
    "ServiceAccount",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
)
TIMING = ["--lease-duration", "3", "--renew-deadline", "2", "--retry-period", "0.5"]
SCENARIO_TIMEOUT = 45.0


@dataclass
class Run:
    """One scenario's run: the simulated cluster and the operator process it drives."""

    sim: SimCluster
    kubeconfig: Path
    proc: asyncio.subprocess.Process | None = None
    output: list[str] = field(default_factory=list)

    def forbidden(self) -> int:
        return int(self.sim.server.stats.snapshot()["by_code"].get("403", {}).get("requests", 0))

    def get(self, group: str, version: str, plural: str, ns: str, name: str) -> dict[str, Any]:
        registry = self.sim.server.registry
        return registry.get(registry.lookup(group, version, plural), ns, name)

    async def start(self, *args: str) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "nodeops.cli", "run", "--kubeconfig", str(self.kubeconfig), "--log-format", "json",
            "--metrics-addr", "0", "--health-addr", "0", *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip

    async def stop(self) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(self.proc.communicate(), timeout=30)
        self.output.append(out.decode())
        return self.proc.returncode or 0


@dataclass(frozen=True)
class Scenario:
    name: str
    components: tuple[Path, ...]
    # Drives the operator to its goal; returns normally once reached, raises AssertionError when
    # it cannot be (a refused request ends the wait at once).
    drive: Callable[[Run], Awaitable[None]]
    # The simulated cluster it needs, beyond one node (SimOptions fields).
    cluster: dict[str, Any] = field(default_factory=dict)


async def until(run: Run, goal: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + SCENARIO_TIMEOUT
    while not goal():
        assert run.forbidden() == 0, f"a request was refused (403) before {what}"
        assert run.proc is None or run.proc.returncode is None, f"nodeops exited before {what}"
        assert asyncio.get_running_loop().time() < deadline, f"no {what} in {SCENARIO_TIMEOUT}s"
        await asyncio.sleep(0.1)
    # A refusal on the way to the goal counts even when the goal was reached within one poll.
    assert run.forbidden() == 0, f"a request was refused (403) before {what}"


async def leads_and_hands_over(run: Run) -> None:
    """The runtime alone: acquire the Lease, renew it, release it on SIGTERM."""
    await run.start("--leader-elect", "--leader-election-identity", "replica-a", *TIMING)
    renewals: set[str] = set()

    def renewed_twice() -> bool:
        try:
            lease = run.get("coordination.k8s.io", "v1", "leases", NAMESPACE, "nodeops-leader")
        except Exception:
            return False
        if lease["spec"].get("holderIdentity") == "replica-a":
            renewals.add(lease["spec"]["renewTime"])
        return len(renewals) >= 3

    await until(run, renewed_twice, "lease acquired and renewed")
    assert await run.stop() == 0, run.output[-1]
    lease = run.get("coordination.k8s.io", "v1", "leases", NAMESPACE, "nodeops-leader")
    assert not lease["spec"].get("holderIdentity"), "the lease was not released on stop"


def _registry_of(run: Run, group: str, version: str, plural: str) -> Any:
    return run.sim.server.registry.lookup(group, version, plural)


def _objects(run: Run, group: str, version: str, plural: str, ns: str | None = None) -> list[Any]:
    rt = _registry_of(run, group, version, plural)
    entries = run.sim.server.store.bucket(rt.storage_key).entries(ns)
    return [run.sim.server.registry.decode(rt, e) for e in entries]


def _record(run: Run) -> dict[str, Any] | None:
    try:
        return run.get("nodeops.dev", "v1alpha1", "loadbalancerattachments", NAMESPACE, "node-0")
    except Exception:
        return None


async def detaches_a_node_and_brings_it_back(run: Run) -> None:
    """The detacher: a cordoned node is detached and its pods stopped, a NodeDrainRule choosing
    by namespace labels and the ingress DaemonSet's pod last (its stopping is no ingress
    rollout); uncordoned, it is attached again at once and its pods come back; deleted, its
    record goes."""
    from nodeops.api import all_crds
    from nodeops.sim import objects

    server = run.sim.server
    for crd in all_crds():
        server.create(crd)
    server.create(
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": "edge", "labels": {"team": "edge"}}}
    )  # fmt: skip
    server.create(objects.make_daemonset("ingress", "edge", containers=1))
    server.create(objects.make_replicaset("web", "edge", replicas=1, containers=1))
    server.create(
        {"apiVersion": "nodeops.dev/v1alpha1", "kind": "NodeDrainRule",
         "metadata": {"name": "edge-first"},
         "spec": {"drain": {"behavior": "Drain", "order": -1},
                  "pods": [{"namespaceSelector": {"matchLabels": {"team": "edge"}}}]}}
    )  # fmt: skip
    ca = run.kubeconfig.parent / "ca.pem"
    assert server.ca_pem is not None
    ca.write_bytes(server.ca_pem)
    config = run.kubeconfig.parent / "providers.yaml"
    config.write_text(
        f"providers:\n  sim:\n    url: {server.url}\n    token: {server.admin_token}\n"
        f"    ca_file: {ca}\n"
    )
    pods = _registry_of(run, "", "v1", "pods")
    nodes = _registry_of(run, "", "v1", "nodes")

    def running() -> bool:
        entries = server.store.bucket(pods.storage_key).entries("edge")
        items = [server.registry.decode(pods, e) for e in entries]
        return len(items) == 2 and all(
            (p.get("status") or {}).get("phase") == "Running" for p in items
        )

    await until(run, running, "the edge pods running")
    await run.start(
        "--controllers=detacher", "--provider=sim", f"--provider-config={config}",
        "--detacher-stop-pods", "--detacher-stop-daemonset-pods",
        "--detacher-drain-delete-emptydir-data", "--detacher-discovery=services",
        "--detacher-manage-daemonset-pods", "--detacher-daemonsets=edge/ingress",
    )  # fmt: skip
    server.registry.patch(nodes, "", "node-0", "merge", {"spec": {"unschedulable": True}})

    def stopped() -> bool:
        return bool(((_record(run) or {}).get("status") or {}).get("podsStoppedAt"))

    await until(run, stopped, "the node detached and its pods stopped")
    server.registry.patch(nodes, "", "node-0", "merge", {"spec": {"unschedulable": None}})

    def attached() -> bool:
        return ((_record(run) or {}).get("status") or {}).get("phase") == "Attached"

    await until(run, attached, "the node attached again")
    # Its DaemonSet taint lifted, the ingress pod it stopped comes back, as does the web pod.
    await until(run, running, "the edge pods running again")
    server.registry.delete(nodes, "", "node-0", {})
    await until(run, lambda: _record(run) is None, "the deleted node's record removed")


MAINTENANCE_CONFIG = """\
instances:
  check:
  - {type: hasLabel, name: go, config: {key: go}}
  - {type: podsOnNode, name: no_protected, config: {annotations: {karpenter.sh/do-not-disrupt: "true"}}}
  - {type: stagger, name: stagger, config: {duration: 1m, leaseName: mnt, leaseNamespace: default}}
  trigger:
  - {type: eviction, name: cordon, config: {action: cordon}}
  - {type: eviction, name: drain, config: {action: drain}}
profiles:
- name: p
  operational:
    transitions: [{check: go && no_protected && stagger, next: in-maintenance}]
  in-maintenance:
    enter: cordon && drain
"""


async def maintenance_drains_a_node(run: Run) -> None:
    """A node labelled for maintenance passes its checks (pods, stagger Lease), is cordoned and
    drained (DaemonSet pods stay; a budget is consulted), and its record is written."""
    from nodeops.api import all_crds
    from nodeops.kube.client import Client
    from nodeops.kube.resources import DAEMONSETS, DEPLOYMENTS, NODES, PODS

    for crd in all_crds():  # installed as the install does: the drain reads NodeDrainRules
        run.sim.server.create(crd)
    work = run.kubeconfig.parent
    config = work / "maintenance.yaml"
    config.write_text(MAINTENANCE_CONFIG)
    admin = run.sim.server.write_kubeconfig(work / "admin.kubeconfig")
    labels = {"app": "web"}
    template = {
        "metadata": {"labels": labels},
        "spec": {
            "containers": [{"name": "c", "image": "nginx"}],
            "terminationGracePeriodSeconds": 0,
        },
    }
    async with await Client.from_kubeconfig(str(admin)) as client:
        spec = {"selector": {"matchLabels": labels}, "template": template}
        await client.create(
            DEPLOYMENTS,
            {"metadata": {"name": "web", "namespace": "default"}, "spec": {"replicas": 1, **spec}},
            "default",
        )
        ds_labels = {"app": "agent"}
        ds_template = {**template, "metadata": {"labels": ds_labels}}
        await client.create(
            DAEMONSETS,
            {
                "metadata": {"name": "agent", "namespace": "default"},
                "spec": {"selector": {"matchLabels": ds_labels}, "template": ds_template},
            },
            "default",
        )
        for _ in range(300):
            items, _ = await client.list(PODS, "default")
            if len([p for p in items if p["status"].get("phase") == "Running"]) >= 2:
                break
            await asyncio.sleep(0.1)
        await run.start(
            "--controllers", "maintenance", "--maintenance-config", str(config),
            "--maintenance-api-addr", "0",
        )  # fmt: skip
        await client.patch(
            NODES,
            "node-0",
            {"metadata": {"labels": {"nodeops.dev/maintenance-profile": "p", "go": "1"}}},
        )

    def drained() -> bool:
        node = run.get("", "v1", "nodes", "", "node-0")
        data = (node["metadata"].get("annotations") or {}).get("nodeops.dev/maintenance-data", "")
        web = [
            p
            for p in _objects(run, "", "v1", "pods", "default")
            if p["metadata"]["name"].startswith("web-")
            and p["spec"].get("nodeName") == "node-0"
            and not p["metadata"].get("deletionTimestamp")
        ]
        return (
            '"Previous":"in-maintenance"' in data
            and bool(node["spec"].get("unschedulable"))
            and not web
        )

    await until(run, drained, "node-0 drained in maintenance")
    assert await run.stop() == 0, run.output[-1]


KUBERNIKUS_CONFIG = """\
intervals:
  requeue: 1s
  podDeletion: {period: 200ms, timeout: 5m}
  podEviction: {period: 200ms, timeout: 5m, force: false}
cloudProviderSecret: {name: cloud-config, namespace: kube-system}
"""


async def drain_subjects(run: Run) -> None:
    """What a drain meets, every rule of a draining controller in use: a Deployment's pod under a
    budget, a DaemonSet's pod, a drain rule matching namespaces; returns once the pods run."""
    from nodeops.api import all_crds

    server = run.sim.server
    for crd in all_crds():
        server.create(crd)
    server.create(
        {
            "apiVersion": "nodeops.dev/v1alpha1",
            "kind": "NodeDrainRule",
            "metadata": {"name": "default-namespace"},
            "spec": {
                "drain": {"behavior": "Drain"},
                "pods": [{"namespaceSelector": {"matchLabels": {"team": "web"}}}],
            },
        }
    )
    labels = {"app": "web"}
    template = {
        "metadata": {"labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "nginx:1.27"}],
        },
    }
    selector = {"matchLabels": labels}
    server.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": 1, "selector": selector, "template": template},
        }
    )
    server.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"maxUnavailable": 1, "selector": selector},
        }
    )
    agent = {"app": "agent"}
    server.create(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": agent},
                "template": {**template, "metadata": {"labels": agent}},
            },
        }
    )

    def pods_ready() -> bool:
        web = run.get("apps", "v1", "deployments", "default", "web").get("status") or {}
        agents = run.get("apps", "v1", "daemonsets", "default", "agent").get("status") or {}
        return web.get("readyReplicas") == 1 and agents.get("numberReady") == 1

    await until(run, pods_ready, "the pods running")


async def kubernikus_replaces_a_node(run: Run) -> None:
    """Label the outdated node, then delete it: drain (a Deployment's pod under a budget, a
    DaemonSet's pod, a drain rule matching namespaces), credentials from the Secret, Node gone."""
    server, node = run.sim.server, "node-0"
    server.set_kube_version("v1.32.0")  # the node's kubelet is v1.31.4
    await drain_subjects(run)
    conf = "[Global]\nauth-url = http://127.0.0.1:1/v3\nusername = u\npassword = p\n"
    conf += "domain-name = d\ntenant-id = t\n"
    server.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "cloud-config", "namespace": "kube-system"},
            "stringData": {"cloudprovider.conf": conf},
        }
    )
    config = run.kubeconfig.with_name("kubernikus.yaml")
    config.write_text(KUBERNIKUS_CONFIG)

    await run.start("--controllers", "kubernikus", "--kubernikus-config", str(config))

    def labelled() -> bool:
        labels = run.get("", "v1", "nodes", "", node)["metadata"].get("labels", {})
        return labels.get("nodeops.dev/kubelet-needs-update") == "true"

    await until(run, labelled, "the outdated node labelled")
    registry = server.registry
    registry.patch(
        registry.lookup("", "v1", "nodes"), "", node, "merge",
        {"metadata": {"labels": {"nodeops.dev/delete-node": "true"}}},
    )  # fmt: skip

    def removed() -> bool:
        try:
            run.get("", "v1", "nodes", "", node)
        except Exception:
            return True
        return False

    await until(run, removed, "the node removed")
    assert await run.stop() == 0, run.output[-1]


async def esx_takes_a_node_down_and_back(run: Run) -> None:
    """vCenter (govmomi's simulator) puts the host of node-0's VM into maintenance: the node is
    labelled, cordoned, drained (the pods of `drain_subjects`), its VM shut down; the host
    leaves maintenance: the VM is powered on, the node uncordoned."""
    from tests.vcsim import PASSWORD, USER, VCSIM, start_vcsim

    if VCSIM is None:
        pytest.skip("no vcsim binary (.ci/run builds it into .venv/bin)")
    work = run.kubeconfig.parent
    vcsim = await start_vcsim(work)
    try:
        vm = (await vcsim.vms())[0]
        await vcsim.rename(vm.ref, "node-0")
        credentials = work / "esx-credentials.yaml"
        credentials.write_text(f"username: {USER}\npassword: {PASSWORD}\n")
        await drain_subjects(run)
        await run.start(
            "--controllers", "esx", "--esx-vcenter-url", vcsim.url,
            "--esx-credentials-file", str(credentials), "--esx-ca-file", str(vcsim.ca_file),
            "--esx-match-by", "name", "--esx-check-interval", "200ms",
            "--esx-eviction-period", "200ms",
        )  # fmt: skip

        def node() -> dict[str, Any]:
            return run.get("", "v1", "nodes", "", "node-0")

        def labelled(value: str) -> Callable[[], bool]:
            return lambda: (
                node()["metadata"]["labels"].get("nodeops.dev/esx-in-maintenance") == value
            )

        await until(run, labelled("false"), "node-0 labelled out of maintenance")
        registry = run.sim.server.registry
        registry.patch(
            registry.lookup("", "v1", "nodes"), "", "node-0", "merge",
            {"metadata": {"labels": {"nodeops.dev/esx-reboot-ok": "true"}}},
        )  # fmt: skip
        await vcsim.enter_maintenance(vm.host)

        def off() -> bool:
            notes = node()["metadata"].get("annotations") or {}
            return '"step":"Off"' in notes.get("nodeops.dev/esx-maintenance-progress", "")

        await until(run, off, "node-0 drained and its VM off")
        assert (await vcsim.power())[vm.ref] == "poweredOff"
        await vcsim.exit_maintenance(vm.host)

        def back() -> bool:
            notes = node()["metadata"].get("annotations") or {}
            return (
                not node()["spec"].get("unschedulable")
                and "nodeops.dev/esx-maintenance-progress" not in notes
            )

        await until(run, back, "node-0 back and uncordoned")
        assert (await vcsim.power())[vm.ref] == "poweredOn"
        assert await run.stop() == 0, run.output[-1]
    finally:
        vcsim.proc.terminate()
        await vcsim.proc.wait()


def cycling_cluster() -> Any:
    """Two nodes in one cloud node group, the demo's workloads (budgets, a DaemonSet) on them;
    replacements boot in a second."""
    from nodeops.demo.scenario import demo_scenario

    return demo_scenario(2, groups=1, boot_seconds=1, grace_seconds=0, stateful=False)


async def cycling_replaces_a_node_group(run: Run) -> None:
    """Both controllers of the component (requests and the observer): a CycleNodeRequest
    replaces every node of the group, with a health check whose CA is in a Secret, a label
    removed from a pod before the drain, and a NodeDrainRule choosing pods by namespace labels;
    the request ends Successful and no node is left cordoned."""
    from nodeops.api import all_crds
    from tests.integration.cycling.checkserver import make_pki, serve

    server = run.sim.server
    for crd in all_crds():
        server.create(crd)
    registry = server.registry
    namespaces, pods = (_registry_of(run, "", "v1", p) for p in ("namespaces", "pods"))
    registry.patch(namespaces, "", "shop", "merge", {"metadata": {"labels": {"team": "shop"}}})
    server.create(
        {"apiVersion": "nodeops.dev/v1alpha1", "kind": "NodeDrainRule",
         "metadata": {"name": "shop-first"},
         "spec": {"drain": {"behavior": "Drain", "order": -1},
                  "pods": [{"namespaceSelector": {"matchLabels": {"team": "shop"}}}]}}
    )  # fmt: skip
    old = {n["metadata"]["name"] for n in _objects(run, "", "v1", "nodes")}

    def serving() -> list[dict[str, Any]]:
        items = _objects(run, "", "v1", "pods", "shop")
        running = [p for p in items if (p.get("status") or {}).get("phase") == "Running"]
        return running if running and len(running) == len(items) else []

    await until(run, lambda: bool(serving()), "the shop's pods running")
    labelled = serving()[0]["metadata"]["name"]
    registry.patch(pods, "shop", labelled, "merge", {"metadata": {"labels": {"in-lb": "yes"}}})
    pki = make_pki()
    async with serve(pki) as checks:
        import base64

        server.create(
            {"apiVersion": "v1", "kind": "Secret",
             "metadata": {"name": "checks-ca", "namespace": NAMESPACE},
             "data": {"ca.crt": base64.b64encode(pki.ca).decode()}}
        )  # fmt: skip
        ca = run.kubeconfig.parent / "ca.pem"
        assert server.ca_pem is not None
        ca.write_bytes(server.ca_pem)
        config = run.kubeconfig.parent / "providers.yaml"
        config.write_text(
            f"providers:\n  sim:\n    url: {server.url}\n    token: {server.admin_token}\n"
            f"    ca_file: {ca}\n"
        )
        await run.start(
            "--controllers=cycling,cycling-observer", "--provider=sim",
            f"--provider-config={config}", "--cycling-check-interval=1",
            "--cycling-cloud-poll-interval=1",
        )  # fmt: skip
        server.create(
            {"apiVersion": "nodeops.dev/v1alpha1", "kind": "CycleNodeRequest",
             "metadata": {"name": "roll", "namespace": NAMESPACE},
             "spec": {"nodeGroupName": "workers-a",
                      "selector": {"matchLabels": {"role": "worker"}},
                      "cycleSettings": {"method": "Drain", "concurrency": 2,
                                        "labelsToRemove": ["in-lb"]},
                      "healthChecks": [{"endpoint": checks.url + "/health/{{ .NodeName }}",
                                        "waitPeriod": "1m",
                                        "tls": {"secretRef": {"name": "checks-ca"}}}]}}
        )  # fmt: skip

        def phase() -> str:
            request = run.get("nodeops.dev", "v1alpha1", "cyclenoderequests", NAMESPACE, "roll")
            return str((request.get("status") or {}).get("phase") or "")

        await until(run, lambda: phase() in ("Successful", "Failed"), "the roll finished")
        request = run.get("nodeops.dev", "v1alpha1", "cyclenoderequests", NAMESPACE, "roll")
        assert phase() == "Successful", request.get("status")
        assert set(checks.checks) - old, "no new node was health-checked"
    nodes = _objects(run, "", "v1", "nodes")
    assert not old & {n["metadata"]["name"] for n in nodes}
    assert not any(n["spec"].get("unschedulable") for n in nodes)
    assert await run.stop() == 0, run.output[-1]


SCENARIOS = [
    Scenario("runtime", (), leads_and_hands_over),
    Scenario("detacher", (COMPONENTS / "detacher",), detaches_a_node_and_brings_it_back),
    Scenario("maintenance", (COMPONENTS / "maintenance",), maintenance_drains_a_node),
    Scenario("kubernikus", (COMPONENTS / "kubernikus",), kubernikus_replaces_a_node),
    Scenario("esx", (COMPONENTS / "esx",), esx_takes_a_node_down_and_back),
    Scenario(
        "cycling",
        (COMPONENTS / "cycling",),
        cycling_replaces_a_node_group,
        {"scenario": cycling_cluster()},
    ),
]


# ------------------------------------------------------------------------------- harness


def rbac_objects(tmp_path: Path, components: tuple[Path, ...]) -> list[dict[str, Any]]:
    objects = render(with_components(tmp_path / "install", BASE, list(components)))
    return [o for o in objects if o["kind"] in SETUP_KINDS]


def rules(objects: list[dict[str, Any]]) -> Iterator[tuple[str, int]]:
    for obj in objects:
        if obj["kind"] in RBAC_KINDS:
            for i in range(len(obj["rules"])):
                yield f"{obj['kind']}/{obj['metadata']['name']}", i


def without_rule(objects: list[dict[str, Any]], role: str, index: int) -> list[dict[str, Any]]:
    changed = copy.deepcopy(objects)
    for obj in changed:
        if f"{obj['kind']}/{obj['metadata']['name']}" == role:
            del obj["rules"][index]
    return changed


async def play(tmp_path: Path, scenario: Scenario, objects: list[dict[str, Any]]) -> Run:
    """A fresh cluster in RBAC mode, the roles created as the installer would, then the scenario
    run as the ServiceAccount."""
    sim = SimCluster(SimOptions(**{"nodes": 1, "instant": True, **scenario.cluster, "rbac": True}))
    await sim.start()
    try:
        account: dict[str, Any] = {}
        for obj in objects:
            created = sim.server.create(copy.deepcopy(obj))
            if obj["kind"] == "ServiceAccount":
                account = created
        assert sim.server.authn is not None
        token, _ = sim.server.authn.mint_service_account_token(
            NAMESPACE, ACCOUNT, account["metadata"]["uid"], 3600, sim.server.clock.now(), []
        )
        kubeconfig = sim.server.write_kubeconfig(tmp_path / f"{scenario.name}.kubeconfig", token)
        run = Run(sim, kubeconfig)
        sim.server.stats.reset()
        try:
            await scenario.drive(run)
        finally:
            if run.proc is not None and run.proc.returncode is None:
                await run.stop()
        return run
    finally:
        await sim.stop()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
async def test_scenario_needs_no_more_than_its_roles(tmp_path: Path, scenario: Scenario) -> None:
    run = await play(tmp_path, scenario, rbac_objects(tmp_path, scenario.components))
    assert run.forbidden() == 0, "\n".join(run.output)


def _every_rule() -> list[Any]:
    """Each rule of every role the scenarios grant, as test parameters."""
    if shutil.which("kubectl") is None:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        components = tuple(sorted({c for s in SCENARIOS for c in s.components}))
        found = list(rules(rbac_objects(Path(tmp), components)))
    return [pytest.param(role, index, id=f"{role}[{index}]") for role, index in found]


@pytest.mark.parametrize(("role", "index"), _every_rule())
async def test_every_rule_is_needed(tmp_path: Path, role: str, index: int) -> None:
    for scenario in SCENARIOS:
        objects = rbac_objects(tmp_path, scenario.components)
        if role not in {f"{o['kind']}/{o['metadata']['name']}" for o in objects}:
            continue
        try:
            await play(tmp_path, scenario, without_rule(objects, role, index))
        except AssertionError:
            return  # this scenario cannot do without the rule
    pytest.fail(f"every scenario passes without rule {index} of {role}")
