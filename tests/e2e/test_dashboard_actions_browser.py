"""`edgeagent dashboard --allow-actions` in a real headless Chromium (issue 36): the promote button on a rollout's
card moves the rollout (the real controller acts on the request), and a page from another loopback port that
posts to the button's route (a form, a fetch with a guessed token, a no-cors fetch) moves nothing.

The harness is test_dashboard_browser's: Debian's chromium and chromium-driver through selenium, every call in
a thread while the sim, the controller and the dashboard serve in the test's event loop; waits have deadlines.
The promoted card is saved as a picture (build/test-report/, or $EDGEAGENT_ACTIONS_SCREENSHOT, which `make
screenshot` points at docs/img/dashboard-actions.png).
"""

from __future__ import annotations

import asyncio
import html
import os
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiohttp import web

from edgeagent.kube.client import KubeClient
from tests.conftest import SimFactory
from tests.e2e.test_dashboard_browser import REPORT, js, until
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
from tests.support.rollout_plans import get_plan, plan_state, with_plan
from tests.support.waiting import eventually

__all__ = ["controllers"]  # the fixture, imported so that pytest finds it here

pytestmark = [pytest.mark.skipif(bool(browser.missing()), reason=browser.missing() or "browser present"),
              pytest.mark.xdist_group("chromium")]

JSON = dict[str, Any]
SHOT = Path(os.environ.get("EDGEAGENT_ACTIONS_SCREENSHOT") or REPORT.with_name("dashboard-actions.png"))


@asynccontextmanager
async def attacker_site(target: str) -> AsyncIterator[str]:
    """Another web site on another loopback port, whose page (opened by the user) tries to press promote on the
    dashboard at `target`: a form posted into a hidden frame, a CORS fetch with a guessed token header and a
    no-cors fetch. What the page could observe lands in `window.tried`."""
    action = html.escape(target + "api/actions/default/web/promote", quote=True)
    page = f"""<!doctype html><title>cat pictures</title>
<form method="post" action="{action}" target="sink"><input name="verb" value="promote"></form>
<iframe name="sink"></iframe>
<script>
window.tried = {{}};
const url = {target + "api/actions/default/web/promote"!r};
fetch(url, {{method: "POST", headers: {{"X-Edgeagent-Token": "guessed"}}}})
  .then(r => window.tried.cors = "answered " + r.status, e => window.tried.cors = "blocked");
fetch(url, {{method: "POST", mode: "no-cors", body: "promote"}})
  .then(r => window.tried.noCors = r.type, e => window.tried.noCors = "blocked");
document.forms[0].submit();
window.tried.form = "submitted";
</script>"""

    async def index(request: web.Request) -> web.Response:
        return web.Response(text=page, content_type="text/html")

    app = web.Application()
    app.router.add_get("/", index)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/"
    finally:
        await runner.cleanup()


