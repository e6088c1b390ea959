"""The disruption controller's computation of a PodDisruptionBudget's status.

The eviction subresource trusts `status.disruptionsAllowed` blindly, so the simulated cluster has
to produce the very numbers kube-controller-manager would: the same rounding of percentages, the
same pods counted as healthy, the same expiry of `disruptedPods`, and the same fail-safe when the
expected pod count cannot be worked out. The code follows `pkg/controller/disruption/disruption.go`
(`trySync`, `getExpectedPodCount`, `getExpectedScale`, `countHealthyPods`, `buildDisruptedPodMap`,
`updatePdbStatus`, `failSafe`) and the condition helpers of
`k8s.io/component-helpers/apps/poddisruptionbudget` (`UpdateDisruptionAllowedCondition`).

Everything here is pure: objects are plain dicts as they travel on the wire, and the caller
decides whether the returned status differs from the stored one and needs writing.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from nodeops.common.selectors import label_selector_from_object
from nodeops.sim.clock import parse_time

DELETION_TIMEOUT = timedelta(minutes=2)
"""How long an entry of `status.disruptedPods` protects a pod the eviction API approved.

kube's `DeletionTimeout`: if the pod has not been marked for deletion by then, the eviction is
assumed to have been lost and the pod counts as healthy again.
"""

DISRUPTION_ALLOWED = "DisruptionAllowed"
SUFFICIENT_PODS = "SufficientPods"
INSUFFICIENT_PODS = "InsufficientPods"
SYNC_FAILED = "SyncFailed"


class ControllerScale(NamedTuple):
    """The scale of the controller that is ultimately responsible for a pod.

    A ReplicaSet owned by a Deployment is answered with the Deployment's uid and replicas, so that
    the old and new ReplicaSets of a rolling update count the Deployment once, as kube does.
    """

    uid: str
    replicas: int


class ScaleLookupError(Exception):
    """Raised by a `scale_of` callback when kube's finder would have failed with an error.

    For example "deployments.apps does not implement the scale subresource": the message becomes the
    `SyncFailed` condition's message, exactly as the controller's `failSafe` records `err.Error()`.
    """


ScaleOf = Callable[[dict[str, Any]], int | ControllerScale | None]
"""Scale of the controller named by an ownerReference with `controller: true`.

An int is the replicas of that very controller; a `ControllerScale` names the controller whose
replicas they are (a Deployment above a ReplicaSet); None means no such controller exists.
"""


class _SyncError(Exception):
    """A failure that sends the controller down its fail-safe path."""


def rfc3339(t: datetime) -> str:
    """`metav1.Time` as it is serialised: UTC, second precision."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_is_healthy(pod: Mapping[str, Any]) -> bool:
    """Whether a pod counts as healthy for a disruption budget: its Ready condition is True.

    kube uses `IsPodReady` for this in both the controller and the eviction subresource, without
    looking at the phase; whether a pod that is being deleted counts is a separate question each
    caller answers for itself.
    """
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def find_condition(
    conditions: Iterable[Mapping[str, Any]] | None, type_: str
) -> dict[str, Any] | None:
    for cond in conditions or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def set_status_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: str,
    reason: str,
    message: str,
    observed_generation: int,
    now: datetime,
) -> None:
    """Insert or update a `metav1.Condition` in place the way `meta.SetStatusCondition` does.

    The transition time moves only when the status flips, so a controller recomputing an unchanged
    budget produces an identical status and does not write.
    """
    for cond in conditions:
        if cond.get("type") != type_:
            continue
        if cond.get("status") != status:
            cond["status"] = status
            cond["lastTransitionTime"] = rfc3339(now)
        cond["reason"] = reason
        cond["message"] = message
        if observed_generation:
            cond["observedGeneration"] = observed_generation
        else:
            cond.pop("observedGeneration", None)
        return
    new: dict[str, Any] = {"type": type_, "status": status}
    if observed_generation:
        new["observedGeneration"] = observed_generation
    new["lastTransitionTime"] = rfc3339(now)
    new["reason"] = reason
    new["message"] = message
    conditions.append(new)


