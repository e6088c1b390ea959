"""OpenStack: find and delete the Nova server behind a node.

This is the cloud half of Kubernikus-style node replacement: once a node is drained, its VM is
deleted and the cluster's node pool launches a new one. Credentials come either from a
`clouds.yaml` cloud (the OpenStack client convention) or from the `[Global]` section of a
`cloudprovider.conf`, the file the OpenStack cloud controller manager of the cluster already
reads, so an operator next to it needs no second copy of the secret.

Registered as `openstack` in the `nodeops.providers` entry-point group; configured by
`OpenStackConfig`. The package is split by concern: settings (`config`), the cloudprovider.conf
dialect (`cloudproviderconf`), turning either credential source into the SDK's cloud
(`credentials`), error classification (`errors`), Nova servers (`servers`) and the provider
itself (`provider`).
"""

from nodeops.providers.openstack.cloudproviderconf import (
    CloudproviderConf,
    parse_cloudprovider_conf,
)
from nodeops.providers.openstack.config import OpenStackConfig
from nodeops.providers.openstack.errors import classify_openstack_error
from nodeops.providers.openstack.provider import OpenStackProvider
from nodeops.providers.openstack.servers import GONE_STATUSES

__all__ = [
    "GONE_STATUSES",
    "CloudproviderConf",
    "OpenStackConfig",
    "OpenStackProvider",
    "classify_openstack_error",
    "parse_cloudprovider_conf",
]
