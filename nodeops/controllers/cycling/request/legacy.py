"""A request written by a release that listed its nodes in status: its queue moved to labels.

Releases before the selection label kept every selected node in `status.nodesToTerminate` and
the queue in `status.nodesAvailable`. A request found mid-roll with those lists (the manager
upgraded under it) labels the nodes of its queue and then drops the lists, in that order, so a
crash in between leaves the lists to do it again. Without this, the upgraded manager would see
an empty queue and end the roll after the batch in flight.
"""

from __future__ import annotations

from nodeops.controllers.cycling.nodes import edit_node, select_for
from nodeops.controllers.cycling.request.env import Obj, RequestEnv, RequestView, each

__all__ = ["adopt_listed_queue"]


async def adopt_listed_queue(env: RequestEnv, view: RequestView) -> None:
    status = view.typed
    if status.nodes_to_terminate is None and status.nodes_available is None:
        return
    if view.phase in ("", "Pending"):
        await env.status.commit(view, {"nodesToTerminate": None, "nodesAvailable": None})
        return
    batch = {e.name for e in status.current_nodes or ()}
    queue = [e.name for e in status.nodes_available or () if e.name not in batch]

    async def label(name: str) -> None:
        node = env.node(name)
        if node is not None:
            await edit_node(env.client, node, select_for(view.name))

    await each(queue, label)
    by_group: dict[str, int] = {}
    for entry in status.nodes_to_terminate or ():
        by_group[entry.node_group_name] = by_group.get(entry.node_group_name, 0) + 1
    changes: Obj = {
        "nodesToTerminate": None,
        "nodesAvailable": None,
        "selectedByGroup": dict(sorted(by_group.items())) or None,
    }
    total = len(status.nodes_to_terminate or ())
    changes.update(env.progress(env.children_of(view), view, changes, total=total))
    await env.status.commit(view, changes)
