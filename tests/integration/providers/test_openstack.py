"""The OpenStack provider against a Keystone + Nova server on loopback, through real openstacksdk.

Nothing of the provider or the SDK is patched: every test goes through token requests, catalog
lookup, version discovery and Nova's REST calls over HTTP, with faults injected by the server.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from nodeops.providers.base import ProviderConfigError, ProviderError, Server, Servers
from nodeops.providers.openstack import (
    OpenStackConfig,
    OpenStackProvider,
    parse_cloudprovider_conf,
)
from nodeops.providers.registry import validate_config
from nodeops.providers.retry import RetryPolicy
from tests.integration.providers import fake_openstack as fake
from tests.integration.providers.fake_openstack import FakeOpenStack

# openstacksdk warns about its own internal use of deprecated code paths; not ours to fix.
pytestmark = [
    pytest.mark.filterwarnings("ignore::openstack.warnings.RemovedInSDK50Warning"),
    pytest.mark.filterwarnings("ignore::openstack.warnings.RemovedInSDK60Warning"),
]

FAST = RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=0.05, attempt_timeout=5, timeout=10)


def node(name: str, provider_id: str | None = None) -> dict[str, Any]:
    spec = {"providerID": provider_id} if provider_id else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": spec}


def write_conf(tmp_path: Path, cloud: FakeOpenStack, extra: str = "") -> Path:
    """A cloudprovider.conf as Kubernikus writes it: quoted gcfg values, only `domain-name`."""
    path = tmp_path / "cloudprovider.conf"
    path.write_text(
        f"""
[Global]
auth-url = "{cloud.auth_url}"
username = "{fake.USERNAME}"
; gcfg: a quoted value keeps ; and #, an unquoted one would end at them
password = "{fake.PASSWORD}"
domain-name = "{fake.USER_DOMAIN}"   # user and project domain
tenant-id = {fake.PROJECT_ID}
region = "{fake.REGION}"
{extra}

