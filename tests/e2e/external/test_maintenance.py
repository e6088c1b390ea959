"""The maintenance controller (`nodeops run --controllers maintenance`) takes one attached node
through operational -> maintenance-required -> in-maintenance (cordoned on the way in) ->
operational (uncordoned on the way out), each step allowed by a label the test sets. The
operator runs as the ServiceAccount holding the maintenance component's roles."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.e2e.external.attached import Attached
from tests.e2e.external.conftest import kubectl
from tests.e2e.external.operator import operator_identity, running

PREFIX = "nodeops.dev/"
CONFIG = """\
instances:
  check:
  - {type: hasLabel, name: wanted, config: {key: e2e.nodeops.dev/wanted}}
  - {type: hasLabel, name: approved, config: {key: e2e.nodeops.dev/approved}}
  trigger:
  - {type: eviction, name: cordon, config: {action: cordon}}
  - {type: eviction, name: uncordon, config: {action: uncordon}}
profiles:
- name: PROFILE
  operational:
    transitions: [{check: wanted, next: maintenance-required}]
  maintenance-required:
    transitions: [{check: approved, next: in-maintenance}]
  in-maintenance:
    enter: cordon
    transitions: [{check: "!wanted", trigger: uncordon, next: operational}]
"""


def wait_node(kubeconfig: Path, node: str, condition: str) -> None:
    done = kubectl(
        kubeconfig, "wait", f"node/{node}", f"--for=jsonpath={condition}", "--timeout=90s"
    )
    assert done.returncode == 0, f"{node} never {condition}: {done.stderr}"


def label(kubeconfig: Path, node: str, *changes: str) -> None:
    done = kubectl(kubeconfig, "label", "--overwrite", f"node/{node}", *changes)
    assert done.returncode == 0, done.stderr


def state_is(state: str) -> str:
    return f"{{.metadata.labels.nodeops\\.dev/maintenance-state}}={state}"


def test_a_node_goes_through_maintenance_and_back(
    kubeconfig: Path, namespace: str, sim_attach: Callable[..., Attached], tmp_path: Path
) -> None:
    attached = sim_attach("--nodes", "1", expect_nodes=1)
    (node,) = attached.nodes
    config = tmp_path / "maintenance.yaml"
    # A profile of the test's own: no other node of the cluster carries it.
    config.write_text(CONFIG.replace("PROFILE", attached.id))
    with operator_identity(kubeconfig, tmp_path, "maintenance", namespace) as identity:
        with running(
            identity, "--controllers", "maintenance", "--maintenance-config", str(config),
            "--maintenance-api-addr", "0",
        ) as operator:  # fmt: skip
            label(kubeconfig, node, f"{PREFIX}maintenance-profile={attached.id}")
            wait_node(kubeconfig, node, state_is("operational"))
            label(kubeconfig, node, "e2e.nodeops.dev/wanted=true")
            wait_node(kubeconfig, node, state_is("maintenance-required"))
            unschedulable = kubectl(
                kubeconfig, "get", "node", node, "-o", "jsonpath={.spec.unschedulable}"
            )
            assert unschedulable.stdout == "", "cordoned before in-maintenance"
            label(kubeconfig, node, "e2e.nodeops.dev/approved=true")
            wait_node(kubeconfig, node, state_is("in-maintenance"))
            wait_node(kubeconfig, node, "{.spec.unschedulable}=true")
            label(kubeconfig, node, "e2e.nodeops.dev/wanted-")
            wait_node(kubeconfig, node, state_is("operational"))
            # The transition's trigger ran before the state it leads to was recorded.
            unschedulable = kubectl(
                kubeconfig, "get", "node", node, "-o", "jsonpath={.spec.unschedulable}"
            )
            assert unschedulable.stdout in ("", "false"), "still cordoned after maintenance"
            operator.alive()
