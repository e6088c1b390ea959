"""Where the cycling kinds live in the API."""

from __future__ import annotations

from nodeops.api import CycleNodeRequest, CycleNodeStatus, NodeGroup
from nodeops.api.meta import GROUP, VERSION
from nodeops.kube.resources import Resource

__all__ = ["CYCLENODEREQUESTS", "CYCLENODESTATUSES", "NODEGROUPS"]


def _resource(kind: type[CycleNodeRequest] | type[CycleNodeStatus] | type[NodeGroup]) -> Resource:
    info = kind.KIND_INFO
    return Resource(GROUP, VERSION, info.plural, info.kind, info.scope == "Namespaced")


CYCLENODEREQUESTS = _resource(CycleNodeRequest)
CYCLENODESTATUSES = _resource(CycleNodeStatus)
NODEGROUPS = _resource(NodeGroup)
