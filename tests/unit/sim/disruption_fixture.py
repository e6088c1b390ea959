"""A disruption controller over informers no server fills: tests put objects in by hand."""

from __future__ import annotations

from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import (
    DEPLOYMENTS,
    PDBS,
    PODS,
    REPLICASETS,
    STATEFULSETS,
    ApiClient,
)
from nodeops.sim.cluster.disruption import DisruptionController
from nodeops.sim.cluster.informer import Informer


def disruption_controller() -> tuple[DisruptionController, dict[str, Informer]]:
    """The controller, and its informers by plural."""
    client = ApiClient("http://127.0.0.1:1")
    infs = {
        r.plural: Informer(client, r) for r in (PODS, PDBS, REPLICASETS, DEPLOYMENTS, STATEFULSETS)
    }
    dc = DisruptionController(
        Clock(1.0),
        client,
        infs["pods"],
        infs["poddisruptionbudgets"],
        infs["replicasets"],
        infs["deployments"],
        infs["statefulsets"],
    )
    return dc, infs
