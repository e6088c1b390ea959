"""A vCenter the controller cannot use: unreachable, wrong credentials, a certificate its CA
does not sign. Each is a readiness failure naming the cause, and no node is touched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodeops.controllers import SetupError
from nodeops.controllers.esx.metrics import POLLS
from nodeops.sim.server.tls import self_signed
from tests.integration.esx.conftest import Env
from tests.vcsim import needs_vcsim

pytestmark = needs_vcsim


async def refused(env: Env, run: Any, code: str) -> str:
    """The readiness reason once a poll failed with `code`, after the nodes were looked at."""
    target = POLLS.labels(code)._value.get() + 2

    async def failing() -> str | None:
        if POLLS.labels(code)._value.get() < target:
            return None
        return run.manager.readiness.failures().get("esx-vcenter")

    return str(await env.wait(failing, f"two polls failing with {code}"))


async def untouched(env: Env) -> None:
    for name, node in (await env.nodes()).items():
        assert not any(
            k.startswith("nodeops.dev/esx") for k in node["metadata"].get("labels") or {}
        ), name
        assert not node["spec"].get("unschedulable"), name


async def test_unreachable_vcenter(env: Env) -> None:
    run = await env.start(vcenter_url="https://127.0.0.1:1/sdk")
    reason = await refused(env, run, "Unreachable")
    assert "cannot connect to https://127.0.0.1:1/sdk" in reason
    await untouched(env)


async def test_wrong_password(env: Env) -> None:
    run = await env.start(credentials_file=env.credentials("wrong"))
    reason = await refused(env, run, "Login")
    assert "refused the login of 'operator': wrong user name or password" in reason
    await untouched(env)


async def test_certificate_of_another_ca(env: Env, tmp_path: Path) -> None:
    other, _ = self_signed("127.0.0.1")
    ca = tmp_path / "other-ca.pem"
    ca.write_bytes(other)
    run = await env.start(ca_file=ca)
    reason = await refused(env, run, "TLS")
    assert f"its certificate is not trusted by the CA in {ca}" in reason
    await untouched(env)


async def test_the_vcenter_answering_again_makes_it_ready(env: Env) -> None:
    creds = env.credentials("wrong")
    run = await env.start(credentials_file=creds)
    await refused(env, run, "Login")
    creds.write_text("username: operator\npassword: s3cret\n")  # the Secret was fixed

    async def ready() -> bool:
        return "esx-vcenter" not in run.manager.readiness.failures()

    await env.wait(ready, "readiness once the credentials work")

    async def labelled() -> bool:
        labels = (await env.nodes())["esx-a"]["metadata"].get("labels") or {}
        return labels.get("nodeops.dev/esx-in-maintenance") == "false"

    await env.wait(labelled, "esx-a labelled once vCenter answers")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"vcenter_url": ""}, "--esx-vcenter-url: required"),
        ({"credentials_file": Path("/nonexistent/creds.yaml")}, "--esx-credentials-file: "),
        ({"ca_file": Path("/nonexistent/ca.pem")}, "--esx-ca-file: /nonexistent/ca.pem"),
    ],
)
async def test_settings_refused_at_start(env: Env, settings: dict[str, Any], message: str) -> None:
    with pytest.raises(SetupError, match=message):
        await env.start(**settings)
