"""Auto Scaling through the AWS provider against a moto server: describe, detach, attach."""

from __future__ import annotations

import pytest

from nodeops.providers.aws.autoscaling import lifecycle_of
from nodeops.providers.base import Lifecycle, ProviderError
from tests.integration.providers import test_aws_support as support
from tests.integration.providers.test_aws_support import Aws

aws = support.aws


async def test_describe_groups_reports_instances(aws: Aws) -> None:
    aws.world.template("workers")
    aws.world.group("workers-a", 3, template="workers", zone="us-east-1b")

    [group] = await aws.provider.describe_groups(["workers-a"])

    assert (group.name, group.desired, group.min, group.max) == ("workers-a", 3, 0, 8)
    assert sorted(i.id for i in group.instances) == sorted(aws.world.instances_of("workers-a"))
    for instance in group.instances:
        assert instance.provider_id == f"aws:///us-east-1b/{instance.id}"
        assert instance.zone == "us-east-1b"
        assert instance.lifecycle_state is Lifecycle.IN_SERVICE
        assert instance.raw_state == "InService"
        assert instance.healthy
        assert not instance.protected_from_scale_in
        assert not instance.out_of_date


async def test_describe_groups_keeps_the_requested_order_and_skips_missing(aws: Aws) -> None:
    aws.world.template("tpl")
    for name in ("b", "a", "c"):
        aws.world.group(name, 1, template="tpl")

    groups = await aws.provider.describe_groups(["c", "missing", "a", "c", "b"])

    assert [g.name for g in groups] == ["c", "a", "b"]
    assert await aws.provider.describe_groups([]) == []


async def test_describe_groups_pages_through_many_groups_and_instances(aws: Aws) -> None:
    aws.world.template("tpl")
    aws.world.group("big", 150, template="tpl", max_size=200)
    small = [f"small-{i:03d}" for i in range(120)]
    for name in small:
        aws.world.group(name, 1, template="tpl")
    # AWS may answer with short pages; make moto do so to walk the NextToken chain.
    aws.proxy.cap_page_size("DescribeAutoScalingGroups", "MaxRecords", 7)

    groups = await aws.provider.describe_groups(["big", *small])

    assert [g.name for g in groups] == ["big", *small]
    big = groups[0]
    assert len(big.instances) == 150
    assert len({i.id for i in big.instances}) == 150
    assert all(len(g.instances) == 1 for g in groups[1:])
    # 121 names: one chunk of 100 names and one of 21, each walked 7 groups at a time.
    assert aws.proxy.requests["DescribeAutoScalingGroups"] == 15 + 3


async def test_instance_protection_and_standby_are_reported(aws: Aws) -> None:
    aws.world.template("tpl")
    aws.world.group("g", 2, template="tpl", NewInstancesProtectedFromScaleIn=True)
    first, second = aws.world.instances_of("g")
    aws.world.autoscaling.enter_standby(
        AutoScalingGroupName="g", InstanceIds=[second], ShouldDecrementDesiredCapacity=False
    )

    [group] = await aws.provider.describe_groups(["g"])

    by_id = {i.id: i for i in group.instances}
    assert by_id[first].protected_from_scale_in
    assert by_id[first].in_service
    assert by_id[second].lifecycle_state is Lifecycle.STANDBY
    assert not by_id[second].in_service


async def test_detach_keeps_desired_capacity_and_is_idempotent(aws: Aws) -> None:
    aws.world.template("tpl")
    aws.world.group("g", 3, template="tpl")
    victim = aws.world.instances_of("g")[0]

    await aws.provider.detach_instance("g", victim)
    await aws.provider.detach_instance("g", victim)

    assert aws.world.desired("g") == 3
    remaining = aws.world.instances_of("g")
    assert victim not in remaining
    # The group launched a replacement because the desired capacity did not drop.
    assert len(remaining) == 3
    assert aws.world.state(victim) == "running"
    assert aws.proxy.requests["DetachInstances"] == 1


