"""Credentials given as text (a Secret read through the API) reach Keystone unchanged and never
appear in a log line or an error message, at any log level."""

from __future__ import annotations

import io
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from nodeops.providers.base import ProviderConfigError
from nodeops.providers.openstack import OpenStackConfig, OpenStackProvider
from nodeops.providers.retry import RetryPolicy
from tests.integration.providers import fake_openstack as fake
from tests.integration.providers.fake_openstack import FakeOpenStack

pytestmark = [
    pytest.mark.filterwarnings("ignore::openstack.warnings.RemovedInSDK50Warning"),
    pytest.mark.filterwarnings("ignore::openstack.warnings.RemovedInSDK60Warning"),
]

FAST = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05, attempt_timeout=5, timeout=10)
SOURCE = Path("secret kube-system/cloud-config key cloudprovider.conf")


@pytest.fixture
async def cloud() -> AsyncIterator[FakeOpenStack]:
    server = FakeOpenStack()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def all_logs() -> Iterator[io.StringIO]:
    """Every stdlib log record of every library (keystoneauth, openstacksdk, urllib3) at DEBUG."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield out
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


def conf(cloud: FakeOpenStack, password: str = fake.PASSWORD) -> str:
    return (
        "[Global]\n"
        f'auth-url = "{cloud.auth_url}"\n'
        f'username = "{fake.USERNAME}"\n'
        f'password = "{password}"\n'
        f'domain-name = "{fake.USER_DOMAIN}"\n'
        f"tenant-id = {fake.PROJECT_ID}\n"
        f'region = "{fake.REGION}"\n'
    )


def clouds_yaml(cloud: FakeOpenStack) -> str:
    return f"""
clouds:
  kubernikus:
    auth:
      auth_url: {cloud.auth_url}
      username: {fake.USERNAME}
      password: "{fake.PASSWORD}"
      user_domain_name: {fake.USER_DOMAIN}
      project_id: {fake.PROJECT_ID}
    region_name: {fake.REGION}
"""


async def test_cloudprovider_conf_text_deletes_a_server(
    cloud: FakeOpenStack, all_logs: io.StringIO
) -> None:
    vm = cloud.add_server("node-a")
    config = OpenStackConfig(cloudprovider_conf=SOURCE, retry=FAST, poll_interval=0.01)
    async with OpenStackProvider.from_text(config, conf(cloud)) as provider:
        server = await provider.find_server({"metadata": {"name": "node-a"}})
        assert server is not None and server.id == vm.id
        await provider.delete_server(server)
        await provider.wait_deleted(server, timeout=5)
    assert cloud.auth_bodies, "keystone was asked for a token"
    logs = all_logs.getvalue()
    assert "keystoneauth" in logs or "openstack" in logs  # the libraries did log at DEBUG
    assert fake.PASSWORD not in logs


async def test_clouds_yaml_text(cloud: FakeOpenStack, all_logs: io.StringIO) -> None:
    vm = cloud.add_server("node-b")
    config = OpenStackConfig(cloud="kubernikus", clouds_yaml=Path("secret x/y key clouds.yaml"))
    config = config.model_copy(update={"retry": FAST})
    async with OpenStackProvider.from_text(config, clouds_yaml(cloud)) as provider:
        server = await provider.find_server({"metadata": {"name": "node-b"}})
        assert server is not None and server.id == vm.id
        with pytest.raises(ProviderConfigError, match="no cloud named 'other'"):
            other = config.model_copy(update={"cloud": "other"})
            await OpenStackProvider.from_text(other, clouds_yaml(cloud)).connect()
    assert fake.PASSWORD not in all_logs.getvalue()


@pytest.mark.parametrize(
    "text",
    [
        # A line configparser cannot read: its own message would quote it.
        '[Global]\nauth-url = "http://k/v3"\npassword "{pw}"\n',
        # A key before any section.
        'password = "{pw}"\n[Global]\n',
        # An escape gcfg refuses inside the password.
        '[Global]\nauth-url = "http://k/v3"\npassword = "{pw}\\q"\n',
    ],
)
async def test_errors_never_quote_the_password(text: str) -> None:
    secret = "Sup3r-S3cret-Value"
    config = OpenStackConfig(cloudprovider_conf=SOURCE, retry=FAST)
    provider = OpenStackProvider.from_text(config, text.replace("{pw}", secret))
    with pytest.raises(ProviderConfigError) as err:
        await provider.connect()
    await provider.close()
    assert str(SOURCE) in str(err.value)
    assert secret not in str(err.value) and "S3cret" not in repr(err.value)


async def test_yaml_errors_never_quote_the_password() -> None:
    secret = "Sup3r-S3cret-Value"
    config = OpenStackConfig(cloud="c", clouds_yaml=Path("secret x/y key clouds.yaml"))
    text = f"clouds:\n  c:\n    auth: {{password: {secret}: oops}}\n"
    provider = OpenStackProvider.from_text(config, text)
    with pytest.raises(ProviderConfigError, match="not valid YAML at line") as err:
        await provider.connect()
    await provider.close()
    assert secret not in str(err.value)
