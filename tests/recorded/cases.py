"""The requests whose answers nodeops depends on, run the same way against any API server.

Each case returns a list of steps, each the parts of the answer that matter (code, reason,
message, causes, warnings, and what the case picked from the body). Names carry the run's token
so runs never collide; the token is written as `RUN` in what is kept, so two runs, and two
servers, answer alike where they behave alike.

Some answers changed between Kubernetes versions. A case says so per field (`SINCE`): when the
recorded server is older than the minor version given, that field is not compared, and the
reason is written beside it. Everything else must match exactly.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tests.recorded.client import TABLE, Http, Obj

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
Clock = Callable[[], float]


@dataclass(frozen=True)
class Since:
    minor: int
    why: str


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[Http, str, Clock], Awaitable[list[Obj]]]
    needs_controllers: bool = False
    """The case needs kube-controller-manager's loops (disruption, pod GC) beside the server."""
    since: tuple[tuple[str, Since], ...] = ()
    """(step/field, since): fields that hold only from that minor version on."""
    simulator_gaps: tuple[tuple[str, str], ...] = ()
    """(step/field, why): what the simulator does not reproduce yet; not compared, and said."""


async def _namespace(http: Http, token: str) -> str:
    """A namespace of the case's own, named after the run."""
    ns = f"recorded-{token}"
    await http.must(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
    )
    return ns


def _step(name: str, **parts: Any) -> Obj:
    return {"step": name, **parts}


def _crd(token: str, kind: str, schema: Obj) -> Obj:
    plural = f"{kind.lower()}s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.r{token}.nodeops.dev"},
        "spec": {
            "group": f"r{token}.nodeops.dev",
            "names": {"kind": kind, "plural": plural},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def _spec_schema(spec: Obj, **top: Any) -> Obj:
    return {"type": "object", "properties": {"spec": spec}, **top}


async def _crd_attempt(http: Http, token: str, kind: str, schema: Obj) -> Obj:
    body = _crd(token, kind, schema)
    reply = await http.call("POST", CRDS, body)
    if reply.code == 201:
        await http.call("DELETE", f"{CRDS}/{body['metadata']['name']}")
    return reply.status()


async def crd_installation(http: Http, token: str, clock: Clock) -> list[Obj]:
    steps = []
    bounded = {
        "type": "object",
        "properties": {
            "count": {
                "type": "integer",
                "minimum": -9223372036854775808,
                "maximum": 9223372036854775807,
                "default": 1,
            }
        },
    }
    steps.append(
        _step(
            "int64 sentinel bounds", **await _crd_attempt(http, token, "A", _spec_schema(bounded))
        )
    )
    wrong_default = {"type": "object", "properties": {"count": {"type": "integer", "default": "x"}}}
    steps.append(
        _step(
            "default of the wrong type",
            **await _crd_attempt(http, token, "B", _spec_schema(wrong_default)),
        )
    )
    unknown_in_default = {
        "type": "object",
        "properties": {
            "inner": {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "default": {"a": "x", "b": "y"},
            }
        },
    }
    steps.append(
        _step(
            "default with a field the schema lacks",
            **await _crd_attempt(http, token, "C", _spec_schema(unknown_in_default)),
        )
    )
    no_compile = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "x-kubernetes-validations": [{"rule": "self.a +", "message": "broken"}],
    }
    steps.append(
        _step(
            "a rule that does not compile",
            **await _crd_attempt(http, token, "D", _spec_schema(no_compile)),
        )
    )
    not_structural = {"type": "object", "properties": {"a": {}}}
    steps.append(
        _step(
            "a property without a type",
            **await _crd_attempt(http, token, "E", _spec_schema(not_structural)),
        )
    )
    # controller-gen writes `required: [metadata, spec]` at the top (Cluster API's CRDs do).
    required = _spec_schema(
        {"type": "object", "properties": {"a": {"type": "string"}}},
        required=["metadata", "spec"],
    )
    body = _crd(token, "F", required)
    created = await http.call("POST", CRDS, body)
    steps.append(_step("required metadata at the top", **created.status()))
    if created.code == 201:
        name = body["metadata"]["name"]
        await http.wait(CRDS, name, _established, timeout=60)
        group = body["spec"]["group"]
        reply = await http.call(
            "POST",
            f"/apis/{group}/v1/namespaces/default/fs",
            {
                "apiVersion": f"{group}/v1",
                "kind": "F",
                "metadata": {"name": "f"},
                "spec": {"a": "x"},
            },
        )
        steps.append(_step("an object of that definition", **reply.status()))
        await http.call("DELETE", f"{CRDS}/{name}")
    return steps


