"""The walk-throughs of the migration guides, step by step as the pages show them (and the
conversion of Cyclops manifests with the command its page gives): a simulated
cluster served by `nodeops sim serve`, the example files of examples/ applied with kubectl, the
nodeops commands run as processes, and what the pages say comes out checked against the cluster
and the simulated cloud. Ports are free ones instead of the pages' fixed ones (a shared machine)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from nodeops.api.drainrule import NodeDrainRule
from nodeops.api.labelselector import LabelSelector
from tests.repo import DOCS, ROOT

from .conftest import nodeops, stop

EXAMPLES = ROOT / "examples"
T = TypeVar("T")

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]


def run(
    *argv: str, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        list(argv), input=stdin, capture_output=True, text=True, timeout=120, check=False
    )
    if check:
        assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr}{done.stdout}"
    return done


def kubectl(config: Path, *args: str, stdin: str | None = None) -> str:
    return run("kubectl", "--kubeconfig", str(config), *args, stdin=stdin).stdout


def cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run(sys.executable, "-m", "nodeops.cli", *args, "--kubeconfig", str(config), check=False)


def eventually(check: Callable[[], T | None], what: str, timeout: float = 120) -> T:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@contextmanager
def simulator(tmp_path: Path, *args: str) -> Iterator[tuple[Path, str]]:
    """`nodeops sim serve ARGS`: the kubeconfig it wrote and its URL."""
    config = tmp_path / "sim.kubeconfig"
    proc = nodeops("sim", "serve", *args, "--port", "0", "--kubeconfig-out", str(config))
    assert proc.stdout is not None
    url = ""
    # With a node pool, the pool's cloudprovider.conf is written after the server listens.
    last = "cloudprovider.conf written" if "--openstack-pool" in args else "serving at "
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "nodeops sim serve ended before serving"
            if "serving at " in line:
                url = line.rsplit("serving at ", 1)[1].strip()
            if last in line:
                break
        assert url, "nodeops sim serve did not start"
        yield config, url
    finally:
        stop(proc)


def documented(page: str, *snippets: str) -> None:
    """The page still shows what the test runs."""
    text = (DOCS / page).read_text()
    for snippet in snippets:
        assert snippet in text, f"{page} no longer shows {snippet!r}"


# ------------------------------------------------------------------ Cluster API drain rules

CAPI_PAGE = "migrating-from-cluster-api-drain-rules.md"
RULES = EXAMPLES / "drain-rules"


def convert(mdr: dict[str, Any], cluster_labels: dict[str, str]) -> dict[str, Any] | None:
    """The page's conversion of a MachineDrainRule for one workload cluster (None: no rule
    there): `drain` and `pods` unchanged, the namespace dropped, the `machines` entries that
    select the cluster turned into `nodes`, none at all when one of them selects every node."""
    spec: dict[str, Any] = {"drain": mdr["spec"]["drain"]}
    machines = mdr["spec"].get("machines")
    if machines:
        kept = [
            m
            for m in machines
            if "clusterSelector" not in m
            or LabelSelector.model_validate(m["clusterSelector"]).matches(cluster_labels)
        ]
        if not kept:
            return None
        if all("selector" in m for m in kept):
            spec["nodes"] = [{"selector": m["selector"]} for m in kept]
    if "pods" in mdr["spec"]:
        spec["pods"] = mdr["spec"]["pods"]
    return {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "NodeDrainRule",
        "metadata": {"name": mdr["metadata"]["name"]},
        "spec": spec,
    }


def test_machine_drain_rules_convert_as_the_page_says() -> None:
    """`drain` and `pods` unchanged, `machines[].selector` become `nodes[].selector`, the
    cluster selector and the namespace dropped: the two example files are one set of rules."""
    machine_rules = {r["metadata"]["name"]: r for r in yaml.safe_load_all(
        (RULES / "machinedrainrules.yaml").read_text())}  # fmt: skip
    node_rules = {r["metadata"]["name"]: r for r in yaml.safe_load_all(
        (RULES / "nodedrainrules.yaml").read_text())}  # fmt: skip
    assert machine_rules.keys() == node_rules.keys()
    for name, mdr in machine_rules.items():
        ndr = node_rules[name]
        assert mdr["kind"] == "MachineDrainRule" and ndr["kind"] == "NodeDrainRule"
        assert "namespace" not in ndr["metadata"]
        assert convert(mdr, {"env": "prod"}) == {
            k: ndr[k] for k in ("apiVersion", "kind", "metadata", "spec")
        }, name
        NodeDrainRule.model_validate(ndr)


def test_an_entry_with_only_a_cluster_selector_selects_every_node_there() -> None:
    documented(CAPI_PAGE, "### Entries with only a `clusterSelector`", "leave `nodes`\n  out")
    mdr = {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineDrainRule",
        "metadata": {"name": "prod-db-last", "namespace": "fleet"},
        "spec": {
            "drain": {"behavior": "Drain", "order": 50},
            "machines": [
                {"clusterSelector": {"matchLabels": {"env": "prod"}}},
                {"selector": {"matchLabels": {"pool": "db"}}, "clusterSelector": {}},
            ],
            "pods": [{"selector": {"matchLabels": {"tier": "db"}}}],
        },
    }
    prod = convert(mdr, {"env": "prod"})
    assert prod is not None and "nodes" not in prod["spec"]
    rule = NodeDrainRule.model_validate(prod)
    assert rule.spec.nodes is None  # every node of the cluster
    dev = convert(mdr, {"env": "dev"})  # the empty cluster selector selects every cluster
    assert dev is not None and dev["spec"]["nodes"] == [
        {"selector": {"matchLabels": {"pool": "db"}}}
    ]
    NodeDrainRule.model_validate(dev)
    only_prod = {**mdr, "spec": {**mdr["spec"], "machines": mdr["spec"]["machines"][:1]}}
    assert convert(only_prod, {"env": "dev"}) is None


def test_cluster_api_drain_rules_walk_through(tmp_path: Path) -> None:
    documented(
        CAPI_PAGE,
        "kubectl apply -f examples/drain-rules/nodedrainrules.yaml",
        "kubectl label node node-0 node.cluster.x-k8s.io/pool=general",
        "kubectl apply -f examples/drain-rules/workload.yaml",
        "$ nodeops drain node-0;",
    )
    with simulator(tmp_path, "--nodes", "2", "--instant") as (config, _):
        crds = run(sys.executable, "-m", "nodeops.cli", "crds").stdout
        kubectl(config, "apply", "-f", "-", stdin=crds)
        applied = kubectl(config, "apply", "-f", str(RULES / "nodedrainrules.yaml"))
        assert applied.split() == [
            "nodedrainrule.nodeops.dev/frontends-first", "created",
            "nodedrainrule.nodeops.dev/databases-last", "created",
            "nodedrainrule.nodeops.dev/keep-cache", "created",
        ]  # fmt: skip
        kubectl(config, "label", "node", "node-0", "node.cluster.x-k8s.io/pool=general")
        assert cli(config, "cordon", "node-1").returncode == 0
        kubectl(config, "apply", "-f", str(RULES / "workload.yaml"))
        eventually(
            lambda: len(kubectl(config, "get", "pods", "-o", "name").split()) == 6,
            "the workload's six pods",
        )
        kubectl(config, "wait", "--for=condition=Ready", "pods", "--all", "--timeout=120s")
        assert cli(config, "uncordon", "node-1").returncode == 0

        drain = cli(config, "drain", "node-0")
        assert drain.returncode == 0, drain.stderr
        evicted = [
            line.rsplit("/", 1)[1].rsplit("-", 1)[0]
            for line in drain.stdout.splitlines()
            if line.startswith("evicting pod ")
        ]
        assert evicted == ["frontend", "frontend", "backend", "backend", "postgres"], drain.stdout
        assert drain.stdout.splitlines()[-1] == "node/node-0 drained"
        left = kubectl(
            config, "get", "pods", "--field-selector", "spec.nodeName=node-0", "-o", "name"
        )
        assert [name.rsplit("-", 1)[0] for name in left.split()] == ["pod/cache"]


# ---------------------------------------------------------------------------- node-detacher

DETACHER_PAGE = "migrating-from-node-detacher.md"


def _registered(url: str, instance: str) -> dict[str, list[str]]:
    with urllib.request.urlopen(f"{url}/sim/cloud/loadbalancers?instanceId={instance}") as resp:
        lbs = json.load(resp)["loadBalancers"]
    return {lb["name"]: [t["state"] for t in lb["targets"]] for lb in lbs}


def test_node_detacher_walk_through(tmp_path: Path) -> None:
    documented(
        DETACHER_PAGE,
        "nodeops sim serve --scenario examples/detacher/cluster.yaml",
        "--provider-config examples/detacher/providers.yaml",
        "--detacher-stop-pods &",
        "$ kubectl annotate node $NODE nodeops.dev/detach=true",
        "$ kubectl annotate node $NODE nodeops.dev/detach-",
        "$ kubectl cordon $NODE",
    )
    scenario = EXAMPLES / "detacher" / "cluster.yaml"
    with simulator(tmp_path, "--scenario", str(scenario)) as (config, url):
        providers = tmp_path / "providers.yaml"
        providers.write_text(
            (EXAMPLES / "detacher" / "providers.yaml")
            .read_text()
            .replace("http://127.0.0.1:8001", url)
        )
        crds = run(sys.executable, "-m", "nodeops.cli", "crds").stdout
        kubectl(config, "apply", "-f", "-", stdin=crds)
        kubectl(config, "create", "namespace", "nodeops-system")
        manager = nodeops(
            "run", "--kubeconfig", str(config), "--controllers", "detacher",
            "--provider", "sim", "--provider-config", str(providers), "--detacher-stop-pods",
            "--metrics-addr", "0", "--health-addr", "0",
        )  # fmt: skip
        try:
            node = kubectl(config, "get", "nodes", "-o", "name").split()[0].split("/", 1)[1]
            instance = json.loads(kubectl(config, "get", "node", node, "-o", "json"))["spec"][
                "providerID"
            ].rsplit("/", 1)[1]
            both = {"web-tg": ["healthy"], "web-clb": ["healthy"]}
            assert _registered(url, instance) == both

            def phase() -> str:
                found = run(
                    "kubectl", "--kubeconfig", str(config), "-n", "nodeops-system", "get",
                    "lba", node, "-o", "jsonpath={.status.phase}", check=False,
                )  # fmt: skip
                return found.stdout if found.returncode == 0 else ""

            def pods_on_node() -> list[str]:
                selector = f"spec.nodeName={node}"
                return kubectl(
                    config, "get", "pods", "--field-selector", selector, "-o", "name"
                ).split()

            kubectl(config, "annotate", "node", node, "nodeops.dev/detach=true")
            eventually(lambda: phase() == "Detached", "the record Detached")
            assert _registered(url, instance) == {"web-tg": [], "web-clb": []}
            assert pods_on_node(), "the annotation alone stopped the node's pods"

            kubectl(config, "annotate", "node", node, "nodeops.dev/detach-")
            eventually(lambda: phase() == "Attached", "the record Attached")
            assert _registered(url, instance) == both

            kubectl(config, "cordon", node)
            eventually(lambda: phase() == "Detached", "the cordoned node Detached")
            eventually(lambda: not pods_on_node(), "the node's pods stopped")
            assert _registered(url, instance) == {"web-tg": [], "web-clb": []}

            def told() -> bool:
                reasons = kubectl(
                    config, "get", "events", "--field-selector", f"involvedObject.name={node}",
                    "-o", "jsonpath={.items[*].reason}",
                ).split()  # fmt: skip
                return {"Detaching", "Detached", "Attaching", "Attached", "PodsStopped"} <= set(
                    reasons
                )

            eventually(told, "the Events the page shows")
            assert manager.poll() is None
        finally:
            stop(manager)


# ------------------------------------------------------------------------------- Kubernikus

MAINTENANCE_PAGE = "migrating-from-maintenance-controller.md"


def test_kubernikus_walk_through(tmp_path: Path) -> None:
    documented(
        MAINTENANCE_PAGE,
        "--openstack-pool workers:2:v1.31.4",
        "nodeops run --controllers kubernikus --kubernikus-compat sapcc \\\n"
        "    --kubernikus-config examples/kubernikus/kubernikus.yaml &",
        "$ kubectl label node kks-workers-q7rcl cloud.sap/delete-node=true",
    )
    with simulator(
        tmp_path, "--nodes", "0", "--instant", "--kube-version", "v1.32.1",
        "--openstack-pool", "workers:2:v1.31.4",
    ) as (config, _):  # fmt: skip
        conf = config.with_name("sim-cloudprovider.conf")
        secret = kubectl(
            config, "create", "secret", "generic", "cloud-config", "-n", "kube-system",
            f"--from-file=cloudprovider.conf={conf}", "--dry-run=client", "-o", "yaml",
        )  # fmt: skip
        kubectl(config, "apply", "-f", "-", stdin=secret)
        manager = nodeops(
            "run", "--kubeconfig", str(config), "--controllers", "kubernikus",
            "--kubernikus-compat", "sapcc",
            "--kubernikus-config", str(EXAMPLES / "kubernikus" / "kubernikus.yaml"),
            "--metrics-addr", "0", "--health-addr", "0",
        )  # fmt: skip
        try:

            def labelled() -> dict[str, str]:
                nodes = json.loads(kubectl(config, "get", "nodes", "-o", "json"))["items"]
                return {
                    n["metadata"]["name"]: n["metadata"]["labels"].get(
                        "cloud.sap/kubelet-needs-update", ""
                    )
                    for n in nodes
                }

            eventually(
                lambda: labelled() == {"kks-workers-q7rcl": "true", "kks-workers-tpxjv": "true"},
                "both nodes labelled cloud.sap/kubelet-needs-update=true",
            )
            kubectl(config, "label", "node", "kks-workers-q7rcl", "cloud.sap/delete-node=true")
            kubectl(config, "wait", "node/kks-workers-q7rcl", "--for=delete", "--timeout=120s")
            eventually(
                lambda: (
                    {"Draining", "Drained", "DeletingServer", "ServerDeleted"}
                    <= set(
                        kubectl(
                            config, "get", "events", "-o", "jsonpath={.items[*].reason}"
                        ).split()
                    )
                ),
                "the Events the page shows",
            )
            assert manager.poll() is None
        finally:
            stop(manager)


def test_the_migration_pages_link_what_exists() -> None:
    """Every example a migration page links to is in the repository."""
    for page in sorted(DOCS.glob("migrating-from-*.md")):
        text = page.read_text()
        for target in set(re.findall(r"\]\((\.\./examples/[^)#]+)\)", text)):
            assert (page.parent / target).resolve().exists(), f"{page.name}: {target}"


# --------------------------------------------------------------------------------- Cyclops

CYCLOPS_PAGE = "migrating-from-cyclops.md"


def test_the_cyclops_examples_say_what_they_are() -> None:
    """Modelled on Cyclops's documentation, in its format: not quotes of its README."""
    for path in sorted((EXAMPLES / "cyclops").glob("*.yaml")):
        header = path.read_text().split("\napiVersion:", 1)[0]
        assert "in Cyclops's format, modelled on" in " ".join(header.split()), path.name
        assert "README writes" not in header, path.name
    documented("migrating-from-cyclops.md", "modelled on the examples of Cyclops's documentation")


