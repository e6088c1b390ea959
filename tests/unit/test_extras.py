"""The operator's core needs no extra, and the extras' module lists match pyproject.toml.

`pip install nodeops` must give a library user of `nodeops.kube` (and `nodeops run`) a working
install without the clouds' SDKs or the simulator's packages; `nodeops.common.extras` tells a
command which extra a missing module belongs to, so its lists must name the modules the extras'
requirements really install.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import tomllib
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from nodeops.common.extras import EXTRAS, MissingExtra, optional_dependencies
from tests.repo import ROOT

#: What the extras install, their own dependencies' top-level packages included.
EXTRA_PACKAGES = sorted(
    {m.split(".")[0] for e in EXTRAS.values() for m in e.modules if "." not in m}
    | {"google.protobuf", "aiobotocore", "botocore", "boto3", "keystoneauth1", "lark"}
)

LOADED = """
import json, sys
def loaded():
    found = [m for m in sys.modules if m in PACKAGES or m.split(".")[0] in PACKAGES]
    return sorted(found + [m for m in sys.modules if m.startswith("nodeops.sim")])
import nodeops.api, nodeops.drain, nodeops.kube, nodeops.providers
from nodeops.controllers import plugins
plugins()  # every controller's top level, as `nodeops run` loads them for its flags
core = loaded()
from nodeops.cli import build_parser
build_parser()
print(json.dumps({"core": core, "cli": [m for m in loaded() if not m.startswith("nodeops.")]}))
"""


def test_the_core_and_the_command_line_load_no_extra() -> None:
    code = f"PACKAGES = {EXTRA_PACKAGES!r}\n{LOADED}"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"core": [], "cli": []}


def _project() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def _provided_by(module: str, distributions: set[str]) -> set[str]:
    path = module.replace(".", "/")
    return {
        name
        for name in distributions
        if any(
            str(f) == f"{path}.py" or str(f).startswith(f"{path}/")
            for f in importlib.metadata.distribution(name).files or ()
        )
    }


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_an_extras_modules_are_those_of_its_requirements(extra: str) -> None:
    declared = _names(_project()["optional-dependencies"][extra])
    by_module = {m: _provided_by(m, declared) for m in EXTRAS[extra].modules}
    assert all(len(found) == 1 for found in by_module.values()), by_module
    assert set().union(*by_module.values()) == declared


def test_every_extra_is_listed() -> None:
    """Each extra of pyproject.toml but the two that gather the others."""
    assert set(_project()["optional-dependencies"]) - {"all", "test"} == set(EXTRAS)


def test_the_core_carries_no_extras_requirement() -> None:
    project = _project()
    optional = project["optional-dependencies"]
    in_extras = set().union(*(_names(optional[e]) for e in EXTRAS))
    assert _names(project["dependencies"]) & in_extras == set()


@pytest.mark.parametrize("extra", ["all", "test"])
def test_all_and_test_install_every_extra(extra: str) -> None:
    ours = [
        Requirement(r)
        for r in _project()["optional-dependencies"][extra]
        if canonicalize_name(Requirement(r).name) == "nodeops"
    ]
    assert len(ours) == 1 and ours[0].extras >= set(EXTRAS)


def test_a_missing_import_names_the_extra() -> None:
    with pytest.raises(MissingExtra) as caught, optional_dependencies("aws"):
        import nodeops_module_nobody_installs  # type: ignore[import-not-found]  # noqa: F401
    assert str(caught.value) == (
        "the aws provider needs the 'aws' extra (no module named "
        "'nodeops_module_nobody_installs'): pip install 'nodeops[aws]'"
    )
    assert caught.value.extra == "aws"
    assert isinstance(caught.value, ModuleNotFoundError)


REQUIRE = """
import json, sys
from nodeops.common.extras import EXTRAS, MissingExtra, require
for extra in EXTRAS:
    require(extra)  # the tests install every extra
imported = sorted(m for m in sys.modules if m in PACKAGES or m.split(".")[0] in PACKAGES)
sys.modules["celpy"] = None  # as if cel-python were not installed
try:
    require("sim")
except MissingExtra as exc:
    print(json.dumps({"imported": imported, "missing": [exc.extra, exc.name]}))
"""


def test_require_checks_an_extra_without_importing_it() -> None:
    code = f"PACKAGES = {EXTRA_PACKAGES!r}\n{REQUIRE}"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"imported": [], "missing": ["sim", "celpy"]}
