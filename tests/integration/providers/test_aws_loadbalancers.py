"""Classic load balancers and ELBv2 target groups through the AWS provider against moto."""

from __future__ import annotations

import pytest

from nodeops.providers.base import (
    CLASSIC,
    TARGET_GROUP,
    LoadBalancerTarget,
    ProviderError,
    RegistrationState,
    ServiceRef,
)
from tests.integration.providers import test_aws_support as support
from tests.integration.providers.test_aws_support import Aws

aws = support.aws


async def test_targets_of_finds_classic_lbs_and_target_groups_with_ports(aws: Aws) -> None:
    node = aws.world.run_instance()["InstanceId"]
    other = aws.world.run_instance()["InstanceId"]
    aws.world.classic_lb("clb-web")
    aws.world.classic_lb("clb-empty")
    aws.world.elb.register_instances_with_load_balancer(
        LoadBalancerName="clb-web", Instances=[{"InstanceId": node}, {"InstanceId": other}]
    )
    http = aws.world.target_group("tg-http", port=80)
    node_port = aws.world.target_group("tg-nodeport", port=80)
    unrelated = aws.world.target_group("tg-other", port=80)
    aws.world.target_group("tg-ip", target_type="ip")
    aws.world.elbv2.register_targets(TargetGroupArn=http, Targets=[{"Id": node}])
    aws.world.elbv2.register_targets(
        TargetGroupArn=node_port, Targets=[{"Id": node, "Port": 30443}]
    )
    aws.world.elbv2.register_targets(TargetGroupArn=unrelated, Targets=[{"Id": other}])

    targets = await aws.provider.targets_of(node)

    assert targets == [
        LoadBalancerTarget(CLASSIC, "clb-web"),
        *sorted(
            [
                LoadBalancerTarget(TARGET_GROUP, http, 80),
                LoadBalancerTarget(TARGET_GROUP, node_port, 30443),
            ],
            key=lambda t: t.name,
        ),
    ]
    # Target groups of IP targets cannot hold an instance and are not asked.
    assert aws.proxy.requests["DescribeTargetHealth"] == 3
    assert aws.proxy.requests["DescribeTargetGroups"] == 1
    assert aws.proxy.requests["DescribeLoadBalancers"] == 1


async def test_targets_of_many_shares_one_scan(aws: Aws) -> None:
    first = aws.world.run_instance()["InstanceId"]
    second = aws.world.run_instance()["InstanceId"]
    arn = aws.world.target_group("tg", port=8080)
    aws.world.elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": first}, {"Id": second}])

    found = await aws.provider.targets_of_many([first, second])

    assert found == {
        first: [LoadBalancerTarget(TARGET_GROUP, arn, 8080)],
        second: [LoadBalancerTarget(TARGET_GROUP, arn, 8080)],
    }
    assert aws.proxy.requests["DescribeTargetHealth"] == 1


async def test_among_limits_the_health_calls(aws: Aws) -> None:
    node = aws.world.run_instance()["InstanceId"]
    arns = [aws.world.target_group(f"tg-{i}") for i in range(6)]
    for arn in arns:
        aws.world.elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": node}])
    aws.world.classic_lb("clb")
    aws.world.elb.register_instances_with_load_balancer(
        LoadBalancerName="clb", Instances=[{"InstanceId": node}]
    )

    targets = await aws.provider.targets_of(
        node,
        among=[
            LoadBalancerTarget(TARGET_GROUP, arns[2]),
            LoadBalancerTarget(TARGET_GROUP, arns[4]),
        ],
    )

    assert targets == [
        LoadBalancerTarget(TARGET_GROUP, arns[2], 80),
        LoadBalancerTarget(TARGET_GROUP, arns[4], 80),
    ]
    assert aws.proxy.requests["DescribeTargetHealth"] == 2
    # No classic load balancer was among them, so none was listed.
    assert aws.proxy.requests["DescribeLoadBalancers"] == 0


