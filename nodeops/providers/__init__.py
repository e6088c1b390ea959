"""Cloud providers: named plugins behind small protocols.

`nodeops.providers.base` defines the protocols (`NodeGroups`, `LoadBalancers`,
`LoadBalancerDraining`, `Servers`), their value types and errors; `nodeops.providers.registry`
finds providers through the `nodeops.providers` entry-point group and builds them from their
configuration block; `nodeops.providers.retry` is the retry loop every provider calls through.
Concrete providers (`aws`, `openstack`, `sim`) are imported only when selected, so their SDKs
load only where they are used; the clouds' SDKs are installed with the extras of the same names
(`nodeops[aws]`, `nodeops[openstack]`), and a provider whose extra is missing is refused with a
`ProviderConfigError` that says what to install.
"""

from nodeops.providers.base import (
    CLASSIC,
    TARGET_GROUP,
    BaseProvider,
    Instance,
    Lifecycle,
    LoadBalancerDraining,
    LoadBalancers,
    LoadBalancerTarget,
    NodeGroup,
    NodeGroups,
    Provider,
    ProviderConfigError,
    ProviderError,
    ProviderId,
    ProviderIdError,
    Server,
    Servers,
    ServiceRef,
    node_name,
    node_provider_id,
    parse_provider_id,
)
from nodeops.providers.registry import (
    ENTRY_POINT_GROUP,
    available_providers,
    create_provider,
    create_providers,
    provider_class,
)
from nodeops.providers.retry import RetryPolicy, call_with_retry

__all__ = [
    "CLASSIC",
    "ENTRY_POINT_GROUP",
    "TARGET_GROUP",
    "BaseProvider",
    "Instance",
    "Lifecycle",
    "LoadBalancerDraining",
    "LoadBalancerTarget",
    "LoadBalancers",
    "NodeGroup",
    "NodeGroups",
    "Provider",
    "ProviderConfigError",
    "ProviderError",
    "ProviderId",
    "ProviderIdError",
    "RetryPolicy",
    "Server",
    "Servers",
    "ServiceRef",
    "available_providers",
    "call_with_retry",
    "create_provider",
    "create_providers",
    "node_name",
    "node_provider_id",
    "parse_provider_id",
    "provider_class",
]
