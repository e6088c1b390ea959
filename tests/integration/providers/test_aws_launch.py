"""Out-of-date detection: launch template versions resolved, templates compared by ID.

The first tests run against moto, which reports every instance of a template-based group with
the template's *default* version number; that is enough to show `$Latest` and `$Default` being
resolved rather than compared as text. moto re-derives an instance's template and launch
configuration from its group's current settings, so switching templates or configurations is
checked on the DescribeAutoScalingGroups shapes directly.
"""

from __future__ import annotations

from typing import Any

from nodeops.providers.aws.launch import (
    TemplateInfo,
    Templates,
    current_specs,
    instance_spec,
    is_out_of_date,
)
from tests.integration.providers import test_aws_support as support
from tests.integration.providers.test_aws_support import Aws

aws = support.aws


async def test_latest_resolves_to_the_newest_version(aws: Aws) -> None:
    stale = aws.world.template("stale", versions=2)  # default 1, latest 2
    current = aws.world.template("current", versions=1)  # default 1 = latest 1
    aws.world.group("on-stale", 2, template="stale", version="$Latest")
    aws.world.group("on-current", 2, template="current", version="$Latest")

    on_stale, on_current = await aws.provider.describe_groups(["on-stale", "on-current"])

    assert on_stale.launch_version == f"{stale}:2"
    assert all(i.launch_version == f"{stale}:1" for i in on_stale.instances)
    assert all(i.out_of_date for i in on_stale.instances)
    # Comparing "$Latest" with "1" as text would call these out of date forever (Cyclops #61).
    assert on_current.launch_version == f"{current}:1"
    assert not any(i.out_of_date for i in on_current.instances)


async def test_default_and_omitted_versions_resolve_to_the_default(aws: Aws) -> None:
    template = aws.world.template("tpl", versions=3)  # default 1, latest 3
    aws.world.group("explicit-default", 1, template="tpl", version="$Default")
    aws.world.group("no-version", 1, template="tpl", version=None)
    aws.world.group("pinned-3", 1, template="tpl", version="3")

    explicit, omitted, pinned = await aws.provider.describe_groups(
        ["explicit-default", "no-version", "pinned-3"]
    )

    assert explicit.launch_version == omitted.launch_version == f"{template}:1"
    assert not any(i.out_of_date for i in explicit.instances + omitted.instances)
    assert pinned.launch_version == f"{template}:3"
    assert all(i.out_of_date for i in pinned.instances)


async def test_default_version_changes_are_followed(aws: Aws) -> None:
    template = aws.world.template("tpl", versions=2)
    aws.world.group("g", 2, template="tpl", version="$Latest")
    [before] = await aws.provider.describe_groups(["g"])
    assert all(i.out_of_date for i in before.instances)

    aws.world.ec2.modify_launch_template(LaunchTemplateId=template, DefaultVersion="2")
    [after] = await aws.provider.describe_groups(["g"])

    assert after.launch_version == f"{template}:2"
    assert not any(i.out_of_date for i in after.instances)


async def test_mixed_instances_policy(aws: Aws) -> None:
    template = aws.world.template("mixed", versions=2)
    aws.world.group(
        "g",
        2,
        MixedInstancesPolicy={
            "LaunchTemplate": {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateName": "mixed",
                    "Version": "$Latest",
                },
                "Overrides": [{"InstanceType": "t3.micro"}, {"InstanceType": "t3a.micro"}],
            },
            "InstancesDistribution": {"OnDemandBaseCapacity": 0},
        },
    )

    [group] = await aws.provider.describe_groups(["g"])

    assert group.launch_version == f"{template}:2"
    assert len(group.instances) == 2
    assert all(i.out_of_date and i.launch_version == f"{template}:1" for i in group.instances)


async def test_launch_configuration_groups(aws: Aws) -> None:
    aws.world.autoscaling.create_launch_configuration(
        LaunchConfigurationName="lc-1", ImageId=support.AMI, InstanceType="t3.micro"
    )
    aws.world.group("g", 2, LaunchConfigurationName="lc-1")

    [group] = await aws.provider.describe_groups(["g"])

    assert group.launch_version == "lc:lc-1"
    assert all(i.launch_version == "lc:lc-1" and not i.out_of_date for i in group.instances)
    # No template to resolve, so no EC2 call either.
    assert aws.proxy.requests["DescribeLaunchTemplates"] == 0


