"""The controller kit: what more than one controller needs, written once.

It lives beside the controllers rather than in `nodeops.kube` because it is about nodes and
drains: it builds on `nodeops.drain` (the drain engine, its options and errors), which sits above
the runtime in the layers, and the runtime knows nothing of nodes. Controllers import the kit;
the kit imports no controller.

- `clock`: the manager's one clock (cluster time, and wall seconds for requeues);
- `events`: an event sink that is always there (`NULL_EVENTS` when there is no recorder);
- `status`: the status writer (guarded merge patches of what changed, transitions made visible);
- `predicates`: `node_changed`, a node update that is more than a heartbeat, and
  `more_than_notes_changed`, an update of a controller's object that is more than its notes;
- `drain`: the "node is going away" preset, a controller's Drainers, one pass -> done/wait/failed;
- `channel`: requests from events that are not the cluster's (a cloud poller, a reload);
- `keys`: the prefix rule of a controller's label and annotation keys (and `compat: sapcc`);
- `progress`: a node's step in a flow, recorded in an annotation on the node before it is taken;
- finalizers, through `nodeops.kube.finalizers`.
"""

from __future__ import annotations

from nodeops.controllers.kit.channel import Channel, every_object, to_request
from nodeops.controllers.kit.clock import Clock, clock_at, clock_of, use_clock
from nodeops.controllers.kit.drain import (
    GOING_AWAY,
    Drainers,
    DrainOutcome,
    drain_pass,
    going_away,
)
from nodeops.controllers.kit.events import NULL_EVENTS, EventSink, events_or_null
from nodeops.controllers.kit.keys import PrefixedKeys
from nodeops.controllers.kit.predicates import more_than_notes_changed, node_changed
from nodeops.controllers.kit.progress import NodeProgress, ProgressError, patch_node, record_step
from nodeops.controllers.kit.status import (
    StatusWriter,
    TransitionObserver,
    View,
    merge_patch,
    timestamp,
)
from nodeops.kube.finalizers import add_finalizer, remove_finalizer

__all__ = [
    "GOING_AWAY",
    "NULL_EVENTS",
    "Channel",
    "Clock",
    "DrainOutcome",
    "Drainers",
    "EventSink",
    "NodeProgress",
    "PrefixedKeys",
    "ProgressError",
    "StatusWriter",
    "TransitionObserver",
    "View",
    "add_finalizer",
    "clock_at",
    "clock_of",
    "drain_pass",
    "events_or_null",
    "every_object",
    "going_away",
    "merge_patch",
    "more_than_notes_changed",
    "node_changed",
    "patch_node",
    "record_step",
    "remove_finalizer",
    "timestamp",
    "to_request",
    "use_clock",
]
