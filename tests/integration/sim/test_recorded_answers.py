"""The simulated API server answers the recorded cases as the real kube-apiserver did.

Each file in `tests/recorded/answers/` is what a real kube-apiserver answered to the cases of
`tests/recorded/cases.py` (recorded with `python -m tests.recorded.record`). The same cases run
here against the simulator, with its disruption controller and pod GC beside it where a case
needs kube-controller-manager, and every answer must match, field by field, except the fields a
case marks as changed in a later Kubernetes version than the recorded one (the simulator
answers as the newest does).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from nodeops.sim.clock import Clock
from nodeops.sim.cluster import ClusterLoops
from nodeops.sim.server.app import SimServer
from tests.recorded.cases import CASES, Case, comparable, normalise, server_minor
from tests.recorded.client import Http

ANSWERS = sorted((Path(__file__).parents[2] / "recorded" / "answers").glob("*.json"))
TIME_SCALE = 10.0


def _recorded() -> list[Any]:
    params = []
    for path in ANSWERS:
        data = json.loads(path.read_text(encoding="utf-8"))
        minor = server_minor(str(data["server"]["gitVersion"]))
        for case in CASES:
            if case.name in data["cases"]:
                params.append(
                    pytest.param(
                        case,
                        minor,
                        data["cases"][case.name],
                        id=f"{data['server']['gitVersion']}-{case.name.replace(' ', '-')}",
                    )
                )
    return params


@pytest.fixture
async def sim() -> AsyncIterator[tuple[SimServer, Clock]]:
    clock = Clock(TIME_SCALE)
    server = SimServer(clock=clock)
    await server.start()
    try:
        yield server, clock
    finally:
        await server.stop()


def test_there_are_recorded_answers() -> None:
    assert ANSWERS, "no recorded answers of a real kube-apiserver"
    assert len(_recorded()) >= len(CASES)


@pytest.mark.parametrize(("case", "minor", "recorded"), _recorded())
async def test_the_simulator_answers_as_kube_apiserver_did(
    sim: tuple[SimServer, Clock], case: Case, minor: float, recorded: list[dict[str, Any]]
) -> None:
    server, clock = sim
    loops = None
    if case.needs_controllers:
        loops = ClusterLoops(
            server.url, server.admin_token, clock, components=("disruption", "podgc")
        )
        await loops.start()
    token = secrets.token_hex(3)
    try:
        async with aiohttp.ClientSession() as session:
            http = Http(session, server.url, server.admin_token, None)
            steps = await case.run(http, token, lambda: clock.now().timestamp())
    finally:
        if loops is not None:
            await loops.stop()
    answered = normalise(steps, token)
    assert comparable(case, minor, answered) == comparable(case, minor, recorded)
