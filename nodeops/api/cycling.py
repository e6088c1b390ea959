"""What CycleNodeRequest, CycleNodeStatus and NodeGroup share: cycle settings, checks, budgets.

Field names and meanings are Cyclops's (`cycleSettings`, `healthChecks`, `preTerminationChecks`,
`validationOptions`), so a Cyclops manifest works after changing its apiVersion. What nodeops
adds is additive and optional: TLS material from a Secret, a drain deadline, the taint that keeps
evicted pods off nodes about to be replaced, the capacity check before a batch, and disruption
budgets in Karpenter's shape.
"""

from __future__ import annotations

import re
from typing import Annotated, Final, Literal, Self

from croniter import croniter
from pydantic import ConfigDict, Field, field_validator, model_validator

from nodeops.api.duration import Duration, parse_duration
from nodeops.api.errors import FieldProblem
from nodeops.api.meta import ApiModel, NonNegativeInt64

__all__ = [
    "CNR_PHASES",
    "CNS_PHASES",
    "TERMINAL_PHASES",
    "Budget",
    "Budgets",
    "CycleNodeRequestNode",
    "CycleNodeRequestPhase",
    "CycleNodeStatusPhase",
    "CycleSettings",
    "DrainDeadlineAction",
    "HealthCheck",
    "Method",
    "PendingNodeTaint",
    "PreTerminationCheck",
    "SecretReference",
    "TLSConfig",
    "TemplateError",
    "ValidationOptions",
    "check_template",
]

Method = Literal["Drain", "Wait"]
PendingNodeTaint = Literal["Off", "PreferNoSchedule", "NoSchedule"]
DrainDeadlineAction = Literal["Force", "Fail"]

CycleNodeRequestPhase = Literal[
    "",
    "Pending",
    "Initialised",
    "ScalingUp",
    "CordoningNode",
    "WaitingTermination",
    "Successful",
    "Healing",
    "Failed",
]
CycleNodeStatusPhase = Literal[
    "",
    "Pending",
    "WaitingPods",
    "RemovingLabelsFromPods",
    "DrainingPods",
    "DeletingNode",
    "TerminatingNode",
    "Successful",
    "Failed",
]
CNR_PHASES: Final[tuple[str, ...]] = (
    "Pending",
    "Initialised",
    "ScalingUp",
    "CordoningNode",
    "WaitingTermination",
    "Successful",
    "Healing",
    "Failed",
)
CNS_PHASES: Final[tuple[str, ...]] = (
    "Pending",
    "WaitingPods",
    "RemovingLabelsFromPods",
    "DrainingPods",
    "DeletingNode",
    "TerminatingNode",
    "Successful",
    "Failed",
)
TERMINAL_PHASES: Final = frozenset({"Successful", "Failed"})


# --- templates -------------------------------------------------------------------------------


class TemplateError(ValueError):
    """An endpoint template that names something the node does not have."""


_ACTION: Final = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}")
_FIELD: Final = re.compile(r"^\.(NodeIP|NodeName|ProviderID|InstanceID|NodeGroupName)$")
_LABEL: Final = re.compile(r'^(?:index\s+\.Labels\s+"([^"]+)"|\.Labels\.([A-Za-z0-9_]+))$')


def check_template(text: str) -> None:
    """Refuse endpoint templates that could never render.

    The endpoints are Go templates in Cyclops (`{{ .NodeIP }}`); nodeops renders the same
    actions, plus the node's name, provider ID, instance ID, node group and labels
    (`{{ index .Labels "topology.kubernetes.io/zone" }}`), and nothing else: a template that is
    a program has no place in a URL.
    """
    for match in _ACTION.finditer(text):
        action = match.group(1)
        if not (_FIELD.match(action) or _LABEL.match(action)):
            raise TemplateError(
                f"unsupported template action {{{{ {action} }}}}: use .NodeIP, .NodeName, "
                '.ProviderID, .InstanceID, .NodeGroupName or index .Labels "<key>"'
            )
    if "{{" in _ACTION.sub("", text):
        raise TemplateError("unclosed template action")