def _established(crd: Obj | None) -> bool:
    conditions = ((crd or {}).get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


# --------------------------------------------------------------------------- field validation


def _configmap(name: str, **extra: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"a": "b"},
        **extra,
    }


async def field_validation(http: Http, token: str, clock: Clock) -> list[Obj]:
    ns = await _namespace(http, token)
    base = f"/api/v1/namespaces/{ns}/configmaps"
    steps = []
    try:
        for mode in ("Strict", "Warn", "Ignore"):
            reply = await http.call(
                "POST",
                base,
                _configmap(f"c-{mode.lower()}", bogus=1),
                params={"fieldValidation": mode},
            )
            steps.append(_step(f"create with an unknown field, {mode}", **reply.status()))
        duplicate = (
            b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c-dup"},'
            b'"data":{"a":"b"},"data":{"c":"d"}}'
        )
        reply = await http.call("POST", base, duplicate, params={"fieldValidation": "Strict"})
        steps.append(_step("create with a duplicate field, Strict", **reply.status()))
        reply = await http.call("POST", base, duplicate, params={"fieldValidation": "Warn"})
        steps.append(_step("create with a duplicate field, Warn", **reply.status()))
        target = f"{base}/c-ignore"
        reply = await http.patch(
            target, {"bogus": 2}, "merge", params={"fieldValidation": "Strict"}
        )
        steps.append(_step("merge patch with an unknown field, Strict", **reply.status()))
        reply = await http.patch(
            target, {"bogus": 2}, "strategic", params={"fieldValidation": "Warn"}
        )
        steps.append(_step("strategic merge patch with an unknown field, Warn", **reply.status()))
        current = await http.must("GET", target)
        current["bogus"] = 3
        reply = await http.call("PUT", target, current, params={"fieldValidation": "Strict"})
        steps.append(_step("update with an unknown field, Strict", **reply.status()))
        applied = _configmap("c-apply", bogus=4)
        reply = await http.patch(
            f"{base}/c-apply",
            applied,
            "apply",
            params={"fieldManager": "recorder", "fieldValidation": "Strict"},
        )
        steps.append(_step("apply with an unknown field, Strict", **reply.status()))
        # The same on a custom resource.
        crd = _crd(
            token,
            "Gadget",
            _spec_schema({"type": "object", "properties": {"size": {"type": "integer"}}}),
        )
        await http.must("POST", CRDS, crd)
        name = crd["metadata"]["name"]
        try:
            await http.wait(CRDS, name, _established, timeout=60)
            group = crd["spec"]["group"]
            gadgets = f"/apis/{group}/v1/namespaces/{ns}/gadgets"
            gadget = {
                "apiVersion": f"{group}/v1",
                "kind": "Gadget",
                "metadata": {"name": "g"},
                "spec": {"size": 1, "colour": "red"},
            }
            for mode in ("Strict", "Warn"):
                reply = await http.call("POST", gadgets, gadget, params={"fieldValidation": mode})
                steps.append(
                    _step(f"custom resource with an unknown field, {mode}", **reply.status())
                )
        finally:
            await http.call("DELETE", f"{CRDS}/{name}")
    finally:
        await http.call("DELETE", f"/api/v1/namespaces/{ns}")
    return steps


# --------------------------------------------------------------------------- table watches


def _node(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"recorded": "yes"}},
    }


def _table_event(event: Obj) -> Obj:
    obj = event.get("object") or {}
    rows = obj.get("rows") or []
    return {
        "type": event.get("type"),
        "kind": obj.get("kind"),
        "columns": [c.get("name") for c in obj.get("columnDefinitions") or ()],
        "rows": len(rows),
        "cells": [len(r.get("cells") or ()) for r in rows],
        "row_object_kind": [(r.get("object") or {}).get("kind") for r in rows],
    }


async def table_watch(http: Http, token: str, clock: Clock) -> list[Obj]:
    """What `kubectl get -w` reads: every event of a watch asked for as a Table is a Table of
    one row (columns in the first event only). ConfigMaps, which no controller touches, keep
    the events (of the one labelled) to the three changes made here."""
    ns = await _namespace(http, token)
    base = f"/api/v1/namespaces/{ns}/configmaps"
    try:
        start = await http.must("GET", base)
        rv = start["metadata"]["resourceVersion"]

        async def changes() -> None:
            watched = _configmap("watched")
            watched["metadata"]["labels"] = {"recorded": "watched"}
            await http.must("POST", base, watched)
            await http.must(
                "PATCH",
                f"{base}/watched",
                {"data": {"b": "c"}},
                content_type="application/merge-patch+json",
            )
            await http.must("DELETE", f"{base}/watched")

        events = await http.events(
            base,
            {"resourceVersion": rv, "labelSelector": "recorded=watched"},
            count=3,
            timeout=30,
            accept=TABLE,
            after=changes,
        )
    finally:
        await http.call("DELETE", f"/api/v1/namespaces/{ns}")
    return [_step(f"event {i + 1}", **_table_event(e)) for i, e in enumerate(events)]


