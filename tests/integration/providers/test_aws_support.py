"""Shared ground of the AWS provider tests: a moto server, a fault-injecting proxy, a world builder.

- One moto server (`ThreadedMotoServer` on loopback) serves the whole session; its state is reset
  before each test.
- The provider under test talks to moto through `FaultProxy`, a small aiohttp reverse proxy on
  loopback that counts requests per API action, keeps a timeline of them (for ordering
  assertions), can hold an action's requests back, and can answer the next N requests of an
  action with an AWS error (Throttling in the query-protocol XML, RequestLimitExceeded in EC2's) or cap
  page sizes so short pages, which AWS is free to return, exercise pagination.
- The world (groups, templates, load balancers) is built with plain boto3 straight against moto,
  never through the provider.

Test modules pick the fixture up with `aws = support.aws`.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import re
import threading
import time
import urllib.request
import uuid
from collections import Counter, defaultdict, deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode

import aiohttp
import boto3
import pytest
from aiohttp import web
from moto.server import ThreadedMotoServer

from nodeops.providers.aws import AwsConfig, AwsProvider
from nodeops.providers.retry import RetryPolicy

REGION = "us-east-1"
AMI = "ami-12c6146b"

_server_lock = threading.Lock()
_server_url: str | None = None


def moto_url() -> str:
    """The session's moto server, started on first use and stopped at exit."""
    global _server_url
    with _server_lock:
        if _server_url is None:
            logging.getLogger("werkzeug").setLevel(logging.ERROR)
            server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            server.start()
            atexit.register(server.stop)
            host, port = server.get_host_and_port()
            _server_url = f"http://{host}:{port}"
        return _server_url


def reset_moto(url: str) -> None:
    with urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST")):
        pass


_SERVICE_RE = re.compile(r"Credential=[^/]+/[^/]+/[^/]+/([^/]+)/aws4_request")
_HOP_HEADERS = {
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "content-encoding",
    "accept-encoding",
    "keep-alive",
}


@dataclass(frozen=True)
class Call:
    """One request that went through to moto: when it arrived and was answered, and its form."""

    action: str
    arrived: float
    answered: float
    status: int
    form: dict[str, list[str]]

    def param(self, name: str) -> str | None:
        values = self.form.get(name)
        return values[0] if values else None


@dataclass
class Fault:
    code: str
    status: int
    message: str
    times: int
    after: int = 0


def error_body(service: str, fault: Fault) -> bytes:
    """An AWS error response as the query-protocol services write it (EC2 has its own shape)."""
    request_id = uuid.uuid4()
    if service == "ec2":
        return (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Response><Errors><Error><Code>{fault.code}</Code>"
            f"<Message>{fault.message}</Message></Error></Errors>"
            f"<RequestID>{request_id}</RequestID></Response>"
        ).encode()
    kind = "Receiver" if fault.status >= 500 else "Sender"
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        "<ErrorResponse><Error>"
        f"<Type>{kind}</Type><Code>{fault.code}</Code><Message>{fault.message}</Message>"
        f"</Error><RequestId>{request_id}</RequestId></ErrorResponse>"
    ).encode()