async def test_the_promote_button_moves_the_rollout_and_another_sites_post_does_not(
        sim_factory: SimFactory, controllers: Controllers) -> None:
    """The real controller rolls a two-wave plan (1 node, then the rest) and bakes an hour after wave 1. A
    page on another loopback port posts to the promote route: the dashboard refuses each request that reaches
    it (a 403, logged), the browser does not even send the one with a custom header, and the plan is untouched.
    Then promote pressed on the card: the card shows the CLI's line, and wave 2 starts."""
    sim = await sim_factory(nodes=4)
    async with await KubeClient.connect(sim.admin_kubeconfig) as admin:
        await controllers.start(sim)
        await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", annotations={
            "apps.openyurt.io/max-unavailable": "4"}))
        await with_plan(admin, "web", {"edgeagent.io/rollout-steps": "1,100%", "edgeagent.io/rollout-bake": "1h"})
        await eventually(lambda: all_running(admin, "web", 4), timeout=30, what="4 pods running")
        await set_image(admin, "web", "nginx:1.20")

        async def baking() -> bool:
            found = await plan_state(admin, "web")
            return found is not None and found["wave"] == 1 and found["phase"] == "baking"

        await eventually(baking, timeout=30, what="wave 1 finished and baking")
        async with dashboard(sim.admin_kubeconfig, allow_actions=True) as url:
            with browser.chromium() as driver:
                await asyncio.to_thread(driver.get, url)
                await until(driver, lambda d: d.find_element("tag name", "body").get_attribute("data-rendered")
                            == "4", "the grid of four nodes")
                buttons = await js(driver, "return Array.from(document.querySelectorAll('.rollout .actions button'))"
                                           ".filter(b => b.offsetParent !== null).map(b => b.textContent);")
                assert buttons == ["promote", "pause", "resume", "abort"]

                # Another site's page, opened in the same browser, tries to press promote.
                before = await get_plan(admin, "web")
                with structlog.testing.capture_logs() as logs:
                    async with attacker_site(url) as elsewhere:
                        await asyncio.to_thread(driver.execute_script, "window.open(arguments[0], 'other');",
                                                elsewhere)
                        dashboard_tab = driver.current_window_handle
                        await asyncio.to_thread(driver.switch_to.window, "other")
                        tried = await until(driver, lambda d: d.execute_script(
                            "const t = window.tried; return t && t.cors && t.noCors && t.form ? t : null;"),
                            "the other site's three attempts")

                        def refused() -> list[MutableMapping[str, Any]]:
                            return [e for e in logs if e.get("event") == "action_refused"]

                        # The form and the no-cors fetch reach the dashboard and are refused, by their Origin.
                        seen = await eventually(lambda: refused() if len(refused()) >= 2 else None, timeout=30,
                                                what="the dashboard refusing the form and the no-cors fetch")
                        await asyncio.to_thread(driver.close)
                        await asyncio.to_thread(driver.switch_to.window, dashboard_tab)
                assert tried["cors"] == "blocked"  # the preflight of the custom header is never granted
                assert tried["noCors"] == "opaque"
                assert all(e["origin"] == elsewhere.rstrip("/") and "not from the dashboard's own page" in e["why"]
                           for e in seen), seen
                assert len(seen) == 2, seen  # the fetch with the token header never went out
                after = await get_plan(admin, "web")
                assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
                assert (await plan_state(admin, "web") or {}).get("wave") == 1

                # The card's own button: the controller ends the bake and starts wave 2.
                await asyncio.to_thread(lambda: driver.find_element(
                    "css selector", ".rollout[data-daemonset='default/web'] button[data-verb='promote']").click())
                answer = await until(driver, lambda d: d.find_element("css selector", ".rollout .answer")
                                     .get_attribute("data-status") and d.find_element("css selector",
                                                                                     ".rollout .answer").text,
                                     "the answer to the press")
                assert answer.startswith('rolloutplan "web" in namespace "default": promote of wave 1/2 requested'), \
                    answer
                assert await js(driver, "return document.querySelector('.rollout .answer')"
                                        ".getAttribute('data-status');") == "200"

                async def second_wave() -> bool:
                    found = await plan_state(admin, "web")
                    return found is not None and found["wave"] == 2

                await eventually(second_wave, timeout=60, what="wave 2 started by the promote")
                await until(driver, lambda d: "wave 2/2" in d.find_element("css selector", ".rollout").text,
                            "wave 2/2 on the card")
                # The card with its buttons and the answer, for the report (and docs/fleet.md, via `make
                # screenshot`).
                await asyncio.to_thread(SHOT.parent.mkdir, parents=True, exist_ok=True)
                card = await asyncio.to_thread(driver.find_element, "css selector", ".rollout")
                assert await asyncio.to_thread(card.screenshot, str(SHOT))

        # Every write the dashboard made is the promote's one PATCH of the plan, made with the user's credentials.
        writes = [(e["verb"], e["path"]) for e in sim.audit.entries
                  if e["userAgent"].startswith("edgeagent-dashboard/") and e["verb"] not in ("GET", "HEAD")]
        assert writes == [("PATCH", "/apis/edgeagent.io/v1alpha1/namespaces/default/rolloutplans/web")]


async def test_a_refused_press_is_shown_as_text(sim_factory: SimFactory) -> None:
    """A press the steering rules refuse (the plan's status names a revision with markup in it): the card shows
    the refusal, the markup as text, never run."""
    from tests.support.rolloutplan_crd import create_plan, install_crd, status, write_status

    sim = await sim_factory(nodes=1)
    xss = '<img src=x onerror="window.pwned=1">'
    async with await KubeClient.connect(sim.admin_kubeconfig) as admin:
        await install_crd(admin)
        from tests.support.fleet_scenario import manifest

        await admin.create("/apis/apps/v1/namespaces/default/daemonsets", manifest())
        await create_plan(admin)
        await write_status(admin, "web", status("5b4499c6c8" + xss, phase="Aborted"))
        async with dashboard(sim.admin_kubeconfig, allow_actions=True) as url:
            with browser.chromium() as driver:
                await asyncio.to_thread(driver.get, url)
                button = ".rollout[data-daemonset='default/web'] button[data-verb='promote']"
                await until(driver, lambda d: d.find_element("css selector", button).is_displayed(),
                            "the promote button")
                await asyncio.to_thread(lambda: driver.find_element("css selector", button).click())
                answer = await until(driver, lambda d: d.find_element("css selector", ".rollout .answer")
                                     .get_attribute("data-status") == "409" and d.find_element(
                                         "css selector", ".rollout .answer").text, "the refusal")
                assert answer == (f"nothing to promote: the rollout of revision 5b4499c6c8{xss} (rolloutplan \"web\" "
                                  'in namespace "default") has ended (phase Aborted)')
                assert await js(driver, "return window.pwned === undefined && "
                                        "document.querySelectorAll('.rollout .answer img').length === 0;")
                assert "refused" in await js(driver, "return document.querySelector('.rollout .answer').className;")