# --------------------------------------------------------------------------- evictions


def _running_pod(name: str, node: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "recorded"}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "registry.invalid/app:1"}],
            "terminationGracePeriodSeconds": 30,
        },
    }


READY_STATUS = {
    "status": {
        "phase": "Running",
        "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "ContainersReady", "status": "True"},
            {"type": "PodScheduled", "status": "True"},
            {"type": "Initialized", "status": "True"},
        ],
    }
}


def _budget_current(healthy: int, allowed: int) -> Callable[[Obj | None], bool]:
    def check(pdb: Obj | None) -> bool:
        meta, status = (pdb or {}).get("metadata") or {}, (pdb or {}).get("status") or {}
        return (
            status.get("observedGeneration") == meta.get("generation")
            and status.get("currentHealthy") == healthy
            and status.get("disruptionsAllowed") == allowed
        )

    return check


async def evictions(http: Http, token: str, clock: Clock) -> list[Obj]:
    node = f"recorded-{token}-node"
    await http.must("POST", "/api/v1/nodes", _node(node))
    ns = await _namespace(http, token)
    pods = f"/api/v1/namespaces/{ns}/pods"
    budgets = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
    steps = []
    try:
        for name in ("p-0", "p-1"):
            await http.must("POST", pods, _running_pod(name, node))
            await http.must(
                "PATCH",
                f"{pods}/{name}/status",
                READY_STATUS,
                content_type="application/merge-patch+json",
            )
        budget = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "recorded"}}},
        }
        await http.must("POST", budgets, budget)
        await http.wait(budgets, "web", _budget_current(2, 0), timeout=60)
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "p-0", "namespace": ns},
        }
        refused = await http.call("POST", f"{pods}/p-0/eviction", eviction)
        steps.append(_step("eviction the budget does not allow", **refused.status()))
        await http.must(
            "PATCH",
            f"{budgets}/web",
            {"spec": {"minAvailable": 1}},
            content_type="application/merge-patch+json",
        )
        await http.wait(budgets, "web", _budget_current(2, 1), timeout=60)
        allowed = await http.call("POST", f"{pods}/p-0/eviction", eviction)
        answer = allowed.status()
        if isinstance(allowed.body, dict):
            answer["body_kind"] = allowed.body.get("kind")
            answer["body_status"] = allowed.body.get("status")
        steps.append(_step("eviction the budget allows", **answer))
        pdb = await http.must("GET", f"{budgets}/web")
        status = pdb.get("status") or {}
        steps.append(
            _step(
                "the budget right after",
                disruptionsAllowed=status.get("disruptionsAllowed"),
                disruptedPods=sorted(status.get("disruptedPods") or {}),
            )
        )
        pod = await http.must("GET", f"{pods}/p-0")
        meta = pod.get("metadata") or {}
        steps.append(
            _step(
                "the evicted pod",
                terminating=bool(meta.get("deletionTimestamp")),
                deletionGracePeriodSeconds=meta.get("deletionGracePeriodSeconds"),
                conditions=sorted(
                    f"{c.get('type')}/{c.get('reason')}"
                    for c in (pod.get("status") or {}).get("conditions") or ()
                    if c.get("type") == "DisruptionTarget"
                ),
            )
        )
        again = await http.call(
            "POST",
            f"{pods}/p-1/eviction",
            {**eviction, "metadata": {"name": "p-1", "namespace": ns}},
        )
        steps.append(_step("second eviction while the first pod terminates", **again.status()))
    finally:
        await http.call("DELETE", f"/api/v1/namespaces/{ns}")
        await http.call("DELETE", f"/api/v1/nodes/{node}")
    return steps


# --------------------------------------------------------------------------- pod GC


async def pod_gc(http: Http, token: str, clock: Clock) -> list[Obj]:
    ns = await _namespace(http, token)
    pods = f"/api/v1/namespaces/{ns}/pods"
    try:
        created = await http.must("POST", pods, _running_pod("orphan", f"recorded-{token}-gone"))
        started = clock()
        seen: list[Obj] = []

        def gone(pod: Obj | None) -> bool:
            if pod is not None:
                seen.append(copy.deepcopy(pod))
            return pod is None

        await http.wait(pods, "orphan", gone, timeout=180)
        waited = clock() - started
        phases = sorted({(p.get("status") or {}).get("phase") or "" for p in seen} - {""})
        conditions = sorted(
            {
                f"{c.get('type')}/{c.get('reason')}"
                for p in seen
                for c in (p.get("status") or {}).get("conditions") or ()
                if c.get("type") == "DisruptionTarget"
            }
        )
        return [
            _step(
                "a pod bound to a node that does not exist",
                created_phase=(created.get("status") or {}).get("phase"),
                deleted=True,
                waited_at_least_quarantine=waited >= 40.0,
                waited_under_two_minutes=waited < 120.0,
                phases_seen=phases,
                conditions_seen=conditions,
            )
        ]
    finally:
        await http.call("DELETE", f"/api/v1/namespaces/{ns}")


