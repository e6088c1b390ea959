"""CycleNodeRequest, CycleNodeStatus and NodeGroup: Cyclops manifests parse; mistakes name the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from nodeops.api import CycleNodeRequest, CycleNodeStatus, InvalidResource, NodeGroup, crd_for
from nodeops.api.cycling import Budget, TemplateError, check_template
from nodeops.api.duration import format_duration, parse_duration
from nodeops.sim.server.schema import prune, validate

# The example of Cyclops's documentation, with the real field names and the apiVersion changed.
CYCLOPS_CNR = """
apiVersion: "nodeops.dev/v1alpha1"
kind: "CycleNodeRequest"
metadata:
  name: "example"
  labels:
    name: "example"
spec:
  nodeGroupName: "nodes.my-site.com"
  nodeGroupsList:
    - nodeGroupA
    - nodeGroupB
  selector:
    matchLabels:
      labelKeyA: valueA
  nodeNames:
    - "node-name-A"
  validationOptions:
    skipMissingNamedNodes: true
  cycleSettings:
    method: "Wait"
    concurrency: 5
    cyclingTimeout: 10h2m1s
    labelsToRemove:
      - app
    ignorePodsLabels:
      labelName:
        - "value1"
        - "value2"
    ignoreNamespaces:
      - "kube-system"
  healthChecks:
    - endpoint: "http://{{ .NodeIP }}:8080/ready"
      waitPeriod: 5m
      validStatusCodes: [200, 204]
      regexMatch: "^ok$"
      tls:
        rootCA: ROOT_CA
        crt: CLIENT_CRT
        key: CLIENT_KEY
  preTerminationChecks:
    - triggerEndpoint: "http://{{ .NodeIP }}:8080/drain"
      validStatusCodes: [202]
      healthCheck:
        endpoint: "http://{{ .NodeIP }}:8080/drained"
        waitPeriod: 1m
  skipInitialHealthChecks: true
  skipPreTerminationChecks: false
"""

CYCLOPS_NODEGROUP = """
apiVersion: nodeops.dev/v1alpha1
kind: NodeGroup
metadata:
  name: system
spec:
  nodeGroupName: system.my-site.com
  nodeSelector:
    matchLabels:
      role: system
  cycleSettings:
    method: Drain
    concurrency: 1
  maxFailedCycleNodeRequests: 2
  priority: -1