[LoadBalancer]
lb-version = v2
subnet-id = "c8c6e9d4-0000-0000-0000-000000000000"
""",
        encoding="utf-8",
    )
    return path


def make_provider(**settings: Any) -> OpenStackProvider:
    settings.setdefault("retry", FAST)
    settings.setdefault("poll_interval", 0.01)
    return OpenStackProvider(OpenStackConfig(**settings))


@pytest.fixture
async def cloud() -> AsyncIterator[FakeOpenStack]:
    server = FakeOpenStack()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def provider(cloud: FakeOpenStack, tmp_path: Path) -> AsyncIterator[OpenStackProvider]:
    p = make_provider(cloudprovider_conf=write_conf(tmp_path, cloud))
    yield p
    await p.close()


# --------------------------------------------------------------------------------------------
# find_server
# --------------------------------------------------------------------------------------------


async def test_implements_servers(provider: OpenStackProvider) -> None:
    assert isinstance(provider, Servers)


async def test_find_by_provider_id(cloud: FakeOpenStack, provider: OpenStackProvider) -> None:
    vm = cloud.add_server("kubernikus-pool-abcde", availability_zone="eu-de-1a")
    # The node name differs from the server name: the ID alone decides.
    found = await provider.find_server(node("some-node", f"openstack:///{vm.id}"))
    assert found == Server(
        id=vm.id,
        name="kubernikus-pool-abcde",
        status="ACTIVE",
        provider_id=f"openstack:///{vm.id}",
        zone="eu-de-1a",
    )
    assert cloud.hits[fake.ROUTE_SERVERS_DETAIL] == 0
    assert provider.region == fake.REGION


async def test_find_by_provider_id_with_region(
    cloud: FakeOpenStack, provider: OpenStackProvider
) -> None:
    vm = cloud.add_server("node-r")
    found = await provider.find_server(node("node-r", f"openstack://{fake.REGION}/{vm.id}"))
    assert found is not None and found.provider_id == f"openstack://{fake.REGION}/{vm.id}"

    with pytest.raises(ProviderError) as err:
        await provider.find_server(node("node-r", f"openstack://RegionTwo/{vm.id}"))
    assert err.value.code == "RegionMismatch"
    assert not err.value.retryable
    assert "providers.openstack.region" in str(err.value)


async def test_gone_provider_id_does_not_fall_back_to_name(
    cloud: FakeOpenStack, provider: OpenStackProvider
) -> None:
    # A server named like the node exists, but it is not the node's VM.
    cloud.add_server("node-1")
    assert await provider.find_server(node("node-1", f"openstack:///{uuid.uuid4()}")) is None
    assert cloud.hits[fake.ROUTE_SERVER_GET] == 1
    assert cloud.hits[fake.ROUTE_SERVERS_DETAIL] == 0


async def test_deleted_server_counts_as_gone(
    cloud: FakeOpenStack, provider: OpenStackProvider
) -> None:
    for status in ("DELETED", "SOFT_DELETED"):
        vm = cloud.add_server(f"node-{status.lower()}", status=status)
        assert await provider.find_server(node(vm.name, f"openstack:///{vm.id}")) is None


async def test_find_by_name(cloud: FakeOpenStack, provider: OpenStackProvider) -> None:
    # Nova's name filter is a regular expression: node-1 would also match these.
    cloud.add_server("node-10")
    cloud.add_server("xnode-1")
    cloud.add_server("node-1.example")
    vm = cloud.add_server("node-1")
    found = await provider.find_server(node("node-1"))
    assert found is not None
    assert (found.id, found.name, found.provider_id) == (vm.id, "node-1", f"openstack:///{vm.id}")
    assert cloud.hits[fake.ROUTE_SERVERS_DETAIL] == 1


async def test_find_by_name_with_dots(cloud: FakeOpenStack, provider: OpenStackProvider) -> None:
    cloud.add_server("node-1xexample")
    vm = cloud.add_server("node-1.example")
    found = await provider.find_server(node("node-1.example"))
    assert found is not None and found.id == vm.id


async def test_ambiguous_name(cloud: FakeOpenStack, provider: OpenStackProvider) -> None:
    a = cloud.add_server("node-2")
    b = cloud.add_server("node-2")
    with pytest.raises(ProviderError) as err:
        await provider.find_server(node("node-2"))
    assert err.value.code == "AmbiguousNode"
    assert not err.value.retryable
    assert a.id in err.value.message and b.id in err.value.message
    assert "providerID" in err.value.message


async def test_not_found(cloud: FakeOpenStack, provider: OpenStackProvider) -> None:
    cloud.add_server("node-30")
    assert await provider.find_server(node("node-3")) is None


async def test_foreign_nodes_are_not_ours(
    cloud: FakeOpenStack, provider: OpenStackProvider
) -> None:
    assert await provider.find_server(node("n", "aws:///eu-west-1a/i-0123456789abcdef0")) is None
    assert await provider.find_server(node("n", "openstack:///not-a-uuid")) is None
    assert sum(cloud.hits.values()) == 0


# --------------------------------------------------------------------------------------------
# delete_server / wait_deleted
# --------------------------------------------------------------------------------------------


async def test_delete_is_idempotent(cloud: FakeOpenStack, provider: OpenStackProvider) -> None:
    vm = cloud.add_server("node-4", gone_after=0)
    server = await provider.find_server(node("node-4"))
    assert server is not None
    await provider.delete_server(server)
    assert cloud.servers[vm.id].deleting
    await provider.wait_deleted(server, timeout=5)
    assert vm.id not in cloud.servers
    await provider.delete_server(server)  # already gone: 404 is success
    await provider.delete_server(Server(id=str(uuid.uuid4()), name="never", status="ACTIVE"))
    assert cloud.hits[fake.ROUTE_SERVER_DELETE] == 3


async def test_delete_while_deleting(cloud: FakeOpenStack, provider: OpenStackProvider) -> None:
    vm = cloud.add_server("node-5", gone_after=10)
    server = Server(id=vm.id, name=vm.name, status="ACTIVE")
    await provider.delete_server(server)
    await provider.delete_server(server)
    assert cloud.hits[fake.ROUTE_SERVER_DELETE] == 2


async def test_wait_deleted_polls_until_404(
    cloud: FakeOpenStack, provider: OpenStackProvider
) -> None:
    # Nova keeps showing ACTIVE with task state "deleting" while the host tears the VM down.
    vm = cloud.add_server("node-6", gone_after=3, status_while_deleting="ACTIVE")
    server = Server(id=vm.id, name=vm.name, status="ACTIVE")
    await provider.delete_server(server)
    await provider.wait_deleted(server, timeout=5)
    assert cloud.hits[fake.ROUTE_SERVER_GET] == 4  # three sightings, then the 404


async def test_wait_deleted_accepts_deleted_status(
    cloud: FakeOpenStack, provider: OpenStackProvider
) -> None:
    vm = cloud.add_server("node-7", gone_after=100, status_while_deleting="DELETED")
    server = Server(id=vm.id, name=vm.name, status="ACTIVE")
    await provider.delete_server(server)
    await provider.wait_deleted(server, timeout=5)
    assert cloud.hits[fake.ROUTE_SERVER_GET] == 1


async def test_wait_deleted_timeout(cloud: FakeOpenStack, provider: OpenStackProvider) -> None:
    vm = cloud.add_server("node-8", gone_after=10**6, status_while_deleting="ACTIVE")
    server = Server(id=vm.id, name=vm.name, status="ACTIVE")
    await provider.delete_server(server)
    started = time.monotonic()
    with pytest.raises(ProviderError) as err:
        await provider.wait_deleted(server, timeout=0.3)
    assert time.monotonic() - started < 2
    assert err.value.code == "Timeout"
    assert err.value.retryable
    assert vm.id in err.value.message and "ACTIVE" in err.value.message
    assert cloud.hits[fake.ROUTE_SERVER_GET] >= 2


async def test_wait_deleted_outlasts_failing_polls(
    cloud: FakeOpenStack, provider: OpenStackProvider
) -> None:
    vm = cloud.add_server("node-9", gone_after=10**6, status_while_deleting="ACTIVE")
    server = Server(id=vm.id, name=vm.name, status="ACTIVE")
    cloud.faults[fake.ROUTE_SERVER_GET] = [503] * 1000
    with pytest.raises(ProviderError) as err:
        await provider.wait_deleted(server, timeout=0.5)
    assert err.value.code == "Timeout"
    assert "503" in err.value.message


# --------------------------------------------------------------------------------------------
# Retries and error mapping
# --------------------------------------------------------------------------------------------


async def test_retries_503_and_429(cloud: FakeOpenStack, provider: OpenStackProvider) -> None:
    vm = cloud.add_server("node-11")
    cloud.faults[fake.ROUTE_SERVER_GET] = [503, 503]
    found = await provider.find_server(node("x", f"openstack:///{vm.id}"))
    assert found is not None and found.id == vm.id
    assert cloud.hits[fake.ROUTE_SERVER_GET] == 3  # the SDK itself did not retry

    cloud.faults[fake.ROUTE_SERVERS_DETAIL] = [429]
    found = await provider.find_server(node("node-11"))
    assert found is not None and found.id == vm.id
    assert cloud.hits[fake.ROUTE_SERVERS_DETAIL] == 2

    cloud.faults[fake.ROUTE_SERVER_DELETE] = [502]
    await provider.delete_server(found)
    assert cloud.hits[fake.ROUTE_SERVER_DELETE] == 2
    assert cloud.servers[vm.id].deleting


async def test_retries_keystone(cloud: FakeOpenStack, provider: OpenStackProvider) -> None:
    vm = cloud.add_server("node-12")
    cloud.faults[fake.ROUTE_TOKENS] = [503, 429]
    found = await provider.find_server(node("node-12"))
    assert found is not None and found.id == vm.id
    assert cloud.hits[fake.ROUTE_TOKENS] == 3


async def test_gives_up_after_the_attempt_budget(
    cloud: FakeOpenStack, provider: OpenStackProvider
) -> None:
    vm = cloud.add_server("node-13")
    cloud.faults[fake.ROUTE_SERVER_GET] = [503] * 10
    with pytest.raises(ProviderError) as err:
        await provider.find_server(node("x", f"openstack:///{vm.id}"))
    assert err.value.code == "503"
    assert err.value.retryable
    assert err.value.operation == "compute.get_server"
    assert "gave up after 4 attempts" in err.value.message
    assert "(request req-" in err.value.message
    assert cloud.hits[fake.ROUTE_SERVER_GET] == FAST.max_attempts


async def test_client_errors_are_not_retried(
    cloud: FakeOpenStack, provider: OpenStackProvider
) -> None:
    vm = cloud.add_server("node-14")
    cloud.faults[fake.ROUTE_SERVER_DELETE] = [403]
    with pytest.raises(ProviderError) as err:
        await provider.delete_server(Server(id=vm.id, name=vm.name, status="ACTIVE"))
    assert (err.value.code, err.value.retryable) == ("403", False)
    assert "injected fault 403" in err.value.message
    assert cloud.hits[fake.ROUTE_SERVER_DELETE] == 1


async def test_conflict_is_retried(cloud: FakeOpenStack, provider: OpenStackProvider) -> None:
    vm = cloud.add_server("node-15")
    cloud.faults[fake.ROUTE_SERVER_DELETE] = [409]
    await provider.delete_server(Server(id=vm.id, name=vm.name, status="ACTIVE"))
    assert cloud.hits[fake.ROUTE_SERVER_DELETE] == 2


async def test_wrong_password(cloud: FakeOpenStack, tmp_path: Path) -> None:
    conf = write_conf(tmp_path, cloud)
    conf.write_text(conf.read_text().replace(fake.PASSWORD, "wrong"))
    async with make_provider(cloudprovider_conf=conf) as p:
        assert isinstance(p, OpenStackProvider)
        with pytest.raises(ProviderError) as err:
            await p.find_server(node("node-1"))
    assert (err.value.code, err.value.retryable) == ("401", False)
    assert cloud.hits[fake.ROUTE_TOKENS] == 1


async def test_reauthenticates_after_token_revocation(
    cloud: FakeOpenStack, provider: OpenStackProvider
) -> None:
    vm = cloud.add_server("node-16")
    assert await provider.find_server(node("node-16")) is not None
    cloud.tokens.clear()
    found = await provider.find_server(node("x", f"openstack:///{vm.id}"))
    assert found is not None and found.id == vm.id
    assert cloud.hits[fake.ROUTE_TOKENS] == 2


async def test_unreachable_cloud(tmp_path: Path) -> None:
    gone = FakeOpenStack()
    await gone.start()
    await gone.stop()  # the port is closed now: connection refused
    conf = write_conf(tmp_path, gone)
    policy = RetryPolicy(max_attempts=2, base_delay=0.01, attempt_timeout=5, timeout=10)
    async with make_provider(cloudprovider_conf=conf, retry=policy) as p:
        assert isinstance(p, OpenStackProvider)
        with pytest.raises(ProviderError) as err:
            await p.find_server(node("node-1"))
    assert err.value.code == "ConnectionError"
    assert err.value.retryable


async def test_region_override(cloud: FakeOpenStack, tmp_path: Path) -> None:
    conf = write_conf(tmp_path, cloud)
    async with make_provider(cloudprovider_conf=conf, region="Nowhere") as p:
        assert isinstance(p, OpenStackProvider)
        with pytest.raises(ProviderError) as err:
            await p.find_server(node("node-1"))
        assert p.region == "Nowhere"
    assert (err.value.code, err.value.retryable) == ("EndpointNotFound", False)
    assert "Nowhere" in err.value.message
    assert "providers.openstack.region" in err.value.message


async def test_concurrent_calls(cloud: FakeOpenStack, provider: OpenStackProvider) -> None:
    vms = [cloud.add_server(f"node-c{i}") for i in range(8)]
    found = await asyncio.gather(*(provider.find_server(node(vm.name)) for vm in vms))
    assert [s.id if s else None for s in found] == [vm.id for vm in vms]
    assert cloud.hits[fake.ROUTE_TOKENS] <= provider.config.max_workers


async def test_closed_provider(cloud: FakeOpenStack, provider: OpenStackProvider) -> None:
    await provider.find_server(node("node-1"))
    await provider.close()
    await provider.close()
    with pytest.raises(ProviderError) as err:
        await provider.find_server(node("node-1"))
    assert err.value.code == "Closed"


# --------------------------------------------------------------------------------------------
# Credential sources
# --------------------------------------------------------------------------------------------


def write_clouds_yaml(tmp_path: Path, cloud: FakeOpenStack) -> Path:
    path = tmp_path / "clouds.yaml"
    path.write_text(
        f"""
