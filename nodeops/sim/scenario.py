"""Scenario files: a YAML description of a simulated cluster, validated into a model.

A scenario says which node groups (auto-scaling groups of the simulated cloud) and standalone
nodes exist, which namespaces, workloads, disruption budgets, bare pods and load balancers, and
turns that into the Kubernetes objects to create. Pods of workloads are not among them: the
simulated controllers make those, as in a real cluster.

People write these files by hand, so every mistake is reported with the file, the line and the
field it concerns (`small.yaml:12: nodeGroups[0].size: ...`); YAML is composed into nodes first to
keep line numbers, and validation errors are mapped back onto them.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from nodeops.common.unknownkeys import Loc, unknown_key_message
from nodeops.common.yamlfile import (
    ConfigFileError,
    ConfigProblem,
    Marked,
    load_yaml,
    read_config_text,
    render_path,
)
from nodeops.sim import objects as gen
from nodeops.sim.objects import DEFAULT_NOW, INSTANCE_TYPES, Obj, TimeLike

# Namespaces every cluster has; the API server makes them, so a scenario never creates them.
BUILTIN_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})


# --- errors ----------------------------------------------------------------------------------


Problem = ConfigProblem
"""One mistake in a scenario: where it is (1-based line, dotted field path) and what."""


class ScenarioError(ConfigFileError):
    """A scenario that cannot be used, with every problem found, one `file:line: field: msg` each."""


# --- field types -----------------------------------------------------------------------------

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_PERCENT = re.compile(r"^[0-9]+%$")
_KUBE_VERSION = re.compile(r"^v[0-9]+\.[0-9]+\.[0-9]+$")


def _dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 label: at most 63 characters of lowercase letters, "
            "digits and '-', starting and ending with a letter or digit"
        )
    return value


def _dns_subdomain(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit"
        )
    return value


def _qualified_name_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"the prefix of {key!r} must be a DNS subdomain"
    if len(name) > 63 or not _QUALIFIED_PART.match(name):
        return (
            f"{key!r} is not a valid key: a name of at most 63 alphanumerics, '-', '_' or '.', "
            "with an optional DNS-subdomain prefix and '/'"
        )
    return None


def _labels(value: dict[str, str]) -> dict[str, str]:
    for key, val in value.items():
        problem = _qualified_name_problem(key)
        if problem:
            raise ValueError(problem)
        if val and (len(val) > 63 or not _QUALIFIED_PART.match(val)):
            raise ValueError(
                f"label {key!r} has invalid value {val!r}: at most 63 alphanumerics, '-', '_' or "
                "'.', starting and ending with an alphanumeric"
            )
    return value


def _annotations(value: dict[str, str]) -> dict[str, str]:
    for key in value:
        problem = _qualified_name_problem(key)
        if problem:
            raise ValueError(problem)
    return value


def _int_or_percent(value: object) -> int | str:
    """Validated by hand so a wrong value gets one clear message rather than one per type."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and _PERCENT.match(value) and int(value[:-1]) <= 100:
        return value
    raise ValueError(f'must be an integer >= 0 or a percentage like "10%", not {value!r}')


def _version_string(value: object) -> str:
    """`launchVersion: 3` is as natural to write as `"3"`; both mean the same version."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value:
        return value
    raise ValueError(f"must be a non-empty string or an integer, not {value!r}")


def _kube_version(value: str) -> str:
    if not _KUBE_VERSION.match(value):
        raise ValueError(f'{value!r} is not a Kubernetes version like "v1.31.4"')
    return value


def _instance_type(value: str) -> str:
    if value not in INSTANCE_TYPES:
        raise ValueError(f"unknown instance type {value!r}; known: {', '.join(INSTANCE_TYPES)}")
    return value


def _zone(value: str) -> str:
    if not re.match(r"^[a-z]{2}(-[a-z]+)+-[0-9]+[a-z]$", value):
        raise ValueError(f'{value!r} is not an availability zone like "eu-west-1a"')
    return value


DnsLabel = Annotated[str, AfterValidator(_dns_label)]
DnsSubdomain = Annotated[str, AfterValidator(_dns_subdomain)]
Labels = Annotated[dict[str, str], AfterValidator(_labels)]
Annotations = Annotated[dict[str, str], AfterValidator(_annotations)]
IntOrPercent = Annotated[int | str, PlainValidator(_int_or_percent)]
VersionString = Annotated[str, PlainValidator(_version_string)]
KubeVersion = Annotated[str, AfterValidator(_kube_version)]
InstanceType = Annotated[str, AfterValidator(_instance_type)]
Zone = Annotated[str, AfterValidator(_zone)]


class _Model(BaseModel):
    """Scenario keys are camelCase like Kubernetes'; unknown keys are mistakes, not extensions."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        strict=True,
        frozen=True,
    )


