"""A command whose extra is not installed says, in one line, which extra to install.

The `nodeops` command runs in a child Python where no extra's packages can be found (a finder
ahead of the others answers for them as for an absent package), as after `pip install nodeops`:
everything else is the installed nodeops. The container image test checks the same on a real
install without the simulator.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from nodeops.common.extras import EXTRAS
from tests.repo import ROOT

from .conftest import free_port, simulated_cluster

CORE_ONLY = """
import contextlib, io, json, sys

class Absent:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if any(name == m or name.startswith(m + ".") for m in MODULES):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Absent)
from nodeops.cli import main

results = []
for args in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exc:
            code = exc.code
    results.append([code, out.getvalue(), err.getvalue().splitlines()])
print(json.dumps(results))
"""

SIM = [["demo"], ["sim", "serve", "--nodes", "1"], ["sim", "detach", "--kubeconfig", "x"]]
# Refused before the API server is reached: the kubeconfig named does not exist.
PROVIDERS = [["run", "--provider", p, "--kubeconfig", "absent"] for p in ("aws", "openstack")]
OTHERS = [["--help"], ["crds"], ["run", "--help"], ["drain", "--help"], ["cycle", "--help"]]


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Every command below run once, in one child (each child costs an import of nodeops)."""
    with simulated_cluster(tmp_path_factory.mktemp("sim")) as kubeconfig:
        kubernikus = ["run", "--kubeconfig", str(kubeconfig), "--controllers", "kubernikus",
                      "--provider", "sim", "--metrics-addr", "0",
                      "--health-addr", f"127.0.0.1:{free_port()}"]  # fmt: skip
        commands = [*SIM, *PROVIDERS, kubernikus, *OTHERS]
        modules = [m for extra in EXTRAS.values() for m in extra.modules]
        code = f"MODULES = {modules!r}\n{CORE_ONLY}"
        done = subprocess.run(
            [sys.executable, "-c", code, json.dumps(commands)],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
        )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.splitlines()[-1])
    names = [" ".join(c) for c in commands]
    names[commands.index(kubernikus)] = "kubernikus"
    yield dict(zip(names, results, strict=True))


def one_line(extra: str, command: str, purpose: str, module: str, key: str = "") -> str:
    return (
        f"nodeops {command}: {key}{purpose} needs the {extra!r} extra "
        f"(no module named {module!r}): pip install 'nodeops[{extra}]'"
    )


@pytest.mark.parametrize("args", SIM)
def test_the_simulator_commands_without_the_sim_extra(
    answers: dict[str, Any], args: list[str]
) -> None:
    assert answers[" ".join(args)] == [
        2,
        "",
        [one_line("sim", args[0], "the simulator", "cryptography")],
    ]


@pytest.mark.parametrize(
    ("args", "module"), list(zip(PROVIDERS, ["aioboto3", "openstack"], strict=True))
)
def test_a_provider_without_its_extra(
    answers: dict[str, Any], args: list[str], module: str
) -> None:
    provider = args[2]
    assert answers[" ".join(args)] == [
        2,
        "",
        [one_line(provider, "run", f"the {provider} provider", module, key="--provider: ")],
    ]


def test_the_kubernikus_controller_without_the_openstack_extra(answers: dict[str, Any]) -> None:
    """Kubernikus deletes servers through the openstack provider, whichever provider is named;
    the API server is reached first (the controller's setup runs after it answers)."""
    code, out, err = answers["kubernikus"]
    assert (code, out) == (2, "")
    assert err == [one_line("openstack", "run", "the openstack provider", "openstack")]


@pytest.mark.parametrize("args", OTHERS)
def test_the_other_commands_need_no_extra(answers: dict[str, Any], args: list[str]) -> None:
    code, out, err = answers[" ".join(args)]
    assert code == 0 and out, err