clouds:
  other:
    auth:
      auth_url: http://127.0.0.1:9/v3
  kubernikus:
    auth_type: password
    region_name: {fake.REGION}
    auth:
      auth_url: {cloud.auth_url}
      username: {fake.USERNAME}
      user_domain_name: {fake.USER_DOMAIN}
      project_name: {fake.PROJECT_NAME}
      project_domain_name: {fake.USER_DOMAIN}
""",
        encoding="utf-8",
    )
    # The password lives beside it in secure.yaml, as the OpenStack client convention has it.
    (tmp_path / "secure.yaml").write_text(
        f"clouds:\n  kubernikus:\n    auth:\n      password: '{fake.PASSWORD}'\n",
        encoding="utf-8",
    )
    return path


async def test_clouds_yaml(cloud: FakeOpenStack, tmp_path: Path) -> None:
    vm = cloud.add_server("node-17")
    path = write_clouds_yaml(tmp_path, cloud)
    async with make_provider(cloud="kubernikus", clouds_yaml=path) as p:
        assert isinstance(p, OpenStackProvider)
        found = await p.find_server(node("node-17"))
        assert p.region == fake.REGION
    assert found is not None and found.id == vm.id
    scope = cloud.auth_bodies[-1]["auth"]["scope"]["project"]
    assert scope == {"name": fake.PROJECT_NAME, "domain": {"name": fake.USER_DOMAIN}}


async def test_connect_reads_files_without_network(cloud: FakeOpenStack, tmp_path: Path) -> None:
    async with make_provider(cloudprovider_conf=write_conf(tmp_path, cloud)) as p:
        assert isinstance(p, OpenStackProvider)
        await p.connect()
        assert p.region == fake.REGION
    assert sum(cloud.hits.values()) == 0


async def test_clouds_yaml_errors(cloud: FakeOpenStack, tmp_path: Path) -> None:
    path = write_clouds_yaml(tmp_path, cloud)
    with pytest.raises(ProviderConfigError) as err:
        await make_provider(cloud="nope", clouds_yaml=path).connect()
    assert err.value.key == "providers.openstack.cloud"
    assert "no cloud named 'nope' (defined: kubernikus, other)" in err.value.message

    with pytest.raises(ProviderConfigError) as err:
        await make_provider(cloud="kubernikus", clouds_yaml=tmp_path / "missing.yaml").connect()
    assert err.value.key == "providers.openstack.clouds_yaml"
    assert "missing.yaml: no such file" in err.value.message

    broken = tmp_path / "broken.yaml"
    broken.write_text("clouds: [unclosed\n", encoding="utf-8")
    with pytest.raises(ProviderConfigError) as err:
        await make_provider(cloud="kubernikus", clouds_yaml=broken).connect()
    assert err.value.key == "providers.openstack.clouds_yaml"
    assert "broken.yaml: not valid YAML" in err.value.message

    with pytest.raises(ProviderConfigError) as err:
        await make_provider(cloud="kubernikus", clouds_yaml=path, region="Elsewhere").connect()
    assert err.value.key == "providers.openstack.region"
    assert "Elsewhere" in err.value.message


async def test_cloudprovider_conf_tenant_name(cloud: FakeOpenStack, tmp_path: Path) -> None:
    vm = cloud.add_server("node-18")
    conf = tmp_path / "cloudprovider.conf"
    conf.write_text(
        f"""[global]