def _regex_problem(value: str) -> str | None:
    try:
        re.compile(value)
    except re.error as e:
        return f"Invalid value: {value!r}: not a regular expression: {e}"
    return None


# --- checks ----------------------------------------------------------------------------------


class SecretReference(ApiModel):
    """A Secret holding PEM material for TLS, with the keys of its parts."""

    name: Annotated[str, Field(min_length=1, max_length=253)]
    """Name of the Secret."""
    namespace: str | None = None
    """Namespace of the Secret; defaults to the namespace of the CycleNodeRequest (for a
    NodeGroup, the operator's namespace)."""
    ca_key: str = "ca.crt"
    """Key of the PEM CA bundle that verifies the server."""
    cert_key: str = "tls.crt"
    """Key of the client certificate for mTLS."""
    key_key: str = "tls.key"
    """Key of the client certificate's private key for mTLS."""


class TLSConfig(ApiModel):
    """TLS for a check: the CA that verifies the server, and a client certificate for mTLS.

    Either name environment variables of the operator that hold the PEM (`rootCA`, `crt`, `key`,
    as Cyclops does), or a Secret (`secretRef`). Valid combinations: nothing (the system's
    CAs), a CA only, or a CA with a certificate and key.
    """

    root_ca: str | None = Field(default=None, alias="rootCA")
    """Name of an environment variable of the operator holding the PEM CA bundle (Cyclops)."""
    crt: str | None = None
    """Name of an environment variable holding the client certificate PEM (Cyclops)."""
    key: str | None = None
    """Name of an environment variable holding the client key PEM (Cyclops)."""
    secret_ref: SecretReference | None = None
    """A Secret with `ca.crt`, and for mTLS `tls.crt` and `tls.key` (keys configurable)."""

    @model_validator(mode="after")
    def _combination(self) -> Self:
        env = (self.root_ca, self.crt, self.key)
        if self.secret_ref is not None and any(env):
            raise FieldProblem("secretRef", "Forbidden: set secretRef or rootCA/crt/key, not both")
        if (self.crt is None) != (self.key is None):
            missing = "key" if self.key is None else "crt"
            raise FieldProblem(missing, "Required value: crt and key go together")
        if self.crt is not None and self.root_ca is None:
            raise FieldProblem("rootCA", "Required value: mTLS needs the CA as well")
        return self

    @property
    def configured(self) -> bool:
        return self.secret_ref is not None or self.root_ca is not None


StatusCodes = Annotated[
    list[Annotated[int, Field(ge=100, le=599)]],
    Field(min_length=1, json_schema_extra={"x-kubernetes-list-type": "atomic"}),
]


def _checked_template(value: str) -> str:
    """An endpoint template that renders for every node, or the field's problem."""
    try:
        check_template(value)
    except TemplateError as e:
        raise FieldProblem("", f"Invalid value: {value!r}: {e}") from None
    return value


class HealthCheck(ApiModel):
    """An HTTP(S) GET that must pass on a node within `waitPeriod`."""

    endpoint: Annotated[str, Field(min_length=1)]
    """URL to GET. A template: `{{ .NodeIP }}` is the node's InternalIP; `.NodeName`,
    `.ProviderID`, `.InstanceID`, `.NodeGroupName` and `index .Labels "<key>"` are also known."""
    wait_period: Duration
    """How long the check may keep failing, from the time the node was first seen Ready (or the
    pre-termination trigger was sent), before the CycleNodeRequest fails."""
    valid_status_codes: StatusCodes = Field(default_factory=lambda: [200])
    """Status codes that mean healthy. Defaults to [200]."""
    regex_match: str | None = None
    """A regular expression the response body must match; no body check when unset."""
    tls: TLSConfig | None = None
    """TLS settings for https:// endpoints."""

    @field_validator("endpoint")
    @classmethod
    def _template(cls, value: str) -> str:
        return _checked_template(value)

    @field_validator("regex_match")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        problem = None if value is None else _regex_problem(value)
        if problem:
            raise FieldProblem("", problem)
        return value

    @property
    def wait_seconds(self) -> float:
        return parse_duration(self.wait_period)


