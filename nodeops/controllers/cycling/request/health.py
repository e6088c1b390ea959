"""Health: the checks a request runs on nodes, and what it records of them.

Initial checks run on the selected nodes before cycling (a group that is unhealthy already is
not made worse); new-node checks run on the replacements before any old node is cordoned, each
with its wait period counted from the node's first Ready time; pre-termination checks trigger
and then poll each old node after it is cordoned. Every result goes into status as it comes,
so a restarted manager neither repeats a trigger nor forgets a pass.
"""

from __future__ import annotations

from collections.abc import Sequence

from nodeops.api.cyclenoderequest import (
    CycleNodeRequestSpec,
    HealthCheckStatus,
    PreTerminationCheckStatus,
    PreTerminationCheckStatusList,
)
from nodeops.api.cycling import CycleNodeRequestNode
from nodeops.controllers.cycling.checks import CheckTarget
from nodeops.controllers.cycling.inventory import Inventory, provider_id
from nodeops.controllers.cycling.request.env import Heal, Obj, RequestEnv, RequestView, Wait
from nodeops.kube import objects as o

__all__ = ["initial_health_checks", "new_node_health", "pre_termination"]


def _key(node: Obj) -> str:
    return f"{provider_id(node)}/{o.name(node)}"


async def initial_health_checks(
    env: RequestEnv,
    view: RequestView,
    spec: CycleNodeRequestSpec,
    valid: Sequence[tuple[Obj, str]],
) -> Obj | None:
    """The healthChecks status of the selected nodes (None without checks); waits while one
    fails, and heals once the failures outlast the equilibrium limit."""
    if not spec.health_checks:
        return None
    out: dict[str, HealthCheckStatus] = {}
    failing: list[str] = []
    for node, group in valid:
        if spec.skip_initial_health_checks:
            out[_key(node)] = HealthCheckStatus(skip=True)
            continue
        target = CheckTarget.of(node, group)
        results = []
        for check in spec.health_checks:
            outcome = await env.checks.health(check, target, view.namespace)
            results.append(outcome.ok)
            if not outcome.ok:
                failing.append(outcome.detail)
        out[_key(node)] = HealthCheckStatus(skip=True, checks=results)
    if failing:
        waited = env.time.since(view.typed.equilibrium_wait_started)
        if waited > env.settings.equilibrium_wait_limit:
            raise Heal(
                f"initial health checks failed: {'; '.join(failing[:5])}", "HealthCheckFailed"
            )
        raise Wait(
            f"initial health checks failing: {'; '.join(failing[:5])}",
            reason="HealthCheckFailing",
        )
    return {key: entry.to_dict() for key, entry in out.items()}


async def new_node_health(
    env: RequestEnv, view: RequestView, spec: CycleNodeRequestSpec, inventory: Inventory
) -> str:
    """Run the health checks of new nodes; "" when all pass. Past a check's wait period
    from the node's first Ready time, the request heals."""
    if not spec.health_checks:
        return ""
    status = dict(view.typed.health_checks or {})
    before = dict(status)
    failing: list[str] = []
    batch_groups = {e.node_group_name for e in view.current_nodes}
    count = len(spec.health_checks)
    for node, group in env.new_nodes(view, inventory, batch_groups):
        key = _key(node)
        entry = status.get(key) or HealthCheckStatus()
        if entry.skip:
            continue
        checks = list(entry.checks or [False] * count)
        checks += [False] * (count - len(checks))
        ready_at = entry.ready or env.time.now().replace(microsecond=0)
        target = CheckTarget.of(node, group)
        for i, check in enumerate(spec.health_checks):
            if checks[i]:
                continue
            outcome = await env.checks.health(check, target, view.namespace)
            if outcome.ok:
                checks[i] = True
                continue
            if env.time.since(ready_at) > check.wait_seconds:
                status[key] = entry.model_copy(update={"ready": ready_at, "checks": checks})
                await _save_health(env, view, status)
                raise Heal(
                    f"health check {i} of new node {o.name(node)} failed for longer than "
                    f"{check.wait_period}: {outcome.detail}",
                    "HealthCheckFailed",
                )
            failing.append(f"{o.name(node)}: {outcome.detail}")
        status[key] = entry.model_copy(update={"ready": ready_at, "checks": checks})
    if status != before:
        await _save_health(env, view, status)
    return ("health checks failing: " + "; ".join(failing[:5])) if failing else ""


async def _save_health(
    env: RequestEnv, view: RequestView, status: dict[str, HealthCheckStatus]
) -> None:
    await env.status.commit(
        view, {"healthChecks": {key: entry.to_dict() for key, entry in status.items()}}
    )


async def pre_termination(
    env: RequestEnv,
    view: RequestView,
    spec: CycleNodeRequestSpec,
    node: Obj,
    entry: CycleNodeRequestNode,
) -> str:
    """Trigger (once) and poll each check of a node; "" when all have passed."""
    name = entry.name
    checks = spec.pre_termination_checks or ()
    recorded = (view.typed.pre_termination_checks or {}).get(name)
    state = list((recorded.checks if recorded else None) or ())
    state += [PreTerminationCheckStatus() for _ in range(len(checks) - len(state))]
    target = CheckTarget.of(node, entry.node_group_name)
    for i, check in enumerate(checks):
        if state[i].check:
            continue
        if state[i].trigger is None:
            outcome = await env.checks.trigger(check, target, view.namespace)
            if not outcome.ok:
                raise Heal(
                    f"pre-termination trigger {i} of node {name} failed: {outcome.detail}",
                    "PreTerminationFailed",
                )
            state[i] = state[i].model_copy(
                update={"trigger": env.time.now().replace(microsecond=0)}
            )
            await _save_pre_termination(env, view, name, state)
        outcome = await env.checks.health(check.health_check, target, view.namespace)
        if outcome.ok:
            state[i] = state[i].model_copy(update={"check": True})
            await _save_pre_termination(env, view, name, state)
            continue
        if env.time.since(state[i].trigger) > check.health_check.wait_seconds:
            raise Heal(
                f"pre-termination check {i} of node {name} did not pass within "
                f"{check.health_check.wait_period}: {outcome.detail}",
                "PreTerminationFailed",
            )
        return f"{name}: {outcome.detail}"
    return ""


async def _save_pre_termination(
    env: RequestEnv, view: RequestView, name: str, state: list[PreTerminationCheckStatus]
) -> None:
    """One node's check state into status; the other nodes' entries are kept as they are."""
    recorded = dict(view.typed.pre_termination_checks or {})
    recorded[name] = PreTerminationCheckStatusList(checks=state)
    await env.status.commit(
        view,
        {"preTerminationChecks": {key: entry.to_dict() for key, entry in recorded.items()}},
    )
