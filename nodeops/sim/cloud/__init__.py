"""The simulated cloud: Auto Scaling-like node groups, instances and load balancers.

`model` holds the values, `state` every rule and operation (no I/O), `loop` the clockwork that
boots and terminates instances and mirrors them into Node objects over the Kubernetes API,
`routes` the JSON API under `/sim/cloud/` (documented there) that the `sim` provider calls, and
`cloud.SimCloud` ties them together for `nodeops sim serve`.
"""

from nodeops.sim.cloud.cloud import SimCloud
from nodeops.sim.cloud.model import (
    CloudError,
    CloudSettings,
    Registration,
    SimInstance,
    SimLoadBalancer,
    SimNodeGroup,
)
from nodeops.sim.cloud.routes import CLOUD_PREFIX, cloud_routes
from nodeops.sim.cloud.state import CloudState

__all__ = [
    "CLOUD_PREFIX",
    "CloudError",
    "CloudSettings",
    "CloudState",
    "Registration",
    "SimCloud",
    "SimInstance",
    "SimLoadBalancer",
    "SimNodeGroup",
    "cloud_routes",
]
