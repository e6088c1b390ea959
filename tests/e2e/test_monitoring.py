"""The alert rules and dashboards in manifests/monitoring name only series a running manager
exports, with labels those series carry. A `nodeops run` with leader election is scraped over
HTTP against the simulated cluster; every PromQL expression is parsed (promql-parser) and each
selector checked against what came back."""

from __future__ import annotations

import json
import re
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

from nodeops.kube import metrics as runtime_metrics
from tests.repo import DOCS, MANIFESTS

from .conftest import free_port, nodeops, simulated_cluster, stop

MONITORING = MANIFESTS / "monitoring"
ALERT_FILES = sorted((MONITORING / "alerts").glob("*.yaml"))
DASHBOARD_FILES = sorted((MONITORING / "dashboards").glob("*.json"))
# Series Prometheus makes itself, and labels its scrape adds (a ServiceMonitor adds the last
# four, from the target's Service and pod).
PROMETHEUS_SERIES = {"up"}
TARGET_LABELS = {"job", "instance", "namespace", "pod", "service", "endpoint", "container"}
# Grafana's variables, as Grafana substitutes them before sending a query.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$job": "nodeops-metrics"}
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


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """Series name -> label names, from /metrics of a leading `nodeops run`."""
    with simulated_cluster(tmp_path_factory.mktemp("sim")) as kubeconfig:
        return series_of(_scrape_leader(kubeconfig))


def _scrape_leader(kubeconfig: Path) -> str:
    port = free_port()
    proc = nodeops(
        "run", "--kubeconfig", str(kubeconfig), "--leader-elect",
        "--leader-election-namespace", "default", "--metrics-addr", f"127.0.0.1:{port}",
        "--health-addr", "0", "--log-format", "json",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        text = ""
        while time.monotonic() < deadline:
            try:
                text = _get(f"http://127.0.0.1:{port}/metrics")
                if re.search(
                    r'^leader_election_master_status\{name="nodeops-leader"\} 1', text, re.M
                ):
                    break
            except OSError:
                pass
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.2)
        else:
            raise AssertionError(f"the manager never led; last scrape:\n{text}")
    finally:
        stop(proc)
    return text


def declared_labels() -> dict[str, tuple[str, ...]]:
    """Label names of the runtime's metrics, for families with no sample yet (no controller runs
    in a bare manager, so per-controller series do not exist)."""
    found = {}
    for value in vars(runtime_metrics).values():
        if isinstance(value, MetricWrapperBase):
            found[value._name] = tuple(value._labelnames)  # prometheus_client keeps them here
    return found


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
