"""Subresources with verbs of their own: eviction, binding, scale and service account tokens.

Each is a small transaction on the registry: eviction checks PodDisruptionBudgets and spends
one disruption in a single atomic step, so a PDB can never be violated by two evictions racing
each other, then deletes the pod in kube-apiserver's order of effects.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nodeops.sim.server import errors
from nodeops.sim.server.auth import Authenticator
from nodeops.sim.server.eviction import (
    condition_precondition_error,
    decide_eviction,
    eviction_delete_options,
    eviction_success_status,
    with_disruption_target_condition,
)
from nodeops.sim.server.registry import Registry
from nodeops.sim.server.resources import ResourceType

_SUCCESS_CREATED: dict[str, Any] = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Success",
    "code": 201,
}


WATCH_SEND_TIMEOUT = 1.0
"""How long an eviction waits for the budget's watchers to be sent its status update.

Long enough for any live consumer on loopback; a stalled one does not hold evictions up.
"""

STORAGE_WRITE_SECONDS = 0.001
"""What one write to etcd costs kube-apiserver on a fast local disk.

The eviction handler writes the pod twice (its DisruptionTarget condition, then its deletion)
after the budget's status; the budget's watchers, the disruption controller among them, act on
that status meanwhile, so its next status update can reach a client before the eviction's answer.
"""

EVICTIONS_RETRY_STEPS = 20
EVICTIONS_RETRY_SECONDS = 0.5
EVICTIONS_RETRY_JITTER = 0.1
"""kube's `EvictionsRetry`: a budget whose status changed between the eviction's read and its
write is read again after 500 ms (plus up to 10% jitter), at most 20 times.

