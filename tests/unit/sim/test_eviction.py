"""The eviction subresource's rules, case by case against kube's eviction.go."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from nodeops.sim.server.errors import ApiError
from nodeops.sim.server.eviction import (
    MAX_DISRUPTED_POD_SIZE,
    EvictionDecision,
    decide_eviction,
    eviction_delete_options,
    eviction_success_status,
    with_disruption_target_condition,
)

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
NOW_S = "2024-05-01T12:00:00Z"
EARLIER = "2024-05-01T11:00:00Z"
REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."


def pod(
    *,
    phase: str = "Running",
    ready: bool = True,
    deleting: bool = False,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": "web-1",
        "namespace": "ns",
        "uid": "pod-uid",
        "resourceVersion": "42",
        "labels": {"app": "web"} if labels is None else labels,
    }
    if deleting:
        meta["deletionTimestamp"] = EARLIER
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def eviction(delete_options: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "web-1", "namespace": "ns", **meta},
    }
    if delete_options is not None:
        body["deleteOptions"] = delete_options
    return body


def pdb(
    name: str = "budget",
    *,
    allowed: int = 1,
    current: int = 3,
    desired: int = 2,
    generation: int = 1,
    observed: int = 1,
    policy: str | None = None,
    selector: Any = "default",
    namespace: str = "ns",
    disrupted: dict[str, str] | None = None,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"minAvailable": desired}
    if selector == "default":
        spec["selector"] = {"matchLabels": {"app": "web"}}
    elif selector is not None:
        spec["selector"] = selector
    if policy is not None:
        spec["unhealthyPodEvictionPolicy"] = policy
    status: dict[str, Any] = {
        "observedGeneration": observed,
        "disruptionsAllowed": allowed,
        "currentHealthy": current,
        "desiredHealthy": desired,
        "expectedPods": current,
    }
    if disrupted is not None:
        status["disruptedPods"] = disrupted
    if conditions is not None:
        status["conditions"] = conditions
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace, "generation": generation},
        "spec": spec,
        "status": status,
    }


def refusal(**kwargs: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        decide_eviction(kwargs.pop("pod", pod()), kwargs.pop("ev", eviction()), **kwargs)
    return info.value


def cond(status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": "DisruptionAllowed",
        "status": status,
        "observedGeneration": 1,
        "lastTransitionTime": EARLIER,
        "reason": reason,
        "message": message,
    }


# --- the request itself ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(
            eviction(name="web-2"),
            "name in URL does not match name in Eviction object",
            id="name mismatch",
        ),
        pytest.param(
            {"metadata": {"namespace": "ns"}},
            "name in URL does not match name in Eviction object",
            id="name missing",
        ),
        pytest.param(
            eviction(namespace="other"),
            "the namespace of the provided object does not match the namespace sent on the request",
            id="namespace mismatch",
        ),
    ],
)
def test_body_must_match_the_url(body: dict[str, Any], message: str) -> None:
    err = refusal(ev=body, pdbs_in_namespace=[], now=NOW)
    assert (err.code, err.reason, err.message) == (400, "BadRequest", message)


def test_body_without_namespace_takes_the_url_one() -> None:
    body = {"metadata": {"name": "web-1"}}
    assert eviction_delete_options(body, namespace="ns", name="web-1") == {}


@pytest.mark.parametrize(
    ("delete_options", "query", "want"),
    [
        (None, None, {}),
        (None, ["All"], {"dryRun": ["All"]}),
        ({"gracePeriodSeconds": 5}, None, {"gracePeriodSeconds": 5}),
        ({"gracePeriodSeconds": 5}, ["All"], {"gracePeriodSeconds": 5, "dryRun": ["All"]}),
        ({"dryRun": ["All"]}, None, {"dryRun": ["All"]}),
        ({"dryRun": ["All"]}, ["All"], {"dryRun": ["All"]}),
        ({"dryRun": []}, ["All"], {"dryRun": ["All"]}),
    ],
)
def test_delete_options_from_body_and_query(
    delete_options: dict[str, Any] | None, query: list[str] | None, want: dict[str, Any]
) -> None:
    body = eviction(delete_options)
    before = copy.deepcopy(body)
    assert eviction_delete_options(body, namespace="ns", name="web-1", dry_run=query) == want
    assert body == before


def test_conflicting_dry_run_is_a_500_without_reason() -> None:
    with pytest.raises(ApiError) as info:
        eviction_delete_options(
            eviction({"dryRun": ["All", "All"]}), namespace="ns", name="web-1", dry_run=["All"]
        )
    err = info.value
    assert err.code == 500
    assert err.message == (
        "Non-matching dry-run options in request and content: [All] and [All All]"
    )
    assert err.status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": err.message,
        "code": 500,
    }


def test_success_status() -> None:
    assert eviction_success_status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }


# --- pods whose budget does not matter -------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "pinned"),
    [
        pytest.param(pod(phase="Succeeded", ready=False), False, id="Succeeded"),
        pytest.param(pod(phase="Failed", ready=False), False, id="Failed"),
        pytest.param(pod(phase="Pending", ready=False), True, id="Pending is pinned"),
        pytest.param(pod(deleting=True), False, id="being deleted"),
        pytest.param(pod(phase="Pending", deleting=True), False, id="Pending and being deleted"),
    ],
)
def test_budget_is_ignored(target: dict[str, Any], pinned: bool) -> None:
    blocking = pdb(allowed=0, current=1, desired=3)
    decision = decide_eviction(
        target, eviction({"gracePeriodSeconds": 7}), [blocking, pdb("b2")], NOW
    )
    want: dict[str, Any] = {"gracePeriodSeconds": 7}
    if pinned:
        want["preconditions"] = {"resourceVersion": "42"}
    assert decision == EvictionDecision(None, want, True)


def test_pending_pod_keeps_the_callers_resource_version() -> None:
    options = {"preconditions": {"resourceVersion": "42", "uid": "pod-uid"}}
    decision = decide_eviction(pod(phase="Pending"), eviction(options), [], NOW)
    assert decision.delete_options == options


def test_ignored_budget_with_dry_run_adds_no_condition() -> None:
    decision = decide_eviction(pod(phase="Failed"), eviction(), [pdb()], NOW, dry_run=["All"])
    assert decision == EvictionDecision(None, {"dryRun": ["All"]}, False)


# --- which budgets match ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "budgets",
    [
        pytest.param([], id="no budget"),
        pytest.param([pdb(allowed=0, selector={"matchLabels": {"app": "db"}})], id="other labels"),
        pytest.param([pdb(allowed=0, namespace="other")], id="other namespace"),
        pytest.param([pdb(allowed=0, selector=None)], id="null selector matches nothing"),
        pytest.param(
            [
                pdb(
                    allowed=0,
                    selector={"matchExpressions": [{"key": "app", "operator": "Maybe"}]},
                )
            ],
            id="invalid selector matches nothing",
        ),
    ],
)
def test_no_matching_budget_deletes(budgets: list[dict[str, Any]]) -> None:
    decision = decide_eviction(pod(), eviction({"gracePeriodSeconds": 0}), budgets, NOW)
    assert decision == EvictionDecision(None, {"gracePeriodSeconds": 0}, True)


def test_empty_selector_matches_every_pod() -> None:
    err = refusal(pdbs_in_namespace=[pdb(allowed=0, selector={})], now=NOW)
    assert err.code == 429


def test_more_than_one_budget_is_a_500_without_reason() -> None:
    err = refusal(pdbs_in_namespace=[pdb("a"), pdb("b")], now=NOW)
    assert err.code == 500
    assert err.status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": (
            "This pod has more than one PodDisruptionBudget, which the eviction subresource "
            "does not support."
        ),
        "code": 500,
    }
    assert err.headers == {}


# --- refusals by the budget ------------------------------------------------------------------


def test_budget_not_yet_processed_asks_to_retry_after_10s() -> None:
    err = refusal(pdbs_in_namespace=[pdb(generation=2, observed=1, allowed=5)], now=NOW)
    assert (err.code, err.reason, err.message) == (429, "TooManyRequests", REFUSED)
    assert err.details == {
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": "The disruption budget budget is still being processed by the server.",
            }
        ],
        "retryAfterSeconds": 10,
    }
    assert err.headers == {"Retry-After": "10"}


@pytest.mark.parametrize(
    ("budget", "why", "explanation"),
    [
        pytest.param(
            pdb(allowed=-1),
            "pdb disruptions allowed is negative",
            "pdb disruptions allowed is negative",
            id="negative",
        ),
        pytest.param(
            pdb(
                allowed=1,
                disrupted={f"p{i}": NOW_S for i in range(MAX_DISRUPTED_POD_SIZE + 1)},
            ),
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
            "too many pending evictions not confirmed by PDB controller",
            id="too many disrupted pods",
        ),
    ],
)
def test_forbidden(budget: dict[str, Any], why: str, explanation: str) -> None:
    err = refusal(pdbs_in_namespace=[budget], now=NOW)
    assert (err.code, err.reason) == (403, "Forbidden")
    assert err.message == f'poddisruptionbudget.policy "budget" is forbidden: {why}'
    assert err.details == {
        "name": "budget",
        "group": "policy",
        "kind": "poddisruptionbudget",
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": (
                    f"The disruption budget budget does not allow evicting pods currently: "
                    f"{explanation}"
                ),
            }
        ],
    }
    assert err.headers == {}


def test_disrupted_pods_at_the_limit_are_still_allowed() -> None:
    disrupted = {f"p{i}": NOW_S for i in range(MAX_DISRUPTED_POD_SIZE)}
    decision = decide_eviction(pod(), eviction(), [pdb(disrupted=disrupted)], NOW)
    assert decision.pdb_to_update is not None
    assert len(decision.pdb_to_update["status"]["disruptedPods"]) == MAX_DISRUPTED_POD_SIZE + 1


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        pytest.param(
            pdb(allowed=0, current=2, desired=3),
            "The disruption budget budget needs 3 healthy pods and has 2 currently",
            id="too few healthy",
        ),
        pytest.param(
            pdb(allowed=0, current=3, desired=3, conditions=[cond("False", "InsufficientPods")]),
            "The disruption budget budget needs 3 healthy pods and has 3 currently",
            id="exactly enough healthy",
        ),
        pytest.param(
            pdb(
                allowed=0,
                current=2,
                desired=3,
                conditions=[cond("False", "SyncFailed", 'found no controllers for pod "x"')],
            ),
            "The disruption budget budget does not allow evicting pods currently because it "
            'failed sync: found no controllers for pod "x"',
            id="failed sync comes first",
        ),
        pytest.param(
            pdb(allowed=0, current=5, desired=3, conditions=[cond("False", "Custom", "held")]),
            "The disruption budget budget does not allow evicting pods currently (Custom): held",
            id="another false condition with a message",
        ),
        pytest.param(
            pdb(allowed=0, current=5, desired=3, conditions=[cond("False", "InsufficientPods")]),
            "The disruption budget budget does not allow evicting pods currently",
            id="a condition without a message",
        ),
        pytest.param(
            pdb(allowed=0, current=5, desired=3, conditions=[cond("True", "SyncFailed", "x")]),
            "The disruption budget budget does not allow evicting pods currently",
            id="a true condition explains nothing",
        ),
    ],
)
def test_no_disruptions_allowed(budget: dict[str, Any], message: str) -> None:
    err = refusal(pdbs_in_namespace=[budget], now=NOW)
    assert (err.code, err.reason, err.message) == (429, "TooManyRequests", REFUSED)
    assert err.details == {"causes": [{"reason": "DisruptionBudget", "message": message}]}
    assert err.headers == {}


# --- spending the budget ---------------------------------------------------------------------


def test_healthy_pod_spends_one_disruption() -> None:
    budget = pdb(
        allowed=2, disrupted={"other": EARLIER}, conditions=[cond("True", "SufficientPods")]
    )
    before = copy.deepcopy(budget)
    decision = decide_eviction(pod(), eviction({"gracePeriodSeconds": 30}), [budget], NOW)
    want = copy.deepcopy(budget)
    want["status"]["disruptionsAllowed"] = 1
    want["status"]["disruptedPods"] = {"other": EARLIER, "web-1": NOW_S}
    assert decision == EvictionDecision(want, {"gracePeriodSeconds": 30}, True)
    assert budget == before


def test_spending_the_last_disruption_flips_the_condition() -> None:
    budget = pdb(allowed=1, observed=4, generation=4, conditions=[cond("True", "SufficientPods")])
    decision = decide_eviction(pod(), eviction(), [budget], NOW)
    assert decision.pdb_to_update is not None
    status = decision.pdb_to_update["status"]
    assert status["disruptionsAllowed"] == 0
    assert status["disruptedPods"] == {"web-1": NOW_S}
    assert status["conditions"] == [
        {
            "type": "DisruptionAllowed",
            "status": "False",
            "observedGeneration": 4,
            "lastTransitionTime": NOW_S,
            "reason": "InsufficientPods",
            "message": "",
        }
    ]


def test_dry_run_checks_but_writes_nothing() -> None:
    decision = decide_eviction(pod(), eviction(), [pdb(allowed=1)], NOW, dry_run=["All"])
    assert decision == EvictionDecision(None, {"dryRun": ["All"]}, False)
    err = refusal(pdbs_in_namespace=[pdb(allowed=0)], now=NOW, dry_run=["All"])
    assert err.code == 429


# --- unready pods ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "options", "free"),
    [
        pytest.param(pdb(allowed=0, policy="AlwaysAllow", current=0), None, True, id="AlwaysAllow"),
        pytest.param(
            pdb(allowed=0, current=2, desired=2), None, True, id="default, healthy budget"
        ),
        pytest.param(
            pdb(allowed=0, policy="IfHealthyBudget", current=3, desired=2),
            {"preconditions": {"resourceVersion": "7"}},
            True,
            id="IfHealthyBudget overrides the caller's resourceVersion",
        ),
        pytest.param(
            pdb(allowed=1, policy="IfHealthyBudget", current=1, desired=2),
            None,
            False,
            id="IfHealthyBudget, disrupted application spends the budget",
        ),
        pytest.param(
            pdb(allowed=1, current=0, desired=0),
            None,
            False,
            id="default, nothing desired spends the budget",
        ),
    ],
)
def test_unready_pod(budget: dict[str, Any], options: dict[str, Any] | None, free: bool) -> None:
    decision = decide_eviction(pod(ready=False), eviction(options), [budget], NOW)
    if free:
        assert decision == EvictionDecision(
            None, {"preconditions": {"resourceVersion": "42"}}, True
        )
    else:
        assert decision.pdb_to_update is not None
        assert decision.pdb_to_update["status"]["disruptionsAllowed"] == 0
        assert decision.delete_options == {}


def test_unready_pod_of_a_disrupted_application_is_refused() -> None:
    err = refusal(pod=pod(ready=False), pdbs_in_namespace=[pdb(allowed=0, current=1)], now=NOW)
    assert err.details == {
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": "The disruption budget budget needs 2 healthy pods and has 1 currently",
            }
        ]
    }


# --- preconditions ---------------------------------------------------------------------------

UID_CONFLICT = (
    'Operation cannot be fulfilled on Pod "web-1": the UID in the precondition (old-uid) does not '
    "match the UID in record (pod-uid). The object might have been deleted and then recreated"
)
RV_CONFLICT = (
    'Operation cannot be fulfilled on Pod "web-1": the ResourceVersion in the precondition (41) '
    "does not match the ResourceVersion in record (42). The object might have been modified"
)


@pytest.mark.parametrize(
    ("target", "budgets", "preconditions", "message"),
    [
        pytest.param(pod(), [], {"uid": "old-uid"}, UID_CONFLICT, id="no budget, uid"),
        pytest.param(pod(), [], {"resourceVersion": "41"}, RV_CONFLICT, id="no budget, rv"),
        pytest.param(
            pod(phase="Succeeded"), [pdb()], {"uid": "old-uid"}, UID_CONFLICT, id="ignored budget"
        ),
        pytest.param(
            pod(ready=False),
            [pdb(allowed=0)],
            {"uid": "old-uid", "resourceVersion": "41"},
            UID_CONFLICT,
            id="unready pod, caller's own resourceVersion",
        ),
    ],
)
def test_precondition_conflict(
    target: dict[str, Any], budgets: list[dict[str, Any]], preconditions: Any, message: str
) -> None:
    err = refusal(
        pod=target,
        ev=eviction({"preconditions": preconditions}),
        pdbs_in_namespace=budgets,
        now=NOW,
    )
    assert (err.code, err.reason, err.message) == (409, "Conflict", message)
    assert err.details == {"name": "web-1", "kind": "Pod"}


@pytest.mark.parametrize("dry_run", [None, ["All"]])
def test_unready_pod_precondition_conflict_asks_to_retry(dry_run: list[str] | None) -> None:
    err = refusal(
        pod=pod(ready=False),
        ev=eviction({"preconditions": {"uid": "old-uid"}}),
        pdbs_in_namespace=[pdb(allowed=0)],
        now=NOW,
        dry_run=dry_run,
    )
    assert (err.code, err.message, err.headers) == (429, REFUSED, {"Retry-After": "10"})
    assert err.details is not None
    assert err.details["causes"][0]["message"] == (
        "The disruption budget budget is still being processed by the server."
    )


def test_empty_uid_precondition() -> None:
    """Skipped by the condition step, but the store compares it on a dry run."""
    body = eviction({"preconditions": {"uid": ""}})
    decision = decide_eviction(pod(ready=False), body, [pdb(allowed=0)], NOW)
    assert decision.add_disruption_target_condition
    err = refusal(
        pod=pod(ready=False), ev=body, pdbs_in_namespace=[pdb(allowed=0)], now=NOW, dry_run=["All"]
    )
    assert err.code == 429


def test_conflict_after_spending_the_budget() -> None:
    decision = decide_eviction(
        pod(), eviction({"preconditions": {"uid": "old-uid"}}), [pdb(allowed=3)], NOW
    )
    assert decision.pdb_to_update is not None
    assert decision.pdb_to_update["status"]["disruptionsAllowed"] == 2
    assert not decision.add_disruption_target_condition
    assert decision.error_after_pdb_update is not None
    assert decision.error_after_pdb_update.code == 409
    assert decision.error_after_pdb_update.message == UID_CONFLICT


def test_matching_preconditions_pass() -> None:
    options = {"preconditions": {"uid": "pod-uid", "resourceVersion": "42"}}
    decision = decide_eviction(pod(), eviction(options), [pdb()], NOW)
    assert decision.error_after_pdb_update is None
    assert decision.add_disruption_target_condition


# --- the DisruptionTarget condition ----------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "want_rv"),
    [
        ({"preconditions": {"resourceVersion": "42"}}, "43"),
        ({"preconditions": {"uid": "pod-uid"}}, None),
        ({}, None),
    ],
)
def test_delete_options_after_condition(options: dict[str, Any], want_rv: str | None) -> None:
    decision = EvictionDecision(None, options, True)
    updated = {"metadata": {"resourceVersion": "43"}}
    got = decision.delete_options_after_condition(updated)
    assert (got.get("preconditions") or {}).get("resourceVersion") == want_rv
    assert decision.delete_options == options


DISRUPTION_TARGET = {
    "type": "DisruptionTarget",
    "status": "True",
    "lastProbeTime": None,
    "lastTransitionTime": NOW_S,
    "reason": "EvictionByEvictionAPI",
    "message": "Eviction API: evicting",
}


@pytest.mark.parametrize(
    ("existing", "transition"),
    [
        pytest.param(None, NOW_S, id="added"),
        pytest.param(
            {"type": "DisruptionTarget", "status": "False", "lastTransitionTime": EARLIER},
            NOW_S,
            id="flipped to True",
        ),
        pytest.param(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "lastProbeTime": EARLIER,
                "lastTransitionTime": EARLIER,
                "reason": "PreemptionByScheduler",
            },
            EARLIER,
            id="already True keeps its transition time",
        ),
    ],
)
def test_with_disruption_target_condition(existing: dict[str, Any] | None, transition: str) -> None:
    target = pod()
    if existing is not None:
        target["status"]["conditions"].append(existing)
    before = copy.deepcopy(target)
    out = with_disruption_target_condition(target, NOW)
    assert out["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {**DISRUPTION_TARGET, "lastTransitionTime": transition},
    ]
    assert target == before
