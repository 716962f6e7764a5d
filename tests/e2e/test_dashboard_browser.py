"""`edgeagent dashboard` in a real headless Chromium (Debian's chromium + chromium-driver, driven by selenium).

The sim and the dashboard run in the test's event loop; every selenium call goes through a thread so they
keep serving while the browser waits. Waits are WebDriverWait conditions with deadlines, never sleeps.
A screenshot of the page is saved for the test report (build/test-report/, or $EDGEAGENT_SCREENSHOT, which
`make screenshot` points at docs/img/dashboard.png).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from edgeagent.durations import format_duration
from edgeagent.fleet import plan_source
from edgeagent.kube.client import CONTENT_MERGE_PATCH, KubeClient
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.integration.controller.conftest import (
    Controllers,
    all_running,
    controllers,
    create_daemonset,
    daemonset_manifest,
    set_image,
)
from tests.support import browser
from tests.support.dashboard_server import dashboard
from tests.support.fleet_scenario import (
    NODES,
    NS,
    WINDOW_MESSAGE,
    agent_event,
    live_pods,
    mixed_fleet,
    post_sim,
    replace_pod,
    set_condition,
)
from tests.support.hook_proxy import HookProxy
from tests.support.waiting import eventually

__all__ = ["controllers"]  # the fixture, imported so that pytest finds it here

# One Chromium at a time (xdist_group: `make test` runs them on one worker): each takes a core while it renders.
pytestmark = [pytest.mark.skipif(bool(browser.missing()), reason=browser.missing() or "browser present"),
              pytest.mark.xdist_group("chromium")]

REPO = Path(__file__).resolve().parents[2]
REPORT = Path(os.environ.get("EDGEAGENT_SCREENSHOT") or REPO / "build" / "test-report" / "dashboard.png")
WAIT = 30.0
T = TypeVar("T")
JSON = dict[str, Any]

XSS = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'


async def until(driver: Any, condition: Callable[[Any], T | None], what: str, timeout: float = WAIT) -> T:
    """WebDriverWait in a thread: the condition's first truthy value, or a failure naming `what`."""
    from selenium.webdriver.support.ui import WebDriverWait

    def wait() -> T:
        result = WebDriverWait(driver, timeout, poll_frequency=0.05).until(condition, message=what)
        assert result is not None  # until() returns only a truthy value
        return result

    return await asyncio.to_thread(wait)


async def js(driver: Any, script: str, *args: Any) -> Any:
    return await asyncio.to_thread(driver.execute_script, script, *args)


def cell_state(node: str) -> Callable[[Any], str | None]:
    def probe(driver: Any) -> str | None:
        value = driver.execute_script(
            "const c = document.querySelector(`[data-node='${arguments[0]}']`); return c && c.dataset.state;", node)
        return str(value) if value else None
    return probe


def counts(driver: Any) -> dict[str, str]:
    return {code: driver.find_element("id", f"count-{code}").text for code in "ugwhsof"}


def bar(driver: Any) -> dict[str, float]:
    element = driver.find_element("css selector", ".rollout .bar")
    return {"done": float(element.get_attribute("data-done")), "reached": float(element.get_attribute("data-reached"))}


