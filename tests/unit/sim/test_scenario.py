"""Scenario files: the examples load, and mistakes are reported by file, line and field."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from nodeops.sim import objects as gen
from nodeops.sim.scenario import ScenarioError, load_scenario, parse_scenario

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "scenarios"
KIND_ORDER = [
    "Namespace",
    "Node",
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "PodDisruptionBudget",
    "Service",
    "Pod",
]
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"}


def _by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def _error(text: str, tmp_path: Path, name: str = "bad.yaml") -> ScenarioError:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    return info.value


# --- the examples ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["small.yaml", "node-groups.yaml"])
def test_example_loads_and_yields_creatable_objects(name: str) -> None:
    scenario = load_scenario(EXAMPLES / name)
    objs = scenario.objects()
    assert objs
    ranks = [KIND_ORDER.index(o["kind"]) if o["kind"] not in WORKLOADS else 2 for o in objs]
    assert ranks == sorted(ranks), [o["kind"] for o in objs]
    for obj in objs:
        orjson.dumps(obj)
        meta = obj["metadata"]
        assert meta["name"] and obj["apiVersion"]
        assert not {"uid", "resourceVersion", "creationTimestamp"} & set(meta)
        assert ("namespace" in meta) == (obj["kind"] not in {"Namespace", "Node"})
        assert ("status" in obj) == (obj["kind"] == "Node")
    nodes = _by_kind(objs, "Node")
    assert len(nodes) == sum(g.size for g in scenario.node_groups) + len(scenario.nodes)
    assert len({n["metadata"]["name"] for n in nodes}) == len(nodes)
    assert not {"default", "kube-system"} & {
        n["metadata"]["name"] for n in _by_kind(objs, "Namespace")
    }
    pod_labels = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"]["template"]["metadata"][
            "labels"
        ]
        for o in objs
        if o["kind"] in WORKLOADS
    }
    for pdb in _by_kind(objs, "PodDisruptionBudget"):
        selector = pdb["spec"]["selector"]["matchLabels"]
        ns = pdb["metadata"]["namespace"]
        assert any(
            selector.items() <= labels.items()
            for (wns, _), labels in pod_labels.items()
            if wns == ns
        ), pdb["metadata"]["name"]


def test_small_example_is_what_it_says() -> None:
    scenario = load_scenario(EXAMPLES / "small.yaml")
    assert scenario.seed == 7 and scenario.time_scale == 60
    (group,) = scenario.node_groups
    assert (group.name, group.size, group.instance_type) == ("workers", 3, "m5.large")
    objs = scenario.objects()
    nodes = _by_kind(objs, "Node")
    assert all(n["metadata"]["labels"][gen.NODE_GROUP_LABEL] == "workers" for n in nodes)
    assert all(n["spec"]["providerID"].startswith("aws:///eu-west-1a/i-") for n in nodes)
    (deployment,) = _by_kind(objs, "Deployment")
    assert deployment["spec"]["replicas"] == 6
    assert deployment["spec"]["template"]["metadata"]["labels"]["tier"] == "frontend"
    (pdb,) = _by_kind(objs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 5
    (daemonset,) = _by_kind(objs, "DaemonSet")
    assert daemonset["spec"]["template"]["spec"]["tolerations"] == [{"operator": "Exists"}]


def test_node_groups_example_spreads_zones_and_wires_the_load_balancer() -> None:
    scenario = load_scenario(EXAMPLES / "node-groups.yaml")
    web, batch = scenario.node_groups
    assert (web.launch_version, batch.launch_version) == ("3", "7")
    assert scenario.load_balancers[0].node_groups == ["web"]
    nodes = _by_kind(scenario.objects(), "Node")
    web_zones = [
        n["metadata"]["labels"]["topology.kubernetes.io/zone"]
        for n in nodes
        if n["metadata"]["labels"].get(gen.NODE_GROUP_LABEL) == "web"
    ]
    assert sorted(web_zones) == ["eu-west-1a", "eu-west-1a", "eu-west-1b", "eu-west-1b"]
    batch_nodes = [n for n in nodes if n["metadata"]["labels"].get(gen.NODE_GROUP_LABEL) == "batch"]
    assert all(n["spec"]["taints"][0]["key"] == "dedicated" for n in batch_nodes)
    control = next(n for n in nodes if n["metadata"]["name"] == "control-plane-1")
    assert "node-role.kubernetes.io/control-plane" in control["metadata"]["labels"]


def test_objects_are_deterministic_from_the_seed() -> None:
    scenario = load_scenario(EXAMPLES / "node-groups.yaml")
    assert orjson.dumps(scenario.objects()) == orjson.dumps(scenario.objects())
    assert orjson.dumps(scenario.objects(random.Random(1))) == orjson.dumps(scenario.objects(1))
    assert orjson.dumps(scenario.objects(1)) != orjson.dumps(scenario.objects(2))


def test_bare_pods_are_created_as_given() -> None:
    scenario = parse_scenario(
        "namespaces: [jobs]\n"
        "pods:\n"
        "  - name: one-off\n"
        "    namespace: jobs\n"
        "    nodeName: node-1\n"
        "    containers: 1\n"
    )
    (pod,) = scenario.objects()[1:]
    assert pod["kind"] == "Pod" and pod["spec"]["nodeName"] == "node-1"
    assert len(pod["spec"]["containers"]) == 1
    assert "ownerReferences" not in pod["metadata"]


def test_workloads_carry_pod_affinity_and_spread_constraints_as_written() -> None:
    scenario = parse_scenario(
        "workloads:\n"
        "  - kind: Deployment\n"
        "    name: web\n"
        "    replicas: 3\n"
        "    affinity:\n"
        "      podAntiAffinity:\n"
        "        requiredDuringSchedulingIgnoredDuringExecution:\n"
        "          - labelSelector: {matchLabels: {app: web}}\n"
        "            topologyKey: kubernetes.io/hostname\n"
        "    topologySpreadConstraints:\n"
        "      - maxSkew: 1\n"
        "        topologyKey: topology.kubernetes.io/zone\n"
        "        whenUnsatisfiable: DoNotSchedule\n"
        "        labelSelector: {matchLabels: {app: web}}\n"
    )
    (deployment,) = _by_kind(scenario.objects(), "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    term = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term == [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
    ]
    assert spec["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "DoNotSchedule"


# --- errors ----------------------------------------------------------------------------------


def test_unknown_key_names_file_line_field_and_the_likely_key(tmp_path: Path) -> None:
    err = _error(
        "seed: 1\nnodeGroups:\n  - name: w\n    size: 3\n    instanceTyp: m5.large\n", tmp_path
    )
    (problem,) = err.problems
    assert (problem.line, problem.field) == (5, "nodeGroups[0].instanceTyp")
    assert "did you mean 'instanceType'" in problem.message
    assert str(err).startswith(f"{tmp_path / 'bad.yaml'}:5: nodeGroups[0].instanceTyp: unknown key")


def test_wrong_type_and_negative_size(tmp_path: Path) -> None:
    err = _error(
        "timeScale: fast\nnodeGroups:\n  - name: a\n    size: 1\n  - name: b\n    size: -2\n",
        tmp_path,
    )
    assert [(p.line, p.field) for p in err.problems] == [
        (1, "timeScale"),
        (6, "nodeGroups[1].size"),
    ]
    assert "'fast'" in err.problems[0].message
    assert "greater than or equal to 0" in err.problems[1].message


def test_missing_field_points_at_its_mapping(tmp_path: Path) -> None:
    err = _error("namespaces: [shop]\nworkloads:\n  - name: web\n    namespace: shop\n", tmp_path)
    (problem,) = err.problems
    assert (problem.line, problem.field) == (3, "workloads[0].kind")


def test_rules_between_fields_point_at_the_field(tmp_path: Path) -> None:
    err = _error(
        "workloads:\n"
        "  - kind: DaemonSet\n"
        "    name: agent\n"
        "    replicas: 3\n"
        "  - kind: Deployment\n"
        "    name: web\n"
        "    pdb:\n"
        "      minAvailable: 1\n"
        "      maxUnavailable: 10 percent\n",
        tmp_path,
    )
    assert [(p.line, p.field) for p in err.problems] == [
        (4, "workloads[0].replicas"),
        (9, "workloads[1].pdb.maxUnavailable"),
    ]


def test_references_are_checked(tmp_path: Path) -> None:
    err = _error(
        "nodeGroups:\n"
        "  - name: web\n"
        "    size: 1\n"
        "workloads:\n"
        "  - kind: Deployment\n"
        "    name: api\n"
        "    namespace: shop\n"
        "loadBalancers:\n"
        "  - name: lb\n"
        "    type: classic\n"
        "    port: 80\n"
        "    nodeGroups: [web, wbe]\n",
        tmp_path,
    )
    assert [(p.line, p.field) for p in err.problems] == [
        (7, "workloads[0].namespace"),
        (12, "loadBalancers[0].nodeGroups[1]"),
    ]
    assert "'wbe'" in err.problems[1].message


def test_duplicates_are_reported(tmp_path: Path) -> None:
    err = _error("seed: 1\nseed: 2\n", tmp_path)
    assert [(p.line, p.field) for p in err.problems] == [(2, "seed")]
    err = _error("nodeGroups:\n  - {name: a, size: 1}\n  - {name: a, size: 2}\n", tmp_path)
    assert [(p.line, p.field) for p in err.problems] == [(3, "nodeGroups[1].name")]
    assert "nodeGroups[0].name" in err.problems[0].message


def test_unusable_files(tmp_path: Path) -> None:
    err = _error("nodeGroups:\n  - name: w\n   size: 1\n", tmp_path)
    assert err.problems[0].line == 3 and "invalid YAML" in err.problems[0].message
    err = _error("- just\n- a list\n", tmp_path)
    assert "mapping" in str(err)
    err = _error("", tmp_path)
    assert "empty" in str(err)
    with pytest.raises(ScenarioError, match=r"missing\.yaml: cannot read"):
        load_scenario(tmp_path / "missing.yaml")