async def test_classic_listing_is_paginated(aws: Aws) -> None:
    node = aws.world.run_instance()["InstanceId"]
    names = [aws.world.classic_lb(f"clb-{i:02d}") for i in range(11)]
    for name in names[::2]:
        aws.world.elb.register_instances_with_load_balancer(
            LoadBalancerName=name, Instances=[{"InstanceId": node}]
        )
    aws.proxy.cap_page_size("DescribeLoadBalancers", "PageSize", 3)

    targets = await aws.provider.targets_of(node)

    assert [t.name for t in targets] == names[::2]
    # elb and elbv2 share the action name; 4 short CLB pages plus one target group listing.
    assert aws.proxy.requests["DescribeLoadBalancers"] == 4


async def test_target_group_deregister_and_register_are_idempotent(aws: Aws) -> None:
    node = aws.world.run_instance()["InstanceId"]
    arn = aws.world.target_group("tg", port=80)
    aws.world.elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": node, "Port": 30080}])
    [target] = await aws.provider.targets_of(node)
    assert target == LoadBalancerTarget(TARGET_GROUP, arn, 30080)

    await aws.provider.deregister(target, node)
    await aws.provider.deregister(target, node)
    assert aws.world.registered(arn) == []
    assert await aws.provider.targets_of(node) == []

    await aws.provider.register(target, node)
    await aws.provider.register(target, node)
    assert aws.world.registered(arn) == [(node, 30080)]


async def test_deregister_without_port_removes_the_registered_ports(aws: Aws) -> None:
    node = aws.world.run_instance()["InstanceId"]
    arn = aws.world.target_group("tg", port=80)
    aws.world.elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": node, "Port": 31000}])

    await aws.provider.deregister(LoadBalancerTarget(TARGET_GROUP, arn), node)

    assert aws.world.registered(arn) == []
    # Nothing registered any more: no deregistration call at all.
    await aws.provider.deregister(LoadBalancerTarget(TARGET_GROUP, arn), node)
    assert aws.proxy.requests["DeregisterTargets"] == 1


async def test_deregister_from_a_deleted_target_group_succeeds(aws: Aws) -> None:
    node = aws.world.run_instance()["InstanceId"]
    arn = aws.world.target_group("tg")
    aws.world.elbv2.delete_target_group(TargetGroupArn=arn)

    await aws.provider.deregister(LoadBalancerTarget(TARGET_GROUP, arn, 80), node)
    await aws.provider.deregister(LoadBalancerTarget(TARGET_GROUP, arn), node)

    with pytest.raises(ProviderError) as caught:
        await aws.provider.register(LoadBalancerTarget(TARGET_GROUP, arn, 80), node)
    assert (caught.value.code, caught.value.retryable) == ("TargetGroupNotFound", False)


async def test_classic_deregister_and_register_are_idempotent(aws: Aws) -> None:
    node = aws.world.run_instance()["InstanceId"]
    aws.world.classic_lb("clb")
    aws.world.elb.register_instances_with_load_balancer(
        LoadBalancerName="clb", Instances=[{"InstanceId": node}]
    )
    target = LoadBalancerTarget(CLASSIC, "clb")

    await aws.provider.deregister(target, node)
    await aws.provider.deregister(target, node)
    assert aws.world.classic_members("clb") == []

    await aws.provider.register(target, node)
    await aws.provider.register(target, node)
    assert aws.world.classic_members("clb") == [node]

    # What AWS answers for a deleted CLB (moto fails with a 500 instead).
    aws.proxy.fail(
        "DeregisterInstancesFromLoadBalancer",
        1,
        code="LoadBalancerNotFound",
        message="There is no ACTIVE Load Balancer named 'deleted-clb'",
    )
    await aws.provider.deregister(LoadBalancerTarget(CLASSIC, "deleted-clb"), node)
    assert aws.proxy.faulted["DeregisterInstancesFromLoadBalancer"] == 1


async def test_unknown_target_kinds_are_refused(aws: Aws) -> None:
    with pytest.raises(ProviderError) as caught:
        await aws.provider.deregister(LoadBalancerTarget("pool", "p-1", 80), "i-0123456789abcdef0")
    assert (caught.value.code, caught.value.retryable) == ("UnsupportedTarget", False)


