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
from hypothesis import strategies as hs

from edgeagent.durations import format_duration
from edgeagent.kube.client import CONTENT_MERGE_PATCH, KubeClient
from edgeagent.rollout import plan_source
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
from tests.support.rollout_plans import PLANS_PATH, get_plan, plan_state, with_plan
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
                assert await asyncio.to_thread(visible_cells, driver) == NODES  # each cell names its node
                # Right counts per state: one node in each.
                assert await asyncio.to_thread(counts, driver) == {**{c: "1" for c in "ugwhof"}, "s": "0"}
                for node, code in {"edge-1": "h", "edge-2": "o", "edge-3": "f", "edge-4": "w", "edge-5": "g",
                                   "edge-6": "u"}.items():
                    assert await asyncio.to_thread(cell_state(node), driver) == code, node
                card = await asyncio.to_thread(lambda: driver.find_element("css selector", ".rollout").text)
                assert "default/web" in card and world.revision in card and "1/6 up to date" in card
                assert f"revision {world.revision} (nginx:1.20)" in card  # the image beside the hash
                await js(driver, "window.sameDocument = true;")
                before = await asyncio.to_thread(bar, driver)

                # Details on click: the held node's reason and next window.
                await asyncio.to_thread(lambda: driver.find_element("css selector", "[data-node='edge-1']").click())
                details = await until(driver, lambda d: d.find_element("id", "details").is_displayed()
                                      and d.find_element("id", "details-fields").text, "edge-1's details")
                assert "OutsideMaintenanceWindow: " + WINDOW_MESSAGE in details
                assert "2026-11-28 02:00 CET" in details
                assert "(nginx:1.19.4) (older revision)" in details  # its pod's revision with its image

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
            "apps.openyurt.io/max-unavailable": "4"}))
        await with_plan(admin, "web", {"edgeagent.io/rollout-steps": "1,100%", "edgeagent.io/rollout-bake": "1h"})
        await eventually(lambda: all_running(admin, "web", 4), timeout=30, what="4 pods running")
        await set_image(admin, "web", "nginx:1.20")

        async def baking() -> bool:
            found = await plan_state(admin, "web")
            return found is not None and found["wave"] == 1 and found["phase"] == "baking"

        await eventually(baking, timeout=30, what="wave 1 finished and baking")
        async with dashboard(sim.admin_kubeconfig) as url:
            with browser.chromium() as driver:
                await asyncio.to_thread(driver.get, url)
                await until(driver, lambda d: d.find_element("tag name", "body").get_attribute("data-rendered")
                            == "4", "the grid of four nodes")
                await js(driver, "window.sameDocument = true;")
                card = await asyncio.to_thread(lambda: driver.find_element("css selector", ".rollout").text)
                assert "wave 1/2" in card and "phase baking" in card.lower()
                # Without --allow-actions: no token in the page and no button on the card (the plan is steered
                # with `edgeagent rollout promote` below).
                assert await js(driver, "return document.querySelector('meta[name=\"edgeagent-token\"]').content "
                                        "+ document.querySelectorAll('.rollout button').length;") == "0"
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


def visible_cells(driver: Any) -> list[str]:
    """The names the grid shows, in page order: the text of every cell a person can see."""
    return [str(n) for n in driver.execute_script(
        "return Array.from(document.querySelectorAll('#grid .cell'))"
        ".filter(c => c.offsetParent !== null).map(c => c.textContent);")]


def groups(driver: Any) -> dict[str, list[str]]:
    """Each group section's title -> the names of its cells."""
    found = driver.execute_script(
        "return Array.from(document.querySelectorAll('#grid .group')).map(s => [s.dataset.group, "
        "Array.from(s.querySelectorAll('.cell')).map(c => c.textContent)]);")
    return {str(title): [str(n) for n in names] for title, names in found}


