"""The `sim` provider against a running simulated cluster with cloud node groups, over HTTP.

Nothing is patched: the provider is built through the registry and every call goes to the
simulator's `/sim/cloud/` API, with faults injected by the simulator itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from nodeops.providers.base import (
    CLASSIC,
    TARGET_GROUP,
    Lifecycle,
    LoadBalancerDraining,
    LoadBalancers,
    LoadBalancerTarget,
    NodeGroups,
    Provider,
    ProviderConfigError,
    ProviderError,
    RegistrationState,
    Servers,
    ServiceRef,
)
from nodeops.providers.registry import create_provider, provider_class
from nodeops.providers.sim import SimProvider
from nodeops.sim.serve import SimCluster, SimOptions
from tests.waiting import until

TIME_SCALE = 200.0
FAST_RETRY = {
    "max_attempts": 6,
    "base_delay": 0.01,
    "max_delay": 0.05,
    "attempt_timeout": 5,
    "timeout": 20,
}
TG = LoadBalancerTarget(TARGET_GROUP, "web-tg", 8080)
CLB = LoadBalancerTarget(CLASSIC, "web-clb")

SCENARIO = """
seed: 11
nodeGroups:
  - name: web
    size: 2
    zone: eu-west-1a
    launchVersion: "1"
    labels:
      workload: web
    bootSeconds: 30
  - name: batch
    size: 1
    zone: eu-west-1b
    bootSeconds: 30
  - name: slow
    size: 0
    zone: eu-west-1c
    bootSeconds: 86400
loadBalancers:
  - name: web-tg
    type: target-group
    port: 8080
    nodeGroups: [web]
  - name: web-clb
    type: classic
    port: 80
    nodeGroups: [web]
