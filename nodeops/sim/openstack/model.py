"""Values of the simulated OpenStack cloud: node pools of Nova servers, and who may log in.

The shape is Kubernikus's: a cluster has node pools, each a number of identical servers named
`<cluster>-<pool>-<suffix>` whose kubelets register as nodes of that name, with the pool's
labels, taints and Kubernetes version. Deleting a server makes the pool launch another one with
the pool's *current* version, which is how Kubernikus replaces outdated kubelets.

All times are seconds since the epoch on the simulator's clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "ACTIVE",
    "BUILD",
    "DELETED",
    "NODEPOOL_LABEL",
    "Credentials",
    "NodePool",
    "NovaError",
    "NovaServer",
    "OpenStackSettings",
]

BUILD: Final = "BUILD"
ACTIVE: Final = "ACTIVE"
DELETED: Final = "DELETED"

NODEPOOL_LABEL: Final = "ccloud.sap.com/nodepool"
"""The label Kubernikus gives every node of a pool."""

FLATCAR_VERSION_LABEL: Final = "flatcar-linux-update.v1.flatcar-linux.net/version"


class NovaError(Exception):
    """A refused call, answered with Nova's or Keystone's error body for `status`."""

    def __init__(self, status: int, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class Credentials:
    """The one user the simulated Keystone accepts, and the project it scopes tokens to.

    Defaults follow a Kubernikus `cloud-config` Secret: the user lives in domain `kubernikus`
    and the project is given by ID.
    """

    username: str = "kubernikus-operator"
    password: str = "sim-password"
    user_domain: str = "kubernikus"
    project_id: str = "5d2ea5bb2c6e4a1e9c8d3f7a9b1c2d3e"
    project_name: str = "kubernikus-project"
    region: str = "eu-de-1"

    def cloudprovider_conf(self, auth_url: str, *, ca_file: str | None = None) -> str:
        """A `[Global]` section as the cluster's `cloud-config` Secret carries it."""
        lines = [
            "[Global]",
            f'auth-url = "{auth_url}"',
            f'username = "{self.username}"',
            f'password = "{self.password}"',
            f'domain-name = "{self.user_domain}"',
            f'tenant-id = "{self.project_id}"',
            f'region = "{self.region}"',
        ]
        if ca_file:
            lines.append(f'ca-file = "{ca_file}"')
        return "\n".join(lines) + "\n"


@dataclass(slots=True)
class OpenStackSettings:
    """How long the cloud's slow operations take, in simulated seconds.

    Nova takes seconds to tear a VM down; the cloud controller manager deletes the Node of a
    server Nova no longer lists within its monitor period.
    """

    shutdown_seconds: float = 10.0
    node_delete_seconds: float = 5.0
    retry_seconds: float = 2.0


@dataclass(eq=False, slots=True)
class NodePool:
    """A Kubernikus node pool: keeps `size` servers that are not being deleted."""

    name: str
    size: int
    kubelet_version: str
    """The version servers launched from now on run."""
    zone: str = "eu-de-1a"
    flavor: str = "m5.large"
    boot_seconds: float = 60.0
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    os_version: str = "3975.2.2"
    initial_kubelet_version: str | None = None
    """The version of the servers the pool starts with, when it differs (a cluster whose
    control plane was upgraded before its nodes)."""
    launched: int = 0


@dataclass(eq=False, slots=True)
class NovaServer:
    id: str
    name: str
    pool: str
    zone: str
    flavor: str
    kubelet_version: str
    os_version: str
    ip: str
    created_at: float
    status: str = BUILD
    deleting: bool = False
    due: float | None = None
    """When the current transition (boot, teardown, node removal) is over."""
    node_created: bool = False
    node_gone: bool = False
    kubelet_stopped: bool = False
    deleted_at: float | None = None

    @property
    def provider_id(self) -> str:
        return f"openstack:///{self.id}"

    @property
    def listed(self) -> bool:
        """Whether Nova still shows the server (a GET answers, a list includes it)."""
        return self.status != DELETED
