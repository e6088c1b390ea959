"""kube-scheduler's filters that depend on where other pods run: PodTopologySpread (its
`DoNotSchedule` constraints) and InterPodAffinity (required affinity and anti-affinity, the
pod's own and those of the pods already placed).

Unlike the node predicates (`nodematch`), their answer for a node changes with every pod placed
or gone, so it cannot be kept per node. A caller builds an `InterPodCheck` for each attempt
from the pods it has placed, as kube-scheduler's PreFilter does, then asks it about each node
its walk reaches, after the resource fit, in kube-scheduler's filter order. Two callers: the
simulated scheduler, and the cycling controllers' capacity check before a batch is drained.
These rules are why a roll leaves pods Pending on real clusters (one replica per node or per
zone, and the cordoned nodes still count as domains), so a rehearsal that ignored them would
predict a clean roll that the real one does not make, and a capacity check that ignored them
would drain a batch whose pods then wait.

Not modelled: the preferred (scored) terms, which change where a pod goes, not whether it fits.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from nodeops.common.nodematch import is_deleting, node_matches_affinity, untolerated_taint
from nodeops.common.selectors import SelectorError
from nodeops.common.selectors.labels import NOTHING, LabelSelector, label_selector_from_object
from nodeops.common.selectors.requirements import (
    OP_DOUBLE_EQUALS,
    OP_EQUALS,
    OP_IN,
    OP_NOT_IN,
    new_requirement,
)

Obj = Mapping[str, Any]
Labels = Mapping[str, str]

SPREAD_MISSING_LABEL = (
    "node(s) didn't match pod topology spread constraints (missing required label)"
)
SPREAD_SKEW = "node(s) didn't match pod topology spread constraints"
AFFINITY = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A required PodAffinityTerm as kube-scheduler holds it: the namespaces it names (the
    pod's own when it names none and has no namespace selector), and parsed selectors."""

    namespaces: frozenset[str]
    namespace_selector: LabelSelector
    selector: LabelSelector
    topology_key: str

    def matches(self, namespace: str, labels: Labels, namespace_labels: Labels) -> bool:
        if namespace in self.namespaces or self.namespace_selector.matches(namespace_labels):
            return self.selector.matches(labels)
        return False


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    max_skew: int
    topology_key: str
    selector: LabelSelector
    min_domains: int
    honor_node_affinity: bool
    """`nodeAffinityPolicy` (default Honor): only nodes the pod's node affinity allows are
    domains."""
    honor_node_taints: bool
    """`nodeTaintsPolicy` (default Ignore): Honor leaves out nodes with taints the pod does not
    tolerate; Ignore keeps them, so a cordoned node with none of the pods is a domain of 0."""


@dataclass(frozen=True, slots=True)
class PodRules:
    affinity: tuple[AffinityTerm, ...] = ()
    anti_affinity: tuple[AffinityTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.affinity or self.anti_affinity or self.spread)


NO_RULES = PodRules()


def _with_label_keys(
    selector: Obj | None, labels: Labels, match: Sequence[str], mismatch: Sequence[str] = ()
) -> LabelSelector:
    """The selector with `matchLabelKeys` (and `mismatchLabelKeys`) folded in: the pod's own
    value of each key, as the API server merges them (keys the pod lacks are ignored)."""
    parsed = label_selector_from_object(selector)
    if parsed.matches_nothing or not (match or mismatch):
        return parsed
    extra = [new_requirement(k, OP_IN, [labels[k]]) for k in match if k in labels]
    extra += [new_requirement(k, OP_NOT_IN, [labels[k]]) for k in mismatch if k in labels]
    return LabelSelector([*parsed.requirements, *extra]) if extra else parsed


def _terms(raw: Iterable[Obj], namespace: str, labels: Labels) -> tuple[AffinityTerm, ...]:
    terms = []
    for term in raw:
        names = term.get("namespaces") or []
        ns_selector = term.get("namespaceSelector")
        terms.append(
            AffinityTerm(
                namespaces=frozenset(names if names or ns_selector is not None else [namespace]),
                namespace_selector=(
                    NOTHING if ns_selector is None else label_selector_from_object(ns_selector)
                ),
                selector=_with_label_keys(
                    term.get("labelSelector"),
                    labels,
                    term.get("matchLabelKeys") or (),
                    term.get("mismatchLabelKeys") or (),
                ),
                topology_key=str(term.get("topologyKey") or ""),
            )
        )
    return tuple(terms)


