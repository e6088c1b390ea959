"""Random and malformed command lines against a running simulated cluster: the node commands
never end in a traceback, and one refused before it printed anything has written nothing (the
simulator's own count of the requests it served, by client)."""

from __future__ import annotations

import io
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from nodeops.drain import command
from tests.argv_strategies import command_lines

from .test_drain_cli import api

WRITES = ("create", "update", "patch", "delete", "deletecollection")


def writes_by_nodeops(kubeconfig: Path) -> int:
    stats = api(kubeconfig, "GET", "/sim/requests")
    pairs = ((stats.get("by_agent") or {}).get("nodeops") or {}).get("by_verb_resource") or {}
    return sum(int(v["requests"]) for k, v in pairs.items() if k.split("/", 1)[0] in WRITES)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(argv=command_lines())
def test_no_traceback_and_no_write_before_an_error(sim_cluster: Path, argv: list[str]) -> None:
    api(sim_cluster, "DELETE", "/sim/requests")
    out, err = io.StringIO(), io.StringIO()
    code = command.main([*argv, "--kubeconfig", str(sim_cluster)], out, err)
    assert code in (0, 1), (argv, err.getvalue())
    assert "Traceback" not in err.getvalue()
    if code == 1 and out.getvalue() == "":
        assert writes_by_nodeops(sim_cluster) == 0, (argv, err.getvalue())