def update_disruption_allowed_condition(status: dict[str, Any], now: datetime) -> None:
    """Bring the `DisruptionAllowed` condition in line with `disruptionsAllowed`, in place.

    Shared by the controller and the eviction subresource (which calls it when its decrement reaches
    zero), as kube shares `UpdateDisruptionAllowedCondition`.
    """
    conditions = status.setdefault("conditions", [])
    if conditions is None:
        conditions = status["conditions"] = []
    observed = int(status.get("observedGeneration") or 0)
    if int(status.get("disruptionsAllowed") or 0) > 0:
        set_status_condition(
            conditions, DISRUPTION_ALLOWED, "True", SUFFICIENT_PODS, "", observed, now
        )
    else:
        set_status_condition(
            conditions, DISRUPTION_ALLOWED, "False", INSUFFICIENT_PODS, "", observed, now
        )


class Member(NamedTuple):
    """What a budget's status needs of one selected pod."""

    deleting: bool
    healthy: bool
    """`pod_is_healthy`."""
    controller: dict[str, Any] | None
    """Its ownerReference with `controller: true`, if any."""


def member_of(pod: Mapping[str, Any]) -> Member:
    meta = pod.get("metadata") or {}
    return Member(bool(meta.get("deletionTimestamp")), pod_is_healthy(pod), _controller_ref(pod))


class Members:
    """The pods a budget selects, by name, with the sums its status is made of.

    The disruption controller keeps one per budget current from pod events, so a budget's
    status costs its controllers and its `disruptedPods`, not its pods; `compute_pdb_status`
    builds one from a list.
    """

    __slots__ = ("_by_name", "_controllers", "live_healthy")

    def __init__(self) -> None:
        self._by_name: dict[str, Member] = {}
        self._controllers: dict[str, dict[str, dict[str, Any]]] = {}
        """Controller uid -> its members' names -> their ownerReference, the controllers in
        the order their first pod came."""
        self.live_healthy = 0
        """Healthy members not being deleted."""

    def __len__(self) -> int:
        return len(self._by_name)

    def get(self, name: str) -> Member | None:
        return self._by_name.get(name)

    def names(self) -> set[str]:
        return set(self._by_name)

    def controllers(self) -> Iterable[tuple[dict[str, Any], str]]:
        """Each controller of a member once: its ownerReference and a member's name."""
        for names in self._controllers.values():
            name, ref = next(iter(names.items()))
            yield ref, name

    def put(self, name: str, member: Member | None) -> None:
        """Set (None: remove) the member of this name."""
        before = self._by_name.pop(name, None)
        if before is not None:
            self._count(before, -1, name)
        if member is not None:
            self._by_name[name] = member
            self._count(member, +1, name)

    def _count(self, m: Member, sign: int, name: str) -> None:
        if m.healthy and not m.deleting:
            self.live_healthy += sign
        if m.controller is None:
            return
        ref_uid = str(m.controller.get("uid", ""))
        if sign > 0:
            self._controllers.setdefault(ref_uid, {})[name] = m.controller
            return
        names = self._controllers.get(ref_uid)
        if names is not None:
            names.pop(name, None)
            if not names:
                del self._controllers[ref_uid]

    @classmethod
    def of(cls, pods: Iterable[Mapping[str, Any]]) -> Members:
        members = cls()
        for pod in pods:
            members.put(str((pod.get("metadata") or {}).get("name", "")), member_of(pod))
        return members


def compute_pdb_status(
    pdb: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    scale_of: ScaleOf,
    now: datetime,
) -> dict[str, Any]:
    """The status the disruption controller would write for `pdb` at `now`.

    `pods` are the pods of the budget's namespace; the ones the selector picks are used, including
    terminating and finished ones, because kube's lister returns those too: an integer
    `minAvailable` counts them as expected pods, and only the health count leaves them out.
    On a failure (invalid selector, a pod with no findable controller, a `ScaleLookupError`, an
    invalid IntOrString) the old status is kept with `disruptionsAllowed` forced to 0 and a
    `SyncFailed` condition, kube's fail-safe that stops evictions until the budget can be judged.
    """
    try:
        selected = _pods_for_pdb(pdb, pods)
    except _SyncError as err:
        return _fail_safe(pdb, str(err), now)
    return pdb_status_of(pdb, Members.of(selected), scale_of, now)