def _required(affinity: Obj, kind: str) -> list[Obj]:
    return list(
        (affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or []
    )


@functools.lru_cache(maxsize=4096)
def _parse(blob: bytes) -> PodRules:
    namespace, labels, affinity, spread = orjson.loads(blob)
    try:
        return PodRules(
            affinity=_terms(_required(affinity, "podAffinity"), namespace, labels),
            anti_affinity=_terms(_required(affinity, "podAntiAffinity"), namespace, labels),
            spread=tuple(
                SpreadConstraint(
                    max_skew=int(c.get("maxSkew") or 1),
                    topology_key=str(c.get("topologyKey") or ""),
                    selector=_with_label_keys(
                        c.get("labelSelector"), labels, c.get("matchLabelKeys") or ()
                    ),
                    min_domains=int(c.get("minDomains") or 0),
                    honor_node_affinity=c.get("nodeAffinityPolicy") != "Ignore",
                    honor_node_taints=c.get("nodeTaintsPolicy") == "Honor",
                )
                for c in spread
                if c.get("whenUnsatisfiable") == "DoNotSchedule"
            ),
        )
    except (SelectorError, ValueError, TypeError):
        # The API server validated the pod; what it let through and we cannot parse, we
        # cannot hold against it either.
        return NO_RULES


def pod_rules(pod: Obj) -> PodRules:
    """The pod's inter-pod rules; NO_RULES (falsy) for the many pods that have none."""
    spec = pod.get("spec") or {}
    affinity = spec.get("affinity") or {}
    spread = spec.get("topologySpreadConstraints") or []
    if not spread and not affinity.get("podAffinity") and not affinity.get("podAntiAffinity"):
        return NO_RULES
    meta = pod.get("metadata") or {}
    pod_affinity = {k: affinity[k] for k in ("podAffinity", "podAntiAffinity") if k in affinity}
    return _parse(
        orjson.dumps(
            [meta.get("namespace") or "", meta.get("labels") or {}, pod_affinity, spread],
            option=orjson.OPT_SORT_KEYS,
        )
    )


class NodeView(Protocol):
    """What the check reads of a node (the scheduler's own record of it): the node, for node
    affinity; its labels; its effective taints."""

    @property
    def node(self) -> Obj: ...
    @property
    def labels(self) -> Labels: ...
    @property
    def taints(self) -> Sequence[Obj]: ...


Key = tuple[str, str]


def exact_label(selector: LabelSelector) -> tuple[str, str] | None:
    """A label every pod the selector matches must have, to look them up by."""
    for r in selector.requirements:
        if r.operator in (OP_EQUALS, OP_DOUBLE_EQUALS, OP_IN) and len(r.values) == 1:
            return r.key, r.values[0]
    return None


class PlacedPods:
    """The pods placed on nodes (those being deleted too, as in kube-scheduler's cache),
    indexed the way the rules look them up: by namespace and label, so that an attempt reads
    the pods a term selects rather than every pod; and the placed pods' required anti-affinity
    terms grouped by shape, so that a Deployment's thousand replicas are one group to check."""

    def __init__(self) -> None:
        self._where: dict[Key, tuple[str, Obj]] = {}
        self._by_ns: dict[str, dict[Key, None]] = {}
        self._by_label: dict[tuple[str, str, str], dict[Key, None]] = {}
        self._anti_of: dict[Key, tuple[AffinityTerm, ...]] = {}
        self._anti: dict[tuple[AffinityTerm, ...], dict[str, int]] = {}

    @property
    def anti_affinity(self) -> Mapping[tuple[AffinityTerm, ...], Mapping[str, int]]:
        """Each shape of placed pods' required anti-affinity terms: its pods per node."""
        return self._anti

    def add(self, key: Key, node: str, pod: Obj) -> bool:
        """Whether this may let a pod waiting for pods fit: a pod new here, or relabelled."""
        before = self._where.get(key)
        if before is not None:
            if before[0] == node and _ns_labels_of(before[1]) == _ns_labels_of(pod):
                self._where[key] = (node, pod)
                return False
            self.remove(key)
        self._where[key] = (node, pod)
        namespace, labels = _ns_labels_of(pod)
        self._by_ns.setdefault(namespace, {})[key] = None
        for k, v in labels.items():
            self._by_label.setdefault((namespace, k, v), {})[key] = None
        terms = pod_rules(pod).anti_affinity
        if terms:
            self._anti_of[key] = terms
            per_node = self._anti.setdefault(terms, {})
            per_node[node] = per_node.get(node, 0) + 1
        return True

    def remove(self, key: Key) -> None:
        where = self._where.pop(key, None)
        if where is None:
            return
        node, pod = where
        namespace, labels = _ns_labels_of(pod)
        _discard(self._by_ns, namespace, key)
        for k, v in labels.items():
            _discard(self._by_label, (namespace, k, v), key)
        terms = self._anti_of.pop(key, None)
        if terms is not None:
            per_node = self._anti[terms]
            per_node[node] -= 1
            if not per_node[node]:
                del per_node[node]
                if not per_node:
                    del self._anti[terms]

    @contextmanager
    def without(self, keys: Iterable[Key]) -> Iterator[None]:
        """The pods of `keys` taken away for a while, as kube-scheduler's preemption takes its
        victims away to see whether a pod's inter-pod rules let it in without them."""
        taken = [(key, self._where[key]) for key in keys if key in self._where]
        for key, _ in taken:
            self.remove(key)
        try:
            yield
        finally:
            for key, (node, pod) in taken:
                self.add(key, node, pod)

    def namespaces(self) -> Iterable[str]:
        return self._by_ns.keys()

    def matching(
        self, namespaces: Iterable[str], selector: LabelSelector
    ) -> Iterator[tuple[str, Obj]]:
        """(node, pod) of the placed pods of `namespaces` that `selector` selects."""
        if selector.matches_nothing:
            return
        exact = exact_label(selector)
        for namespace in namespaces:
            keys = (
                self._by_label.get((namespace, *exact))
                if exact is not None
                else self._by_ns.get(namespace)
            )
            for key in keys or ():
                node, pod = self._where[key]
                if selector.matches(_ns_labels_of(pod)[1]):
                    yield node, pod


def _discard(index: dict[Any, dict[Key, None]], at: Any, key: Key) -> None:
    keys = index.get(at)
    if keys is not None:
        keys.pop(key, None)
        if not keys:
            del index[at]


def _ns_labels_of(pod: Obj) -> tuple[str, Labels]:
    meta = pod.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("labels") or {}


class InterPodCheck:
    """One scheduling attempt's view of the other pods (kube-scheduler's PreFilter state)."""

    def __init__(
        self,
        pod: Obj,
        rules: PodRules,
        nodes: Mapping[str, NodeView],
        placed: PlacedPods,
        namespace_labels: Callable[[str], Labels],
    ) -> None:
        self.rules = rules
        self.namespace, self.labels = _ns_labels_of(pod)
        self._nodes = nodes
        self._placed = placed
        self._namespace_labels = namespace_labels
        self._spread_domains: list[dict[str, int]] = []
        self._affinity: dict[tuple[str, str], int] = {}
        self._anti: dict[tuple[str, str], int] = {}
        self._existing_anti: dict[tuple[str, str], int] = {}
        if rules.spread:
            self._count_spread(pod.get("spec") or {})
        if rules.affinity:
            self._count_affinity()
        for term in rules.anti_affinity:
            for node, _ in self._selected(term):
                self._count(self._anti, term.topology_key, node)
        own_ns_labels = namespace_labels(self.namespace)
        for terms, per_node in placed.anti_affinity.items():
            for term in terms:
                if term.matches(self.namespace, self.labels, own_ns_labels):
                    for node, n in per_node.items():
                        self._count(self._existing_anti, term.topology_key, node, n)
        self._affinity_self = bool(rules.affinity) and all(
            t.matches(self.namespace, self.labels, own_ns_labels) for t in rules.affinity
        )

    def _count(self, counts: dict[tuple[str, str], int], key: str, node: str, n: int = 1) -> None:
        view = self._nodes.get(node)
        value = None if view is None else view.labels.get(key)
        if value is not None:
            counts[(key, value)] = counts.get((key, value), 0) + n

    def _selected(self, term: AffinityTerm) -> Iterator[tuple[str, Obj]]:
        """The placed pods a term selects: of the namespaces it names or its namespace
        selector picks."""
        namespaces = set(term.namespaces)
        if not term.namespace_selector.matches_nothing:
            namespaces.update(
                ns
                for ns in self._placed.namespaces()
                if term.namespace_selector.matches(self._namespace_labels(ns))
            )
        return self._placed.matching(namespaces, term.selector)

    def _count_affinity(self) -> None:
        """Pods that match all of the terms count, under each term's topology."""
        first, *rest = self.rules.affinity
        for node, p in self._selected(first):
            ns, labels = _ns_labels_of(p)
            if rest and not all(t.matches(ns, labels, self._namespace_labels(ns)) for t in rest):
                continue
            for t in self.rules.affinity:
                self._count(self._affinity, t.topology_key, node)

    def _count_spread(self, spec: Obj) -> None:
        spread = self.rules.spread
        keys = [c.topology_key for c in spread]
        tolerations = spec.get("tolerations") or []
        # Most pods name no node selector or affinity: every node passes, so none is asked.
        node_rules = bool(spec.get("nodeSelector")) or bool(
            (spec.get("affinity") or {}).get("nodeAffinity")
        )
        for c in spread:
            domains: dict[str, int] = {}
            eligible: dict[str, str] = {}
            for name, view in self._nodes.items():
                labels = view.labels
                if any(k not in labels for k in keys):
                    continue
                if (
                    node_rules
                    and c.honor_node_affinity
                    and not node_matches_affinity(spec, view.node)
                ):
                    continue
                if c.honor_node_taints and untolerated_taint(view.taints, tolerations):
                    continue
                value = eligible[name] = labels[c.topology_key]
                domains.setdefault(value, 0)
            # Pods being deleted do not count (kubernetes#87621), nor other namespaces'.
            for node, p in self._placed.matching((self.namespace,), c.selector):
                domain = eligible.get(node)
                if domain is not None and not is_deleting(p):
                    domains[domain] += 1
            self._spread_domains.append(domains)

    def reason(self, node_labels: Labels) -> str | None:
        """Why the pod cannot go to a node with these labels, in kube-scheduler's words, or
        None. PodTopologySpread runs before InterPodAffinity."""
        for c, domains in zip(self.rules.spread, self._spread_domains, strict=True):
            value = node_labels.get(c.topology_key)
            if value is None:
                return SPREAD_MISSING_LABEL
            # The smallest count of any domain: 0 while there are fewer domains than
            # `minDomains`, and no bound at all when there are none.
            if c.min_domains and len(domains) < c.min_domains:
                least = 0
            elif domains:
                least = min(domains.values())
            else:
                continue
            own = 1 if c.selector.matches(self.labels) else 0
            if domains.get(value, 0) + own - least > c.max_skew:
                return SPREAD_SKEW
        if self.rules.affinity and not self._affinity_fits(node_labels):
            return AFFINITY
        for t in self.rules.anti_affinity:
            value = node_labels.get(t.topology_key)
            if value is not None and self._anti.get((t.topology_key, value), 0) > 0:
                return ANTI_AFFINITY
        if self._existing_anti:
            for pair in node_labels.items():
                if self._existing_anti.get(pair, 0) > 0:
                    return EXISTING_ANTI_AFFINITY
        return None

    def _affinity_fits(self, node_labels: Labels) -> bool:
        found = True
        for t in self.rules.affinity:
            value = node_labels.get(t.topology_key)
            if value is None:
                return False
            if self._affinity.get((t.topology_key, value), 0) <= 0:
                found = False
        # The first of a group of pods with affinity to each other may go anywhere that has
        # the topology labels, or none of them could ever start.
        return found or (not self._affinity and self._affinity_self)
