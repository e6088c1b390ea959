"""`nodeops run` controller plugins: flags and environment from each settings model, validated
at startup with one clear line naming the flag, before anything connects anywhere."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeops.cli import build_parser, main
from nodeops.controllers import ControllerPlugin, PluginError, plugins
from nodeops.run import ConfigProblem, load_provider_config, plugin_settings
from tests import toyctl


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ControllerPlugin]:  # type: ignore[type-arg]
    for path in toyctl.install(tmp_path / "site"):
        monkeypatch.syspath_prepend(path)
    yield plugins()["toy"]
    sys.modules.pop("nodeops_toyctl", None)


def _args(*argv: str) -> object:
    return build_parser().parse_args(["run", *argv])


def test_settings_become_flags_and_environment(
    toy: ControllerPlugin,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[type-arg]
) -> None:
    help_text = build_parser()._subparsers._group_actions[0].choices["run"].format_help()  # type: ignore[union-attr]
    for flag in ("--toy-greeting", "--toy-replicas", "--toy-names", "--toy-loud", "--no-toy-loud"):
        assert flag in help_text
    assert "NODEOPS_TOY_GREETING" in help_text
    monkeypatch.setenv("NODEOPS_TOY_GREETING", "from-env")
    monkeypatch.setenv("NODEOPS_TOY_NAMES", "a, b,,c")
    monkeypatch.setenv("NODEOPS_TOY_LOUD", "true")
    settings = plugin_settings(toy, _args("--toy-replicas", "3"))
    assert settings.model_dump() == {
        "greeting": "from-env",
        "replicas": 3,
        "names": ["a", "b", "c"],
        "loud": True,
        "refuse": False,
    }
    settings = plugin_settings(toy, _args("--toy-greeting", "flag", "--no-toy-loud"))
    assert (settings.greeting, settings.loud) == ("flag", False)  # type: ignore[attr-defined]


def test_bad_values_name_the_flag_or_the_variable(
    toy: ControllerPlugin,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[type-arg]
) -> None:
    with pytest.raises(ConfigProblem, match=r"^--toy-replicas: .*integer.*'many'"):
        plugin_settings(toy, _args("--toy-replicas", "many"))
    with pytest.raises(ConfigProblem, match=r"^--toy-replicas: .*greater than or equal to 1"):
        plugin_settings(toy, _args("--toy-replicas", "0"))
    monkeypatch.setenv("NODEOPS_TOY_REPLICAS", "lots")
    with pytest.raises(ConfigProblem, match=r"^NODEOPS_TOY_REPLICAS: "):
        plugin_settings(toy, _args())


def test_nodeops_run_exits_2_with_one_line(
    toy: ControllerPlugin,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,  # type: ignore[type-arg]
) -> None:
    assert main(["run", "--controllers", "toy", "--toy-replicas", "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("nodeops run: --toy-replicas: ")
    assert main(["run", "--controllers", "toy,nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown controller(s) nope (available: " in err
    assert "toy" in err.split("(available: ", 1)[1]
    assert main(["run", "--controllers", "tyo"]) == 2
    err = capsys.readouterr().err
    assert "unknown controller(s) tyo; did you mean 'toy'? (available: " in err
    bad = tmp_path / "providers.yaml"
    bad.write_text("providers:\n  sim:\n    endpoint: [unclosed\n")
    assert main(["run", "--controllers", "toy", "--provider-config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nodeops run: {bad}:4: ") and err.count("\n") == 1


def test_nodeops_run_with_a_missing_kubeconfig_says_so_in_one_line(
    toy: ControllerPlugin,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,  # type: ignore[type-arg]
) -> None:
    missing = tmp_path / "nonexistent"
    assert main(["run", "--controllers", "toy", "--kubeconfig", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err == f"nodeops run: stat {missing}: no such file or directory\n"


def test_provider_config_file(tmp_path: Path) -> None:
    good = tmp_path / "p.yaml"
    good.write_text("providers:\n  sim: {endpoint: 'http://127.0.0.1:1'}\n")
    assert load_provider_config(str(good)) == {
        "providers": {"sim": {"endpoint": "http://127.0.0.1:1"}}
    }
    (tmp_path / "list.yaml").write_text("- a\n")
    with pytest.raises(ConfigProblem, match=r"list.yaml:1: expected a mapping"):
        load_provider_config(str(tmp_path / "list.yaml"))
    with pytest.raises(ConfigProblem, match="cannot read"):
        load_provider_config(str(tmp_path / "missing.yaml"))


def test_malformed_plugins_are_refused() -> None:
    class NotAModel:
        pass

    async def setup(ctx: object, settings: object) -> None:
        pass

    with pytest.raises(PluginError, match="lowercase"):
        ControllerPlugin(name="Bad_Name", settings=NotAModel, setup=setup)  # type: ignore[arg-type,type-var]
    with pytest.raises(PluginError, match="pydantic"):
        ControllerPlugin(name="ok", settings=NotAModel, setup=setup)  # type: ignore[arg-type,type-var]