class FaultProxy:
    """A loopback reverse proxy in front of moto that counts and perturbs API actions."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.requests: Counter[str] = Counter()
        self.faulted: Counter[str] = Counter()
        self._faults: dict[str, deque[Fault]] = defaultdict(deque)
        self._page_caps: dict[str, tuple[str, int]] = {}
        self._holds: dict[str, tuple[int, asyncio.Event]] = {}
        self.timeline: list[Call] = []
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""

    def fail(
        self,
        action: str,
        times: int,
        *,
        code: str = "Throttling",
        status: int = 400,
        message: str = "Rate exceeded",
        after: int = 0,
    ) -> None:
        """Let `after` requests of `action` through, then answer `times` with this error."""
        self._faults[action].append(Fault(code, status, message, times, after))

    def cap_page_size(self, action: str, parameter: str, size: int) -> None:
        """Rewrite the page-size parameter of `action` so moto returns short pages."""
        self._page_caps[action] = (parameter, size)

    def hold(self, action: str, *, after: int = 0) -> asyncio.Event:
        """Let `after` requests of `action` through, then keep the next ones waiting until the
        returned event is set (a call the cloud is slow to answer, or never answers in time)."""
        gate = asyncio.Event()
        self._holds[action] = (after, gate)
        return gate

    def calls(self, *actions: str) -> list[Call]:
        """The timeline's answered calls of these actions, in the order they were answered."""
        return [c for c in self.timeline if c.action in actions and c.status < 300]

    def reset_counts(self) -> None:
        self.requests.clear()
        self.faulted.clear()

    async def start(self) -> str:
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        self._session = aiohttp.ClientSession(auto_decompress=False)
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def _next_fault(self, action: str) -> Fault | None:
        pending = self._faults.get(action)
        if not pending:
            return None
        fault = pending[0]
        if fault.after > 0:
            fault.after -= 1
            return None
        fault.times -= 1
        if fault.times <= 0:
            pending.popleft()
        return fault

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        form = parse_qs(body.decode(), keep_blank_values=True)
        action = form.get("Action", [""])[0]
        self.requests[action] += 1
        match = _SERVICE_RE.search(request.headers.get("Authorization", ""))
        service = match.group(1) if match else ""
        arrived = time.monotonic()
        held = self._holds.get(action)
        if held is not None:
            after, gate = held
            if after > 0:
                self._holds[action] = (after - 1, gate)
            else:
                await gate.wait()
        fault = self._next_fault(action)
        if fault is not None:
            self.faulted[action] += 1
            return web.Response(
                status=fault.status, body=error_body(service, fault), content_type="text/xml"
            )
        if action in self._page_caps:
            parameter, size = self._page_caps[action]
            form[parameter] = [str(size)]
            body = urlencode(form, doseq=True).encode()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        assert self._session is not None
        async with self._session.request(
            request.method, f"{self.upstream}{request.path_qs}", headers=headers, data=body
        ) as upstream:
            payload = await upstream.read()
            out_headers = {
                k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_HEADERS
            }
            self.timeline.append(
                Call(action, arrived, time.monotonic(), upstream.status, dict(form))
            )
            return web.Response(status=upstream.status, body=payload, headers=out_headers)