async def test_detach_from_standby_and_of_strangers(aws: Aws) -> None:
    aws.world.template("tpl")
    aws.world.group("g", 2, template="tpl")
    aws.world.group("other", 1, template="tpl")
    standby = aws.world.instances_of("g")[0]
    aws.world.autoscaling.enter_standby(
        AutoScalingGroupName="g", InstanceIds=[standby], ShouldDecrementDesiredCapacity=False
    )
    loose = aws.world.run_instance()["InstanceId"]
    elsewhere = aws.world.instances_of("other")[0]

    await aws.provider.detach_instance("g", standby)
    # An instance in no group, or in another group, is not in this one: nothing to do.
    await aws.provider.detach_instance("g", loose)
    await aws.provider.detach_instance("g", elsewhere)
    await aws.provider.detach_instance("no-such-group", loose)

    assert standby not in aws.world.instances_of("g")
    assert elsewhere in aws.world.instances_of("other")
    assert aws.proxy.requests["DetachInstances"] == 1


async def test_attach_returns_an_instance_and_is_idempotent(aws: Aws) -> None:
    aws.world.template("tpl")
    aws.world.group("g", 2, template="tpl")
    victim = aws.world.instances_of("g")[0]
    await aws.provider.detach_instance("g", victim)

    await aws.provider.attach_instance("g", victim)
    await aws.provider.attach_instance("g", victim)

    members = aws.world.instances_of("g")
    assert members.count(victim) == 1
    # Auto Scaling raises the desired capacity by the instances attached.
    assert aws.world.desired("g") == 3
    assert aws.proxy.requests["AttachInstances"] == 1


async def test_attach_refuses_an_instance_of_another_group(aws: Aws) -> None:
    aws.world.template("tpl")
    aws.world.group("g", 1, template="tpl")
    aws.world.group("other", 1, template="tpl")
    elsewhere = aws.world.instances_of("other")[0]

    with pytest.raises(ProviderError) as caught:
        await aws.provider.attach_instance("g", elsewhere)

    assert caught.value.code == "InstanceInOtherGroup"
    assert not caught.value.retryable
    assert "other" in caught.value.message
    assert aws.proxy.requests["AttachInstances"] == 0


async def test_attach_to_a_missing_group(aws: Aws) -> None:
    loose = aws.world.run_instance()["InstanceId"]

    with pytest.raises(ProviderError) as caught:
        await aws.provider.attach_instance("no-such-group", loose)

    assert (caught.value.code, caught.value.retryable) == ("NotFound", False)


async def test_attach_past_max_size_surfaces_the_cloud_error(aws: Aws) -> None:
    aws.world.template("tpl")
    aws.world.group("g", 2, template="tpl", max_size=2)
    loose = aws.world.run_instance()["InstanceId"]

    with pytest.raises(ProviderError) as caught:
        await aws.provider.attach_instance("g", loose)

    # moto says ResourceContention where AWS says ValidationError; neither is "done".
    assert caught.value.code in ("ValidationError", "ResourceContention")
    assert loose not in aws.world.instances_of("g")


async def test_a_refused_detach_of_a_member_is_not_taken_for_done(aws: Aws) -> None:
    aws.world.template("tpl")
    aws.world.group("g", 1, template="tpl")
    member = aws.world.instances_of("g")[0]
    # The text Cyclops took to mean "already detaching"; the instance is still InService.
    aws.proxy.fail(
        "DetachInstances",
        1,
        code="ValidationError",
        message=f"The instance {member} is not in InService or Standby.",
    )

    with pytest.raises(ProviderError) as caught:
        await aws.provider.detach_instance("g", member)

    assert (caught.value.code, caught.value.retryable) == ("ValidationError", False)
    assert member in aws.world.instances_of("g")


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("Pending", Lifecycle.PENDING),
        ("Pending:Wait", Lifecycle.PENDING),
        ("Pending:Proceed", Lifecycle.PENDING),
        ("InService", Lifecycle.IN_SERVICE),
        ("Standby", Lifecycle.STANDBY),
        ("EnteringStandby", Lifecycle.STANDBY),
        ("Detaching", Lifecycle.DETACHING),
        ("Detached", Lifecycle.DETACHING),
        ("Terminating", Lifecycle.TERMINATING),
        ("Terminating:Wait", Lifecycle.TERMINATING),
        ("Terminated", Lifecycle.TERMINATED),
        ("Warmed:Running", Lifecycle.WARMED),
        ("Quarantined", Lifecycle.UNKNOWN),
    ],
)
def test_lifecycle_states(state: str, expected: Lifecycle) -> None:
    assert lifecycle_of(state) is expected
