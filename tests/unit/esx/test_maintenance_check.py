"""The maintenance profiles' esxMaintenance check: loaded from maintenance.yaml like any check,
reading the label the esx controller keeps, under the maintenance controller's keys."""

from __future__ import annotations

from nodeops.controllers.maintenance.config import load_text
from nodeops.controllers.maintenance.keys import Keys
from tests.unit.maintenance.fakes import MemoryCluster, context, node

PROFILE = """\
instances:
  check:
  - type: esxMaintenance
    name: esx-in
  - type: esxMaintenance
    name: esx-out
    config: {inMaintenance: false}
profiles:
- name: esx
  operational:
    transitions:
    - check: esx-in
      next: maintenance-required
"""


async def test_the_check_follows_the_esx_label_under_the_compat_keys() -> None:
    config = load_text(PROFILE, "maintenance.yaml", env={})
    into, out = config.checks["esx-in"].plugin, config.checks["esx-out"].plugin
    sapcc = MemoryCluster(keys=Keys.for_compat("sapcc"))

    in_maintenance = node("a", {"cloud.sap/esx-in-maintenance": "true"})
    assert (await into.check(context(in_maintenance, sapcc))).passed
    assert not (await out.check(context(in_maintenance, sapcc))).passed

    back = node("b", {"cloud.sap/esx-in-maintenance": "false"})
    result = await into.check(context(back, sapcc))
    assert not result.passed
    assert "not in maintenance (cloud.sap/esx-in-maintenance=false)" in result.info["reason"]
    assert (await out.check(context(back, sapcc))).passed

    # Under the default keys the sapcc label is somebody else's: not seen.
    result = await into.check(context(in_maintenance, MemoryCluster()))
    assert not result.passed
    assert "no nodeops.dev/esx-in-maintenance label" in result.info["reason"]


def test_a_mistyped_config_names_the_field() -> None:
    import pytest

    from nodeops.controllers.maintenance.config import ConfigError

    with pytest.raises(ConfigError) as err:
        load_text(
            PROFILE.replace("{inMaintenance: false}", "{inMaintenance: perhaps}"), "m.yaml", env={}
        )
    assert "instances.check[1].config.inMaintenance" in str(err.value)
