"""Servers of the simulated cloud: the instance behind a node, found by its `sim://` provider ID
or else by its private DNS name (as on AWS), and the wait for its termination.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from nodeops.common.looptime import loop_time
from nodeops.providers.base import ProviderError, Server, node_name, node_provider_id
from nodeops.providers.sim.api import NAME, SimApi, parse_answer

__all__ = ["find_server", "wait_deleted"]


def _server(raw: Mapping[str, Any], name: str | None = None) -> Server:
    return Server(
        id=str(raw["instanceId"]),
        name=name or str(raw["privateDnsName"]),
        status=str(raw["state"]),
        provider_id=str(raw["providerId"]),
        zone=raw.get("zone"),
    )


async def find_server(api: SimApi, node: Mapping[str, Any]) -> Server | None:
    """The live instance behind a node: by `sim://` provider ID, else by private DNS name."""
    provider_id = node_provider_id(node)
    name = node_name(node)
    if provider_id is not None:
        if provider_id.scheme != NAME:
            return None
        raw = await api.raw_instance(provider_id.id)
        if raw is None or raw.get("state") == "terminated":
            return None
        return parse_answer("instances.get", lambda r: _server(r, name), raw)
    operation = "instances.list"
    data = await api.call(
        "GET", "/instances", operation=operation, params=[("privateDnsName", name)]
    )
    live = parse_answer(
        operation,
        lambda d: [_server(r, name) for r in d["instances"] if r["state"] != "terminated"],
        data,
    )
    if not live:
        return None
    if len(live) > 1:
        ids = ", ".join(sorted(s.id for s in live))
        raise ProviderError(
            "AmbiguousNode",
            f"node {name} has no providerID and several instances have its name as private "
            f"DNS name ({ids})",
            retryable=False,
            operation=operation,
        )
    return live[0]


async def wait_deleted(api: SimApi, server: Server, timeout: float) -> None:
    """Poll until the instance is terminated or no longer listed."""
    deadline = loop_time() + timeout
    while True:
        raw = await api.raw_instance(server.id)
        state = None if raw is None else raw.get("state")
        if state is None or state == "terminated":
            return
        remaining = deadline - loop_time()
        if remaining <= 0:
            raise ProviderError(
                "Timeout",
                f"instance {server.id} is still {state} after {timeout:g}s",
                retryable=True,
                operation="instances.get",
            )
        await asyncio.sleep(min(api.config.poll_interval, remaining))