async def test_a_deleted_template_calls_nothing_out_of_date(aws: Aws) -> None:
    template = aws.world.template("doomed", versions=2)
    aws.world.template("kept", versions=2)
    aws.world.group("g", 1, template="doomed", version="$Latest")
    aws.world.group("h", 1, template="kept", version="$Latest")
    aws.world.ec2.delete_launch_template(LaunchTemplateId=template)

    g, h = await aws.provider.describe_groups(["g", "h"])

    # Guessing would cycle the group; an unknown current version is reported as such.
    assert g.launch_version is None
    assert not any(i.out_of_date for i in g.instances)
    # The batch failed on the deleted template and was looked up one by one.
    assert h.launch_version is not None and h.launch_version.endswith(":2")
    assert all(i.out_of_date for i in h.instances)


# Pure comparisons on DescribeAutoScalingGroups shapes -------------------------------------

TEMPLATES = Templates(
    [
        TemplateInfo(id="lt-aaa", name="a", default_version=2, latest_version=5),
        TemplateInfo(id="lt-bbb", name="b", default_version=1, latest_version=1),
    ]
)


def _lt(ident: str, version: str | None, name: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"LaunchTemplateId": ident}
    if name is not None:
        spec["LaunchTemplateName"] = name
    if version is not None:
        spec["Version"] = version
    return spec


def _instance(**fields: Any) -> dict[str, Any]:
    return {"InstanceId": "i-0123456789abcdef0", "InstanceType": "m5.large", **fields}


def _stale(group: dict[str, Any], instance: dict[str, Any]) -> bool:
    return is_out_of_date(instance, current_specs(group, TEMPLATES), TEMPLATES)


def test_another_template_with_the_same_version_number_is_out_of_date() -> None:
    group = {"LaunchTemplate": _lt("lt-bbb", "1")}
    assert not _stale(group, _instance(LaunchTemplate=_lt("lt-bbb", "1")))
    assert _stale(group, _instance(LaunchTemplate=_lt("lt-aaa", "1")))


def test_a_group_naming_its_template_by_name_compares_by_id() -> None:
    group = {"LaunchTemplate": {"LaunchTemplateName": "a", "Version": "$Latest"}}
    assert not _stale(group, _instance(LaunchTemplate=_lt("lt-aaa", "5", name="a")))
    assert _stale(group, _instance(LaunchTemplate=_lt("lt-aaa", "2", name="a")))


def test_launch_configuration_changes() -> None:
    group = {"LaunchConfigurationName": "lc-2"}
    assert not _stale(group, _instance(LaunchConfigurationName="lc-2"))
    assert _stale(group, _instance(LaunchConfigurationName="lc-1"))
    # Moving a group from a configuration to a template, or back, changes every instance.
    assert _stale(group, _instance(LaunchTemplate=_lt("lt-aaa", "2")))
    assert _stale({"LaunchTemplate": _lt("lt-aaa", None)}, _instance(LaunchConfigurationName="x"))


def test_an_instance_without_launch_source_differs_from_the_group() -> None:
    assert _stale({"LaunchTemplate": _lt("lt-aaa", "$Default")}, _instance())


def test_symbolic_instance_versions_are_resolved_too() -> None:
    group = {"LaunchTemplate": _lt("lt-aaa", "5")}
    assert not _stale(group, _instance(LaunchTemplate=_lt("lt-aaa", "$Latest")))
    assert instance_spec(_instance(LaunchTemplate=_lt("lt-aaa", "$Default")), TEMPLATES) == (
        instance_spec(_instance(LaunchTemplate=_lt("lt-aaa", "2")), TEMPLATES)
    )


def test_mixed_instances_overrides_per_instance_type() -> None:
    group = {
        "MixedInstancesPolicy": {
            "LaunchTemplate": {
                "LaunchTemplateSpecification": _lt("lt-aaa", "$Latest"),
                "Overrides": [
                    {"InstanceType": "m5.large"},
                    {
                        "InstanceType": "m6g.large",
                        "LaunchTemplateSpecification": _lt("lt-bbb", None),
                    },
                ],
            }
        }
    }
    current = current_specs(group, TEMPLATES)
    assert current.default is not None and current.default.label() == "lt-aaa:5"
    assert current.for_type("m6g.large") is not None
    assert current.for_type("m6g.large").label() == "lt-bbb:1"  # type: ignore[union-attr]

    x86 = _instance(InstanceType="m5.large", LaunchTemplate=_lt("lt-aaa", "5"))
    arm = _instance(InstanceType="m6g.large", LaunchTemplate=_lt("lt-bbb", "1"))
    arm_on_x86_template = _instance(InstanceType="m6g.large", LaunchTemplate=_lt("lt-aaa", "5"))
    assert not _stale(group, x86)
    assert not _stale(group, arm)
    assert _stale(group, arm_on_x86_template)


def test_unknown_templates_make_the_group_unknown() -> None:
    group = {"LaunchTemplate": _lt("lt-gone", "$Latest")}
    current = current_specs(group, TEMPLATES)
    assert not current.known
    assert not _stale(group, _instance(LaunchTemplate=_lt("lt-gone", "1")))
