"""docs/cycling.md's walk-through shows ages the cluster's clock can produce: the roll of the
example request takes at least a boot of every batch, in simulated time (`AGE` comes from the
simulator's clock, which the scenario runs faster than the wall clock)."""

from __future__ import annotations

import re

import yaml

from tests.repo import DOCS, ROOT

CYCLING = (DOCS / "cycling.md").read_text(encoding="utf-8")


def kubectl_age(text: str) -> float:
    """Seconds of a kubectl age column (`14s`, `8m40s`, `2h3m`)."""
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    parts = re.findall(r"(\d+)([dhms])", text)
    assert parts and "".join(n + u for n, u in parts) == text, text
    return float(sum(int(n) * units[u] for n, u in parts))


def least_roll_seconds() -> float:
    """Batches of the example request times the boot of its group's instances."""
    scenario = yaml.safe_load((ROOT / "examples" / "scenarios" / "node-groups.yaml").read_text())
    request = yaml.safe_load((ROOT / "examples" / "cycling" / "cyclenoderequest.yaml").read_text())
    group = next(g for g in scenario["nodeGroups"] if g["name"] == request["spec"]["nodeGroupName"])
    batches = -(-group["size"] // request["spec"]["cycleSettings"]["concurrency"])
    return float(batches * group["bootSeconds"])


def test_the_successful_line_is_as_old_as_the_roll_takes() -> None:
    block = CYCLING.split("kubectl get cnr -n nodeops-system -w\n```", 1)[1]
    block = block.split("```console\n", 1)[1].split("```", 1)[0]
    rows = [line.split() for line in block.splitlines()[1:]]
    ages = [kubectl_age(row[-1]) for row in rows]
    assert ages == sorted(ages), "ages of a watch only grow"
    [done] = [row for row in rows if "Successful" in row]
    assert kubectl_age(done[-1]) >= least_roll_seconds()