def pdb_status_of(
    pdb: Mapping[str, Any], selected: Members, scale_of: ScaleOf, now: datetime
) -> dict[str, Any]:
    """`compute_pdb_status` for the pods its selector picks, `selected` (valid selector)."""
    try:
        expected, desired = _expected_pod_count(pdb, selected, scale_of)
    except _SyncError as err:
        return _fail_safe(pdb, str(err), now)

    old = pdb.get("status") or {}
    disrupted = _build_disrupted_pod_map(selected, old.get("disruptedPods") or {}, now)
    healthy = _count_healthy_pods(selected, disrupted, now)

    # A budget that expects no pods allows nothing, so that pods appearing before the controller
    # has caught up with them are protected.
    allowed = healthy - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0

    generation = int((pdb.get("metadata") or {}).get("generation") or 0)
    status: dict[str, Any] = {}
    if generation:
        status["observedGeneration"] = generation
    if disrupted:
        status["disruptedPods"] = disrupted
    status["disruptionsAllowed"] = allowed
    status["currentHealthy"] = healthy
    status["desiredHealthy"] = desired
    status["expectedPods"] = expected
    status["conditions"] = copy.deepcopy(list(old.get("conditions") or []))
    update_disruption_allowed_condition(status, now)
    return status


def pdb_recheck_time(status: Mapping[str, Any]) -> datetime | None:
    """When the controller must look at the budget again although nothing changed.

    The earliest expiry of a `disruptedPods` entry: at that moment the pod counts as healthy again
    and `disruptionsAllowed` can grow. kube queues the budget for exactly that time.
    """
    times = [parse_time(t) for t in (status.get("disruptedPods") or {}).values()]
    return min(times) + DELETION_TIMEOUT if times else None


