"""The decision behind `POST /api/v1/namespaces/{ns}/pods/{name}/eviction`.

kube's `EvictionREST.Create` (`pkg/registry/core/pod/storage/eviction.go`) interleaves its checks
with reads and writes and retries on conflicts. The simulated server takes the decision inside one
atomic store step, so no conflict can arise between reading the budget and spending it, and the
rule set reduces to a pure function of the pod, the Eviction body and the namespace's budgets:
`decide_eviction`. The server then carries out the `EvictionDecision` in kube's order (write the
budget and let its watchers see it, add the pod's DisruptionTarget condition, delete the pod,
answer) or answers the `ApiError` it raised; see `subresources.evict`.

Texts, codes and causes are kube's, including those of the latest `checkAndDecrement`, whose
refusals explain a budget's `DisruptionAllowed` condition and carry a `DisruptionBudget` cause on
the 403 answers as well.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeops.common.jsonbytes import json_copy
from nodeops.common.selectors import label_selector_from_object
from nodeops.sim.cluster.pdb_status import (
    DISRUPTION_ALLOWED,
    SYNC_FAILED,
    find_condition,
    pod_is_healthy,
    rfc3339,
    update_disruption_allowed_condition,
)
from nodeops.sim.server.errors import ApiError, bad_request, conflict, forbidden, too_many_requests

MAX_DISRUPTED_POD_SIZE = 2000
"""Approved but unconfirmed evictions a budget may hold before further ones are refused.

Past this many `disruptedPods` entries the disruption controller is evidently not keeping up, and
kube refuses with 403 until the entries are confirmed or expire.
"""

RETRY_AFTER_SECONDS = 10
"""The Retry-After kube suggests when a budget has not been processed yet.

