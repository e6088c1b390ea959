"""Provider discovery through real entry points.

Each test lays out `*.dist-info` directories on a temporary `sys.path` entry, which is exactly what
`pip install` leaves behind and what `importlib.metadata` reads, so discovery runs unmodified.
"""

from __future__ import annotations

import importlib
import sys
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from nodeops.providers.aws import AwsConfig, AwsProvider
from nodeops.providers.base import (
    LoadBalancerDraining,
    LoadBalancers,
    NodeGroups,
    Provider,
    ProviderConfigError,
    Servers,
)
from nodeops.providers.registry import (
    ENTRY_POINT_GROUP,
    available_providers,
    create_provider,
    create_providers,
    provider_class,
)

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "thirdparty_provider"


def write_distribution(
    site: Path, name: str, entry_points: Mapping[str, str], version: str = "0.1.0"
) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = [f"[{ENTRY_POINT_GROUP}]", *(f"{k} = {v}" for k, v in entry_points.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    importlib.invalidate_caches()


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh site-packages-like directory on sys.path."""
    root = tmp_path / "site-packages"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    yield root
    for module in [m for m in sys.modules if m.startswith("nodeops_toycloud")]:
        del sys.modules[module]
    importlib.invalidate_caches()


@pytest.fixture
def toycloud(site: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test package "installed": its code importable, its declared entry points visible."""
    project = tomllib.loads((FIXTURE / "pyproject.toml").read_text())["project"]
    monkeypatch.syspath_prepend(str(FIXTURE))
    write_distribution(
        site, project["name"], project["entry-points"][ENTRY_POINT_GROUP], project["version"]
    )
    return site


def test_third_party_provider_is_discovered_and_built(toycloud: Path) -> None:
    assert "toycloud" in available_providers()

    provider = create_provider("toycloud", {"greeting": "hi", "region": {"name": "r1"}})

    assert type(provider).__module__ == "nodeops_toycloud"
    assert isinstance(provider, Provider)
    assert provider.config.greeting == "hi"  # type: ignore[attr-defined]
    assert provider.config.region.name == "r1"  # type: ignore[attr-defined]
    # It chose to implement only Servers.
    assert isinstance(provider, Servers)
    assert not isinstance(provider, NodeGroups)
    assert not isinstance(provider, LoadBalancers)


def test_missing_block_means_defaults(toycloud: Path) -> None:
    provider = create_provider("toycloud")
    assert provider.config.size == 3  # type: ignore[attr-defined]


def test_unknown_provider_names_the_key_and_lists_known_ones(toycloud: Path) -> None:
    with pytest.raises(ProviderConfigError) as caught:
        create_provider("gcp", {})
    message = str(caught.value)
    assert message.startswith("providers.gcp: unknown provider 'gcp'; known providers: ")
    assert "toycloud" in message
    assert caught.value.key == "providers.gcp"


def test_unknown_provider_when_none_installed(site: Path) -> None:
    with pytest.raises(ProviderConfigError, match="unknown provider 'x'"):
        create_provider("x", {}, group="nodeops.test.empty")
    assert available_providers("nodeops.test.empty") == []


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ({"colour": "red"}, "providers.toycloud.colour: Extra inputs are not permitted"),
        (
            {"size": "many"},
            "providers.toycloud.size: Input should be a valid integer, unable to parse string "
            "as an integer (got 'many')",
        ),
        (
            {"size": 0},
            "providers.toycloud.size: Input should be greater than or equal to 1 (got 0)",
        ),
        ({"region": {}}, "providers.toycloud.region.name: Field required"),
        (
            {"region": {"name": "r", "zones": ["a", 5]}},
            "providers.toycloud.region.zones[1]: Input should be a valid string (got 5)",
        ),
    ],
)
def test_bad_block_names_the_key(toycloud: Path, block: dict[str, object], expected: str) -> None:
    with pytest.raises(ProviderConfigError) as caught:
        create_provider("toycloud", block)
    assert str(caught.value) == expected


def test_every_problem_of_a_block_is_reported(toycloud: Path) -> None:
    with pytest.raises(ProviderConfigError) as caught:
        create_provider("toycloud", {"colour": "red", "size": -1})
    keys = [key for key, _ in caught.value.problems]
    assert keys == ["providers.toycloud.size", "providers.toycloud.colour"]
    assert "providers.toycloud.size: " in str(caught.value)
    assert "; providers.toycloud.colour: Extra inputs" in str(caught.value)


def test_block_must_be_a_mapping(toycloud: Path) -> None:
    with pytest.raises(ProviderConfigError, match=r"^providers.toycloud: expected a mapping"):
        create_provider("toycloud", ["greeting"])  # type: ignore[arg-type]


