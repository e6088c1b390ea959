"""The disruption controller's PDB status, case by case against kube's disruption.go."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodeops.sim.cluster.pdb_status import (
    DELETION_TIMEOUT,
    ControllerScale,
    ScaleLookupError,
    compute_pdb_status,
    pdb_recheck_time,
    pod_is_healthy,
    scaled_value,
    update_disruption_allowed_condition,
)

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
NOW_S = "2024-05-01T12:00:00Z"
EARLIER = "2024-05-01T11:00:00Z"


def ts(delta: timedelta) -> str:
    return (NOW + delta).strftime("%Y-%m-%dT%H:%M:%SZ")


def rs_ref(name: str = "rs", uid: str = "rs-uid") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": name,
        "uid": uid,
        "controller": True,
    }


def pod(
    name: str,
    *,
    ready: bool = True,
    deleting: bool = False,
    labels: dict[str, str] | None = None,
    namespace: str = "ns",
    owner: dict[str, Any] | None = None,
    phase: str = "Running",
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {"app": "web"} if labels is None else labels,
        "ownerReferences": [owner or rs_ref()],
    }
    if owner == {}:
        del meta["ownerReferences"]
    if deleting:
        meta["deletionTimestamp"] = NOW_S
    return {
        "metadata": meta,
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pdb(
    *,
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
    generation: int = 3,
    status: dict[str, Any] | None = None,
    selector: Any = "default",
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if selector == "default":
        spec["selector"] = {"matchLabels": {"app": "web"}}
    elif selector is not None:
        spec["selector"] = selector
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    out: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "budget", "namespace": "ns", "generation": generation},
        "spec": spec,
    }
    if status is not None:
        out["status"] = status
    return out


def scales(**by_uid: int) -> Any:
    def scale_of(ref: dict[str, Any]) -> int | None:
        return by_uid.get(ref["uid"].replace("-", "_"))

    return scale_of


def no_scale(ref: dict[str, Any]) -> int | None:
    raise AssertionError("the scale must not be needed")


def counts(status: dict[str, Any]) -> tuple[int, int, int, int]:
    return (
        status["expectedPods"],
        status["desiredHealthy"],
        status["currentHealthy"],
        status["disruptionsAllowed"],
    )


def condition(status: dict[str, Any]) -> dict[str, Any]:
    (cond,) = [c for c in status["conditions"] if c["type"] == "DisruptionAllowed"]
    return cond


# --- budgets and their numbers -------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "pods", "scale_of", "want"),
    [
        pytest.param(
            pdb(min_available=2),
            [pod("a"), pod("b"), pod("c")],
            no_scale,
            (3, 2, 3, 1),
            id="int minAvailable: expected is the selected pods, no scale needed",
        ),
        pytest.param(
            pdb(min_available=2),
            [pod("a"), pod("b", ready=False), pod("c")],
            no_scale,
            (3, 2, 2, 0),
            id="int minAvailable: an unready pod is not healthy",
        ),
        pytest.param(
            pdb(min_available=2),
            [pod("a"), pod("b", deleting=True), pod("c")],
            no_scale,
            (3, 2, 2, 0),
            id="int minAvailable: a terminating pod is expected but not healthy",
        ),
        pytest.param(
            pdb(min_available=1),
            [pod("a"), pod("b", phase="Succeeded", ready=False)],
            no_scale,
            (2, 1, 1, 0),
            id="int minAvailable: a finished pod still counts as expected",
        ),
        pytest.param(
            pdb(min_available=0),
            [],
            no_scale,
            (0, 0, 0, 0),
            id="no expected pods allows no disruption",
        ),
        pytest.param(
            pdb(min_available="50%"),
            [pod(n) for n in "abcde"],
            scales(rs_uid=5),
            (5, 3, 5, 2),
            id="percent minAvailable rounds up: 50% of 5 is 3",
        ),
        pytest.param(
            pdb(min_available="34%"),
            [pod(n) for n in "abc"],
            scales(rs_uid=3),
            (3, 2, 3, 1),
            id="percent minAvailable rounds up: 34% of 3 is 2",
        ),
        pytest.param(
            pdb(min_available="50%"),
            [pod("a")],
            scales(rs_uid=4),
            (4, 2, 1, 0),
            id="percent minAvailable uses the controller's scale, not the pod count",
        ),
        pytest.param(
            pdb(max_unavailable=1),
            [pod(n) for n in "abcd"],
            scales(rs_uid=4),
            (4, 3, 4, 1),
            id="int maxUnavailable",
        ),
        pytest.param(
            pdb(max_unavailable="30%"),
            [pod(n) for n in "abcde"],
            scales(rs_uid=5),
            (5, 3, 5, 2),
            id="percent maxUnavailable rounds up: 30% of 5 is 2 unavailable",
        ),
        pytest.param(
            pdb(max_unavailable="10%"),
            [pod(n) for n in "abc"],
            scales(rs_uid=3),
            (3, 2, 3, 1),
            id="percent maxUnavailable rounds up: 10% of 3 is 1 unavailable",
        ),
        pytest.param(
            pdb(max_unavailable=5),
            [pod("a"), pod("b", ready=False)],
            scales(rs_uid=2),
            (2, 0, 1, 1),
            id="maxUnavailable above the scale leaves desiredHealthy at 0",
        ),
        pytest.param(
            pdb(max_unavailable=1, min_available=10),
            [pod("a"), pod("b")],
            scales(rs_uid=2),
            (2, 1, 2, 1),
            id="maxUnavailable wins over minAvailable",
        ),
        pytest.param(
            pdb(max_unavailable=0),
            [pod("a"), pod("b", owner={})],
            scales(rs_uid=1),
            (1, 1, 2, 1),
            id="unmanaged pods add no scale but count as healthy",
        ),
        pytest.param(
            pdb(max_unavailable=1),
            [pod("a"), pod("b"), pod("c", owner=rs_ref("other", "rs2-uid"))],
            scales(rs_uid=2, rs2_uid=5),
            (7, 6, 3, 0),
            id="each controller's scale is added once",
        ),
        pytest.param(
            pdb(max_unavailable=1),
            [pod("a"), pod("b", owner=rs_ref("new", "rs2-uid"))],
            lambda ref: ControllerScale("deploy-uid", 3),
            (3, 2, 2, 0),
            id="two ReplicaSets of one Deployment count the Deployment once",
        ),
        pytest.param(
            pdb(min_available=1),
            [pod("a"), pod("b", labels={"app": "db"}), pod("c", namespace="other")],
            no_scale,
            (1, 1, 1, 0),
            id="only selected pods of the budget's namespace count",
        ),
        pytest.param(
            pdb(min_available=0, selector=None),
            [pod("a")],
            no_scale,
            (0, 0, 0, 0),
            id="a null selector selects nothing",
        ),
        pytest.param(
            pdb(min_available=0, selector={}),
            [pod("a"), pod("b", labels={})],
            no_scale,
            (2, 0, 2, 2),
            id="an empty selector selects every pod",
        ),
        pytest.param(
            pdb(),
            [pod("a")],
            no_scale,
            (0, 0, 1, 0),
            id="neither minAvailable nor maxUnavailable",
        ),
    ],
)
def test_counts(
    budget: dict[str, Any], pods: list[dict[str, Any]], scale_of: Any, want: tuple[int, ...]
) -> None:
    status = compute_pdb_status(budget, pods, scale_of, NOW)
    assert counts(status) == want
    assert status["observedGeneration"] == 3
    cond = condition(status)
    if want[3] > 0:
        assert (cond["status"], cond["reason"]) == ("True", "SufficientPods")
    else:
        assert (cond["status"], cond["reason"]) == ("False", "InsufficientPods")
    assert cond["message"] == ""
    assert cond["observedGeneration"] == 3
    assert cond["lastTransitionTime"] == NOW_S


def test_scale_is_looked_up_once_per_controller() -> None:
    asked: list[str] = []

    def scale_of(ref: dict[str, Any]) -> int | None:
        asked.append(ref["name"])
        return 3

    pods = [pod("a"), pod("b"), pod("c", owner=rs_ref("other", "rs2-uid")), pod("d")]
    status = compute_pdb_status(pdb(max_unavailable=1), pods, scale_of, NOW)
    assert asked == ["rs", "other"]
    assert status["expectedPods"] == 6


def test_only_the_controller_owner_has_a_scale() -> None:
    owner = {**rs_ref(), "controller": False}
    status = compute_pdb_status(pdb(max_unavailable=1), [pod("a", owner=owner)], no_scale, NOW)
    assert counts(status) == (0, 0, 1, 0)
    assert condition(status)["reason"] == "InsufficientPods"


def test_budget_and_pods_are_not_modified() -> None:
    budget = pdb(min_available=1, status={"disruptedPods": {"a": NOW_S}, "conditions": []})
    pods = [pod("a"), pod("b")]
    before = copy.deepcopy((budget, pods))
    compute_pdb_status(budget, pods, no_scale, NOW)
    assert (budget, pods) == before


def test_status_field_layout() -> None:
    status = compute_pdb_status(pdb(min_available=1), [pod("a"), pod("b")], no_scale, NOW)
    assert status == {
        "observedGeneration": 3,
        "disruptionsAllowed": 1,
        "currentHealthy": 2,
        "desiredHealthy": 1,
        "expectedPods": 2,
        "conditions": [
            {
                "type": "DisruptionAllowed",
                "status": "True",
                "observedGeneration": 3,
                "lastTransitionTime": NOW_S,
                "reason": "SufficientPods",
                "message": "",
            }
        ],
    }


def test_generation_zero_leaves_observed_generation_out() -> None:
    status = compute_pdb_status(pdb(min_available=1, generation=0), [pod("a")], no_scale, NOW)
    assert "observedGeneration" not in status
    assert "observedGeneration" not in condition(status)


# --- disruptedPods ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "target", "kept", "healthy"),
    [
        pytest.param(ts(-timedelta(minutes=1)), pod("a"), True, 1, id="recent entry protects"),
        pytest.param(ts(-timedelta(minutes=3)), pod("a"), False, 2, id="expired entry goes"),
        pytest.param(
            ts(-DELETION_TIMEOUT),
            pod("a"),
            True,
            2,
            id="at the exact expiry the entry stays but the pod is healthy again",
        ),
        pytest.param(
            ts(-timedelta(seconds=1)),
            pod("a", deleting=True),
            False,
            1,
            id="entry of a pod being deleted goes",
        ),
        pytest.param(ts(-timedelta(seconds=1)), None, False, 1, id="entry of a gone pod goes"),
        pytest.param(
            ts(-timedelta(seconds=1)),
            pod("a", ready=False),
            True,
            1,
            id="entry of an unready pod stays",
        ),
    ],
)
def test_disrupted_pods(
    entry: str, target: dict[str, Any] | None, kept: bool, healthy: int
) -> None:
    pods = [pod("b")] + ([target] if target else [])
    budget = pdb(min_available=0, status={"disruptedPods": {"a": entry}})
    status = compute_pdb_status(budget, pods, no_scale, NOW)
    if kept:
        assert status["disruptedPods"] == {"a": entry}
    else:
        assert "disruptedPods" not in status
    assert status["currentHealthy"] == healthy
    assert status["disruptionsAllowed"] == healthy


def test_recheck_time_is_the_earliest_expiry() -> None:
    status = {"disruptedPods": {"a": ts(-timedelta(seconds=30)), "b": ts(-timedelta(seconds=90))}}
    assert pdb_recheck_time(status) == NOW - timedelta(seconds=90) + DELETION_TIMEOUT
    assert pdb_recheck_time({}) is None


# --- conditions ------------------------------------------------------------------------------


def test_unchanged_condition_keeps_its_transition_time() -> None:
    old_cond = {
        "type": "DisruptionAllowed",
        "status": "True",
        "observedGeneration": 2,
        "lastTransitionTime": EARLIER,
        "reason": "SufficientPods",
        "message": "",
    }
    budget = pdb(min_available=1, status={"conditions": [old_cond]})
    status = compute_pdb_status(budget, [pod("a"), pod("b")], no_scale, NOW)
    assert condition(status) == {**old_cond, "observedGeneration": 3}


def test_failed_sync_recovers_to_insufficient_pods() -> None:
    old_cond = {
        "type": "DisruptionAllowed",
        "status": "False",
        "observedGeneration": 3,
        "lastTransitionTime": EARLIER,
        "reason": "SyncFailed",
        "message": 'found no controllers for pod "a"',
    }
    budget = pdb(min_available=1, status={"conditions": [old_cond]})
    status = compute_pdb_status(budget, [pod("a")], no_scale, NOW)
    assert condition(status) == {**old_cond, "reason": "InsufficientPods", "message": ""}


def test_other_conditions_are_kept() -> None:
    other = {"type": "Other", "status": "True", "lastTransitionTime": EARLIER, "reason": "X"}
    budget = pdb(min_available=1, status={"conditions": [other]})
    status = compute_pdb_status(budget, [pod("a")], no_scale, NOW)
    assert status["conditions"][0] == other
    assert len(status["conditions"]) == 2


def test_update_disruption_allowed_condition_creates_the_list() -> None:
    status: dict[str, Any] = {"disruptionsAllowed": 0, "observedGeneration": 1}
    update_disruption_allowed_condition(status, NOW)
    assert status["conditions"] == [
        {
            "type": "DisruptionAllowed",
            "status": "False",
            "observedGeneration": 1,
            "lastTransitionTime": NOW_S,
            "reason": "InsufficientPods",
            "message": "",
        }
    ]


# --- the fail-safe ---------------------------------------------------------------------------

OLD_STATUS = {
    "observedGeneration": 2,
    "disruptedPods": {"a": NOW_S},
    "disruptionsAllowed": 4,
    "currentHealthy": 5,
    "desiredHealthy": 1,
    "expectedPods": 5,
    "conditions": [
        {
            "type": "DisruptionAllowed",
            "status": "True",
            "observedGeneration": 2,
            "lastTransitionTime": EARLIER,
            "reason": "SufficientPods",
            "message": "",
        }
    ],
}


def failing_scale(ref: dict[str, Any]) -> int | None:
    raise ScaleLookupError("foos.example.com does not implement the scale subresource")


@pytest.mark.parametrize(
    ("budget", "pods", "scale_of", "message"),
    [
        pytest.param(
            pdb(max_unavailable=1, status=OLD_STATUS),
            [pod("a"), pod("b")],
            scales(),
            'found no controllers for pod "a"',
            id="no controller found",
        ),
        pytest.param(
            pdb(min_available="50%", status=OLD_STATUS),
            [pod("a")],
            failing_scale,
            "foos.example.com does not implement the scale subresource",
            id="scale lookup error",
        ),
        pytest.param(
            pdb(min_available="5", status=OLD_STATUS),
            [pod("a")],
            scales(rs_uid=1),
            "invalid value for IntOrString: invalid type: string is not a percentage",
            id="minAvailable string without percent",
        ),
        pytest.param(
            pdb(max_unavailable="x%", status=OLD_STATUS),
            [pod("a")],
            scales(rs_uid=1),
            'invalid value for IntOrString: invalid value "x%": '
            'strconv.Atoi: parsing "x": invalid syntax',
            id="maxUnavailable percent that is no number",
        ),
    ],
)
def test_fail_safe(
    budget: dict[str, Any], pods: list[dict[str, Any]], scale_of: Any, message: str
) -> None:
    status = compute_pdb_status(budget, pods, scale_of, NOW)
    assert status == {
        **OLD_STATUS,
        "disruptionsAllowed": 0,
        "conditions": [
            {
                "type": "DisruptionAllowed",
                "status": "False",
                "observedGeneration": 2,
                "lastTransitionTime": NOW_S,
                "reason": "SyncFailed",
                "message": message,
            }
        ],
    }


def test_fail_safe_on_an_empty_status_fills_zeroes() -> None:
    status = compute_pdb_status(pdb(max_unavailable=1), [pod("a")], scales(), NOW)
    assert status == {
        "disruptionsAllowed": 0,
        "currentHealthy": 0,
        "desiredHealthy": 0,
        "expectedPods": 0,
        "conditions": [
            {
                "type": "DisruptionAllowed",
                "status": "False",
                "lastTransitionTime": NOW_S,
                "reason": "SyncFailed",
                "message": 'found no controllers for pod "a"',
            }
        ],
    }


def test_invalid_selector_fails_the_sync() -> None:
    bad = {"matchExpressions": [{"key": "app", "operator": "Sometimes", "values": ["x"]}]}
    status = compute_pdb_status(pdb(min_available=1, selector=bad), [pod("a")], no_scale, NOW)
    cond = condition(status)
    assert (status["disruptionsAllowed"], cond["reason"], cond["status"]) == (
        0,
        "SyncFailed",
        "False",
    )
    assert cond["message"] == '"Sometimes" is not a valid label selector operator'


# --- helpers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "total", "round_up", "want"),
    [
        (3, 10, True, 3),
        ("25%", 10, True, 3),
        ("25%", 10, False, 2),
        ("100%", 7, True, 7),
        ("0%", 7, True, 0),
        ("+50%", 3, True, 2),
    ],
)
def test_scaled_value(value: int | str, total: int, round_up: bool, want: int) -> None:
    assert scaled_value(value, total, round_up=round_up) == want


@pytest.mark.parametrize(
    ("conditions", "want"),
    [
        ([{"type": "Ready", "status": "True"}], True),
        ([{"type": "Ready", "status": "False"}], False),
        ([{"type": "Ready", "status": "Unknown"}], False),
        ([{"type": "ContainersReady", "status": "True"}], False),
        ([], False),
        (None, False),
    ],
)
def test_pod_is_healthy(conditions: list[dict[str, str]] | None, want: bool) -> None:
    assert pod_is_healthy({"status": {"phase": "Running", "conditions": conditions}}) is want