"""


class Sim:
    """The running cluster, a raw client for its cloud API, and the provider under test."""

    def __init__(
        self, cluster: SimCluster, session: aiohttp.ClientSession, provider: SimProvider
    ) -> None:
        self.cluster = cluster
        self.session = session
        self.provider = provider
        self.url = cluster.server.url

    async def http(self, method: str, path: str, body: Any = None) -> Any:
        async with self.session.request(method, self.url + path, json=body) as resp:
            data = await resp.json()
            assert resp.status == 200, (resp.status, data)
            return data

    async def faults(self, spec: str, seed: int = 1) -> None:
        await self.http("PUT", "/sim/faults", {"spec": spec, "seed": seed})

    async def instance(self, iid: str) -> dict[str, Any]:
        return dict(await self.http("GET", f"/sim/cloud/instances/{iid}"))

    async def lifecycle(self, iid: str) -> str:
        return str((await self.instance(iid))["lifecycleState"])

    async def node(self, iid: str) -> dict[str, Any]:
        provider_id = (await self.instance(iid))["providerId"]
        nodes = await self.http("GET", "/api/v1/nodes")
        return next(n for n in nodes["items"] if n["spec"].get("providerID") == provider_id)


def _provider(url: str, **extra: Any) -> SimProvider:
    config = {"url": url, "retry": FAST_RETRY, "poll_interval": 0.02, **extra}
    provider = create_provider("sim", config)
    assert isinstance(provider, SimProvider)
    return provider


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[Sim]:
    path = tmp_path / "groups.yaml"
    path.write_text(SCENARIO)
    cluster = SimCluster(SimOptions(scenario=str(path), time_scale=TIME_SCALE))
    await cluster.start()
    provider = _provider(cluster.server.url)
    try:
        async with aiohttp.ClientSession() as session:
            yield Sim(cluster, session, provider)
    finally:
        await provider.close()
        await cluster.stop()


def test_registered_with_its_config_and_protocols() -> None:
    assert provider_class("sim") is SimProvider
    provider = _provider("http://127.0.0.1:9/")
    assert provider.config.url == "http://127.0.0.1:9"
    assert isinstance(provider, Provider)
    for protocol in (NodeGroups, LoadBalancers, LoadBalancerDraining, Servers):
        assert isinstance(provider, protocol)
    with pytest.raises(ProviderConfigError) as err:
        create_provider("sim", {"url": "127.0.0.1:9", "tokn": "x"})
    keys = {key for key, _ in err.value.problems}
    assert keys == {"providers.sim.url", "providers.sim.tokn"}
    assert "secret" not in repr(_provider("http://h", token="secret").config)


async def test_describe_groups(sim: Sim) -> None:
    groups = await sim.provider.describe_groups(["web", "nope", "batch", "web"])
    assert [g.name for g in groups] == ["web", "batch"]
    web = groups[0]
    assert (web.desired, web.min, web.max, web.launch_version) == (2, 0, 4, "1")
    assert [i.id for i in web.instances] == ["sim-web-0", "sim-web-1"]
    first = web.instance("sim-web-0")
    assert first is not None
    assert first.provider_id == "sim:///web/sim-web-0" and first.zone == "eu-west-1a"
    assert first.in_service and first.healthy and first.raw_state == "InService"
    assert (first.launch_version, first.out_of_date) == ("1", False)
    assert await sim.provider.describe_groups([]) == []

    await sim.http("PATCH", "/sim/cloud/nodegroups/web", {"launchVersion": "2"})
    (web,) = await sim.provider.describe_groups(["web"])
    assert web.launch_version == "2"
    assert all(i.out_of_date for i in web.instances)


async def test_detach_and_attach_are_idempotent(sim: Sim) -> None:
    provider = sim.provider
    await provider.detach_instance("web", "sim-web-0")
    await provider.detach_instance("web", "sim-web-0")  # detaching: done already
    (web,) = await provider.describe_groups(["web"])
    assert web.desired == 2
    await until(lambda: _is(sim, "sim-web-0", "Detached"), what="the instance detached")
    await provider.detach_instance("web", "sim-web-0")  # detached: done already
    await provider.detach_instance("batch", "sim-web-1")  # not in that group: nothing to do
    await provider.detach_instance("web", "sim-nope-0")  # unknown: nothing to do

    async def replaced() -> bool:
        (group,) = await provider.describe_groups(["web"])
        return {i.id: i.lifecycle_state for i in group.instances} == {
            "sim-web-1": Lifecycle.IN_SERVICE,
            "sim-web-2": Lifecycle.IN_SERVICE,
        }

    await until(replaced, what="the replacement in service")

    await provider.attach_instance("web", "sim-web-0")
    await provider.attach_instance("web", "sim-web-0")
    (web,) = await provider.describe_groups(["web"])
    assert web.desired == 3
    attached = web.instance("sim-web-0")
    assert attached is not None and attached.in_service

    with pytest.raises(ProviderError) as err:
        await provider.attach_instance("batch", "sim-web-0")
    assert (err.value.code, err.value.retryable) == ("InstanceInOtherGroup", False)
    with pytest.raises(ProviderError) as err:
        await provider.attach_instance("web", "sim-nope-0")
    assert (err.value.code, err.value.retryable) == ("NotFound", False)


async def test_detaching_a_booting_instance_is_retryable(sim: Sim) -> None:
    await sim.http("PATCH", "/sim/cloud/nodegroups/slow", {"desiredCapacity": 1})
    await until(lambda: _is(sim, "sim-slow-0", "Pending"), what="a booting instance")
    with pytest.raises(ProviderError) as err:
        await sim.provider.detach_instance("slow", "sim-slow-0")
    assert (err.value.code, err.value.retryable) == ("IncorrectInstanceState", True)
    assert err.value.operation == "nodegroups.detach"


async def test_terminate_is_idempotent(sim: Sim) -> None:
    await sim.provider.terminate_instance("sim-web-1")
    await sim.provider.terminate_instance("sim-web-1")
    await sim.provider.terminate_instance("sim-nope-7")
    await until(lambda: _is(sim, "sim-web-1", "Terminated"), what="the instance terminated")
    await sim.provider.terminate_instance("sim-web-1")
    with pytest.raises(ProviderError) as err:
        await sim.provider.attach_instance("web", "sim-web-1")
    assert (err.value.code, err.value.retryable) == ("IncorrectInstanceState", False)


async def test_targets_deregister_register_and_draining(sim: Sim) -> None:
    provider = sim.provider
    await sim.http("PATCH", "/sim/cloud/loadbalancers/web-tg", {"deregistrationDelaySeconds": 200})
    await sim.http("PATCH", "/sim/cloud/loadbalancers/web-clb", {"deregistrationDelaySeconds": 200})
    assert await provider.targets_of("sim-web-0") == [CLB, TG]
    assert await provider.targets_of(
        "sim-web-0", among=[LoadBalancerTarget(TARGET_GROUP, "web-tg")]
    ) == [TG]
    assert await provider.targets_of("sim-web-0", among=[]) == []
    assert await provider.targets_of("sim-nope-0") == []

    with pytest.raises(ProviderError) as err:
        await provider.wait_drained(TG, "sim-web-0", timeout=5)
    assert (err.value.code, err.value.retryable) == ("IncorrectTargetState", False)

    await provider.deregister(TG, "sim-web-0")
    await provider.deregister(TG, "sim-web-0")  # draining already
    assert await provider.targets_of("sim-web-0") == [CLB]
    with pytest.raises(ProviderError) as err:
        await provider.wait_drained(TG, "sim-web-0", timeout=0.01)
    assert (err.value.code, err.value.retryable) == ("Timeout", True)
    await provider.wait_drained(TG, "sim-web-0", timeout=15)
    await provider.deregister(TG, "sim-web-0")  # absent: done already
    await provider.wait_drained(TG, "sim-web-0", timeout=1)

    await provider.deregister(CLB, "sim-web-0")
    await provider.wait_drained(CLB, "sim-web-0", timeout=15)
    assert await provider.targets_of("sim-web-0") == []

    await provider.register(TG, "sim-web-0")
    await provider.register(TG, "sim-web-0")
    await provider.register(CLB, "sim-web-0")
    assert await provider.targets_of("sim-web-0") == [CLB, TG]

    # A target group target without a port deregisters every port.
    await provider.register(LoadBalancerTarget(TARGET_GROUP, "web-tg", 9090), "sim-web-0")
    await provider.deregister(LoadBalancerTarget(TARGET_GROUP, "web-tg"), "sim-web-0")
    assert await provider.targets_of("sim-web-0") == [CLB]
    await provider.deregister(LoadBalancerTarget(CLASSIC, "gone-lb"), "sim-web-0")

    with pytest.raises(ProviderError) as err:
        await provider.register(LoadBalancerTarget("pool", "p1"), "sim-web-0")
    assert (err.value.code, err.value.retryable) == ("UnsupportedTarget", False)
    with pytest.raises(ProviderError) as err:
        await provider.register(TG, "sim-nope-0")
    assert (err.value.code, err.value.retryable) == ("InvalidTarget", False)


async def test_registrations_and_target_health(sim: Sim) -> None:
    provider = sim.provider
    await sim.http("PATCH", "/sim/cloud/loadbalancers/web-tg", {"deregistrationDelaySeconds": 200})
    everyone = await provider.registrations()
    assert everyone == {"sim-web-0": [CLB, TG], "sim-web-1": [CLB, TG]}
    assert await provider.registrations(among=[LoadBalancerTarget(CLASSIC, "web-clb")]) == {
        "sim-web-0": [CLB],
        "sim-web-1": [CLB],
    }
    health = await provider.target_health(TG, "sim-web-0")
    assert (health.state, health.registered) == (RegistrationState.REGISTERED, True)

    await provider.deregister(TG, "sim-web-0")
    assert (await provider.target_health(TG, "sim-web-0")).state is RegistrationState.DRAINING
    # Draining registrations are not registrations any more.
    assert (await provider.registrations())["sim-web-0"] == [CLB]
    await provider.wait_drained(TG, "sim-web-0", timeout=15)
    health = await provider.target_health(TG, "sim-web-0")
    assert (health.state, health.drain_seconds) == (RegistrationState.UNUSED, 0.0)
    assert (await provider.target_health(CLB, "sim-web-0")).registered
    gone = await provider.target_health(LoadBalancerTarget(CLASSIC, "gone"), "sim-web-0")
    assert gone.state is RegistrationState.UNUSED


async def test_targets_behind_services(sim: Sim) -> None:
    tags = {"kubernetes.io/service-name": "shop/web", "kubernetes.io/cluster/c1": "owned"}
    await sim.http("PATCH", "/sim/cloud/loadbalancers/web-tg", {"tags": tags})
    web, other = ServiceRef("shop", "web"), ServiceRef("shop", "other")
    found = await sim.provider.targets_behind_services([web, other], cluster="c1")
    assert found == {web: [LoadBalancerTarget(TARGET_GROUP, "web-tg")], other: []}
    assert await sim.provider.targets_behind_services([web], cluster="c2") == {web: []}
    assert await sim.provider.targets_behind_services([]) == {}


async def test_servers(sim: Sim) -> None:
    provider = sim.provider
    node = await sim.node("sim-web-0")
    name = node["metadata"]["name"]
    server = await provider.find_server(node)
    assert server is not None
    assert (server.id, server.name, server.status) == ("sim-web-0", name, "running")
    assert (server.provider_id, server.zone) == ("sim:///web/sim-web-0", "eu-west-1a")

    unlabelled = {"metadata": {"name": name}, "spec": {}}
    assert await provider.find_server(unlabelled) == server
    assert await provider.find_server({"metadata": {"name": "nobody"}, "spec": {}}) is None
    other_cloud = {"metadata": {"name": name}, "spec": {"providerID": "aws:///eu-west-1a/i-1"}}
    assert await provider.find_server(other_cloud) is None
    gone = {"metadata": {"name": "x"}, "spec": {"providerID": "sim:///web/sim-web-99"}}
    assert await provider.find_server(gone) is None

    await provider.delete_server(server)
    await provider.delete_server(server)
    await provider.wait_deleted(server, timeout=15)
    assert await provider.find_server(node) is None
    await provider.wait_deleted(server, timeout=1)
    await provider.delete_server(server)


async def test_wait_deleted_times_out_while_the_machine_shuts_down(sim: Sim) -> None:
    sim.cluster.cloud.settings.shutdown_seconds = 86400
    server = await sim.provider.find_server(await sim.node("sim-batch-0"))
    assert server is not None
    await sim.provider.delete_server(server)
    with pytest.raises(ProviderError) as err:
        await sim.provider.wait_deleted(server, timeout=0.05)
    assert (err.value.code, err.value.retryable) == ("Timeout", True)
    assert "shutting-down" in err.value.message


async def test_calls_are_retried_through_injected_faults(sim: Sim) -> None:
    provider = _provider(sim.url, retry={**FAST_RETRY, "max_attempts": 12})
    await sim.faults("error=500:0.25@*/cloud/*; error=429:0.1@*/cloud/*:retry-after=0")
    try:
        for _ in range(10):
            (web,) = await provider.describe_groups(["web"])
            assert web.desired == 2
            assert await provider.targets_of("sim-web-0") == [CLB, TG]
        await provider.detach_instance("web", "sim-web-0")
        await provider.terminate_instance("sim-web-1")
    finally:
        await provider.close()
    status = await sim.http("GET", "/sim/faults")
    assert status["counts"]["error-500"] > 0 and status["counts"]["error-429"] > 0
    await sim.faults("")
    assert await sim.lifecycle("sim-web-0") in ("Detaching", "Detached")
    assert (await sim.instance("sim-web-1"))["state"] in ("shutting-down", "terminated")


async def test_a_cloud_that_keeps_failing_gives_up_retryably(sim: Sim) -> None:
    await sim.faults("error=500@list/cloud/nodegroups")
    provider = _provider(sim.url, retry={**FAST_RETRY, "max_attempts": 3})
    try:
        with pytest.raises(ProviderError) as err:
            await provider.describe_groups(["web"])
    finally:
        await provider.close()
    assert (err.value.code, err.value.retryable) == ("InternalError", True)
    assert err.value.operation == "nodegroups.list"
    assert "gave up after 3 attempts" in err.value.message
    requests = await sim.http("GET", "/sim/requests")
    assert requests["by_verb_resource"]["list/cloud/nodegroups"]["requests"] >= 3

    closed = _provider(sim.url)
    await closed.close()
    with pytest.raises(ProviderError) as err:
        await closed.describe_groups(["web"])
    assert (err.value.code, err.value.retryable) == ("Closed", False)

    unreachable = _provider("http://127.0.0.1:9", retry={**FAST_RETRY, "max_attempts": 2})
    try:
        with pytest.raises(ProviderError) as err:
            await unreachable.terminate_instance("sim-web-0")
    finally:
        await unreachable.close()
    assert (err.value.code, err.value.retryable) == ("ConnectionError", True)


async def test_token_when_the_simulator_requires_one(tmp_path: Path) -> None:
    path = tmp_path / "groups.yaml"
    path.write_text(SCENARIO)
    # Plain HTTP: this is about tokens, and these clients are not given the simulator's CA.
    cluster = SimCluster(
        SimOptions(scenario=str(path), time_scale=TIME_SCALE, auth=True, tls=False)
    )
    await cluster.start()
    anonymous = _provider(cluster.server.url)
    admin = _provider(cluster.server.url, token=cluster.server.admin_token)
    try:
        with pytest.raises(ProviderError) as err:
            await anonymous.describe_groups(["web"])
        assert (err.value.code, err.value.retryable) == ("Unauthorized", False)
        (web,) = await admin.describe_groups(["web"])
        assert len(web.instances) == 2
    finally:
        await anonymous.close()
        await admin.close()
        await cluster.stop()


async def _is(sim: Sim, iid: str, lifecycle: str) -> bool:
    return await sim.lifecycle(iid) == lifecycle


async def test_tls_with_the_simulators_ca(tmp_path: Path) -> None:
    path = tmp_path / "cloud.yaml"
    path.write_text(SCENARIO)
    cluster = SimCluster(SimOptions(scenario=str(path), time_scale=TIME_SCALE, auth=True))
    await cluster.start()
    try:
        assert cluster.server.url.startswith("https://") and cluster.server.ca_pem
        ca = tmp_path / "ca.pem"
        ca.write_bytes(cluster.server.ca_pem)
        config = {
            "url": cluster.server.url,
            "token": cluster.server.admin_token,
            "ca_file": str(ca),
        }
        async with SimProvider(SimProvider.Config(**config)) as provider:
            groups = await provider.describe_groups(["batch"])
            assert [g.name for g in groups] == ["batch"]
    finally:
        await cluster.stop()