async def test_dashboard_shows_the_fleet_and_follows_it_live(sim_factory: SimFactory) -> None:
    sim = await sim_factory(node_names=NODES)
    async with await KubeClient.connect(sim.admin_kubeconfig) as admin:
        world = await mixed_fleet(sim, admin)
        async with dashboard(sim.admin_kubeconfig) as url:
            with browser.chromium() as driver:
                await asyncio.to_thread(driver.get, url)
                await until(driver, lambda d: d.find_element("tag name", "body").get_attribute("data-rendered")
                            == str(len(NODES)), "the grid of six nodes")
                # Right counts per state: one node in each.
                assert await asyncio.to_thread(counts, driver) == {**{c: "1" for c in "ugwhof"}, "s": "0"}
                for node, code in {"edge-1": "h", "edge-2": "o", "edge-3": "f", "edge-4": "w", "edge-5": "g",
                                   "edge-6": "u"}.items():
                    assert await asyncio.to_thread(cell_state(node), driver) == code, node
                card = await asyncio.to_thread(lambda: driver.find_element("css selector", ".rollout").text)
                assert "default/web" in card and world.revision in card and "1/6 up to date" in card
                await js(driver, "window.sameDocument = true;")
                before = await asyncio.to_thread(bar, driver)

                # Details on click: the held node's reason and next window.
                await asyncio.to_thread(lambda: driver.find_element("css selector", "[data-node='edge-1']").click())
                details = await until(driver, lambda d: d.find_element("id", "details").is_displayed()
                                      and d.find_element("id", "details-fields").text, "edge-1's details")
                assert "OutsideMaintenanceWindow: " + WINDOW_MESSAGE in details
                assert "2026-11-28 02:00 CET" in details

                # The picture for the report (and the README, via `make screenshot`): the fleet docs/fleet.md's
                # example describes (one node in each state), edge-1's details open.
                await asyncio.to_thread(REPORT.parent.mkdir, parents=True, exist_ok=True)
                await asyncio.to_thread(driver.save_screenshot, str(REPORT))
                assert (await asyncio.to_thread(REPORT.stat)).st_size > 0

                # A cut link turns the cell offline, without a reload.
                await post_sim(sim, "/sim/v1/nodes/edge-5/disconnect")
                await until(driver, lambda d: cell_state("edge-5")(d) == "o", "edge-5's cell offline")
                assert await js(driver, "return window.sameDocument === true;")
                assert (await asyncio.to_thread(counts, driver))["o"] == "2"

                # The next wave is promoted: edge-4 may move (the controller flips its PodNeedUpgrade), then its
                # pod is replaced; the bar's reached and done parts move.
                pods = await live_pods(admin)
                await set_condition(admin, pods["edge-4"], {"type": "PodNeedUpgrade", "status": "True",
                                                            "reason": "", "message": f"controllerrevision: "
                                                                                     f"{world.revision}"})
                await until(driver, lambda d: bar(d)["reached"] > before["reached"], "the reached part to grow")
                await replace_pod(admin, "edge-4", world.revision)
                await until(driver, lambda d: bar(d)["done"] > before["done"], "the done part to grow")
                assert await js(driver, "return window.sameDocument === true;")

                # Whatever the cluster says is shown as text, never run as markup.
                await agent_event(admin, XSS, "edge-3", "UpgradeFailed", "boom " + XSS)
                row: str = await until(driver, lambda d: str(d.find_element("id", "events").text)
                                       if XSS in d.find_element("id", "events").text else None,
                                       "the Event with markup in it")
                assert "boom " + XSS in row
                assert await js(driver, "return window.pwned === undefined "
                                        "&& document.querySelectorAll('#events script, #events img').length === 0;")

        # Read-only: the dashboard sent no write request to the API server.
        writes = [e for e in sim.audit.entries if e["userAgent"].startswith("edgeagent-dashboard/")
                  and e["verb"] not in ("GET", "HEAD")]
        reads = [e for e in sim.audit.entries if e["userAgent"].startswith("edgeagent-dashboard/")]
        assert reads and writes == []


async def test_page_says_what_to_check_when_the_api_server_is_unreachable_or_refuses(
        sim_factory: SimFactory, tmp_path: Path) -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sim = await sim_factory(nodes=1, authorization="rbac")
    admin_config = sim.admin_kubeconfig.read_text()
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(admin_config.replace(sim.url, f"https://127.0.0.1:{port}"))
    refused = tmp_path / "refused.kubeconfig"
    refused.write_text(_with_token(admin_config, "not-a-valid-token"))
    with browser.chromium() as driver:
        async with dashboard(dead) as url:
            await asyncio.to_thread(driver.get, url)
            text = await until(driver, lambda d: d.find_element("id", "problem").is_displayed()
                               and d.find_element("id", "problem").text, "the unreachable page")
            assert "The API server cannot be reached" in text
            assert f"127.0.0.1:{port}" in text and "is running" in text
            assert not await asyncio.to_thread(lambda: driver.find_element("id", "main").is_displayed())
        async with dashboard(refused) as url:
            await asyncio.to_thread(driver.get, url)
            text = await until(driver, lambda d: d.find_element("id", "problem").is_displayed()
                               and d.find_element("id", "problem").text, "the credentials-refused page")
            assert "refused the dashboard's credentials" in text and "401" in text
            assert "has not expired" in text


