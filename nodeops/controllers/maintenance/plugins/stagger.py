"""stagger: at most `parallel` nodes pass per `duration`, coordinated through Leases.

Slot i is the Lease `<leaseName>-<i>`. A slot is free when its Lease is missing or its
`renewTime + leaseDurationSeconds` has passed. The check only reads; the slot is taken (`reserve`)
after the whole transition was chosen, with a resourceVersion-guarded write so two writers never
take the same slot, and given back if the node's own write then fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import Field

from nodeops.controllers.maintenance.plugins.base import (
    CheckResult,
    PluginConfig,
    PluginContext,
    PluginError,
    PluginType,
)
from nodeops.controllers.maintenance.plugins.fields import Duration, Text
from nodeops.kube import errors
from nodeops.kube.resources import LEASES

Obj = dict[str, Any]


def micro_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(value: str | None) -> datetime | None:
    if not value:
        return None
    text = value.replace("Z", "+00:00")
    if "." in text:
        head, _, rest = text.partition(".")
        digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]
        text = f"{head}.{digits[:6].ljust(6, '0')}{rest[len(digits) :]}"
    return datetime.fromisoformat(text)


def lease_expiry(lease: Obj | None) -> datetime | None:
    """When the Lease stops holding its slot (None: it never held one)."""
    if lease is None:
        return None
    spec = lease.get("spec") or {}
    renewed = parse_micro_time(spec.get("renewTime") or spec.get("acquireTime"))
    if renewed is None:
        return None
    return renewed + timedelta(seconds=int(spec.get("leaseDurationSeconds") or 0))


class StaggerConfig(PluginConfig):
    duration: Duration
    leaseName: Text = Field(min_length=1)
    leaseNamespace: Text = Field(min_length=1)
    parallel: int = Field(1, ge=1, le=1000)


@dataclass
class _Taken:
    cluster: Any
    name: str
    namespace: str
    before: Obj | None
    after: Obj

    async def release(self) -> None:
        """Give the slot back: the node that took it did not move after all."""
        client = self.cluster.client
        try:
            if self.before is None:
                await client.delete(LEASES, self.name, self.namespace)
            else:
                body = dict(self.after)
                body["spec"] = self.before.get("spec") or {}
                await client.replace(LEASES, body)
        except errors.ApiError:
            pass  # someone else moved the Lease on: their state wins


class Stagger:
    def __init__(self, config: StaggerConfig) -> None:
        self.config = config

    def _names(self) -> list[str]:
        return [f"{self.config.leaseName}-{i}" for i in range(self.config.parallel)]

    async def _leases(self, ctx: PluginContext) -> list[tuple[str, Obj | None]]:
        client = ctx.cluster.client
        out = []
        for name in self._names():
            try:
                out.append(
                    (name, await client.get_or_none(LEASES, name, self.config.leaseNamespace))
                )
            except errors.KubeError as exc:
                raise PluginError(f"cannot read Lease {name}: {exc}") from exc
        return out

    async def check(self, ctx: PluginContext) -> CheckResult:
        soonest: datetime | None = None
        for name, lease in await self._leases(ctx):
            expiry = lease_expiry(lease)
            if expiry is None or expiry < ctx.now:
                return CheckResult.ok(lease=name)
            soonest = expiry if soonest is None else min(soonest, expiry)
        wait = max(0.0, ((soonest or ctx.now) - ctx.now).total_seconds())
        return CheckResult.blocked(f"next slot frees in {wait:.0f}s", availableInSec=round(wait, 3))

    async def reserve(self, ctx: PluginContext) -> _Taken:
        client = ctx.cluster.client
        ns = self.config.leaseNamespace
        for name, lease in await self._leases(ctx):
            expiry = lease_expiry(lease)
            if expiry is not None and expiry >= ctx.now:
                continue
            spec = {
                "holderIdentity": ctx.node_name,
                "leaseDurationSeconds": max(1, round(self.config.duration)),
                "acquireTime": micro_time(ctx.now),
                "renewTime": micro_time(ctx.now),
            }
            try:
                if lease is None:
                    after = await client.create(
                        LEASES,
                        {
                            "apiVersion": "coordination.k8s.io/v1",
                            "kind": "Lease",
                            "metadata": {"name": name, "namespace": ns},
                            "spec": spec,
                        },
                        ns,
                    )
                else:
                    after = await client.replace(LEASES, {**lease, "spec": spec})
            except errors.Conflict:
                continue  # taken by someone else a moment ago: try the next slot
            except errors.KubeError as exc:
                raise PluginError(f"cannot take Lease {name}: {exc}") from exc
            return _Taken(ctx.cluster, name, ns, lease, after)
        raise PluginError("every stagger slot was taken meanwhile")


TYPES = [PluginType("check", "stagger", StaggerConfig, Stagger, "rate limit through Leases")]
