"""The detacher's settings: node-detacher's flags, validated."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from nodeops.controllers.detacher.settings import DetacherSettings, parse_static_target
from nodeops.providers.base import CLASSIC, TARGET_GROUP, LoadBalancerTarget

ARN = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:targetgroup/web/0123456789abcdef"


def test_static_targets() -> None:
    assert parse_static_target("classic:web") == LoadBalancerTarget(CLASSIC, "web")
    assert parse_static_target(f"target-group:{ARN}") == LoadBalancerTarget(TARGET_GROUP, ARN)
    assert parse_static_target(f"target-group:{ARN}:30080") == LoadBalancerTarget(
        TARGET_GROUP, ARN, 30080
    )
    for bad in ("web", "classic:", "Classic:web", "classic:web:80", f"target-group:{ARN}:0"):
        with pytest.raises(ValueError):
            parse_static_target(bad)


def test_lists_are_comma_separated_as_flags_give_them() -> None:
    settings = DetacherSettings(
        static_targets=f"classic:web, target-group:{ARN}:30080",  # type: ignore[arg-type]
        daemonsets="edge/contour,ingress/nginx",  # type: ignore[arg-type]
        taints="karpenter.sh/disrupted",  # type: ignore[arg-type]
        manage_daemonset_pods=True,
    )
    assert settings.targets == [
        LoadBalancerTarget(CLASSIC, "web"),
        LoadBalancerTarget(TARGET_GROUP, ARN, 30080),
    ]
    assert settings.ingress_daemonsets == {("edge", "contour"), ("ingress", "nginx")}
    assert settings.taints == ["karpenter.sh/disrupted"]
    # Without manage_daemonset_pods the list is inert, as node-detacher's --daemonset was.
    assert DetacherSettings(daemonsets=["edge/contour"]).ingress_daemonsets == set()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("daemonsets", "contour"),
        ("static_targets", "web"),
        ("integrations", "Classic"),
        ("discovery", "dynamic"),
        ("sync_period", 0),
        ("unknown", 1),
    ],
)
def test_bad_settings_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        DetacherSettings(**{field: value})
    assert caught.value.errors()[0]["loc"][0] == field


def test_flags_and_environment_of_nodeops_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from nodeops.cli import build_parser
    from nodeops.controllers import plugins
    from nodeops.run import plugin_settings

    plugin = plugins()["detacher"]
    monkeypatch.setenv("NODEOPS_DETACHER_TAINTS", "karpenter.sh/disrupted,example.com/*")
    args = build_parser().parse_args(
        [
            "run",
            "--controllers",
            "detacher",
            "--detacher-daemonsets",
            "edge/contour,ingress/nginx",
            "--detacher-manage-daemonset-pods",
            "--detacher-stop-pods",
            "--detacher-sync-period",
            "15",
        ]
    )
    settings = plugin_settings(plugin, args)
    assert isinstance(settings, DetacherSettings)
    assert settings.ingress_daemonsets == {("edge", "contour"), ("ingress", "nginx")}
    assert settings.taints == ["karpenter.sh/disrupted", "example.com/*"]
    assert (settings.stop_pods, settings.sync_period) == (True, 15.0)
