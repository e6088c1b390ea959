"""The API calls that take a pod off a node, and what their answers mean for a drain.

An eviction's answer decides what the drain does next: gone (counted, or not ours any more),
refused by a budget (wait for the budget), refused for good (kubectl's failure), or a server
hiccup (retry). That mapping, the metrics of each answer, and the force-deletion of pods stuck
terminating past their grace live here, apart from when and in what order pods are evicted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from nodeops.drain.errors import DrainError
from nodeops.drain.metrics import DELETED, EVICTED, EVICTIONS, FAILED, FORCE_DELETED, REFUSED
from nodeops.drain.options import DrainOptions
from nodeops.drain.plan import Plan
from nodeops.kube import errors
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.events import WARNING
from nodeops.kube.resources import PODS

__all__ = ["EventSink", "evict_once", "force_delete_stuck", "send_eviction"]

Obj = dict[str, Any]

EventSink = Callable[[Obj, str, str, str, str], None]
"""Records an Event: (object, type, reason, action, note)."""


async def evict_once(
    client: Client, options: DrainOptions, pod: Obj, controller: str | None = None
) -> tuple[str | None, str | None]:
    """Evict (or delete) one pod: what happened (`EVICTED`, `REFUSED`, ...; None when the
    pod was gone already) and the refusal's message (None when it went).

    Raises DrainError for refusals retrying cannot fix (kubectl fails those at once). The
    answer is counted under `controller`; a dry run is not (nothing happened).
    """
    if options.dry_run != "none":
        controller = None
    result: str | None = FAILED  # what an exception out of the request counts as
    try:
        result, refusal = await send_eviction(client, options, pod)
        return result, refusal
    except asyncio.CancelledError:
        result = None  # the pass ended before the answer came: no answer to count
        raise
    finally:
        if controller is not None and result is not None:
            EVICTIONS.labels(controller, result).inc()


async def send_eviction(
    client: Client, options: DrainOptions, pod: Obj
) -> tuple[str | None, str | None]:
    """The result to count (None: the pod was gone already) and the refusal (None: it
    went)."""
    ns, name = o.namespace(pod), o.name(pod)
    grace = options.grace_period if options.grace_period >= 0 else None
    pre = {"uid": o.uid(pod)}
    server_dry = options.dry_run == "server"
    if options.dry_run == "client":
        return None, None
    try:
        if options.disable_eviction:
            await client.delete(
                PODS, name, ns, grace_period=grace, preconditions=pre, dry_run=server_dry
            )
            return DELETED, None
        await client.evict(name, ns, grace_period=grace, preconditions=pre, dry_run=server_dry)
        return EVICTED, None
    except errors.NotFound:
        return None, None
    except errors.Conflict as exc:
        if "UID in precondition" in exc.message or "UID in the precondition" in exc.message:
            return None, None  # the pod we meant is gone; a new one of that name is not ours
        return FAILED, exc.message
    except errors.TooManyRequests as exc:
        causes = " ".join(c.get("message", "") for c in exc.causes if c.get("message"))
        return REFUSED, f"{exc.message} {causes}".strip()
    except errors.Forbidden as exc:
        if any(c.get("reason") == "NamespaceTerminating" for c in exc.causes):
            return FAILED, (
                "Cannot evict pod from terminating namespace: unable to create eviction "
                "(kube-controller-manager should set deletionTimestamp)"
            )
        raise DrainError(f'error when evicting pods/"{name}" -n "{ns}": {exc.message}') from exc
    except errors.ApiError as exc:
        if exc.code >= 500 and "more than one PodDisruptionBudget" not in exc.message:
            return FAILED, exc.message  # a server hiccup: retry
        raise DrainError(f'error when evicting pods/"{name}" -n "{ns}": {exc.message}') from exc


async def force_delete_stuck(
    client: Client,
    options: DrainOptions,
    plan: Plan,
    controller: str,
    event: EventSink,
    now: datetime,
) -> list[str]:
    """Force-delete pods terminating past grace + slack, only when the caller asked; `now` is
    the cluster's time, which deletion timestamps are in."""
    if not options.force_delete_stuck or options.dry_run != "none":
        return []
    done = []
    for d in plan.terminating:
        deadline = o.deletion_timestamp(d.pod)
        if deadline is None:
            continue
        if now - deadline > timedelta(seconds=options.stuck_slack_seconds):
            with contextlib.suppress(errors.NotFound):
                await client.delete(
                    PODS,
                    o.name(d.pod),
                    o.namespace(d.pod),
                    grace_period=0,
                    preconditions={"uid": o.uid(d.pod)},
                )
                EVICTIONS.labels(controller, FORCE_DELETED).inc()
            done.append(d.ref)
            event(
                d.pod,
                WARNING,
                "ForceDeleted",
                "Drain",
                "pod still terminating past its grace period; deleted with grace 0",
            )
    return done