def _with_token(kubeconfig: str, token: str) -> str:
    """The admin kubeconfig with its client certificate swapped for a bearer token the server does not know."""
    import yaml

    doc = yaml.safe_load(kubeconfig)
    for user in doc["users"]:
        user["user"] = {"token": token}
    return json.dumps(doc)


async def test_bound_to_loopback_by_default_and_other_hosts_are_refused(sim: SimCluster) -> None:
    import aiohttp

    async with dashboard(sim.admin_kubeconfig) as url:
        assert url.startswith("http://127.0.0.1:")
        async with aiohttp.ClientSession() as session:
            async with session.get(url, headers={"Host": "attacker.example"}) as response:
                assert response.status == 403
            async with session.post(url) as response:
                assert response.status == 405
            async with session.get(url) as response:
                assert response.status == 200
                assert "script-src 'self'" in response.headers["Content-Security-Policy"]


async def test_dashboard_follows_a_daemonset_patched_after_the_page_opened(sim: SimCluster, admin: KubeClient) -> None:
    """A DaemonSet created while the page is open appears, and its removal takes its card away."""
    from tests.support.fleet_scenario import manifest

    async with dashboard(sim.admin_kubeconfig) as url:
        with browser.chromium() as driver:
            await asyncio.to_thread(driver.get, url)
            await until(driver, lambda d: d.find_element("id", "no-daemonsets").is_displayed(), "the empty note")
            await admin.create(f"/apis/apps/v1/namespaces/{NS}/daemonsets", manifest("late"))
            await until(driver, lambda d: "default/late" in d.find_element("id", "rollouts").text, "late's card")
            await admin.patch(f"/apis/apps/v1/namespaces/{NS}/daemonsets/late", {"metadata": {"annotations": {
                "apps.openyurt.io/update-strategy": None}}}, CONTENT_MERGE_PATCH)
            await until(driver, lambda d: d.find_element("id", "no-daemonsets").is_displayed(), "late's card gone")


async def test_progress_bar_moves_when_the_next_wave_is_promoted(sim_factory: SimFactory,
                                                                 controllers: Controllers) -> None:
    """The real controller rolls a two-wave plan (1 node, then the rest) and bakes for an hour after wave 1;
    `edgeagent rollout promote` starts wave 2 and the page's bar follows, with no reload."""
    sim = await sim_factory(nodes=4)
    async with await KubeClient.connect(sim.admin_kubeconfig) as admin:
        await controllers.start(sim)
        await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", annotations={
            "edgeagent.io/rollout-steps": "1,100%", "edgeagent.io/rollout-bake": "1h",
            "apps.openyurt.io/max-unavailable": "4"}))
        await eventually(lambda: all_running(admin, "web", 4), timeout=30, what="4 pods running")
        await set_image(admin, "web", "nginx:1.20")

        async def baking() -> bool:
            found = plan_source.status_of(await admin.get(f"/apis/apps/v1/namespaces/{NS}/daemonsets/web"))
            return found is not None and found["wave"] == 1 and found["phase"] == "baking"

        await eventually(baking, timeout=30, what="wave 1 finished and baking")
        async with dashboard(sim.admin_kubeconfig) as url:
            with browser.chromium() as driver:
                await asyncio.to_thread(driver.get, url)
                await until(driver, lambda d: d.find_element("tag name", "body").get_attribute("data-rendered")
                            == "4", "the grid of four nodes")
                await js(driver, "window.sameDocument = true;")
                card = await asyncio.to_thread(lambda: driver.find_element("css selector", ".rollout").text)
                assert "wave 1/2" in card and "phase baking" in card
                # The bake left reads as `rollout status` and `fleet -o wide` print it (issue 38 item 10).
                assert re.search(r"bake left (59m(\d{1,2}s)?|1h)\b", card), card
                samples = [-3, 0, 0.4, 0.5, 1.5, 59, 60, 61, 3599.5, 3600, 5400, 86399, 86400, 90061, 10**7]
                assert await js(driver, "return arguments[0].map(duration);", samples) == [
                    format_duration(x) for x in samples]
                assert await asyncio.to_thread(bar, driver) == {"done": 25.0, "reached": 25.0}
                assert (await asyncio.to_thread(counts, driver))["w"] == "3"

                proc = await asyncio.create_subprocess_exec(
                    str(Path(sys.executable).parent / "edgeagent"), "rollout", "promote", "web",
                    "--kubeconfig", str(sim.admin_kubeconfig), stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE)
                _, err = await asyncio.wait_for(proc.communicate(), 60)
                assert proc.returncode == 0, err.decode()

                await until(driver, lambda d: bar(d)["reached"] == 100.0, "the reached part at 100%")
                await until(driver, lambda d: bar(d)["done"] == 100.0, "every node done", timeout=60)
                await until(driver, lambda d: "wave 2/2" in d.find_element("css selector", ".rollout").text,
                            "wave 2/2 on the card")
                assert await js(driver, "return window.sameDocument === true;")