def test_constructor_value_errors_become_config_errors(toycloud: Path) -> None:
    with pytest.raises(ProviderConfigError) as caught:
        create_provider("toycloud", {"size": 1, "region": {"name": "r", "zones": ["a", "b"]}})
    assert str(caught.value) == "providers.toycloud: size must cover every zone of the region"


def test_create_providers_builds_a_whole_block(toycloud: Path) -> None:
    built = create_providers({"toycloud": {"greeting": "yo"}})
    assert list(built) == ["toycloud"]
    assert built["toycloud"].config.greeting == "yo"  # type: ignore[attr-defined]
    assert create_providers(None) == {}


def test_create_providers_reports_the_nested_key(toycloud: Path) -> None:
    with pytest.raises(ProviderConfigError) as caught:
        create_providers({"toycloud": {"size": "x"}}, key="operator.providers")
    assert caught.value.key == "operator.providers.toycloud.size"
    with pytest.raises(ProviderConfigError, match=r"^providers: expected a mapping of providers"):
        create_providers(["toycloud"])  # type: ignore[arg-type]


def test_entry_point_that_cannot_be_imported(site: Path) -> None:
    write_distribution(site, "nodeops-ghost", {"ghost": "nodeops_ghost_module:GhostProvider"})
    with pytest.raises(ProviderConfigError) as caught:
        create_provider("ghost", {})
    assert str(caught.value).startswith(
        "providers.ghost: cannot load 'nodeops_ghost_module:GhostProvider': "
    )
    assert "nodeops_ghost_module" in str(caught.value)


def test_entry_point_that_is_not_a_provider_class(toycloud: Path) -> None:
    write_distribution(toycloud, "nodeops-odd", {"odd": "nodeops_toycloud:not_a_provider"})
    with pytest.raises(ProviderConfigError, match="is not a provider class"):
        provider_class("odd")


def test_config_model_must_forbid_unknown_keys(toycloud: Path) -> None:
    write_distribution(toycloud, "nodeops-loose", {"loose": "nodeops_toycloud:LooseProvider"})
    with pytest.raises(ProviderConfigError) as caught:
        create_provider("loose", {"greting": "typo"})
    assert str(caught.value) == (
        "providers.loose: 'nodeops_toycloud:LooseProvider': its Config model must set "
        "extra='forbid'"
    )


def test_one_name_registered_by_two_distributions(toycloud: Path) -> None:
    write_distribution(toycloud, "nodeops-impostor", {"toycloud": "nodeops_toycloud:LooseProvider"})
    with pytest.raises(ProviderConfigError) as caught:
        create_provider("toycloud", {})
    message = str(caught.value)
    assert "provider 'toycloud' is registered more than once" in message
    assert "from nodeops-impostor" in message
    assert "from nodeops-toycloud" in message


def test_the_same_target_seen_twice_is_not_a_conflict(toycloud: Path) -> None:
    write_distribution(
        toycloud, "nodeops-toycloud-copy", {"toycloud": "nodeops_toycloud:ToyCloudProvider"}
    )
    assert create_provider("toycloud", {}).config.greeting == "hello"  # type: ignore[attr-defined]


def test_builtin_aws_provider_through_an_entry_point(site: Path) -> None:
    # The same line the nodeops distribution declares; seeing it twice is harmless.
    write_distribution(site, "nodeops-builtin-check", {"aws": "nodeops.providers.aws:AwsProvider"})

    provider = create_provider("aws", {"region": "eu-west-1", "retry": {"max_attempts": 3}})

    assert isinstance(provider, AwsProvider)
    assert provider.config == AwsConfig(region="eu-west-1", retry={"max_attempts": 3})
    for protocol in (NodeGroups, LoadBalancers, LoadBalancerDraining, Servers):
        assert isinstance(provider, protocol)


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ({"regoin": "eu-west-1"}, "providers.aws.regoin: Extra inputs are not permitted"),
        ({"region": ""}, "providers.aws.region: Value error, must not be empty"),
        ({"endpoint_url": "localhost:5000"}, "providers.aws.endpoint_url: Value error, must be"),
        (
            {"retry": {"attempts": 2}},
            "providers.aws.retry.attempts: Extra inputs are not permitted",
        ),
        ({"retry": {"max_attempts": 0}}, "providers.aws.retry.max_attempts: Input should be"),
    ],
)
def test_aws_block_errors_name_the_key(site: Path, block: dict[str, object], expected: str) -> None:
    write_distribution(site, "nodeops-builtin-check", {"aws": "nodeops.providers.aws:AwsProvider"})
    with pytest.raises(ProviderConfigError) as caught:
        create_provider("aws", block)
    assert str(caught.value).startswith(expected)