A budget that simply allows no disruption is refused without one (retryAfterSeconds 0, no header).
"""

DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"

TOO_MANY_REQUESTS_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."

MULTIPLE_PDBS_MESSAGE = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."

ALWAYS_ALLOW = "AlwaysAllow"
IF_HEALTHY_BUDGET = "IfHealthyBudget"

DISRUPTION_TARGET = "DisruptionTarget"
EVICTION_BY_EVICTION_API = "EvictionByEvictionAPI"
EVICTION_CONDITION_MESSAGE = "Eviction API: evicting"


class UnknownReasonError(ApiError):
    """A failure whose Status has no reason, as kube writes errors it has no reason for.

    kube answers a failed `metav1.Status` returned by a handler, and plain Go errors, with the
    `reason` field left out (StatusReasonUnknown is the empty string, dropped by omitempty).
    """

    def status(self) -> dict[str, Any]:
        body = super().status()
        if not body.get("reason"):
            body.pop("reason", None)
        return body


@dataclass
class EvictionDecision:
    """What the server must do to carry out an eviction that was not refused outright.

    In order:
    1. If `pdb_to_update` is set, store it as the budget's new status (a status update: the
       resourceVersion moves, the generation does not).
    2. If `error_after_pdb_update` is set, answer it and leave the pod alone. kube has already
       written the budget when the pod's preconditions turn out not to hold, and the budget stays
       decremented until the disruption controller expires the entry.
    3. If `add_disruption_target_condition`, update the pod through its status path with
       `with_disruption_target_condition`, then take `delete_options_after_condition` of the
       updated pod, since kube moves a resourceVersion precondition onto the version it just wrote.
    4. Delete the pod with those DeleteOptions through the normal delete path (grace period,
       preconditions, dryRun and all), and answer `eviction_success_status()` with HTTP 201.
    """

    pdb_to_update: dict[str, Any] | None
    delete_options: dict[str, Any]
    add_disruption_target_condition: bool
    error_after_pdb_update: ApiError | None = None

    def delete_options_after_condition(self, updated_pod: Mapping[str, Any]) -> dict[str, Any]:
        """The DeleteOptions for the delete that follows the DisruptionTarget update."""
        options = json_copy(self.delete_options)
        pre = options.get("preconditions")
        if self.add_disruption_target_condition and pre and pre.get("resourceVersion") is not None:
            pre["resourceVersion"] = (updated_pod.get("metadata") or {}).get("resourceVersion", "")
        return options


def eviction_success_status() -> dict[str, Any]:
    """The body of a granted eviction, sent with HTTP 201 Created.

    kube's create handler fills the empty code of the returned Status with 201.
    """
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }


def eviction_delete_options(
    eviction: Mapping[str, Any],
    *,
    namespace: str,
    name: str,
    dry_run: list[str] | None = None,
) -> dict[str, Any]:
    """Check an Eviction body against its URL and return the DeleteOptions it asks for.

    This is all kube checks before it reads the pod, so the server can call it first to answer a
    400 ahead of a 404 as kube does. `dry_run` is the request's `?dryRun=` values; the create
    handler's namespace check comes first, then `Create`'s name check, then `propagateDryRun`.
    """
    meta = eviction.get("metadata") or {}
    body_namespace = meta.get("namespace") or ""
    if body_namespace and body_namespace != namespace:
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    if meta.get("name", "") != name:
        raise bad_request("name in URL does not match name in Eviction object")

    query = list(dry_run or [])
    raw = eviction.get("deleteOptions")
    if raw is None:
        return {"dryRun": query} if query else {}
    options: dict[str, Any] = json_copy(dict(raw))
    body_dry_run = list(options.get("dryRun") or [])
    if not body_dry_run:
        if query:
            options["dryRun"] = query
        return options
    if query and query != body_dry_run:
        raise UnknownReasonError(
            500,
            "",
            "Non-matching dry-run options in request and content: "
            f"[{' '.join(query)}] and [{' '.join(body_dry_run)}]",
        )
    return options


def decide_eviction(
    pod: Mapping[str, Any],
    eviction: Mapping[str, Any],
    pdbs_in_namespace: Iterable[Mapping[str, Any]],
    now: datetime,
    *,
    dry_run: list[str] | None = None,
) -> EvictionDecision:
    """Decide an eviction of `pod` (the current stored pod named in the URL).

    Raises the `ApiError` kube answers when the eviction is refused. Follows `EvictionREST.Create`:
    pods that already ended, have not started (Pending) or are being deleted are deleted without
    looking at budgets (`canIgnorePDB`); otherwise the single matching budget is consulted
    (`getPodDisruptionBudgets`), an unready pod may go without spending the budget according to
    `unhealthyPodEvictionPolicy`, and a ready pod spends one disruption (`checkAndDecrement`).
    """
    meta = pod.get("metadata") or {}
    name = meta.get("name", "")
    namespace = meta.get("namespace", "")
    original = eviction_delete_options(eviction, namespace=namespace, name=name, dry_run=dry_run)
    is_dry_run = bool(original.get("dryRun"))

    if _can_ignore_pdb(pod):
        options = original
        # A Pending pod could become ready between the read and the delete in kube; the
        # precondition pins the delete to the version that was judged.
        if _should_enforce_resource_version(pod) and _resource_version_unset(original):
            options = _with_resource_version(original, meta.get("resourceVersion", ""))
        if not is_dry_run:
            _raise_on_condition_precondition(pod, options)
        return EvictionDecision(None, options, not is_dry_run)

    pdbs = _matching_pdbs(pod, pdbs_in_namespace)
    if len(pdbs) > 1:
        raise UnknownReasonError(500, "", MULTIPLE_PDBS_MESSAGE)
    if not pdbs:
        if not is_dry_run:
            _raise_on_condition_precondition(pod, original)
        return EvictionDecision(None, original, not is_dry_run)

    pdb = pdbs[0]
    pdb_name = (pdb.get("metadata") or {}).get("name", "")
    if not pod_is_healthy(pod) and _unhealthy_pod_may_go(pdb):
        # The pod does not count towards the budget, so nothing is spent; the precondition makes
        # sure it has not become ready (and counted) since it was judged.
        options = _with_resource_version(original, meta.get("resourceVersion", ""))
        error = None if is_dry_run else condition_precondition_error(pod, options)
        if error is not None or (is_dry_run and _store_precondition_fails(pod, options)):
            # kube turns the delete's conflict into "try again" when the precondition was its own.
            if _resource_version_unset(original):
                raise _still_processing(pdb_name)
            if error is not None:
                raise error
        return EvictionDecision(None, options, not is_dry_run)

    updated = _check_and_decrement(pdb, name, now)
    error = None if is_dry_run else condition_precondition_error(pod, original)
    return EvictionDecision(
        None if is_dry_run else updated,
        original,
        not is_dry_run and error is None,
        error,
    )


def with_disruption_target_condition(pod: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """A copy of `pod` carrying DisruptionTarget=True, reason EvictionByEvictionAPI.

    Follows `UpdatePodCondition`: the condition is replaced whole (so lastProbeTime is null), and
    its transition time is kept only if it was already True.
    """
    out: dict[str, Any] = json_copy(dict(pod))
    status = out.setdefault("status", {})
    conditions: list[dict[str, Any]] = status.get("conditions") or []
    status["conditions"] = conditions
    new: dict[str, Any] = {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": rfc3339(now),
        "reason": EVICTION_BY_EVICTION_API,
        "message": EVICTION_CONDITION_MESSAGE,
    }
    for i, cond in enumerate(conditions):
        if cond.get("type") == DISRUPTION_TARGET:
            if cond.get("status") == "True":
                new["lastTransitionTime"] = cond.get("lastTransitionTime")
            conditions[i] = new
            break
    else:
        conditions.append(new)
    return out


def _can_ignore_pdb(pod: Mapping[str, Any]) -> bool:
    """`canIgnorePDB`: evicting such a pod disrupts nothing the budget protects."""
    phase = (pod.get("status") or {}).get("phase")
    deleting = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    return phase in ("Succeeded", "Failed", "Pending") or deleting


def _should_enforce_resource_version(pod: Mapping[str, Any]) -> bool:
    """`shouldEnforceResourceVersion`: only a pod that may still become ready needs pinning."""
    phase = (pod.get("status") or {}).get("phase")
    deleting = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    return not (phase in ("Succeeded", "Failed") or deleting)


def _resource_version_unset(options: Mapping[str, Any]) -> bool:
    pre = options.get("preconditions")
    return pre is None or pre.get("resourceVersion") is None


def _with_resource_version(options: Mapping[str, Any], resource_version: str) -> dict[str, Any]:
    out: dict[str, Any] = json_copy(dict(options))
    pre = out.get("preconditions")
    if pre is None:
        pre = out["preconditions"] = {}
    pre["resourceVersion"] = resource_version
    return out


def _matching_pdbs(
    pod: Mapping[str, Any], pdbs: Iterable[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """`getPodDisruptionBudgets`: budgets of the pod's namespace whose selector picks the pod.

    A budget with an invalid selector matches nothing; so does one with a null selector, while
    an empty selector `{}` matches every pod (policy/v1 semantics).
    """
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace", "")
    labels = meta.get("labels") or {}
    out = []
    for pdb in pdbs:
        if (pdb.get("metadata") or {}).get("namespace", "") != namespace:
            continue
        try:
            selector = label_selector_from_object((pdb.get("spec") or {}).get("selector"))
        except ValueError:
            continue
        if selector.matches(labels):
            out.append(pdb)
    return out


def _unhealthy_pod_may_go(pdb: Mapping[str, Any]) -> bool:
    """Whether an unready pod may be evicted without spending the budget.

    AlwaysAllow: always. IfHealthyBudget (also when unset): only while the application is not
    disrupted, i.e. it has at least the healthy pods it needs, and it needs some.
    """
    if (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == ALWAYS_ALLOW:
        return True
    status = pdb.get("status") or {}
    current = int(status.get("currentHealthy") or 0)
    desired = int(status.get("desiredHealthy") or 0)
    return current >= desired and desired > 0


def _still_processing(pdb_name: str) -> ApiError:
    """`createTooManyRequestsError`: the budget cannot be judged yet; retry shortly."""
    return too_many_requests(
        TOO_MANY_REQUESTS_MESSAGE,
        RETRY_AFTER_SECONDS,
        [_cause(f"The disruption budget {pdb_name} is still being processed by the server.")],
    )


def _cause(message: str) -> dict[str, str]:
    return {"reason": DISRUPTION_BUDGET_CAUSE, "message": message}


def _pdb_forbidden(pdb_name: str, why: str, explanation: str) -> ApiError:
    return forbidden(
        f'poddisruptionbudget.policy "{pdb_name}" is forbidden: {why}',
        {
            "name": pdb_name,
            "group": "policy",
            "kind": "poddisruptionbudget",
            "causes": [
                _cause(
                    f"The disruption budget {pdb_name} does not allow evicting pods currently: "
                    f"{explanation}"
                )
            ],
        },
    )


def _no_disruptions_message(pdb_name: str, status: Mapping[str, Any]) -> str:
    """Why a budget with `disruptionsAllowed` 0 refuses, from its `DisruptionAllowed` condition.

    A failed sync is reported first because the health counts are stale then; counts that explain
    the refusal come next; then any other False condition with a message.
    """
    current = int(status.get("currentHealthy") or 0)
    desired = int(status.get("desiredHealthy") or 0)
    cond = find_condition(status.get("conditions"), DISRUPTION_ALLOWED)
    explained = cond is not None and cond.get("status") == "False" and bool(cond.get("message"))
    if cond is not None and explained and cond.get("reason") == SYNC_FAILED:
        return (
            f"The disruption budget {pdb_name} does not allow evicting pods currently because it "
            f"failed sync: {cond.get('message')}"
        )
    if current <= desired:
        return f"The disruption budget {pdb_name} needs {desired} healthy pods and has {current} currently"
    if cond is not None and explained:
        return (
            f"The disruption budget {pdb_name} does not allow evicting pods currently "
            f"({cond.get('reason', '')}): {cond.get('message')}"
        )
    return f"The disruption budget {pdb_name} does not allow evicting pods currently"


def _check_and_decrement(pdb: Mapping[str, Any], pod_name: str, now: datetime) -> dict[str, Any]:
    """`checkAndDecrement`: refuse, or return the budget with one disruption spent.

    The pod is recorded in `disruptedPods` so the controller does not count it as healthy while
    its deletion is on the way. On a dry run the caller drops the result: kube validates and
    computes, but writes nothing.
    """
    meta = pdb.get("metadata") or {}
    pdb_name = meta.get("name", "")
    status = pdb.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        raise _still_processing(pdb_name)
    allowed = int(status.get("disruptionsAllowed") or 0)
    if allowed < 0:
        raise _pdb_forbidden(
            pdb_name, "pdb disruptions allowed is negative", "pdb disruptions allowed is negative"
        )
    if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_POD_SIZE:
        raise _pdb_forbidden(
            pdb_name,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
            "too many pending evictions not confirmed by PDB controller",
        )
    if allowed == 0:
        raise too_many_requests(
            TOO_MANY_REQUESTS_MESSAGE, None, [_cause(_no_disruptions_message(pdb_name, status))]
        )
    updated: dict[str, Any] = json_copy(dict(pdb))
    new_status = updated.setdefault("status", {})
    new_status["disruptionsAllowed"] = allowed - 1
    if allowed - 1 == 0:
        update_disruption_allowed_condition(new_status, now)
    disrupted = new_status.get("disruptedPods") or {}
    disrupted[pod_name] = rfc3339(now)
    new_status["disruptedPods"] = disrupted
    return updated


def condition_precondition_error(
    pod: Mapping[str, Any], options: Mapping[str, Any]
) -> ApiError | None:
    """The 409 kube raises while adding the DisruptionTarget condition (`addConditionAndDeletePod`).

    This check ignores empty values and names the resource "Pod"; the delete that follows runs the
    store's own check with the same preconditions, which then holds.
    """
    pre = options.get("preconditions") or {}
    meta = pod.get("metadata") or {}
    name = meta.get("name", "")
    uid = pre.get("uid")
    rv = pre.get("resourceVersion")
    if uid and uid != meta.get("uid", ""):
        return conflict(
            "",
            "Pod",
            name,
            f"the UID in the precondition ({uid}) does not match the UID in record "
            f"({meta.get('uid', '')}). The object might have been deleted and then recreated",
        )
    if rv and rv != meta.get("resourceVersion", ""):
        return conflict(
            "",
            "Pod",
            name,
            f"the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion "
            f"in record ({meta.get('resourceVersion', '')}). The object might have been modified",
        )
    return None


def _store_precondition_fails(pod: Mapping[str, Any], options: Mapping[str, Any]) -> bool:
    """Whether the store's precondition check on delete fails; it compares even empty values.

    Only needed where kube turns that failure into something else: the 409 itself is worded by the
    server's delete path.
    """
    pre = options.get("preconditions") or {}
    meta = pod.get("metadata") or {}
    uid = pre.get("uid")
    rv = pre.get("resourceVersion")
    return (uid is not None and uid != meta.get("uid", "")) or (
        rv is not None and rv != meta.get("resourceVersion", "")
    )


def _raise_on_condition_precondition(pod: Mapping[str, Any], options: Mapping[str, Any]) -> None:
    error = condition_precondition_error(pod, options)
    if error is not None:
        raise error
