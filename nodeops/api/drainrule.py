"""`NodeDrainRule`: which pods a drain evicts, in what order, and which it leaves alone.

Cluster API's MachineDrainRule with nodes in place of machines: a rule is cluster-scoped because a
node belongs to no namespace, and it selects nodes by their own labels. The matching helpers keep
CAPI's semantics (an omitted list selects everything, entries are ORed, the two selectors of a
pod entry are ANDed), so rules written for one work the same way in the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Final, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from nodeops.api.errors import FieldProblem
from nodeops.api.labelselector import LabelSelector
from nodeops.api.meta import ApiModel, Int32
from nodeops.api.resource import AGE_COLUMN, KindInfo, PrinterColumn, Resource

__all__ = [
    "MAX_SELECTOR_ENTRIES",
    "DrainBehavior",
    "NodeDrainRule",
    "NodeDrainRuleDrainConfig",
    "NodeDrainRuleNodeSelector",
    "NodeDrainRulePodSelector",
    "NodeDrainRuleSpec",
    "parse",
]

DrainBehavior = Literal["Drain", "Skip", "WaitCompleted"]

MAX_SELECTOR_ENTRIES: Final = 32
"""CAPI's bound, which also keeps the cost of matching a rule against a pod small."""


class NodeDrainRuleDrainConfig(ApiModel):
    """How the pods selected by the rule are drained."""

    model_config = ConfigDict(
        json_schema_extra={
            # The API server enforces the same rule as the model, so no webhook is needed.
            "x-kubernetes-validations": [
                {
                    "rule": "self.behavior == 'Drain' || !has(self.order)",
                    "message": "order may only be set when behavior is Drain",
                }
            ]
        }
    )

    behavior: DrainBehavior
    """Drain evicts the pods, in ascending order of `order`. Skip leaves them on the node.
    WaitCompleted does not evict them but waits until they have completed."""
    order: Int32 | None = None
    """The order in which pods are evicted: pods with a higher order are evicted only after all
    pods with a lower order are gone from the node. Pods with the same order are evicted together.
    Defaults to 0. May only be set when behavior is Drain."""

    @model_validator(mode="after")
    def _order_only_with_drain(self) -> Self:
        if self.order is not None and self.behavior != "Drain":
            raise FieldProblem("order", "may only be set when {} is Drain", "behavior")
        return self

    @property
    def effective_order(self) -> int:
        """`order` with its default applied.

        The default is not written into the object (the CRD has no `default` for it) because a
        stored `order: 0` would make every Skip or WaitCompleted rule invalid.
        """
        return 0 if self.order is None else self.order


class NodeDrainRuleNodeSelector(ApiModel):
    """Selects nodes by their labels."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    selector: LabelSelector
    """A label selector on Node labels. An empty selector selects all nodes."""

    def matches(self, node_labels: Mapping[str, str] | None) -> bool:
        return self.selector.matches(node_labels)


class NodeDrainRulePodSelector(ApiModel):
    """Selects pods by their labels and by the labels of their namespace; both must match."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    selector: LabelSelector | None = None
    """A label selector on Pod labels. If omitted, pods are not selected by their labels."""
    namespace_selector: LabelSelector | None = None
    """A label selector on the labels of the pod's Namespace. If omitted, pods in every namespace
    are selected."""

    @model_validator(mode="after")
    def _not_empty(self) -> Self:
        if self.selector is None and self.namespace_selector is None:
            raise FieldProblem(
                "", "Required value: must set at least one of selector or namespaceSelector"
            )
        return self

    def matches(
        self, pod_labels: Mapping[str, str] | None, namespace_labels: Mapping[str, str] | None
    ) -> bool:
        if self.selector is not None and not self.selector.matches(pod_labels):
            return False
        return self.namespace_selector is None or self.namespace_selector.matches(namespace_labels)


# Both lists are replaced as a whole by server-side apply: an entry is one alternative, and
# merging alternatives from two managers would select pods neither of them meant to select.
_LIST_BOUNDS = Field(
    min_length=1,
    max_length=MAX_SELECTOR_ENTRIES,
    json_schema_extra={"x-kubernetes-list-type": "atomic"},
)
NodeSelectors = Annotated[list[NodeDrainRuleNodeSelector], _LIST_BOUNDS]
PodSelectors = Annotated[list[NodeDrainRulePodSelector], _LIST_BOUNDS]


class NodeDrainRuleSpec(ApiModel):
    """The desired drain behaviour for the pods and nodes the rule selects."""

    drain: NodeDrainRuleDrainConfig
    """How the selected pods are drained."""
    nodes: NodeSelectors | None = None
    """The nodes the rule applies to: a node is selected if any entry matches it. If omitted, the
    rule applies to all nodes."""
    pods: PodSelectors | None = None
    """The pods the rule applies to: a pod is selected if any entry matches it. If omitted, the
    rule applies to all pods."""

    @model_validator(mode="after")
    def _unique_entries(self) -> Self:
        for field, entries in (("nodes", self.nodes), ("pods", self.pods)):
            duplicate = _first_duplicate(entries or ())
            if duplicate is not None:
                first, again = duplicate
                raise FieldProblem(
                    f"{field}[{again}]", "Duplicate value: same as {}", f"{field}[{first}]"
                )
        return self


def _first_duplicate(entries: Sequence[ApiModel]) -> tuple[int, int] | None:
    """Indices of the first entry repeated and of its repetition; quadratic, over 32 at most."""
    for j, entry in enumerate(entries):
        for i in range(j):
            if entries[i] == entry:
                return i, j
    return None


class NodeDrainRule(Resource):
    """NodeDrainRule sets how a drain treats the pods it selects on the nodes it selects: evict
    them in order (Drain), leave them on the node (Skip), or wait for them to complete without
    evicting them (WaitCompleted). When several rules select a pod, the first by name applies;
    the pod label nodeops.dev/drain takes precedence over every rule."""

    KIND_INFO = KindInfo(
        kind="NodeDrainRule",
        plural="nodedrainrules",
        scope="Cluster",
        short_names=("ndr",),
        printer_columns=(
            PrinterColumn("Behavior", "string", ".spec.drain.behavior"),
            PrinterColumn("Order", "integer", ".spec.drain.order"),
            AGE_COLUMN,
        ),
    )

    kind: Literal["NodeDrainRule"] = "NodeDrainRule"
    """Kind is the REST resource this object represents."""
    spec: NodeDrainRuleSpec
    """Which pods on which nodes the rule selects, and how a drain treats them."""

    @property
    def behavior(self) -> DrainBehavior:
        return self.spec.drain.behavior

    @property
    def order(self) -> int:
        """The eviction order, 0 when unset."""
        return self.spec.drain.effective_order

    def applies_to_node(self, node_labels: Mapping[str, str] | None) -> bool:
        """Whether the rule is in force on a node with these labels."""
        nodes = self.spec.nodes
        return nodes is None or any(entry.matches(node_labels) for entry in nodes)

    def applies_to_pod(
        self, pod_labels: Mapping[str, str] | None, namespace_labels: Mapping[str, str] | None
    ) -> bool:
        """Whether the rule selects a pod with these labels in a namespace with these labels."""
        pods = self.spec.pods
        return pods is None or any(entry.matches(pod_labels, namespace_labels) for entry in pods)


def parse(obj: Mapping[str, Any]) -> NodeDrainRule:
    """A NodeDrainRule from its JSON form; raises InvalidResource naming the offending field."""
    return NodeDrainRule.parse(obj)
