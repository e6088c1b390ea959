"""The nodes a one-shot command acts on: by name or by label selector, all read up front.

kubectl reads every node it was given before it writes anything, so `kubectl drain a b` with no
node `b` stops with `nodes "b" not found` and leaves `a` as it was; a selector is listed in
chunks of `--chunk-size`. Commands that act on nodes (drain, cordon, uncordon, and those built
on them) select them here, after their arguments were validated and before their first write.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nodeops.kube.client import Client
from nodeops.kube.resources import NODES

Obj = dict[str, Any]


async def select_nodes(
    client: Client, names: Sequence[str], selector: str = "", chunk_size: int = 500
) -> list[Obj]:
    """The named nodes in the order given (NotFound for the first missing one), or the nodes
    matching `selector`; a `chunk_size` of 0 or less lists them in one page."""
    if names:
        return [await client.get(NODES, name) for name in names]
    items, _ = await client.list(
        NODES, label_selector=selector or None, page_size=max(0, chunk_size)
    )
    return items