"""


def cnr() -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load(CYCLOPS_CNR)
    return obj


def test_a_cyclops_manifest_parses_unchanged() -> None:
    request = CycleNodeRequest.parse_spec(cnr())
    spec = request.spec
    assert spec.node_groups == ["nodes.my-site.com", "nodeGroupA", "nodeGroupB"]
    assert spec.cycle_settings.method == "Wait"
    assert spec.cycle_settings.concurrency == 5
    assert spec.cycle_settings.timeout_seconds == 10 * 3600 + 2 * 60 + 1
    assert spec.cycle_settings.ignore_pods_labels == {"labelName": ["value1", "value2"]}
    assert spec.validation_options is not None and spec.validation_options.skip_missing_named_nodes
    (check,) = spec.health_checks or []
    assert check.valid_status_codes == [200, 204]
    assert check.wait_seconds == 300
    assert check.tls is not None and (check.tls.root_ca, check.tls.crt) == ("ROOT_CA", "CLIENT_CRT")
    (pre,) = spec.pre_termination_checks or []
    assert pre.health_check.valid_status_codes == [200]  # Cyclops's default
    assert spec.skip_initial_health_checks
    # nodeops' additions have defaults that keep Cyclops's behaviour or improve on it.
    assert spec.cycle_settings.pending_node_taint == "PreferNoSchedule"
    assert spec.provider is None and spec.budgets is None


def test_a_cyclops_nodegroup_parses() -> None:
    group = NodeGroup.parse_spec(yaml.safe_load(CYCLOPS_NODEGROUP))
    assert group.spec.node_groups == ["system.my-site.com"]
    assert (group.spec.priority, group.spec.max_failed_cycle_node_requests) == (-1, 2)


def test_the_server_keeps_every_field_of_a_cyclops_manifest() -> None:
    obj = cnr()
    schema = crd_for(CycleNodeRequest)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    stored = prune(copy.deepcopy(obj), schema, top=True)
    assert stored == obj
    assert validate({"spec": stored["spec"]}, schema) == []


def _invalid(obj: dict[str, Any]) -> str:
    with pytest.raises(InvalidResource) as info:
        CycleNodeRequest.parse_spec(obj)
    return str(info.value)


def _with(path: str, value: Any) -> dict[str, Any]:
    obj = cnr()
    *parents, last = path.split(".")
    node = obj
    for key in parents:
        node = node[key]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return obj


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            "spec.cycleSettings.method",
            "Evict",
            'spec.cycleSettings.method: Unsupported value: "Evict": supported values: '
            '"Drain", "Wait"',
        ),
        ("spec.selector", {}, "spec.selector: Required value: must select nodes"),
        (
            "spec.nodeGroupName",
            "",
            None,  # nodeGroupsList still names groups: valid
        ),
        (
            "spec.cycleSettings.cyclingTimeout",
            "ten minutes",
            "spec.cycleSettings.cyclingTimeout: Invalid value",
        ),
        ("spec.cycleSettings.concurrency", "5", "spec.cycleSettings.concurrency: Invalid value"),
        ("spec.cycleSettings", _DELETE, "spec.cycleSettings: Required value"),
        ("spec.budgets", [{"nodes": "150%"}], "spec.budgets[0].nodes: Invalid value"),
        (
            "spec.budgets",
            [{"nodes": 1, "schedule": "0 9 * * 1-5"}],
            "spec.budgets[0].duration: Required value",
        ),
        (
            "spec.budgets",
            [{"nodes": 0, "schedule": "every day", "duration": "8h"}],
            "spec.budgets[0].schedule: Invalid value: 'every day': not a cron schedule",
        ),
        ("metadata.name", "Example_1", "metadata.name: Invalid value: 'Example_1': a DNS-1035"),
        ("spec.unknown", 1, "spec.unknown: unknown field"),
    ],
)
def test_mistakes_name_the_field(path: str, value: Any, message: str | None) -> None:
    obj = _with(path, value)
    if message is None:
        CycleNodeRequest.parse_spec(obj)
    else:
        assert _invalid(obj).startswith(message)


def test_a_request_without_any_node_group_is_refused() -> None:
    obj = _with("spec.nodeGroupName", "")
    del obj["spec"]["nodeGroupsList"]
    assert _invalid(obj) == (
        "spec.nodeGroupName: Required value: name a node group here or in spec.nodeGroupsList"
    )


def test_check_mistakes_name_the_field() -> None:
    obj = cnr()
    obj["spec"]["healthChecks"][0]["endpoint"] = "http://{{ .Node.IP }}/"
    assert _invalid(obj).startswith("spec.healthChecks[0].endpoint: Invalid value")
    obj = cnr()
    obj["spec"]["healthChecks"][0]["regexMatch"] = "(unclosed"
    assert _invalid(obj).startswith("spec.healthChecks[0].regexMatch: Invalid value")
    obj = cnr()
    del obj["spec"]["healthChecks"][0]["tls"]["key"]
    assert _invalid(obj) == "spec.healthChecks[0].tls.key: Required value: crt and key go together"
    obj = cnr()
    obj["spec"]["healthChecks"][0]["tls"] = {"secretRef": {"name": "s"}, "rootCA": "X"}
    assert _invalid(obj).startswith("spec.healthChecks[0].tls.secretRef: Forbidden")
    obj = cnr()
    obj["spec"]["preTerminationChecks"][0]["validStatusCodes"] = [99]
    assert _invalid(obj).startswith("spec.preTerminationChecks[0].validStatusCodes[0]: Invalid")


def test_templates() -> None:
    check_template('http://{{ .NodeIP }}:1/{{.NodeName}}?z={{ index .Labels "a/b" }}')
    check_template("http://{{ .Labels.zone }}/")
    with pytest.raises(TemplateError):
        check_template("http://{{ printf .NodeIP }}/")
    with pytest.raises(TemplateError, match="unclosed"):
        check_template("http://{{ .NodeIP /")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0), ("90s", 90), ("1h30m", 5400), ("10h2m1s", 36121), ("1.5h", 5400), ("300ms", 0.3)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10", "1d", "h", "1h 30m", "--1s"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_format_duration() -> None:
    assert [format_duration(s) for s in (0, 45, 61, 3600, 36121)] == [
        "0s",
        "45s",
        "1m1s",
        "1h0m0s",
        "10h2m1s",
    ]


@pytest.mark.parametrize(
    ("nodes", "size", "limit"), [(3, 10, 3), ("10%", 10, 1), ("10%", 11, 2), ("0%", 10, 0)]
)
def test_budget_limits(nodes: int | str, size: int, limit: int) -> None:
    assert Budget(nodes=nodes).limit(size) == limit


def test_cns_parses() -> None:
    cns = CycleNodeStatus.parse_spec(
        {
            "apiVersion": "nodeops.dev/v1alpha1",
            "kind": "CycleNodeStatus",
            "metadata": {"name": "example-node-a"},
            "spec": {"nodeName": "node-a", "cycleSettings": {"method": "Drain"}},
            "status": {"phase": "Pending"},
        }
    )
    assert cns.spec.node_name == "node-a"