auth-url={cloud.auth_url}
username={fake.USERNAME}
password="{fake.PASSWORD}"
user-domain-name={fake.USER_DOMAIN}
tenant-name={fake.PROJECT_NAME}
tenant-domain-name={fake.USER_DOMAIN}
""",
        encoding="utf-8",
    )
    async with make_provider(cloudprovider_conf=conf) as p:
        assert isinstance(p, OpenStackProvider)
        found = await p.find_server(node("node-18"))
    assert found is not None and found.id == vm.id
    body = cloud.auth_bodies[-1]["auth"]
    assert body["identity"]["password"]["user"]["domain"] == {"name": fake.USER_DOMAIN}
    assert body["scope"]["project"]["name"] == fake.PROJECT_NAME


async def test_cloudprovider_conf_application_credential(
    cloud: FakeOpenStack, tmp_path: Path
) -> None:
    vm = cloud.add_server("node-19")
    conf = tmp_path / "cloudprovider.conf"
    conf.write_text(
        f"""[Global]
auth-url = {cloud.auth_url}
application-credential-id = {fake.APP_CRED_ID}
application-credential-secret = "{fake.APP_CRED_SECRET}"
region = {fake.REGION}
""",
        encoding="utf-8",
    )
    async with make_provider(cloudprovider_conf=conf) as p:
        assert isinstance(p, OpenStackProvider)
        found = await p.find_server(node("node-19"))
    assert found is not None and found.id == vm.id
    assert cloud.auth_bodies[-1]["auth"]["identity"]["methods"] == ["application_credential"]


async def test_kubernikus_conf_is_parsed_like_gcfg(cloud: FakeOpenStack, tmp_path: Path) -> None:
    conf = parse_cloudprovider_conf(write_conf(tmp_path, cloud).read_text(), source="c.conf")
    assert conf.auth_type == "password"
    assert conf.auth == {
        "auth_url": cloud.auth_url,
        "username": fake.USERNAME,
        "password": fake.PASSWORD,
        "project_id": fake.PROJECT_ID,
        "user_domain_name": fake.USER_DOMAIN,
        "project_domain_name": fake.USER_DOMAIN,
    }
    assert conf.region == fake.REGION
    assert conf.verify
    assert fake.PASSWORD not in repr(conf)


GOOD = """[Global]
auth-url = https://identity.example/v3
username = u
password = p
domain-name = d
tenant-id = t
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[LoadBalancer]\nlb-version = v2\n", "has no [Global] section"),
        ("auth-url = x\n", "not a valid INI file"),
        (GOOD.replace("auth-url = https://identity.example/v3\n", ""), "auth-url is missing"),
        (GOOD.replace("https://identity.example/v3", "identity.example"), "auth-url 'identity"),
        (GOOD.replace("password = p\n", ""), "password is missing"),
        (GOOD.replace("username = u\n", ""), "username (or user-id) is missing"),
        (GOOD.replace("domain-name = d\n", ""), "username needs its domain"),
        (GOOD.replace("tenant-id = t\n", ""), "tenant-id (or tenant-name) is missing"),
        (
            GOOD.replace("tenant-id = t\n", "tenant-name = t\n").replace("domain-name = d\n", "")
            + "user-domain-id = x\n",
            "tenant-name needs its domain",
        ),
        (GOOD + "project-id = other\n", "tenant-id and project-id are both set"),
        (GOOD + "tls-insecure = maybe\n", "tls-insecure 'maybe' is not a boolean"),
        (GOOD + 'ca-file = "/etc/ca.pem\n', "ca-file: unterminated quoted value"),
        (GOOD + "ca-file = a\\qb\n", "ca-file: invalid escape sequence"),
        (GOOD + "ca-file\n", "ca-file has no value"),
        (GOOD + "use-clouds = true\n", "use-clouds refers to a clouds.yaml"),
        (
            "[Global]\nauth-url = https://k/v3\napplication-credential-name = n\n"
            "application-credential-secret = s\n",
            "application-credential-name needs user-id",
        ),
        (
            "[Global]\nauth-url = https://k/v3\napplication-credential-id = i\n",
            "application-credential-secret is missing",
        ),
    ],
)
def test_bad_cloudprovider_conf(text: str, expected: str) -> None:
    with pytest.raises(ProviderConfigError) as err:
        parse_cloudprovider_conf(text, source="/etc/kubernetes/cloudprovider.conf")
    assert err.value.key == "providers.openstack.cloudprovider_conf"
    assert err.value.message.startswith("/etc/kubernetes/cloudprovider.conf: ")
    assert expected in err.value.message