# --- pieces of pod specs ---------------------------------------------------------------------


class Taint(_Model):
    key: str = Field(min_length=1)
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

    def as_dict(self) -> Obj:
        return self.model_dump(by_alias=True, exclude_none=True)


class Toleration(_Model):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists takes no value")
        if self.operator == "Equal" and not self.key:
            raise ValueError("a toleration with operator Equal needs a key")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds only applies to effect NoExecute")
        return self

    def as_dict(self) -> Obj:
        return self.model_dump(by_alias=True, exclude_none=True)


class Budget(_Model):
    """A disruption budget: exactly one of the two limits, as the PDB API requires."""

    min_available: IntOrPercent | None = None
    max_unavailable: IntOrPercent | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Budget:
        if (self.min_available is None) == (self.max_unavailable is None):
            raise ValueError("set exactly one of minAvailable and maxUnavailable")
        return self


class Pdb(Budget):
    """A free-standing PodDisruptionBudget selecting pods by label."""

    name: DnsSubdomain
    namespace: DnsLabel = "default"
    selector: Labels = Field(min_length=1)


# --- cluster shape ---------------------------------------------------------------------------


class _NodeShape(_Model):
    instance_type: InstanceType = gen.DEFAULT_INSTANCE_TYPE
    labels: Labels = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    kubelet_version: KubeVersion = gen.DEFAULT_KUBELET_VERSION