class PreTerminationCheck(ApiModel):
    """An HTTP(S) POST sent once to a node before it is drained, then a health check polled
    until the node says it has finished what the trigger started (an "HTTP SIGTERM")."""

    trigger_endpoint: Annotated[str, Field(min_length=1)]
    """URL to POST once per node; a template like a health check's endpoint."""
    valid_status_codes: StatusCodes = Field(default_factory=lambda: [200])
    """Status codes of the trigger that mean it was accepted. Defaults to [200]."""
    health_check: HealthCheck
    """The check polled after the trigger; its waitPeriod counts from the trigger."""
    tls: TLSConfig | None = None
    """TLS settings for the trigger."""

    @field_validator("trigger_endpoint")
    @classmethod
    def _template(cls, value: str) -> str:
        return _checked_template(value)


# --- settings --------------------------------------------------------------------------------


class CycleSettings(ApiModel):
    """How the nodes are cycled."""

    model_config = ConfigDict(
        json_schema_extra={
            # The API server refuses what the model refuses, so the CLI, the observer, the
            # controller and kubectl agree on it.
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.cyclingTimeout) || self.cyclingTimeout >= duration('0s')",
                    "message": "must not be negative",
                    "fieldPath": ".cyclingTimeout",
                }
            ]
        }
    )

    method: Method = "Drain"
    """Drain evicts the node's pods (drain rules, order and PodDisruptionBudgets respected).
    Wait first waits for pods annotated nodeops.dev/do-not-disrupt=true (also
    cyclops.atlassian.com/do-not-disrupt=true and karpenter.sh/do-not-disrupt, whose value may
    be a duration after the pod's start) to finish, then drains the rest."""
    concurrency: NonNegativeInt64 = 0
    """How many nodes a request works on at once; 0: every selected node at once. On a
    NodeGroup, 0 switches cycling off (`nodeops cycle` and the observer make no request from
    it unless `--concurrency` overrides it)."""
    labels_to_remove: list[str] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-list-type": "atomic"}
    )
    """Label keys removed from every pod on the node before draining it, so Services stop
    sending it traffic before the pod is asked to stop."""
    ignore_pods_labels: dict[str, list[str]] | None = None
    """Wait only: pods with any of these label values are not waited for."""
    ignore_namespaces: list[str] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-list-type": "atomic"}
    )
    """Wait only: pods in these namespaces are not waited for."""
    cycling_timeout: Duration | None = None
    """How long one node may take from the start of its CycleNodeStatus; the manager's
    default (3h) when unset or 0. Must not be negative."""
    drain_deadline: Duration | None = None
    """How long draining one node may take before `onDrainDeadline` applies; no deadline when
    unset."""
    on_drain_deadline: DrainDeadlineAction = "Fail"
    """Past the drain deadline: Force deletes the remaining pods without asking their
    PodDisruptionBudgets; Fail fails the node's CycleNodeStatus (and the request heals)."""
    pending_node_taint: PendingNodeTaint = "PreferNoSchedule"
    """Taint put on the selected nodes at the start, so evicted pods land on new nodes rather
    than on nodes that are replaced next (each pod moves once). Off disables it."""
    wait_for_capacity: bool = True
    """Before draining a batch, check that its pods fit on the ready nodes (requests, taints,
    node selectors) and wait for the new nodes rather than leave pods Pending."""

    @field_validator("cycling_timeout")
    @classmethod
    def _timeout(cls, value: str | None) -> str | None:
        if value is not None and parse_duration(value) < 0:
            raise FieldProblem("", f"Invalid value: {value!r}: must not be negative")
        return value

    def concurrency_for(self, selected: int) -> int:
        """The most nodes a request works on at once, given how many it selected: its
        concurrency, where 0 means every selected node (Cyclops's meaning); at least 1."""
        return max(1, selected) if self.concurrency == 0 else self.concurrency

    @field_validator("labels_to_remove")
    @classmethod
    def _keys(cls, value: list[str] | None) -> list[str] | None:
        for i, key in enumerate(value or ()):
            if not key:
                raise FieldProblem(f"[{i}]", "Required value: a label key")
        return value

    @property
    def timeout_seconds(self) -> float | None:
        if self.cycling_timeout is None:
            return None
        seconds = parse_duration(self.cycling_timeout)
        return seconds if seconds > 0 else None

    @property
    def drain_deadline_seconds(self) -> float | None:
        if self.drain_deadline is None:
            return None
        seconds = parse_duration(self.drain_deadline)
        return seconds if seconds > 0 else None


