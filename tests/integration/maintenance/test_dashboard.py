"""The info API and the dashboard page, the page in a real headless Chromium."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from nodeops.controllers.maintenance.api import build_app
from tests.waiting import until

from .harness import harness

CONFIG = """\
dashboard:
  labelFilter: [zone]
instances:
  check:
  - {type: hasLabel, name: go, config: {key: go}}
  - {type: hasLabel, name: approved, config: {key: approved}}
profiles:
- name: p
  operational:
    transitions: [{check: go, next: maintenance-required}]
  maintenance-required:
    transitions: [{check: approved, next: in-maintenance}]
"""

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def _cluster_ready(h: Any) -> None:
    await h.label("node-0", **{h.keys.profile: "p", "go": "1", "zone": "a"})
    await h.label("node-1", **{h.keys.profile: "p", "zone": "b"})
    await h.label("node-2", **{h.keys.profile: "p", "go": "1", "approved": "1", "zone": "a"})
    await h.wait_state("node-0", "maintenance-required")
    await h.wait_state("node-2", "in-maintenance")
    await h.wait_state("node-1", "operational")

    async def explained() -> bool:
        h.poke("node-0", "node-1", "node-2")
        info = h.reconciler.info.get("node-0")
        return bool(info and info["state"] == "maintenance-required")

    await until(explained, what="explanations")


async def test_info_api(tmp_path: Path) -> None:
    async with harness(tmp_path, CONFIG) as h:
        await _cluster_ready(h)
        runner, url = await _serve(build_app(h.reconciler.info, h.source))
        try:
            async with httpx.AsyncClient() as http:
                items = (await http.get(f"{url}/api/v1/info")).json()
                assert [i["node"] for i in items] == ["node-0", "node-1", "node-2"]
                node0 = (await http.get(f"{url}/api/v1/info/node-0")).json()
                [profile] = node0["profiles"]
                assert profile["name"] == "p" and profile["state"] == "maintenance-required"
                [t] = profile["applied"]["transitions"]
                assert t["target"] == "in-maintenance" and t["passed"] is False
                assert t["chain"]["info"]["approved"]["id"] == "hasLabel"
                assert t["chain"]["info"]["approved"]["passed"] is False
                assert node0["labels"] == {"zone": "a"}
                assert (await http.get(f"{url}/api/v1/info/nope")).status_code == 404
                page = await http.get(f"{url}/", follow_redirects=True)
                assert page.status_code == 200 and "Node maintenance" in page.text
        finally:
            await runner.cleanup()


def _browse(url: str) -> dict[str, Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=str(DRIVER)), options=options)
    try:
        driver.get(f"{url}/static/")
        WebDriverWait(driver, 30).until(
            lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "true"
        )
        counts = {
            cell.get_attribute("data-state"): cell.text
            for cell in driver.find_elements(
                By.CSS_SELECTOR, "#counts tr[data-profile=p] td[data-state]"
            )
        }
        nodes = [
            e.get_attribute("data-node") for e in driver.find_elements(By.CSS_SELECTOR, ".node")
        ]
        node0 = driver.find_element(By.CSS_SELECTOR, ".node[data-node=node-0]").text
        field = driver.find_element(By.ID, "filter")
        field.send_keys("zone=a")
        WebDriverWait(driver, 10).until(
            lambda d: len(d.find_elements(By.CSS_SELECTOR, ".node")) == 2
        )
        filtered = [
            e.get_attribute("data-node") for e in driver.find_elements(By.CSS_SELECTOR, ".node")
        ]
        shown = driver.find_element(By.ID, "shown").text
        return {
            "counts": counts,
            "nodes": nodes,
            "node0": node0,
            "filtered": filtered,
            "shown": shown,
        }
    finally:
        driver.quit()


@pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="no headless browser: install the distro's chromium and chromium-driver packages",
)
async def test_dashboard_in_headless_chromium(tmp_path: Path) -> None:
    async with harness(tmp_path, CONFIG) as h:
        await _cluster_ready(h)
        runner, url = await _serve(build_app(h.reconciler.info, h.source))
        try:
            seen = await asyncio.to_thread(_browse, url)
        finally:
            await runner.cleanup()
    assert seen["counts"] == {
        "operational": "1",
        "maintenance-required": "1",
        "in-maintenance": "1",
    }
    assert seen["nodes"] == ["node-0", "node-1", "node-2"]
    assert "Transition 1 to in-maintenance" in seen["node0"]
    assert "approved" in seen["node0"] and "failed" in seen["node0"]
    assert "Why:" in seen["node0"]
    assert seen["filtered"] == ["node-0", "node-2"]
    assert seen["shown"] == "2 of 3 nodes"
