"""The reference's flatcar example, unchanged but for the Slack hook, against the simulator:
reboot-needed -> maintenance-required (approval asked) -> approved -> in-maintenance
(reboot-ok) -> agent reboots -> operational."""

from __future__ import annotations

from pathlib import Path

import orjson

from nodeops.controllers.maintenance.keys import Keys
from tests.waiting import until

from .harness import harness
from .servers import slack_server

EXAMPLES = Path(__file__).parents[3] / "examples" / "maintenance"
NEEDED = "flatcar-linux-update.v1.flatcar-linux.net/reboot-needed"
OK = "flatcar-linux-update.v1.flatcar-linux.net/reboot-ok"
APPROVED = "cloud.sap/maintenance-approved"


async def test_flatcar_flow(tmp_path: Path) -> None:
    config = (EXAMPLES / "flatcar.yaml").read_text()
    async with slack_server() as slack:
        config = config.replace("Your hook", f"{slack.url}/hook/flatcar")
        async with harness(tmp_path, config, keys=Keys.for_compat("sapcc")) as h:
            await h.label("node-0", **{"cloud.sap/maintenance-profile": "flatcar"})
            node = await h.wait_state("node-0", "operational")
            data = orjson.loads(node["metadata"]["annotations"]["cloud.sap/maintenance-data"])
            assert data["Profiles"]["flatcar"]["Current"] == "operational"

            await h.annotate("node-0", {NEEDED: "true"})
            await h.wait_state("node-0", "maintenance-required")
            await until(
                lambda: _async(any("requires maintenance" in t for t in slack.texts())),
                what="approval message",
            )
            assert (
                "kubectl annotate node node-0 cloud.sap/maintenance-approved=true"
                in (slack.texts()[0])
            )

            await h.annotate("node-0", {APPROVED: "true"})
            node = await h.wait_state("node-0", "in-maintenance")
            annotations = node["metadata"]["annotations"]
            assert annotations.get(OK) == "true"
            assert APPROVED not in annotations
            await until(
                lambda: _async(any("has started" in t for t in slack.texts())),
                what="maintenance started message",
            )

            # The update agent reboots the node and clears reboot-needed.
            await h.annotate("node-0", {NEEDED: None})
            node = await h.wait_state("node-0", "operational")
            assert OK not in node["metadata"]["annotations"]
            data = orjson.loads(node["metadata"]["annotations"]["cloud.sap/maintenance-data"])
            assert data["Profiles"]["flatcar"] | {"Transition": ""} == {
                "Transition": "",
                "Current": "operational",
                "Previous": "operational",
            }
            # One write for the first record, then one per transition; nothing else.
            assert h.reconciler.writes == 4
            changed = await until(
                lambda: _events(h, "ChangedMaintenanceState", 3), what="three state events"
            )
            assert {e["note"] for e in changed} >= {
                "The node is now in the in-maintenance state caused by profile flatcar"
            }
            # Other nodes without a profile were never written.
            other = await h.node("node-1")
            assert "cloud.sap/maintenance-data" not in (other["metadata"].get("annotations") or {})
            await h.sender.wait_idle()
            assert len(slack.requests) == 2


async def _async(value: object) -> object:
    return value


async def _events(h: object, reason: str, n: int) -> list[dict[str, object]] | None:
    items = await h.events(reason)  # type: ignore[attr-defined]
    return items if len(items) >= n else None