class ValidationOptions(ApiModel):
    """How strictly the selected nodes are checked before cycling."""

    skip_missing_named_nodes: bool = False
    """Skip names in nodeNames that are not among the selected nodes of the node groups,
    instead of failing the request."""


_BUDGET_NODES: Final = re.compile(r"^((100|[0-9]{1,2})%|[0-9]+)$")


class Budget(ApiModel):
    """At most `nodes` nodes (a number or a percentage of the node groups' size) being replaced
    at once across every CycleNodeRequest of the cluster; with a `schedule`, only inside the
    windows it opens, each `duration` long. Karpenter's disruption budget, for node groups."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.schedule) == has(self.duration)",
                    "message": "schedule and duration go together",
                }
            ]
        }
    )

    nodes: int | str
    """How many nodes may be in replacement at once: an integer, or a percentage like "10%" of
    the desired size of the node groups. 0 stops new replacements."""
    schedule: str | None = None
    """A cron schedule (UTC, 5 fields or @daily, @hourly ...) when the budget's window opens."""
    duration: Duration | None = None
    """How long each window stays open."""

    @field_validator("nodes", mode="before")
    @classmethod
    def _nodes(cls, value: object) -> object:
        if isinstance(value, bool):
            raise FieldProblem("", f"Invalid value: {value!r}: must be an integer or a percentage")
        if isinstance(value, int):
            if value < 0:
                raise FieldProblem("", f"Invalid value: {value}: must not be negative")
            return value
        if isinstance(value, str) and _BUDGET_NODES.match(value):
            return value
        raise FieldProblem(
            "", f'Invalid value: {value!r}: must be an integer or a percentage like "10%"'
        )

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not croniter.is_valid(value):
            raise FieldProblem("", f"Invalid value: {value!r}: not a cron schedule")
        return value

    @model_validator(mode="after")
    def _window(self) -> Self:
        if (self.schedule is None) != (self.duration is None):
            missing = "duration" if self.duration is None else "schedule"
            raise FieldProblem(missing, "Required value: schedule and duration go together")
        return self

    def limit(self, size: int) -> int:
        """The number of nodes this budget allows for node groups of `size` nodes."""
        if isinstance(self.nodes, int):
            return self.nodes
        if self.nodes.endswith("%"):
            # Rounded up, as Karpenter does, so "10%" of a small group still allows one node.
            percent = int(self.nodes[:-1])
            return -(-size * percent // 100)
        return int(self.nodes)


Budgets = Annotated[
    list[Budget],
    Field(max_length=50, json_schema_extra={"x-kubernetes-list-type": "atomic"}),
]


class CycleNodeRequestNode(ApiModel):
    """A node the request works on, with what is needed to act on it after it is gone."""

    name: str
    """Name of the node."""
    provider_id: str = Field(alias="providerId")
    """The node's spec.providerID."""
    node_group_name: str
    """The cloud node group the node's instance belongs to (and is re-attached to on healing)."""
    private_ip: str | None = Field(default=None, alias="privateIp")
    """The node's InternalIP."""
