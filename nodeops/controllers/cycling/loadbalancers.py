"""Whether a batch may leave its load balancers: detaching an instance from its group takes it
out of the group's load balancers at once, so a batch must not leave a load balancer whose
other targets are all still being checked (the replacements of the batch before, say): in
between, the load balancer has no target to send a request to."""

from __future__ import annotations

from collections.abc import Collection

from nodeops.providers.base import LoadBalancerDraining, LoadBalancers, LoadBalancerTarget

__all__ = ["targets_left_unserved"]


def _name(target: LoadBalancerTarget) -> str:
    port = f" port {target.port}" if target.port is not None else ""
    return f"load balancer {target.name}{port}"


async def targets_left_unserved(provider: object, leaving: Collection[str]) -> list[str]:
    """The load balancer targets that `leaving` (instance IDs) would leave with no healthy
    target while some other target is still being health-checked; [] when the provider has no
    load balancers. Targets whose other members have all been judged unhealthy do not wait:
    nothing would change by waiting (their endpoints may arrive only with the batch's pods)."""
    if not (isinstance(provider, LoadBalancers) and isinstance(provider, LoadBalancerDraining)):
        return []
    members: dict[LoadBalancerTarget, set[str]] = {}
    for iid, targets in (await provider.registrations()).items():
        for target in targets:
            members.setdefault(target, set()).add(iid)
    out = []
    for target in sorted(members, key=lambda t: (t.kind, t.name, t.port or 0)):
        if not members[target] & set(leaving):
            continue
        others = sorted(members[target] - set(leaving))
        checking = 0
        for iid in others:
            health = await provider.target_health(target, iid)
            if health.healthy:
                break
            checking += health.checking
        else:
            if checking:
                out.append(
                    f"{_name(target)}: none of its other {len(others)} targets is healthy yet "
                    f"({checking} still being checked)"
                )
    return out