def test_cyclops_manifests_convert_with_the_documented_command(tmp_path: Path) -> None:
    """The page's `sed` turns Cyclops's manifests (quoted apiVersion or not) into ones the API
    server accepts, with nothing else changed."""
    page = (DOCS / CYCLOPS_PAGE).read_text()
    (command,) = [line.strip() for line in page.splitlines() if line.strip().startswith("sed -i ")]
    workdir = tmp_path / "manifests"
    workdir.mkdir()
    originals = sorted((EXAMPLES / "cyclops").glob("*.yaml"))
    for path in originals:
        shutil.copy(path, workdir / path.name)
    run("bash", "-c", f"cd {workdir} && {command}")
    for path in originals:
        before, after = (
            yaml.safe_load(path.read_text()),
            yaml.safe_load((workdir / path.name).read_text()),
        )
        assert before["apiVersion"] == "atlassian.com/v1"
        assert after == {**before, "apiVersion": "nodeops.dev/v1alpha1"}, path.name
    with simulator(tmp_path, "--nodes", "1", "--instant") as (config, _):
        crds = run(sys.executable, "-m", "nodeops.cli", "crds").stdout
        kubectl(config, "apply", "-f", "-", stdin=crds)
        out = kubectl(config, "apply", "--dry-run=server", "-f", str(workdir))
        assert out.split("\n")[:-1] == [
            "cyclenoderequest.nodeops.dev/example created (server dry run)",
            "nodegroup.nodeops.dev/system created (server dry run)",
        ], out
