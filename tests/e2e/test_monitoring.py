"""The alert rules and dashboards in manifests/monitoring name only series a running manager
exports, with labels those series carry. A `nodeops run` of every controller with leader election
is scraped over HTTP against a simulated cluster with node groups, a load balancer and a
Kubernikus node pool; every PromQL expression is parsed (promql-parser) and each selector checked
against what came back. Every family a controller or provider exports is watched by a panel."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from nodeops import controllers as controller_packages
from nodeops import drain as drain_package
from nodeops import providers as provider_packages
from nodeops.kube import metrics as runtime_metrics
from tests.repo import DOCS, MANIFESTS

from .conftest import free_port, nodeops, stop

MONITORING = MANIFESTS / "monitoring"
ALERT_FILES = sorted((MONITORING / "alerts").glob("*.yaml"))
DASHBOARD_FILES = sorted((MONITORING / "dashboards").glob("*.json"))
# Series Prometheus makes itself, and labels its scrape adds (a ServiceMonitor adds the last
# four, from the target's Service and pod).
PROMETHEUS_SERIES = {"up"}
TARGET_LABELS = {"job", "instance", "namespace", "pod", "service", "endpoint", "container"}
# Grafana's variables, as Grafana substitutes them before sending a query.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$job": "nodeops-metrics"}
# Labels of our own that a scrape renames (to exported_<name>) because the target has them too.
# Queries cannot name them as exported; the runbooks say where they went.
RENAMED_BY_THE_SCRAPE: set[tuple[str, str]] = set()
CONTROLLERS = "cycling,cycling-observer,detacher,maintenance,kubernikus,esx"
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
    "unknown": ("",),
}


def alert_rules() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.name}: {rule['alert']}", rule)
        for path in ALERT_FILES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
    ]


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", ())


def dashboard_queries() -> list[tuple[str, str]]:
    found = []
    for path in DASHBOARD_FILES:
        for panel in panels(json.loads(path.read_text())):
            for target in panel.get("targets", ()):
                expr = target["expr"]
                for variable, value in GRAFANA_VARIABLES.items():
                    expr = expr.replace(variable, value)
                found.append((f"{path.name}: {panel['title']} {target['refId']}", expr))
    return found


def queries() -> list[tuple[str, str]]:
    return [(where, rule["expr"]) for where, rule in alert_rules()] + dashboard_queries()


# ------------------------------------------------------------------------------ the scrape


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return str(resp.read().decode())


SCENARIO = """\
seed: 1
nodeGroups:
  - {name: web, size: 2, zone: eu-west-1a, bootSeconds: 1}
loadBalancers:
  - {name: web-tg, type: target-group, port: 30080, nodeGroups: [web]}
"""
MAINTENANCE = """\
instances:
  check:
  - {type: hasLabel, name: go, config: {key: go}}
profiles:
- name: p
  operational:
    transitions: [{check: go, next: maintenance-required}]
"""
KUBERNIKUS = """\
intervals:
  requeue: 2s
  podDeletion: {period: 1s, timeout: 5m}
  podEviction: {period: 1s, timeout: 5m, force: false}
cloudProviderSecret: {name: cloud-config, namespace: kube-system}
"""
REQUEST = """\
apiVersion: nodeops.dev/v1alpha1
kind: CycleNodeRequest
metadata: {name: scrape, namespace: default}
spec:
  nodeGroupName: web
  selector: {matchLabels: {workload: nothing}}
  cycleSettings: {method: Drain}