class World:
    """Builds AWS resources directly in moto with boto3, bypassing the provider."""

    def __init__(self, url: str) -> None:
        def client(service: str) -> Any:
            return boto3.client(service, endpoint_url=url, region_name=REGION)

        self.ec2 = client("ec2")
        self.autoscaling = client("autoscaling")
        self.elb = client("elb")
        self.elbv2 = client("elbv2")
        self._vpc: str | None = None

    @property
    def vpc_id(self) -> str:
        if self._vpc is None:
            vpcs = self.ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])
            self._vpc = vpcs["Vpcs"][0]["VpcId"]
        return self._vpc

    def template(self, name: str, versions: int = 1) -> str:
        created = self.ec2.create_launch_template(
            LaunchTemplateName=name,
            LaunchTemplateData={"ImageId": AMI, "InstanceType": "t3.micro"},
        )
        for _ in range(versions - 1):
            self.ec2.create_launch_template_version(
                LaunchTemplateName=name,
                LaunchTemplateData={"ImageId": AMI, "InstanceType": "t3.micro"},
            )
        return str(created["LaunchTemplate"]["LaunchTemplateId"])

    def group(
        self,
        name: str,
        size: int,
        *,
        template: str | None = None,
        version: str | None = "$Latest",
        zone: str = "us-east-1a",
        max_size: int | None = None,
        **extra: Any,
    ) -> None:
        params: dict[str, Any] = {
            "AutoScalingGroupName": name,
            "MinSize": 0,
            "MaxSize": max_size if max_size is not None else max(size, 1) + 5,
            "DesiredCapacity": size,
            "AvailabilityZones": [zone],
            **extra,
        }
        if template is not None:
            spec = {"LaunchTemplateName": template}
            if version is not None:
                spec["Version"] = version
            params["LaunchTemplate"] = spec
        self.autoscaling.create_auto_scaling_group(**params)

    def instances_of(self, group: str) -> list[str]:
        described = self.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group])
        return [i["InstanceId"] for i in described["AutoScalingGroups"][0]["Instances"]]

    def desired(self, group: str) -> int:
        described = self.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group])
        return int(described["AutoScalingGroups"][0]["DesiredCapacity"])

    def run_instance(self) -> dict[str, Any]:
        reservation = self.ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1)
        instance: dict[str, Any] = reservation["Instances"][0]
        return instance

    def state(self, instance_id: str) -> str:
        described = self.ec2.describe_instances(InstanceIds=[instance_id])
        return str(described["Reservations"][0]["Instances"][0]["State"]["Name"])

    def classic_lb(self, name: str, *, tags: dict[str, str] | None = None) -> str:
        params: dict[str, Any] = {
            "LoadBalancerName": name,
            "Listeners": [{"Protocol": "HTTP", "LoadBalancerPort": 80, "InstancePort": 30080}],
            "AvailabilityZones": ["us-east-1a"],
        }
        if tags:
            params["Tags"] = [{"Key": k, "Value": v} for k, v in tags.items()]
        self.elb.create_load_balancer(**params)
        return name

    def classic_members(self, name: str) -> list[str]:
        described = self.elb.describe_load_balancers(LoadBalancerNames=[name])
        return [i["InstanceId"] for i in described["LoadBalancerDescriptions"][0]["Instances"]]

    def target_group(
        self,
        name: str,
        *,
        port: int = 80,
        target_type: str = "instance",
        tags: dict[str, str] | None = None,
    ) -> str:
        params: dict[str, Any] = {
            "Name": name,
            "Protocol": "HTTP",
            "Port": port,
            "VpcId": self.vpc_id,
            "TargetType": target_type,
        }
        if tags:
            params["Tags"] = [{"Key": k, "Value": v} for k, v in tags.items()]
        created = self.elbv2.create_target_group(**params)
        return str(created["TargetGroups"][0]["TargetGroupArn"])

    def registered(self, arn: str) -> list[tuple[str, int]]:
        health = self.elbv2.describe_target_health(TargetGroupArn=arn)
        return sorted(
            (d["Target"]["Id"], int(d["Target"]["Port"]))
            for d in health["TargetHealthDescriptions"]
            if d["TargetHealth"].get("Reason") != "Target.NotRegistered"
        )


FAST_RETRY = RetryPolicy(max_attempts=5, base_delay=0.005, max_delay=0.05, timeout=30)


@dataclass
class Aws:
    """Everything a test needs: the provider under test, the proxy it talks through, the world."""

    provider: AwsProvider
    proxy: FaultProxy
    world: World
    moto: str

    def make_provider(self, **settings: Any) -> AwsProvider:
        """Another provider on the same proxy, with other settings (closed by the test)."""
        config: dict[str, Any] = {
            "region": REGION,
            "endpoint_url": self.proxy.url,
            "retry": FAST_RETRY,
            "poll_interval": 0.05,
        }
        config.update(settings)
        return AwsProvider(AwsConfig(**config))


@pytest.fixture
async def aws(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Aws]:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": "/nonexistent/aws-config",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
    }.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(key, raising=False)
    url = moto_url()
    reset_moto(url)
    proxy = FaultProxy(url)
    await proxy.start()
    world = World(url)
    env = Aws(provider=None, proxy=proxy, world=world, moto=url)  # type: ignore[arg-type]
    env.provider = env.make_provider()
    try:
        yield env
    finally:
        await env.provider.close()
        await proxy.close()