def _pods_for_pdb(
    pdb: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    meta = pdb.get("metadata") or {}
    namespace = meta.get("namespace", "")
    try:
        # A null selector selects nothing, an empty one everything (LabelSelectorAsSelector).
        selector = label_selector_from_object((pdb.get("spec") or {}).get("selector"))
    except ValueError as err:
        raise _SyncError(str(err)) from err
    out = []
    for pod in pods:
        pmeta = pod.get("metadata") or {}
        if pmeta.get("namespace", "") != namespace:
            continue
        if selector.matches(pmeta.get("labels") or {}):
            out.append(pod)
    return out


def _expected_pod_count(
    pdb: Mapping[str, Any], pods: Members, scale_of: ScaleOf
) -> tuple[int, int]:
    """(expectedCount, desiredHealthy) as `getExpectedPodCount` works them out.

    `maxUnavailable` wins over `minAvailable`. Both round a percentage up, which for
    `maxUnavailable` means fewer healthy pods are demanded; only an integer `minAvailable` can do
    without the controllers' scale, and then the selected pods are the expected count.
    """
    spec = pdb.get("spec") or {}
    max_unavailable = spec.get("maxUnavailable")
    min_available = spec.get("minAvailable")
    if max_unavailable is not None:
        expected = _expected_scale(pods, scale_of)
        unavailable = scaled_value(max_unavailable, expected, round_up=True)
        return expected, max(0, expected - unavailable)
    if min_available is not None:
        if isinstance(min_available, int):
            return len(pods), min_available
        expected = _expected_scale(pods, scale_of)
        return expected, scaled_value(min_available, expected, round_up=True)
    return 0, 0


_ATOI = re.compile(r"[+-]?[0-9]+")


def scaled_value(value: int | str, total: int, *, round_up: bool) -> int:
    """`intstr.GetScaledValueFromIntOrPercent`: an int as is, "N%" of `total` rounded.

    The float arithmetic is kube's own, so results agree at every boundary.
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise _SyncError("invalid value for IntOrString: invalid type: neither int nor percentage")
    if isinstance(value, int):
        return value
    if not value.endswith("%"):
        raise _SyncError("invalid value for IntOrString: invalid type: string is not a percentage")
    digits = value[:-1]
    if not _ATOI.fullmatch(digits):
        raise _SyncError(
            f'invalid value for IntOrString: invalid value "{value}": '
            f'strconv.Atoi: parsing "{digits}": invalid syntax'
        )
    fraction = float(int(digits)) * float(total) / 100
    return int(math.ceil(fraction) if round_up else math.floor(fraction))


def _controller_ref(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") is True:
            return dict(ref)
    return None


def _expected_scale(pods: Members, scale_of: ScaleOf) -> int:
    """Sum of the scales of the controllers of `pods`, each controller counted once.

    Pods without a controller are skipped (kube only emits an UnmanagedPods event for them); a pod
    whose controller cannot be found fails the whole sync.
    """
    scales: dict[str, int] = {}
    seen_refs: set[str] = set()
    for ref, name in pods.controllers():
        ref_uid = str(ref.get("uid", ""))
        if ref_uid in seen_refs or ref_uid in scales:
            continue
        try:
            found = scale_of(dict(ref))
        except ScaleLookupError as err:
            raise _SyncError(str(err)) from err
        if found is None:
            raise _SyncError(f'found no controllers for pod "{name}"')
        seen_refs.add(ref_uid)
        if isinstance(found, ControllerScale):
            scales[found.uid] = found.replicas
        else:
            scales[ref_uid] = found
    return sum(scales.values())


def _build_disrupted_pod_map(
    pods: Members, disrupted: Mapping[str, str], now: datetime
) -> dict[str, str]:
    """The entries of `disruptedPods` that still protect a pod, by pod name (the order Go
    writes a map in).

    An entry goes once its pod is gone, once the pod is marked for deletion (the eviction took
    effect, the pod is out of the health count on its own), or once `DELETION_TIMEOUT` has passed
    without the deletion showing up.
    """
    kept: dict[str, str] = {}
    for name in sorted(disrupted):
        member = pods.get(name)
        if member is None or member.deleting:
            continue
        when = disrupted[name]
        if parse_time(when) + DELETION_TIMEOUT < now:
            continue
        kept[name] = when
    return kept


def _count_healthy_pods(pods: Members, disrupted: Mapping[str, str], now: datetime) -> int:
    """Ready pods that are neither being deleted nor about to be deleted by an approved eviction.

    The expiry test is strict here but not in `_build_disrupted_pod_map`, as in kube: at the exact
    expiry instant the entry is kept and the pod already counts as healthy. `disrupted` holds
    only members not being deleted.
    """
    healthy = pods.live_healthy
    for name, when in disrupted.items():
        member = pods.get(name)
        if member is not None and member.healthy and parse_time(when) + DELETION_TIMEOUT > now:
            healthy -= 1
    return healthy


def _fail_safe(pdb: Mapping[str, Any], message: str, now: datetime) -> dict[str, Any]:
    """kube's `failSafe`: keep the old status but allow no disruption and say why.

    The condition's observedGeneration is the old status's, not the object's: the budget has not
    been processed at its current generation.
    """
    old = copy.deepcopy(dict(pdb.get("status") or {}))
    status: dict[str, Any] = {}
    if old.get("observedGeneration"):
        status["observedGeneration"] = old["observedGeneration"]
    if old.get("disruptedPods"):
        status["disruptedPods"] = old["disruptedPods"]
    status["disruptionsAllowed"] = 0
    status["currentHealthy"] = int(old.get("currentHealthy") or 0)
    status["desiredHealthy"] = int(old.get("desiredHealthy") or 0)
    status["expectedPods"] = int(old.get("expectedPods") or 0)
    conditions: list[dict[str, Any]] = list(old.get("conditions") or [])
    set_status_condition(
        conditions,
        DISRUPTION_ALLOWED,
        "False",
        SYNC_FAILED,
        message,
        int(old.get("observedGeneration") or 0),
        now,
    )
    status["conditions"] = conditions
    return status