CASES: tuple[Case, ...] = (
    Case(
        "crd installation",
        crd_installation,
        since=(
            (
                "int64 sentinel bounds/message",
                Since(36, "by 1.36 the refusal names the boundary, not the default it overflows"),
            ),
            (
                "int64 sentinel bounds/causes",
                Since(36, "by 1.36 the refusal names the boundary, not the default it overflows"),
            ),
            (
                "default of the wrong type/causes",
                Since(24, "type errors are FieldValueTypeInvalid from 1.24.0"),
            ),
            (
                "default with a field the schema lacks/message",
                Since(34, "API errors render complex values as JSON from 1.34"),
            ),
            (
                "default with a field the schema lacks/causes",
                Since(34, "API errors render complex values as JSON from 1.34"),
            ),
            (
                "a rule that does not compile/message",
                Since(30, "the rule is printed with every field its type has by 1.30"),
            ),
            (
                "a rule that does not compile/causes",
                Since(30, "the rule is printed with every field its type has by 1.30"),
            ),
        ),
    ),
    Case(
        "field validation",
        field_validation,
        simulator_gaps=(
            (
                "merge patch with an unknown field, Strict/message",
                "the patched object is shown without managedFields and with sorted keys",
            ),
            (
                "merge patch with an unknown field, Strict/causes",
                "the patched object is shown without managedFields and with sorted keys",
            ),
        ),
        since=(
            (
                "custom resource with an unknown field, Strict/message",
                Since(
                    25,
                    "1.24's alpha strict decoding of custom resources also names metadata fields",
                ),
            ),
            (
                "custom resource with an unknown field, Warn/warnings",
                Since(
                    25,
                    "1.24's alpha strict decoding of custom resources also names metadata fields",
                ),
            ),
        ),
    ),
    Case("table watch", table_watch),
    Case(
        "evictions",
        evictions,
        needs_controllers=True,
        since=(
            (
                "the evicted pod/conditions",
                Since(26, "DisruptionTarget conditions (PodDisruptionConditions) from 1.26"),
            ),
        ),
    ),
    Case(
        "pod gc",
        pod_gc,
        needs_controllers=True,
        since=(
            (
                "a pod bound to a node that does not exist/phases_seen",
                Since(26, "pod GC marks the pod Failed before deleting it from 1.26"),
            ),
            (
                "a pod bound to a node that does not exist/conditions_seen",
                Since(26, "DisruptionTarget conditions (PodDisruptionConditions) from 1.26"),
            ),
        ),
    ),
)


_VOLATILE = (
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "UID"),
    (re.compile(r'(resourceVersion\\*":\\*")\d+'), r"\1RV"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), "TIME"),
)


def normalise(value: Any, token: str) -> Any:
    """The run's token written as RUN, and uids, resourceVersions and times (which no two runs
    share) as UID, RV and TIME, everywhere in what was kept."""
    if isinstance(value, str):
        value = value.replace(token, "RUN")
        for pattern, replacement in _VOLATILE:
            value = pattern.sub(replacement, value)
        return value
    if isinstance(value, list):
        return [normalise(v, token) for v in value]
    if isinstance(value, dict):
        return {k: normalise(v, token) for k, v in value.items()}
    return value


def server_minor(git_version: str) -> float:
    """The minor version a recorded server stands for: a pre-release (`v1.24.0-alpha.1`)
    counts as half a version before its release, since it lacks what came later in it."""
    core, _, pre = git_version.lstrip("v").partition("-")
    minor = float(core.split(".")[1])
    return minor - 0.5 if pre else minor


def comparable(case: Case, minor: float, steps: list[Obj]) -> list[Obj]:
    """`steps` without the fields that hold only on servers newer than `minor`, and without
    the simulator's known gaps."""
    drop = {key for key, since in case.since if minor < since.minor}
    drop |= {key for key, _ in case.simulator_gaps}
    out = []
    for step in steps:
        kept = {k: v for k, v in step.items() if f"{step['step']}/{k}" not in drop}
        out.append(kept)
    return out


def wall_clock() -> float:
    return time.monotonic()
