"""The explanation of every node's last reconcile, for `/api/v1/info`, the dashboard and
`nodeops maintenance explain`.

The JSON keeps the reference's shape (`node`, `profiles[].name/state/applied{next, error,
transitions[{passed, target, error, chain{passed, expression, info}}]}`, `labels`, `updated`)
and adds `reasons` (each transition's why-not in words) and `error` (a record that cannot be
read).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from nodeops.controllers.maintenance.engine import BLOCKED_BY_PROFILE, NodeOutcome
from nodeops.controllers.maintenance.state import format_time

Obj = dict[str, Any]


def node_info(outcome: NodeOutcome, node: Obj, label_filter: Iterable[str], now: datetime) -> Obj:
    labels = (node.get("metadata") or {}).get("labels") or {}
    wanted = list(label_filter)
    info: Obj = {
        "node": outcome.node,
        "state": outcome.state.value,
        "profiles": [p.to_json() for p in outcome.profiles],
        "labels": {k: labels[k] for k in wanted if k in labels},
        "updated": format_time(now),
        "error": outcome.data_error or "",
    }
    # Only where it is true: the dashboard marks the transitions whose error is this note.
    if any(t.blocked == BLOCKED_BY_PROFILE for p in outcome.profiles for t in p.transitions):
        info["blockedByProfileNote"] = BLOCKED_BY_PROFILE
    return info


class InfoStore:
    """The latest explanation per node; deleted nodes are removed, never linger."""

    def __init__(self) -> None:
        self._items: dict[str, Obj] = {}

    def put(self, name: str, info: Obj) -> None:
        self._items[name] = info

    def remove(self, name: str) -> None:
        self._items.pop(name, None)

    def get(self, name: str) -> Obj | None:
        return self._items.get(name)

    def all(self) -> list[Obj]:
        return [self._items[k] for k in sorted(self._items)]