So concurrent evictions of pods under one budget are not free on kube-apiserver: all but one of
those that read the same version wait half a second and try again.
"""


async def evict(registry: Registry, ns: str, name: str, body: Any, dry_run: bool) -> dict[str, Any]:
    """kube's `EvictionREST.Create`, in kube's order of effects.

    The budget is read, judged and its status written as two steps with other requests free to
    run between them (kube reads through its loopback client and writes with a resourceVersion
    precondition), so evictions racing on one budget conflict and retry as in kube. The status
    write (one disruption spent, the pod in `disruptedPods`) has its watch event sent to every
    watcher of the budget before the pod is touched, and the answer comes last: what a client of
    kube-apiserver sees, since the cacher dispatches that event while the handler goes on to
    update and delete the pod. The pod is read again after that, as kube's update and delete
    read what is stored then.
    """
    if not isinstance(body, dict):
        raise errors.bad_request("the body of the request must be a JSON object")
    dry = ["All"] if dry_run else None
    # Checked before the pod lookup so a malformed body is a 400 ahead of a 404, as in kube.
    eviction_delete_options(body, namespace=ns, name=name, dry_run=dry)
    pods = registry.lookup("", "v1", "pods")
    pdb_rt = registry.lookup("policy", "v1", "poddisruptionbudgets")
    bucket = registry.store.bucket(pdb_rt.storage_key)
    pod = registry.get(pods, ns, name)
    for _ in range(EVICTIONS_RETRY_STEPS):
        entries = list(bucket.entries(ns))
        pdbs = [registry.decode(pdb_rt, e) for e in entries]
        decision = decide_eviction(pod, body, pdbs, registry.clock.now(), dry_run=dry)
        if dry_run:
            return eviction_success_status()
        if decision.pdb_to_update is None:
            break
        pdb = decision.pdb_to_update
        pdb_name = pdb["metadata"]["name"]
        read = next(e.rv for e in entries if e.name == pdb_name)
        await asyncio.sleep(0)  # the read and the guarded write are separate round trips
        current = bucket.get(ns, pdb_name)
        if current is None or current.rv != read:
            await registry.clock.sleep(
                EVICTIONS_RETRY_SECONDS * (1 + registry.rng.random() * EVICTIONS_RETRY_JITTER)
            )
            continue
        stored = registry.update(pdb_rt, ns, pdb_name, pdb, subresource="status")
        await bucket.wait_sent(int(stored["metadata"]["resourceVersion"]), WATCH_SEND_TIMEOUT)
        pod = registry.get(pods, ns, name)
        error = condition_precondition_error(pod, decision.delete_options)
        if error is not None:
            raise error  # the budget stays spent until the disruption controller expires it
        break
    else:
        raise errors.stale_conflict("policy", "poddisruptionbudgets", pdb_name)
    if decision.error_after_pdb_update is not None:
        raise decision.error_after_pdb_update
    options = decision.delete_options
    if decision.add_disruption_target_condition:
        await registry.clock.sleep(STORAGE_WRITE_SECONDS)
        pod = registry.get(pods, ns, name)
        error = condition_precondition_error(pod, options)
        if error is not None:
            raise error
        updated = with_disruption_target_condition(pod, registry.clock.now())
        updated["metadata"].pop("resourceVersion", None)
        stored_pod = registry.update(pods, ns, name, updated, "status")
        options = decision.delete_options_after_condition(stored_pod)
    await registry.clock.sleep(STORAGE_WRITE_SECONDS)
    registry.delete(pods, ns, name, options)
    return eviction_success_status()


def bind(registry: Registry, ns: str, name: str, body: Any, dry_run: bool) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise errors.bad_request("the body of the request must be a JSON object")
    target = (body.get("target") or {}).get("name")
    if not target:
        raise errors.invalid(
            "Binding", "", name, [("FieldValueRequired", "target.name", "Required value")]
        )
    pods = registry.lookup("", "v1", "pods")
    pod = registry.get(pods, ns, name)
    if pod["metadata"].get("deletionTimestamp"):
        raise errors.conflict(
            "", "pods/binding", name, f"pod {name} is being deleted, cannot be assigned to a host"
        )
    current = (pod.get("spec") or {}).get("nodeName")
    if current:
        raise errors.conflict(
            "", "pods/binding", name, f'pod {name} is already assigned to node "{current}"'
        )
    if dry_run:
        return dict(_SUCCESS_CREATED)
    # Binding bypasses pod spec immutability: write through the registry's storage directly.
    pod["spec"]["nodeName"] = target
    status = pod.setdefault("status", {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    conditions.append(
        {
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": registry.clock.timestamp(),
        }
    )
    status["conditions"] = conditions
    registry.replace_unchecked(pods, pod)
    return dict(_SUCCESS_CREATED)


def get_scale(registry: Registry, rt: ResourceType, ns: str, name: str) -> dict[str, Any]:
    obj = registry.get(rt, ns, name)
    return _scale_of(rt, obj)


def _scale_of(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    selector = spec.get("selector") or {}
    labels = selector.get("matchLabels") or {}
    scale_meta = {
        k: meta[k]
        for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
        if k in meta
    }
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": scale_meta,
        "spec": {"replicas": spec.get("replicas", 0)},
        "status": {
            "replicas": status.get("replicas", 0),
            "selector": ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
        },
    }


def update_scale(
    registry: Registry, rt: ResourceType, ns: str, name: str, replicas: Any, rv: str | None
) -> dict[str, Any]:
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise errors.invalid(
            "Scale",
            "autoscaling",
            name,
            [
                (
                    "FieldValueInvalid",
                    "spec.replicas",
                    f"Invalid value: {replicas}: must be greater than or equal to 0",
                )
            ],
        )
    patch: dict[str, Any] = {"spec": {"replicas": replicas}}
    if rv:
        patch["metadata"] = {"resourceVersion": rv}
    obj = registry.patch(rt, ns, name, "merge", patch)
    return _scale_of(rt, obj)


def request_token(
    registry: Registry,
    authn: Authenticator,
    ns: str,
    name: str,
    body: Any,
) -> dict[str, Any]:
    if not isinstance(body, dict):
        body = {}
    sa = registry.get(registry.lookup("", "v1", "serviceaccounts"), ns, name)
    spec = body.get("spec") or {}
    seconds = int(spec.get("expirationSeconds") or 3600)
    audiences = list(spec.get("audiences") or [])
    token, expires = authn.mint_service_account_token(
        ns, name, sa["metadata"].get("uid", ""), seconds, registry.clock.now(), audiences
    )
    return {
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": None},
        "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": None},
        "status": {"token": token, "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")},
    }