async def test_targets_behind_services_by_tags(aws: Aws) -> None:
    lbc = aws.world.target_group(
        "k8s-shop-web",
        tags={"service.k8s.aws/stack": "shop/web", "elbv2.k8s.aws/cluster": "prod"},
    )
    in_tree = aws.world.target_group(
        "k8s-tg-in-tree",
        tags={"kubernetes.io/service-name": "shop/api", "kubernetes.io/cluster/prod": "owned"},
    )
    aws.world.target_group(
        "k8s-other-cluster",
        tags={"service.k8s.aws/stack": "shop/web", "elbv2.k8s.aws/cluster": "staging"},
    )
    aws.world.target_group("untagged")
    aws.world.classic_lb(
        "a1b2c3",
        tags={"kubernetes.io/service-name": "shop/api", "kubernetes.io/cluster/prod": "owned"},
    )
    aws.world.classic_lb("someone-elses")
    web, api, absent = ServiceRef("shop", "web"), ServiceRef("shop", "api"), ServiceRef("x", "y")

    found = await aws.provider.targets_behind_services([web, api, absent], cluster="prod")

    assert found == {
        web: [LoadBalancerTarget(TARGET_GROUP, lbc)],
        api: [LoadBalancerTarget(TARGET_GROUP, in_tree), LoadBalancerTarget(CLASSIC, "a1b2c3")],
        absent: [],
    }
    # Without a cluster, every cluster's target groups of that Service count.
    unscoped = await aws.provider.targets_behind_services([web])
    assert len(unscoped[web]) == 2


async def test_services_then_targets_of(aws: Aws) -> None:
    node = aws.world.run_instance()["InstanceId"]
    arn = aws.world.target_group(
        "k8s-shop-web", tags={"service.k8s.aws/stack": "shop/web", "elbv2.k8s.aws/cluster": "c"}
    )
    noise = [aws.world.target_group(f"noise-{i}") for i in range(4)]
    for tg in [arn, *noise]:
        aws.world.elbv2.register_targets(TargetGroupArn=tg, Targets=[{"Id": node, "Port": 32000}])
    async with aws.make_provider(cluster_name="c") as provider:
        behind = await provider.targets_behind_services([ServiceRef("shop", "web")])
        aws.proxy.reset_counts()
        targets = await provider.targets_of(node, among=behind[ServiceRef("shop", "web")])

    assert targets == [LoadBalancerTarget(TARGET_GROUP, arn, 32000)]
    assert aws.proxy.requests["DescribeTargetHealth"] == 1


async def test_vpc_filter(aws: Aws) -> None:
    node = aws.world.run_instance()["InstanceId"]
    arn = aws.world.target_group("tg")
    aws.world.elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": node}])
    async with aws.make_provider(vpc_id="vpc-00000000000000000") as elsewhere:
        assert await elsewhere.targets_of(node) == []
    async with aws.make_provider(vpc_id=aws.world.vpc_id) as here:
        assert await here.targets_of(node) == [LoadBalancerTarget(TARGET_GROUP, arn, 80)]


async def test_wait_drained(aws: Aws) -> None:
    node = aws.world.run_instance()["InstanceId"]
    arn = aws.world.target_group("tg")
    aws.world.elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": node}])
    aws.world.classic_lb("clb")
    aws.world.elb.register_instances_with_load_balancer(
        LoadBalancerName="clb", Instances=[{"InstanceId": node}]
    )
    group_target = LoadBalancerTarget(TARGET_GROUP, arn, 80)
    classic_target = LoadBalancerTarget(CLASSIC, "clb")

    for target in (group_target, classic_target):
        with pytest.raises(ProviderError) as caught:
            await aws.provider.wait_drained(target, node, timeout=1)
        assert (caught.value.code, caught.value.retryable) == ("IncorrectTargetState", False)

    for target in (group_target, classic_target):
        await aws.provider.deregister(target, node)
        await aws.provider.wait_drained(target, node, timeout=1)


async def test_wait_drained_honours_classic_connection_draining(aws: Aws) -> None:
    node = aws.world.run_instance()["InstanceId"]
    aws.world.classic_lb("clb")
    aws.world.elb.modify_load_balancer_attributes(
        LoadBalancerName="clb",
        LoadBalancerAttributes={"ConnectionDraining": {"Enabled": True, "Timeout": 300}},
    )

    with pytest.raises(ProviderError) as caught:
        await aws.provider.wait_drained(LoadBalancerTarget(CLASSIC, "clb"), node, timeout=0.1)

    assert (caught.value.code, caught.value.retryable) == ("Timeout", True)


