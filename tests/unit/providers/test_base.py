"""Provider IDs, value types, errors and protocol checks of `nodeops.providers.base`."""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from nodeops.providers.base import (
    Instance,
    Lifecycle,
    LoadBalancers,
    NodeGroup,
    NodeGroups,
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


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("aws:///us-east-1a/i-0abc123", ProviderId("aws", "us-east-1a", "i-0abc123")),
        ("aws:////i-0abc123", ProviderId("aws", None, "i-0abc123")),
        ("openstack:///8f9c3a1e-1111-2222", ProviderId("openstack", None, "8f9c3a1e-1111-2222")),
        ("openstack://RegionOne/8f9c", ProviderId("openstack", None, "8f9c", host="RegionOne")),
        ("sim:///group-a/n-1", ProviderId("sim", "group-a", "n-1")),
        (
            "gce://project/europe-west1-b/vm-1",
            ProviderId("gce", "europe-west1-b", "vm-1", "project"),
        ),
        ("digitalocean://12345", ProviderId("digitalocean", None, "12345")),
        (
            "azure:///subscriptions/s/resourceGroups/g/providers/vm/n",
            ProviderId("azure", None, "subscriptions/s/resourceGroups/g/providers/vm/n"),
        ),
    ],
)
def test_parse_provider_id(raw: str, expected: ProviderId) -> None:
    assert parse_provider_id(raw) == expected


@pytest.mark.parametrize(
    "raw", ["aws:///us-east-1a/i-0abc", "openstack:///8f9c", "sim:///g/n-1", "gce://p/z/vm"]
)
def test_provider_id_round_trips(raw: str) -> None:
    assert str(parse_provider_id(raw)) == raw


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "empty"),
        ("i-0abc", "missing '://' after the scheme"),
        (" aws:///z/i-1", "contains whitespace"),
        ("aws:///z/i 1", "contains whitespace"),
        ("AWS:///z/i-1", "scheme 'AWS' is not a lower-case URI scheme"),
        ("://z/i-1", "scheme '' is not a lower-case URI scheme"),
        ("aws://", "no ID after the scheme"),
        ("aws:///", "empty ID (trailing '/' or nothing after the host)"),
        ("aws:///us-east-1a/", "empty ID (trailing '/' or nothing after the host)"),
    ],
)
def test_parse_provider_id_errors(raw: str, reason: str) -> None:
    with pytest.raises(ProviderIdError) as caught:
        parse_provider_id(raw)
    assert caught.value.reason == reason
    assert str(caught.value) == f"invalid provider ID {raw!r}: {reason}"


def test_parse_provider_id_rejects_non_strings() -> None:
    with pytest.raises(ProviderIdError, match="not a string"):
        parse_provider_id(None)  # type: ignore[arg-type]


def test_node_provider_id() -> None:
    node = {"metadata": {"name": "n1"}, "spec": {"providerID": "aws:///eu-west-1b/i-0123"}}
    assert node_provider_id(node) == ProviderId("aws", "eu-west-1b", "i-0123")
    assert node_provider_id({"metadata": {"name": "n1"}, "spec": {}}) is None
    assert node_provider_id({"metadata": {"name": "n1"}}) is None
    assert node_provider_id({"spec": {"providerID": ""}}) is None
    with pytest.raises(ProviderIdError):
        node_provider_id({"spec": {"providerID": "garbage"}})


def test_node_name() -> None:
    assert node_name({"metadata": {"name": "ip-10-0-0-1.ec2.internal"}}) == (
        "ip-10-0-0-1.ec2.internal"
    )
    with pytest.raises(ValueError, match=r"metadata\.name"):
        node_name({"metadata": {}})


def test_service_ref() -> None:
    ref = ServiceRef.parse("ingress/nginx")
    assert ref == ServiceRef("ingress", "nginx")
    assert str(ref) == "ingress/nginx"
    for bad in ("nginx", "/nginx", "ns/", "a/b/c"):
        with pytest.raises(ValueError, match="namespace"):
            ServiceRef.parse(bad)


def test_provider_error_keeps_its_fields_through_pickle() -> None:
    error = ProviderError("Throttling", "Rate exceeded", retryable=True, operation="ec2.x")
    assert str(error) == "ec2.x: Throttling: Rate exceeded"
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.code, copy.message, copy.retryable, copy.operation) == (
        "Throttling",
        "Rate exceeded",
        True,
        "ec2.x",
    )
    assert str(ProviderError("X", "y")) == "X: y"
    assert ProviderError("X", "y").retryable is False


def test_provider_config_error_lists_every_problem() -> None:
    error = ProviderConfigError("providers.aws.region", "bad", more=[("providers.aws.x", "worse")])
    assert str(error) == "providers.aws.region: bad; providers.aws.x: worse"
    assert error.key == "providers.aws.region"
    copy = pickle.loads(pickle.dumps(error))
    assert copy.problems == error.problems


def _instance(ident: str, state: Lifecycle) -> Instance:
    return Instance(
        id=ident,
        provider_id=f"sim:///g/{ident}",
        zone=None,
        lifecycle_state=state,
        healthy=True,
        launch_version="v1",
        out_of_date=False,
    )


def test_node_group_values() -> None:
    a = _instance("a", Lifecycle.IN_SERVICE)
    b = _instance("b", Lifecycle.PENDING)
    group = NodeGroup("g", desired=2, min=1, max=3, instances=[a, b])
    assert group.instance("b") is b
    assert group.instance("c") is None
    assert a.in_service and not b.in_service
    assert hash(group) == hash(NodeGroup("g", 2, 1, 3, instances=[]))


class _OnlyServers:
    async def find_server(self, node: Mapping[str, Any]) -> Server | None:
        return None

    async def delete_server(self, server: Server) -> None:
        return None

    async def wait_deleted(self, server: Server, timeout: float) -> None:
        return None


class _HalfNodeGroups:
    async def describe_groups(self, names: Sequence[str]) -> list[NodeGroup]:
        return []


def test_protocols_are_checked_by_shape() -> None:
    assert isinstance(_OnlyServers(), Servers)
    assert not isinstance(_OnlyServers(), NodeGroups)
    assert not isinstance(_OnlyServers(), LoadBalancers)
    # A provider must implement a protocol entirely to claim it.
    assert not isinstance(_HalfNodeGroups(), NodeGroups)