class NodeGroup(_NodeShape):
    """An auto-scaling group: `size` instances of one launch template spread over its zones."""

    name: DnsLabel
    size: int = Field(ge=0)
    zone: Zone | None = None
    zones: list[Zone] | None = Field(default=None, min_length=1)
    launch_version: VersionString = "1"
    boot_seconds: float = Field(default=60.0, ge=0)
    # After its Node registers, how long the cloud keeps an instance pending before it is in
    # service: an AWS lifecycle hook that waits for the node, say. The cluster is then ahead of
    # the cloud, which a controller only learns by asking the cloud.
    in_service_seconds: float = Field(default=0.0, ge=0)

    @field_validator("zones")
    @classmethod
    def _zones(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if value is None:
            return value
        if info.data.get("zone") is not None:
            raise ValueError("set zone or zones, not both")
        if len(set(value)) != len(value):
            raise ValueError("zones must not repeat")
        if len({gen.region_of(z) for z in value}) > 1:
            raise ValueError("all zones of a group must be in one region")
        return value

    @property
    def zone_list(self) -> list[str]:
        if self.zones is not None:
            return list(self.zones)
        return [self.zone or gen.DEFAULT_ZONE]

    def make_node(
        self,
        *,
        zone: str | None = None,
        ip: str | None = None,
        provider_id: str | None = None,
        rng: random.Random,
        now: TimeLike = DEFAULT_NOW,
    ) -> Obj:
        """A node of this group as it registers once its instance has booted.

        Its name is the EC2 private DNS name of `ip`, drawn from the zone's address block when
        not given; callers that make many nodes pass `ip` to rule out collisions.
        """
        zone = zone or self.zone_list[0]
        ip = ip or _zone_ip(zone, rng)
        return gen.make_node(
            gen.aws_node_name(ip, zone),
            group=self.name,
            zone=zone,
            instance_type=self.instance_type,
            provider_id=provider_id,
            labels=self.labels,
            taints=[t.as_dict() for t in self.taints],
            kubelet_version=self.kubelet_version,
            internal_ip=ip,
            rng=rng,
            now=now,
        )


class Node(_NodeShape):
    """A node outside any group, such as a control-plane node."""

    name: DnsSubdomain
    zone: Zone = gen.DEFAULT_ZONE
    roles: list[DnsLabel] = Field(default_factory=list)
    ready: bool = True
    unschedulable: bool = False
    provider_id: str | None = Field(default=None, alias="providerID")


# --- what runs on it -------------------------------------------------------------------------


class _PodShape(_Model):
    namespace: DnsLabel = "default"
    labels: Labels = Field(default_factory=dict)
    annotations: Annotations = Field(default_factory=dict)
    containers: int = Field(default=2, ge=1, le=10)
    termination_grace_period_seconds: int = Field(default=30, ge=0)
    tolerations: list[Toleration] = Field(default_factory=list)
    node_selector: Labels = Field(default_factory=dict)
    affinity: dict[str, Any] | None = None
    """The pod's `affinity` as Kubernetes spells it (node, pod and anti-affinity)."""
    topology_spread_constraints: list[dict[str, Any]] = Field(default_factory=list)

    def template(self, app: str) -> Obj:
        """The pod template; scenario annotations come on top of the usual ones."""
        return gen.make_pod_template(
            app=app,
            team=self.namespace,
            labels=self.labels,
            annotations={**gen.DEFAULT_POD_ANNOTATIONS, **self.annotations},
            containers=self.containers,
            termination_grace_period_seconds=self.termination_grace_period_seconds,
            tolerations=[t.as_dict() for t in self.tolerations],
            node_selector=self.node_selector,
            affinity=self.affinity,
            topology_spread_constraints=self.topology_spread_constraints,
        )


class Service(_Model):
    port: int = Field(default=80, ge=1, le=65535)
    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"


class Workload(_PodShape):
    """A workload; its pods are labelled `app: <name>` (unless `labels` says otherwise)."""

    kind: Literal["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"]
    # A label, not a subdomain: Services, PDBs and pod hostnames are named after it.
    name: DnsLabel
    replicas: int | None = Field(default=None, ge=0)
    pdb: Budget | None = None
    service: Service | None = None

    # Field validators rather than a model one, so the error points at the offending key.
    @field_validator("replicas")
    @classmethod
    def _no_daemonset_replicas(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and info.data.get("kind") == "DaemonSet":
            raise ValueError("a DaemonSet runs one pod per matching node; replicas does not apply")
        return value

    @field_validator("service")
    @classmethod
    def _statefulset_service(cls, value: Service | None, info: ValidationInfo) -> Service | None:
        if (
            value is not None
            and info.data.get("kind") == "StatefulSet"
            and value.type != "ClusterIP"
        ):
            raise ValueError("a StatefulSet's service is its headless governing service: ClusterIP")
        return value

    @property
    def replica_count(self) -> int:
        return 1 if self.replicas is None else self.replicas


class Pod(_PodShape):
    """A pod no controller owns; the scheduler places it unless `nodeName` does."""

    name: DnsSubdomain
    node_name: DnsSubdomain | None = None


class LoadBalancer(_Model):
    """A cloud load balancer whose targets are the instances of the given node groups."""

    name: DnsLabel
    type: Literal["classic", "target-group"]
    port: int = Field(ge=1, le=65535)
    node_groups: list[DnsLabel] = Field(min_length=1)


class Scenario(_Model):
    """A whole cluster. `seed` makes `objects()` reproducible, so a scenario names one cluster,
    names and uids included, rather than a family of them."""

    seed: int = 0
    time_scale: float | None = Field(default=None, gt=0)
    node_groups: list[NodeGroup] = Field(default_factory=list)
    nodes: list[Node] = Field(default_factory=list)
    namespaces: list[DnsLabel] = Field(default_factory=list)
    workloads: list[Workload] = Field(default_factory=list)
    pdbs: list[Pdb] = Field(default_factory=list)
    load_balancers: list[LoadBalancer] = Field(default_factory=list)
    pods: list[Pod] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> Scenario:
        """Names must be unique and references resolve; each problem keeps its own location."""
        problems: list[tuple[Loc, str]] = []

        def unique(items: Sequence[tuple[Loc, object]], what: str) -> None:
            seen: dict[object, Loc] = {}
            for loc, key in items:
                if key in seen:
                    problems.append((loc, f"duplicate {what} (also at {render_path(seen[key])})"))
                else:
                    seen[key] = loc

        unique(
            [(("nodeGroups", i, "name"), g.name) for i, g in enumerate(self.node_groups)],
            "node group name",
        )
        unique([(("nodes", i, "name"), n.name) for i, n in enumerate(self.nodes)], "node name")
        unique([(("namespaces", i), ns) for i, ns in enumerate(self.namespaces)], "namespace")
        unique(
            [
                (("workloads", i, "name"), (w.kind, w.namespace, w.name))
                for i, w in enumerate(self.workloads)
            ],
            "workload of this kind in this namespace",
        )
        unique(
            [
                (("workloads", i, "pdb"), (w.namespace, w.name))
                for i, w in enumerate(self.workloads)
                if w.pdb
            ]
            + [(("pdbs", i, "name"), (p.namespace, p.name)) for i, p in enumerate(self.pdbs)],
            "PodDisruptionBudget name in this namespace",
        )
        unique(
            [
                (("workloads", i, "service"), (w.namespace, w.name))
                for i, w in enumerate(self.workloads)
                if w.service
            ],
            "Service name in this namespace",
        )
        unique(
            [(("pods", i, "name"), (p.namespace, p.name)) for i, p in enumerate(self.pods)],
            "pod name in this namespace",
        )
        unique(
            [(("loadBalancers", i, "name"), lb.name) for i, lb in enumerate(self.load_balancers)],
            "load balancer name",
        )

        known_ns = BUILTIN_NAMESPACES | set(self.namespaces)
        namespaced: list[tuple[str, Sequence[_PodShape | Pdb]]] = [
            ("workloads", self.workloads),
            ("pdbs", self.pdbs),
            ("pods", self.pods),
        ]
        for section, items in namespaced:
            for i, item in enumerate(items):
                if item.namespace not in known_ns:
                    problems.append(
                        (
                            (section, i, "namespace"),
                            f"namespace {item.namespace!r} is not listed under namespaces",
                        )
                    )
        groups = {g.name for g in self.node_groups}
        for i, lb in enumerate(self.load_balancers):
            for j, group in enumerate(lb.node_groups):
                if group not in groups:
                    problems.append(
                        (("loadBalancers", i, "nodeGroups", j), f"no node group named {group!r}")
                    )
        if problems:
            raise PydanticCustomError(
                "scenario_references",
                "{summary}",
                {"summary": "; ".join(m for _, m in problems), "problems": problems},
            )
        return self

    def objects(
        self, rng: random.Random | int | None = None, *, now: TimeLike = DEFAULT_NOW
    ) -> list[Obj]:
        """The objects to create, in an order the API server accepts them in.

        Namespaces, nodes (standalone, then each group's initial instances), workloads, PDBs,
        services, bare pods. Built-in namespaces are left out because the server has them.
        `rng` defaults to the scenario's `seed`; a given `random.Random` is used as is.
        """
        r = (
            rng
            if isinstance(rng, random.Random)
            else random.Random(self.seed if rng is None else rng)
        )
        out: list[Obj] = [
            gen.for_create(gen.make_namespace(ns, rng=r, now=now))
            for ns in self.namespaces
            if ns not in BUILTIN_NAMESPACES
        ]
        for node in self.nodes:
            out.append(
                gen.for_create(
                    gen.make_node(
                        node.name,
                        zone=node.zone,
                        instance_type=node.instance_type,
                        provider_id=node.provider_id,
                        labels=node.labels,
                        roles=node.roles,
                        taints=[t.as_dict() for t in node.taints],
                        ready=node.ready,
                        unschedulable=node.unschedulable,
                        kubelet_version=node.kubelet_version,
                        rng=r,
                        now=now,
                    )
                )
            )
        used_ips: set[str] = set()
        for group in self.node_groups:
            zones = group.zone_list
            for index in range(group.size):
                zone = zones[index % len(zones)]
                ip = _zone_ip(zone, r)
                while ip in used_ips:
                    ip = _zone_ip(zone, r)
                used_ips.add(ip)
                out.append(gen.for_create(group.make_node(zone=zone, ip=ip, rng=r, now=now)))

        pdbs: list[Obj] = []
        services: list[Obj] = []
        for w in self.workloads:
            template = w.template(w.name)
            selector = {"app": template["metadata"]["labels"]["app"]}
            out.append(gen.for_create(_workload(w, template, selector, r, now)))
            if w.pdb is not None:
                pdbs.append(
                    gen.make_pdb(
                        w.name,
                        w.namespace,
                        selector=selector,
                        min_available=w.pdb.min_available,
                        max_unavailable=w.pdb.max_unavailable,
                        rng=r,
                        now=now,
                    )
                )
            if w.service is not None:
                services.append(
                    gen.make_service(
                        w.name,
                        w.namespace,
                        selector=selector,
                        ports=(w.service.port,),
                        service_type=w.service.type,
                        headless=w.kind == "StatefulSet",
                        rng=r,
                        now=now,
                    )
                )
        for p in self.pdbs:
            pdbs.append(
                gen.make_pdb(
                    p.name,
                    p.namespace,
                    selector=p.selector,
                    min_available=p.min_available,
                    max_unavailable=p.max_unavailable,
                    rng=r,
                    now=now,
                )
            )
        out.extend(gen.for_create(o) for o in pdbs + services)
        for pod in self.pods:
            bare = gen.pod_from_template(
                pod.template(pod.labels.get("app", pod.name)),
                name=pod.name,
                namespace=pod.namespace,
                owner=None,
                node_name=pod.node_name,
                rng=r,
                now=now,
            )
            out.append(gen.for_create(bare))
        return out


def _zone_ip(zone: str, rng: random.Random) -> str:
    """A private address in the zone's block, so a node's name hints at its zone as on EC2."""
    block = (ord(zone[-1]) - ord("a")) % 16 * 16
    return f"10.{block + rng.randrange(16)}.{rng.randrange(256)}.{rng.randrange(4, 255)}"


def _workload(
    w: Workload, template: Obj, selector: Mapping[str, str], rng: random.Random, now: TimeLike
) -> Obj:
    common: dict[str, Any] = {"template": template, "selector": selector, "rng": rng, "now": now}
    if w.kind == "Deployment":
        return gen.make_deployment(w.name, w.namespace, replicas=w.replica_count, **common)
    if w.kind == "StatefulSet":
        return gen.make_statefulset(w.name, w.namespace, replicas=w.replica_count, **common)
    if w.kind == "ReplicaSet":
        return gen.make_replicaset(w.name, w.namespace, replicas=w.replica_count, **common)
    return gen.make_daemonset(w.name, w.namespace, **common)


# --- loading ---------------------------------------------------------------------------------


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; any problem raises `ScenarioError`."""
    try:
        text = read_config_text(path)
    except ConfigFileError as exc:
        raise ScenarioError(exc.source, exc.problems) from None
    return parse_scenario(text, str(path))


def parse_scenario(text: str, source: str = "<scenario>") -> Scenario:
    """Validate scenario YAML; `source` names it in errors."""
    try:
        marked = load_yaml(text, source=source, expand=False)
    except ConfigFileError as exc:
        raise ScenarioError(exc.source, exc.problems) from None
    if marked.empty:
        raise ScenarioError(source, [Problem(1, "", "the scenario is empty")])
    if not isinstance(marked.data, dict):
        problem = Problem(marked.line_of(()), "", "a scenario must be a mapping of keys")
        raise ScenarioError(source, [problem])
    try:
        return Scenario.model_validate(marked.data)
    except ValidationError as exc:
        raise ScenarioError(source, _problems(exc, marked)) from None


def _problems(exc: ValidationError, marked: Marked) -> list[Problem]:
    problems: list[Problem] = []
    for error in exc.errors():
        ctx = error.get("ctx") or {}
        if error["type"] == "scenario_references":
            for loc, message in ctx["problems"]:
                problems.append(Problem(marked.line_of(loc), render_path(loc), message))
            continue
        loc = tuple(error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = unknown_key_message(Scenario, loc)
        elif error["type"] != "missing" and isinstance(error.get("input"), str | int | float):
            got = repr(error["input"])
            if not (isinstance(error["input"], str) and got in message):
                message += f" (got {got})"
        problems.append(Problem(marked.line_of(loc), render_path(loc), message))
    unique = list(dict.fromkeys(problems))
    return sorted(unique, key=lambda p: p.line or 0)
