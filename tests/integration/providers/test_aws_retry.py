"""Throttling, 5xx and give-up behaviour, injected by the loopback proxy in front of moto.

The proxy counts requests per API action, so retries are verified where they happen: on the
wire.
"""

from __future__ import annotations

import time

import pytest

from nodeops.providers.base import ProviderError
from nodeops.providers.retry import RetryPolicy
from tests.integration.providers import test_aws_support as support
from tests.integration.providers.test_aws_support import Aws

aws = support.aws


async def test_throttled_describe_is_retried(aws: Aws) -> None:
    aws.world.template("tpl")
    aws.world.group("g", 2, template="tpl")
    aws.proxy.fail("DescribeAutoScalingGroups", 3)

    [group] = await aws.provider.describe_groups(["g"])

    assert len(group.instances) == 2
    assert aws.proxy.faulted["DescribeAutoScalingGroups"] == 3
    assert aws.proxy.requests["DescribeAutoScalingGroups"] == 4


async def test_ec2_request_limit_exceeded_is_retried(aws: Aws) -> None:
    instance = aws.world.run_instance()["InstanceId"]
    aws.proxy.fail("TerminateInstances", 2, code="RequestLimitExceeded", message="Request limit")

    await aws.provider.terminate_instance(instance)

    assert aws.proxy.requests["TerminateInstances"] == 3
    assert aws.world.state(instance) == "terminated"


async def test_server_errors_are_retried(aws: Aws) -> None:
    node = aws.world.run_instance()["InstanceId"]
    arn = aws.world.target_group("tg")
    aws.world.elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": node}])
    aws.proxy.fail("DescribeTargetHealth", 1, code="ServiceUnavailable", status=503)
    aws.proxy.fail("DescribeTargetGroups", 1, code="InternalFailure", status=500)

    [target] = await aws.provider.targets_of(node)

    assert target.name == arn
    assert aws.proxy.requests["DescribeTargetHealth"] == 2
    assert aws.proxy.requests["DescribeTargetGroups"] == 2


async def test_each_page_is_retried_on_its_own(aws: Aws) -> None:
    aws.world.template("tpl")
    names = [f"g-{i}" for i in range(10)]
    for name in names:
        aws.world.group(name, 1, template="tpl")
    aws.proxy.cap_page_size("DescribeAutoScalingGroups", "MaxRecords", 4)
    aws.proxy.fail("DescribeAutoScalingGroups", 2, after=1)

    groups = await aws.provider.describe_groups(names)

    assert [g.name for g in groups] == names
    # 3 pages + 2 retries of the second; the first page is not fetched again.
    assert aws.proxy.faulted["DescribeAutoScalingGroups"] == 2
    assert aws.proxy.requests["DescribeAutoScalingGroups"] == 5


async def test_giving_up_after_the_attempt_budget(aws: Aws) -> None:
    aws.proxy.fail("DescribeAutoScalingGroups", 100)

    with pytest.raises(ProviderError) as caught:
        await aws.provider.describe_groups(["g"])

    error = caught.value
    assert (error.code, error.retryable) == ("Throttling", True)
    assert error.operation == "autoscaling.describe_auto_scaling_groups"
    assert error.message == "Rate exceeded (gave up after 5 attempts)"
    assert aws.proxy.requests["DescribeAutoScalingGroups"] == support.FAST_RETRY.max_attempts


async def test_client_errors_are_not_retried(aws: Aws) -> None:
    aws.proxy.fail("DescribeAutoScalingInstances", 5, code="AccessDenied", status=403)

    with pytest.raises(ProviderError) as caught:
        await aws.provider.detach_instance("g", "i-0123456789abcdef0")

    assert (caught.value.code, caught.value.retryable) == ("AccessDenied", False)
    assert aws.proxy.requests["DescribeAutoScalingInstances"] == 1
    assert aws.proxy.requests["DetachInstances"] == 0


async def test_the_overall_timeout_bounds_retries(aws: Aws) -> None:
    aws.proxy.fail("TerminateInstances", 1000)
    # The deadline, not the attempt limit, ends the retries: delays are jittered below 50 ms, so
    # 1000 attempts would take far longer than the 1 s allowed.
    slow = RetryPolicy(max_attempts=1000, base_delay=0.05, max_delay=0.05, timeout=1.0)

    async with aws.make_provider(retry=slow) as provider:
        started = time.monotonic()
        with pytest.raises(ProviderError) as caught:
            await provider.terminate_instance("i-0123456789abcdef0")
        elapsed = time.monotonic() - started

    # The last try either was throttled or ran out of the time left (a slow machine).
    assert caught.value.code in {"Throttling", "Timeout"}
    assert caught.value.retryable
    assert 2 <= aws.proxy.requests["TerminateInstances"] < 1000
    # Ended by the deadline: not before its last sleep would pass it, and well before the 1000
    # attempts would end (their jittered delays alone average 25 s). The bound is loose because
    # one attempt through the proxy can take seconds on a loaded machine.
    assert 0.9 <= elapsed < 20.0


async def test_unreachable_endpoint_is_a_retryable_connection_error(aws: Aws) -> None:
    policy = RetryPolicy(max_attempts=2, base_delay=0.001, timeout=10)
    async with aws.make_provider(endpoint_url="http://127.0.0.1:9", retry=policy) as provider:
        with pytest.raises(ProviderError) as caught:
            await provider.terminate_instance("i-0123456789abcdef0")
    assert (caught.value.code, caught.value.retryable) == ("ConnectionError", True)
    assert "gave up after 2 attempts" in caught.value.message