async def test_names_filter_grouping_by_wave_and_a_rolled_back_version_named(sim_factory: SimFactory) -> None:
    """Eight nodes on two sites, a plan rolling `1,50%,100%` by site: every cell shows its node's name; the
    text box and the state chips narrow the grid, and the URL keeps them; grouping by wave gives the
    planner's waves; after a rollback the card names the revision that failed, with its image, in red."""
    from tests.support.fleet_scenario import V1, V2, current_hash, manifest

    names = [f"edge-{i}" for i in range(1, 9)]
    sim = await sim_factory(node_names=names)
    sites = {n: "north" if i % 2 else "south" for i, n in enumerate(names, 1)}
    async with await KubeClient.connect(sim.admin_kubeconfig) as admin:
        for name, site in sites.items():
            await admin.patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": {"site": site}}}, CONTENT_MERGE_PATCH)
        web = manifest()
        await admin.create(f"/apis/apps/v1/namespaces/{NS}/daemonsets", web)
        await with_plan(admin, "web", {"edgeagent.io/rollout-steps": "1,50%,100%",
                                       "edgeagent.io/rollout-group-label": "site"})
        plan_status = f"{PLANS_PATH}/web/status"
        await eventually(lambda: _pods_on(admin, len(names)), timeout=30, what="a web pod on every node")
        old = await current_hash(admin)
        ds_path = f"/apis/apps/v1/namespaces/{NS}/daemonsets/web"
        await admin.patch(ds_path, {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": V2}]}}}},
                          CONTENT_MERGE_PATCH)
        new = await eventually(lambda: _new_hash(admin, old), timeout=20, what="the second revision")
        rolling: JSON = {"revision": new, "stableRevision": old, "wave": 1, "waves": 2, "phase": "Progressing",
                   "counts": {"nodes": len(names), "upgraded": 0, "deferred": 0, "failed": 0}, "failures": []}
        await admin.patch(plan_status, {"status": rolling}, CONTENT_MERGE_PATCH)  # as the controller writes it
        plan = plan_source.plan_of(await admin.get(ds_path), plan_source.index([await get_plan(admin, "web")]))
        assert plan is not None
        ranking = plan_source.ranking(plan, rolling, {n: {"site": s} for n, s in sites.items()})
        # By site: a whole site per wave, so 1,50%,100% gives two waves of four (the planner's rule).
        assert ranking is not None and ranking.waves == 2 and len(ranking.nodes_of_wave(1)) == 4

        async with dashboard(sim.admin_kubeconfig) as url:
            with browser.chromium() as driver:
                await asyncio.to_thread(driver.get, url)
                await until(driver, lambda d: d.find_element("tag name", "body").get_attribute("data-rendered")
                            == str(len(names)), "the grid of eight nodes")
                # Names visible, in a person's order, without hovering or clicking.
                assert await asyncio.to_thread(visible_cells, driver) == names
                card = await asyncio.to_thread(lambda: driver.find_element("css selector", ".rollout").text)
                assert f"revision {new} ({V2})" in card and f"stable {old} ({V1})" in card
                assert "Rolled back" not in card

                # The filter narrows the grid: a part of the name, then a label, then a state chip.
                box = await asyncio.to_thread(driver.find_element, "id", "filter")
                await asyncio.to_thread(box.send_keys, "edge-1")
                await until(driver, lambda d: visible_cells(d) == ["edge-1"], "only edge-1 shown")
                assert "1 shown" in await asyncio.to_thread(lambda: driver.find_element("id", "node-count").text)
                await asyncio.to_thread(box.clear)
                await asyncio.to_thread(box.send_keys, "site=north")
                north = [n for n in names if sites[n] == "north"]
                await until(driver, lambda d: visible_cells(d) == north, "the north site's nodes")
                # Wave 1's site is upgrading, the other waits: the chip for "waiting" keeps the waiting ones.
                first = ranking.order[0]
                await asyncio.to_thread(lambda: driver.find_element("id", "chip-w").click())
                waiting_north = [n for n in north if ranking.wave_of(n) == 2]
                assert waiting_north == north  # the planner puts the north site in wave 2
                await until(driver, lambda d: visible_cells(d) == waiting_north, "north's waiting nodes")
                # The URL keeps the filter: a fresh page opened on it shows the same narrowed grid.
                shared = await js(driver, "return location.href;")
                assert "q=site%3Dnorth" in shared and "s=w" in shared
                await asyncio.to_thread(driver.get, "about:blank")
                await asyncio.to_thread(driver.get, shared)
                await until(driver, lambda d: d.find_element("tag name", "body").get_attribute("data-rendered")
                            == str(len(names)) and visible_cells(d) == waiting_north, "the shared view")
                assert await js(driver, "return document.getElementById('filter').value") == "site=north"

                # Grouping by wave: the planner's waves, each a section headed by its counts.
                await asyncio.to_thread(driver.get, url)
                await until(driver, lambda d: d.find_element("tag name", "body").get_attribute("data-rendered")
                            == str(len(names)), "the page again")
                await until(driver, lambda d: d.find_elements("css selector", f"#group option[value='wave:{NS}/web']"),
                            "the waves among the grouping choices")
                await js(driver, "const s = document.getElementById('group'); s.value = arguments[0];"
                                 "s.dispatchEvent(new Event('change'));", f"wave:{NS}/web")
                expected = {f"wave {k}": sorted(ranking.nodes_of_wave(k), key=_natural) for k in (1, 2)}
                found = await until(driver, lambda d: groups(d) if list(groups(d)) == list(expected) else None,
                                    "two wave groups")
                assert found == expected
                heads = await js(driver, "return Array.from(document.querySelectorAll('.group-head'))"
                                         ".map(h => h.textContent);")
                assert heads[0].startswith("wave 1") and "4 nodes · 4 upgrading" in heads[0]
                assert heads[1].startswith("wave 2") and "4 nodes · 4 waiting for its wave" in heads[1]
                assert "g=wave%3Adefault%2Fweb" in await js(driver, "return location.href;")
                # A click on a group's name folds it: its cells are no longer shown, the other group's are.
                await asyncio.to_thread(lambda: driver.find_element("css selector", ".group .toggle").click())
                await until(driver, lambda d: visible_cells(d) == expected["wave 2"], "wave 1 folded")
                # Grouping by the plan's group label.
                await js(driver, "const s = document.getElementById('group'); s.value = 'label:site';"
                                 "s.dispatchEvent(new Event('change'));")
                await until(driver, lambda d: groups(d) == {"site=north": north,
                                                            "site=south": [n for n in names if n not in north]},
                            "a group per site")

                # Rolled back: the template is back on the old revision, and the card names the one that failed.
                await admin.patch(ds_path, {"spec": {"template": {"spec": {"containers": [
                    {"name": "main", "image": V1}]}}}}, CONTENT_MERGE_PATCH)
                await eventually(lambda: _is_current(admin, old), timeout=20, what="the old revision current again")
                back = {**rolling, "phase": "RolledBack", "failures": [{"node": first, "reason": "CrashLoopBackOff"}],
                        "counts": {**rolling["counts"], "failed": 1}}
                await admin.patch(plan_status, {"status": back}, CONTENT_MERGE_PATCH)
                verdict = await until(driver, lambda d: d.find_element("css selector", ".rollout .verdict").text,
                                      "the rolled-back verdict")
                assert verdict == (f"Rolled back: revision {new} ({V2}) failed on 1 node ({first}: CrashLoopBackOff);"
                                   f" nodes back on revision {old} ({V1}).")
                assert "bad" in await asyncio.to_thread(
                    lambda: driver.find_element("css selector", ".rollout").get_attribute("class"))


def _natural(name: str) -> tuple[Any, ...]:
    from edgeagent.fleet.live import natural_key

    return natural_key(name)


async def _pods_on(admin: KubeClient, n: int) -> bool:
    return len(await live_pods(admin)) == n


async def _new_hash(admin: KubeClient, old: str | None) -> str | None:
    from tests.support.fleet_scenario import current_hash

    found = await current_hash(admin)
    return found if found and found != old else None


async def _is_current(admin: KubeClient, revision: str | None) -> bool:
    from tests.support.fleet_scenario import current_hash

    return revision is not None and await current_hash(admin) == revision


_KEYS = hs.sampled_from(["site", "zone", "a"])
_VALUES = hs.sampled_from(["1", "north", "a-b", ""])
_WORD = hs.one_of(hs.sampled_from(["edge", "EDGE-1", "12", "-", "site", "b=1", "=x", "!=y"]),
                  hs.builds(lambda k, v: f"{k}={v}", _KEYS, _VALUES),
                  hs.builds(lambda k, v: f"{k}!={v}", _KEYS, _VALUES),
                  hs.text(alphabet="abeg-12=!", min_size=1, max_size=6))
_LABELS = hs.dictionaries(_KEYS, _VALUES, max_size=3)


def _oracle(query: str, pressed: str, node: str, code: str, labels: dict[str, str]) -> bool:
    """What docs/fleet.md says the filter does: every word holds (a name part, key=value, key!=value; names
    without regard to case) and the state is one of the pressed chips (none pressed: any)."""
    if pressed and code not in pressed:
        return False
    for word in query.split():
        if "!=" in word and word.index("!=") > 0:
            key, value = word.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in word and word.index("=") > 0:
            key, value = word.split("=", 1)
            if labels.get(key) != value:
                return False
        elif word.lower() not in node.lower():
            return False
    return True


async def test_the_filter_keeps_exactly_the_nodes_its_words_and_chips_describe(sim: SimCluster) -> None:
    """The page's filter (compileFilter) against the rule docs/fleet.md states, over generated queries,
    names, labels and pressed chips: hypothesis draws the cases, the page answers them in one call each."""
    from hypothesis import HealthCheck, given, settings

    cases_strategy = hs.lists(hs.tuples(hs.lists(_WORD, max_size=3).map(" ".join), hs.text(alphabet="ugwhsof",
                                        max_size=2), hs.sampled_from(["edge-1", "Edge-12", "site-a", "b=1"]),
                                        hs.sampled_from("ugwhsof"), _LABELS), min_size=1, max_size=40)
    async with dashboard(sim.admin_kubeconfig) as url:
        with browser.chromium() as driver:
            await asyncio.to_thread(driver.get, url)
            await until(driver, lambda d: d.execute_script("return typeof window.compileFilter === 'function'"),
                        "the page's script")

            @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
            @given(cases=cases_strategy)
            def check(cases: list[tuple[str, str, str, str, dict[str, str]]]) -> None:
                answers = driver.execute_script(
                    "return arguments[0].map(([q, s, node, code, labels]) => "
                    "window.compileFilter(q, new Set(s.split('')))(node, code, labels));", cases)
                assert answers == [_oracle(*case) for case in cases]

            await asyncio.to_thread(check)