def test_cloudprovider_conf_values() -> None:
    conf = parse_cloudprovider_conf(
        GOOD + 'ca-file = "/etc/ssl/my ca.pem"  ; comment\ntls-insecure\n'
        "region = eu-de-1 # comment\n"
        'user-domain-name = "a\\"b"\n',
        source="c",
    )
    assert conf.cacert == "/etc/ssl/my ca.pem"
    assert not conf.verify
    assert conf.region == "eu-de-1"
    assert conf.auth["user_domain_name"] == 'a"b'
    assert conf.auth["project_domain_name"] == "d"


async def test_missing_cloudprovider_conf(tmp_path: Path) -> None:
    p = make_provider(cloudprovider_conf=tmp_path / "nope.conf")
    with pytest.raises(ProviderConfigError) as err:
        await p.connect()
    assert err.value.key == "providers.openstack.cloudprovider_conf"
    assert "nope.conf: no such file" in err.value.message
    await p.close()


@pytest.mark.parametrize(
    ("raw", "key", "expected"),
    [
        ({}, "providers.openstack", "set exactly one of `cloud`"),
        (
            {"cloud": "a", "cloudprovider_conf": "/x.conf"},
            "providers.openstack",
            "set exactly one of `cloud`",
        ),
        ({"cloudprovider_conf": "/x", "clouds_yaml": "/y"}, "providers.openstack", "needs `cloud`"),
        ({"cloud": "a", "regoin": "x"}, "providers.openstack.regoin", "Extra inputs"),
        ({"cloud": " "}, "providers.openstack.cloud", "must not be empty"),
        ({"cloud": "a", "poll_interval": 0}, "providers.openstack.poll_interval", "greater than"),
        (
            {"cloud": "a", "retry": {"attempt_timeout": -1}},
            "providers.openstack.retry.attempt_timeout",
            "greater than",
        ),
    ],
)
def test_bad_settings(raw: dict[str, Any], key: str, expected: str) -> None:
    with pytest.raises(ProviderConfigError) as err:
        validate_config(OpenStackProvider, raw, key="providers.openstack")
    assert err.value.key == key
    assert expected in err.value.message


def test_settings() -> None:
    config = validate_config(
        OpenStackProvider,
        {"cloud": "kubernikus", "region": "eu-de-2", "retry": {"timeout": 60}},
        key="providers.openstack",
    )
    assert isinstance(config, OpenStackConfig)
    assert config.retry.timeout == 60
    assert OpenStackProvider(config).config.region == "eu-de-2"