"""


def _kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        input=stdin, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def exported(scrape: str) -> dict[str, set[str]]:
    """Series name -> label names, from /metrics of a leading `nodeops run` of every controller."""
    return series_of(scrape)


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> str:
    """/metrics of a leading `nodeops run` of every controller."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    tmp = tmp_path_factory.mktemp("sim")
    (tmp / "cluster.yaml").write_text(SCENARIO)
    kubeconfig = tmp / "sim.kubeconfig"
    sim = nodeops(
        "sim", "serve", "--scenario", str(tmp / "cluster.yaml"), "--instant",
        "--kube-version", "v1.32.1", "--openstack-pool", "workers:1:v1.31.4",
        "--kubeconfig-out", str(kubeconfig),
    )  # fmt: skip
    try:
        url = _started(sim)
        crds = subprocess.run(
            [sys.executable, "-m", "nodeops.cli", "crds"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        _kubectl(kubeconfig, "apply", "-f", "-", stdin=crds)
        secret = _kubectl(
            kubeconfig, "create", "secret", "generic", "cloud-config", "-n", "kube-system",
            f"--from-file=cloudprovider.conf={kubeconfig.with_name('sim-cloudprovider.conf')}",
            "--dry-run=client", "-o", "yaml",
        )  # fmt: skip
        _kubectl(kubeconfig, "apply", "-f", "-", stdin=secret)
        (tmp / "providers.yaml").write_text(f"providers:\n  sim:\n    url: {url}\n")
        (tmp / "maintenance.yaml").write_text(MAINTENANCE)
        (tmp / "kubernikus.yaml").write_text(KUBERNIKUS)
        (tmp / "esx-credentials.yaml").write_text("username: operator\npassword: s3cret\n")
        return _scrape_leader(kubeconfig, tmp)
    finally:
        stop(sim)


def _started(sim: subprocess.Popen[str]) -> str:
    assert sim.stdout is not None
    deadline = time.monotonic() + 60
    url = ""
    while time.monotonic() < deadline:
        line = sim.stdout.readline()
        if "serving at " in line:
            url = line.rsplit("serving at ", 1)[1].strip()
        if "cloudprovider.conf written" in line:
            return url
        if sim.poll() is not None:
            raise AssertionError(f"sim serve exited: {sim.stdout.read()}")
    raise AssertionError("sim serve did not start")


def _scrape_leader(kubeconfig: Path, tmp: Path) -> str:
    """Scrape once the manager leads and a CycleNodeRequest is counted, so that the families
    computed at scrape time carry samples (and so their labels) too."""
    port = free_port()
    proc = nodeops(
        "run", "--kubeconfig", str(kubeconfig), "--leader-elect",
        "--leader-election-namespace", "default", "--metrics-addr", f"127.0.0.1:{port}",
        "--health-addr", "0", "--log-format", "json", "--controllers", CONTROLLERS,
        "--provider", "sim", "--provider-config", str(tmp / "providers.yaml"),
        "--maintenance-config", str(tmp / "maintenance.yaml"),
        "--kubernikus-config", str(tmp / "kubernikus.yaml"), "--cycling-namespace", "default",
        # A vCenter that does not answer: the esx families are exported all the same (polls
        # counted as Unreachable), without a vCenter simulator in this test.
        "--esx-vcenter-url", f"http://127.0.0.1:{free_port()}",
        "--esx-credentials-file", str(tmp / "esx-credentials.yaml"),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        text = ""
        applied = False
        while time.monotonic() < deadline:
            try:
                text = _get(f"http://127.0.0.1:{port}/metrics")
            except OSError:
                text = ""
            leads = re.search(
                r'^leader_election_master_status\{name="nodeops-leader"\} 1', text, re.M
            )
            if leads and not applied:
                _kubectl(kubeconfig, "apply", "-f", "-", stdin=REQUEST)
                applied = True
            if leads and re.search(r"^nodeops_cycling_requests\{", text, re.M):
                break
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.2)
        else:
            raise AssertionError(
                f"the manager never led or counted the request; last scrape:\n{text}"
            )
    finally:
        stop(proc)
    return text


def _import_all() -> None:
    """Import every module that may declare metrics, so their label names are known for
    families that have no sample yet (a counter of failures that never happened)."""
    for package in (controller_packages, drain_package, provider_packages):
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            importlib.import_module(module.name)


def declared_labels() -> dict[str, tuple[str, ...]]:
    """Label names of every metric in the manager's registry, by family name."""
    _import_all()
    found = {}
    for collector in list(runtime_metrics.REGISTRY._collector_to_names):  # no public listing
        if isinstance(collector, MetricWrapperBase):
            found[collector._name] = tuple(
                collector._labelnames
            )  # prometheus_client keeps them here
        elif callable(getattr(collector, "describe", None)):
            # A collector computing its families at scrape time describes them without samples.
            for family in collector.describe():
                found[family.name] = tuple(getattr(family, "_labelnames", ()))
    return found


def runtime_families() -> set[str]:
    return {v._name for v in vars(runtime_metrics).values() if isinstance(v, MetricWrapperBase)}


def series_of(text: str) -> dict[str, set[str]]:
    declared = declared_labels()
    series: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        names = [family.name + suffix for suffix in SUFFIXES[family.type]]
        labels = set(declared.get(family.name, ()))
        for sample in family.samples:
            labels |= set(sample.labels) - {"le", "quantile"}
        for name in names:
            series.setdefault(name, set()).update(labels)
        for sample in family.samples:
            series.setdefault(sample.name, set()).update(sample.labels)
        if family.type == "histogram":
            series[family.name + "_bucket"].add("le")
    return series


# ---------------------------------------------------------------------------------- checks


def selectors(expr: str) -> tuple[list[tuple[str, set[str]]], set[str]]:
    """(metric name, label names matched) per selector, and the labels named by grouping."""
    found: list[tuple[str, set[str]]] = []
    grouping: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            found.append((node.name, {m.name for m in node.matchers.matchers}))
        elif isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            grouping.update(node.modifier.labels)
        elif isinstance(node, promql_parser.BinaryExpr) and node.modifier is not None:
            if node.modifier.matching is not None:
                grouping.update(node.modifier.matching.labels)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found, grouping


@pytest.mark.parametrize(("where", "expr"), queries(), ids=[w for w, _ in queries()])
def test_every_query_names_exported_series_and_labels(
    exported: dict[str, set[str]], where: str, expr: str
) -> None:
    found, grouping = selectors(expr)
    assert found, f"{where}: selects no series"
    available = set(TARGET_LABELS)
    for name, labels in found:
        if name in PROMETHEUS_SERIES:
            continue
        assert name in exported, f"{where}: {name} is not exported by the manager"
        assert labels <= exported[name] | TARGET_LABELS, f"{where}: {name} has no {labels}"
        available |= exported[name]
    assert grouping <= available, f"{where}: grouping by {grouping - available}"


def _anchors(markdown: str) -> set[str]:
    return {
        re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", markdown, re.M)
    }


@pytest.mark.parametrize(("where", "rule"), alert_rules(), ids=[w for w, _ in alert_rules()])
def test_alerts_say_what_and_where_to_look(where: str, rule: dict[str, Any]) -> None:
    assert re.fullmatch(r"Nodeops[A-Z]\w+", rule["alert"]), where
    assert rule["labels"]["severity"] in ("critical", "warning", "info"), where
    assert rule["annotations"]["summary"], where
    doc, _, anchor = rule["annotations"]["runbook"].partition("#")
    assert anchor == rule["alert"].lower(), where
    assert anchor in _anchors((DOCS.parent / doc).read_text()), f"{where}: {doc} has no #{anchor}"


def test_every_controller_family_has_a_panel(scrape: str) -> None:
    """A family a controller or provider adds is on the dashboard: metrics nobody looks at are
    not there when a node is stuck at night."""
    runtime = runtime_families()
    selected = {name for _, expr in dashboard_queries() for name, _ in selectors(expr)[0]}
    ours = [
        family
        for family in text_string_to_metric_families(scrape)
        if family.name.startswith("nodeops_")
        and family.name not in runtime
        and not family.name.endswith("_created")
    ]
    assert {f.name for f in ours} >= {"nodeops_cycling_requests", "nodeops_provider_calls"}
    unwatched = [f.name for f in ours if not {f.name + sfx for sfx in SUFFIXES[f.type]} & selected]
    assert not unwatched, unwatched


def test_the_operations_page_lists_every_family(scrape: str) -> None:
    """Every family a running manager exports with the controllers is in docs/operations.md's
    tables, under the name Prometheus stores (counters with `_total`)."""
    page = (DOCS / "operations.md").read_text()
    missing = []
    for family in text_string_to_metric_families(scrape):
        if not family.name.startswith("nodeops_") or family.name.endswith("_created"):
            continue
        name = family.name + ("_total" if family.type == "counter" else "")
        if f"`{name}" not in page:
            missing.append(name)
    assert not missing, missing


def test_the_install_page_names_every_component() -> None:
    install = (DOCS / "install.md").read_text()
    for component in sorted(p.name for p in (MANIFESTS / "components").iterdir() if p.is_dir()):
        assert f"`components/{component}`" in install, component


def test_no_label_of_ours_is_renamed_by_the_scrape(exported: dict[str, set[str]]) -> None:
    clashes = {
        (re.sub(r"_(total|created|bucket|sum|count)$", "", name), label)
        for name, labels in exported.items()
        for label in labels & TARGET_LABELS
    }
    assert clashes <= RENAMED_BY_THE_SCRAPE, sorted(clashes - RENAMED_BY_THE_SCRAPE)


def test_dashboards_are_consistent() -> None:
    uids = []
    for path in DASHBOARD_FILES:
        dashboard = json.loads(path.read_text())
        uids.append(dashboard["uid"])
        ids = [p["id"] for p in panels(dashboard)]
        assert len(ids) == len(set(ids)), path.name
        variables = {v["name"] for v in dashboard["templating"]["list"]}
        assert {"datasource", "job"} <= variables
        for panel in panels(dashboard):
            for target in panel.get("targets", ()):
                assert target["datasource"]["uid"] == "${datasource}", panel["title"]
                assert 'job="$job"' in target["expr"], panel["title"]
    assert len(uids) == len(set(uids))


def test_the_monitoring_component_ships_every_file() -> None:
    kustomization = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    shipped = {f for gen in kustomization["configMapGenerator"] for f in gen["files"]}
    on_disk = {str(p.relative_to(MONITORING)) for p in [*ALERT_FILES, *DASHBOARD_FILES]}
    assert shipped == on_disk


def test_the_checker_notices_unknown_series() -> None:
    found, grouping = selectors('sum by (controller) (rate(nope_total{job="x", foo="y"}[5m]))')
    assert found == [("nope_total", {"job", "foo"})] and grouping == {"controller"}
    with pytest.raises(ValueError):
        promql_parser.parse("sum(rate(a[5m]) by")
