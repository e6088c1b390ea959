"""A simulated OpenStack cloud: Kubernikus-style node pools of Nova servers behind Keystone.

`model` holds the values, `state` every rule (no I/O), `loop` the clockwork that registers and
removes Nodes over the Kubernetes API, `routes` Keystone v3 + Nova v2.1 under `/sim/openstack/`
(the real `openstack` provider and openstacksdk talk to it unchanged), `cloud.SimOpenStack`
ties them together.
"""

from nodeops.sim.openstack.cloud import SimOpenStack
from nodeops.sim.openstack.model import (
    NODEPOOL_LABEL,
    Credentials,
    NodePool,
    NovaServer,
    OpenStackSettings,
)
from nodeops.sim.openstack.routes import OPENSTACK_PREFIX, openstack_routes
from nodeops.sim.openstack.state import NovaState

__all__ = [
    "NODEPOOL_LABEL",
    "OPENSTACK_PREFIX",
    "Credentials",
    "NodePool",
    "NovaServer",
    "NovaState",
    "OpenStackSettings",
    "SimOpenStack",
    "openstack_routes",
]