async def test_the_last_known_fleet_stays_marked_stale_when_the_api_server_goes_away(sim_factory: SimFactory) -> None:
    sim = await sim_factory(nodes=3)
    async with dashboard(sim.admin_kubeconfig) as url:
        with browser.chromium() as driver:
            await asyncio.to_thread(driver.get, url)
            await until(driver, lambda d: d.find_element("tag name", "body").get_attribute("data-rendered") == "3"
                        and d.find_element("tag name", "body").get_attribute("data-health") == "ok", "the page live")
            assert await js(driver, "return document.body.dataset.stale") == "false"
            await sim.stop()  # the API server is gone; the dashboard keeps serving its page
            text = await until(driver, lambda d: d.find_element("id", "problem").is_displayed()
                               and d.find_element("id", "problem").text, "the unreachable page")
            assert "The API server cannot be reached" in text and sim.url.removeprefix("http://") in text
            # The fleet as last seen is still there, marked stale.
            assert await js(driver, "return document.body.dataset.stale") == "true"
            assert await asyncio.to_thread(lambda: driver.find_element("id", "main").is_displayed())
            banner = await asyncio.to_thread(lambda: driver.find_element("id", "stale").text)
            assert banner.startswith("Stale: the fleet as last seen at ")
            assert await js(driver, "return document.querySelectorAll('#grid .cell').length") == 3


async def test_markup_in_an_api_error_is_shown_as_text_on_the_problem_page(sim: SimCluster, tmp_path: Path) -> None:
    """The API server's error message is the cluster's text too: the problem page shows it, never runs it."""
    proxy = HookProxy(sim.url)
    await proxy.start()
    try:
        proxy.answer(lambda request: request.path == "/api/v1/pods", 403, "Forbidden", "pods is forbidden: " + XSS)
        kubeconfig = tmp_path / "proxied.kubeconfig"
        kubeconfig.write_text(sim.admin_kubeconfig.read_text().replace(sim.url, proxy.url))
        async with dashboard(kubeconfig) as url:
            with browser.chromium() as driver:
                await asyncio.to_thread(driver.get, url)
                text = await until(driver, lambda d: d.find_element("id", "problem").is_displayed()
                                   and d.find_element("id", "problem").text, "the forbidden page")
                assert "a permission is missing" in text and "list and watch pods" in text
                assert "pods is forbidden: " + XSS in text
                assert await js(driver, "return window.pwned === undefined "
                                        "&& document.querySelectorAll('#problem script, #problem img').length === 0;")
    finally:
        await proxy.stop()