async def test_registrations_scan_every_instance_once(aws: Aws) -> None:
    first = aws.world.run_instance()["InstanceId"]
    second = aws.world.run_instance()["InstanceId"]
    alone = aws.world.run_instance()["InstanceId"]
    aws.world.classic_lb("clb")
    aws.world.elb.register_instances_with_load_balancer(
        LoadBalancerName="clb", Instances=[{"InstanceId": first}]
    )
    web = aws.world.target_group("tg-web", port=80)
    api = aws.world.target_group("tg-api", port=80)
    aws.world.elbv2.register_targets(
        TargetGroupArn=web, Targets=[{"Id": first, "Port": 30080}, {"Id": second, "Port": 30080}]
    )
    aws.world.elbv2.register_targets(TargetGroupArn=api, Targets=[{"Id": second}])

    found = await aws.provider.registrations()

    assert found[first] == [
        LoadBalancerTarget(CLASSIC, "clb"),
        LoadBalancerTarget(TARGET_GROUP, web, 30080),
    ]
    assert sorted(found[second], key=lambda t: t.name) == sorted(
        [LoadBalancerTarget(TARGET_GROUP, web, 30080), LoadBalancerTarget(TARGET_GROUP, api, 80)],
        key=lambda t: t.name,
    )
    assert alone not in found
    assert aws.proxy.requests["DescribeTargetHealth"] == 2
    aws.proxy.reset_counts()
    narrowed = await aws.provider.registrations(among=[LoadBalancerTarget(TARGET_GROUP, api)])
    assert narrowed == {second: [LoadBalancerTarget(TARGET_GROUP, api, 80)]}
    assert aws.proxy.requests["DescribeTargetHealth"] == 1


async def test_target_health(aws: Aws) -> None:
    node = aws.world.run_instance()["InstanceId"]
    arn = aws.world.target_group("tg", port=80)
    aws.world.elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": node, "Port": 30080}])
    aws.world.classic_lb("clb")
    aws.world.elb.register_instances_with_load_balancer(
        LoadBalancerName="clb", Instances=[{"InstanceId": node}]
    )
    aws.world.elb.modify_load_balancer_attributes(
        LoadBalancerName="clb",
        LoadBalancerAttributes={"ConnectionDraining": {"Enabled": True, "Timeout": 45}},
    )
    group_target = LoadBalancerTarget(TARGET_GROUP, arn, 30080)
    classic_target = LoadBalancerTarget(CLASSIC, "clb")

    assert (await aws.provider.target_health(group_target, node)).registered
    assert (
        await aws.provider.target_health(LoadBalancerTarget(TARGET_GROUP, arn), node)
    ).registered
    assert (await aws.provider.target_health(classic_target, node)).registered

    await aws.provider.deregister(group_target, node)
    await aws.provider.deregister(classic_target, node)

    # moto deregisters at once (AWS would say draining for the deregistration delay).
    health = await aws.provider.target_health(group_target, node)
    assert (health.state, health.drain_seconds) == (RegistrationState.UNUSED, 0.0)
    # A classic load balancer does not report draining: its timeout is the caller's to wait.
    health = await aws.provider.target_health(classic_target, node)
    assert (health.state, health.drain_seconds) == (RegistrationState.UNUSED, 45.0)
    gone = await aws.provider.target_health(LoadBalancerTarget(CLASSIC, "no-such-clb"), node)
    assert gone.state is RegistrationState.UNUSED
    aws.proxy.fail(
        "DescribeTargetHealth",
        1,
        code="TargetGroupNotFound",
        message="One or more target groups not found",
    )
    assert not (await aws.provider.target_health(group_target, node)).registered


async def test_target_health_reports_draining(aws: Aws) -> None:
    node = aws.world.run_instance()["InstanceId"]
    arn = aws.world.target_group("tg", port=80)
    aws.world.elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": node}])
    # moto reports draining only for terminated instances, which AWS also drains.
    aws.world.ec2.terminate_instances(InstanceIds=[node])

    health = await aws.provider.target_health(LoadBalancerTarget(TARGET_GROUP, arn, 80), node)

    assert (health.state, health.detail) == (RegistrationState.DRAINING, "draining")
