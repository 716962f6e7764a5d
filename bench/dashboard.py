"""The dashboard at fleet scale: 10,000 simulated nodes, the page in a real headless Chromium.

The sim (`edgeagent sim --nodes N --no-node-links`, heartbeats every 60 s) and the dashboard
(`edgeagent dashboard`) run as their own processes; Chromium (Debian's chromium + chromium-driver, driven
by selenium) loads the page; this script changes nodes through the API and reads the page.

Figures (`name value unit`):
- `dashboard_grid_render`: from navigation start to the full grid rendered (all N labelled cells in the DOM
  and two animation frames later, i.e. painted), the page's own `performance.now()`; median of `--loads`
  (the first paint; budget 2 s at 10,000 nodes);
- `dashboard_filter_repaint_p50` / `_max`: a keystroke in the filter box (typing `edge-12`, then erasing it:
  each key narrows or widens the grid) to the frame that shows the narrowed grid: from the input event's
  time to two animation frames after the filter was applied (budget 100 ms);
- `dashboard_change_latency_p50` / `_p90` / `_max`: from the API write changing a node (its pod's
  `UpgradeHeld` set True, as an agent does) to that node's cell changing in the page (the page's
  `Date.now()` when it applied the change; same clock as this process), over `--changes` nodes one by one;
- `dashboard_bytes_per_node_change`: every byte a second stream (this script's own EventSource-like
  reader) received during those changes, divided by the changes: the node frames and the DaemonSet
  summaries they caused (changes `--spacing` apart, so that no two share a summary: the costly case);
  `dashboard_node_frame_bytes`: the node frames alone;
- `dashboard_rss`: the dashboard process's RSS with every pod and node cached and two pages open (budget
  250 MiB). The change latency's budget is 1 s.

    .venv/bin/python bench/dashboard.py [--nodes 10000] [--loads 3] [--changes 40]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import MERGE_PATCH, NAMESPACE, STRATEGIC_PATCH, Sim, note, percentile, report, rss_mb, workdir
from edgeagent.demo.processes import Proc, free_port
from tests.support import browser

JSON = dict[str, Any]
DS_PATH = f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets"
PLANS_PATH = f"/apis/edgeagent.io/v1alpha1/namespaces/{NAMESPACE}/rolloutplans"
CRDS_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
ROOT = Path(__file__).resolve().parent.parent


def manifest() -> JSON:
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "edge-app", "namespace": NAMESPACE, "annotations": {
            "apps.openyurt.io/update-strategy": "OTA"}},
        "spec": {"selector": {"matchLabels": {"app": "edge-app"}}, "updateStrategy": {"type": "OnDelete"},
                 "template": {"metadata": {"labels": {"app": "edge-app"}},
                              "spec": {"terminationGracePeriodSeconds": 1,
                                       "containers": [{"name": "main", "image": "app:1"}]}}},
    }


async def until(probe: Any, timeout: float, what: str, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not await probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


class StreamCounter:
    """Reads /api/stream like a page would and counts what arrives after the first snapshot."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.bytes = 0
        self.node_frames: list[int] = []
        self.counting = False
        self.ready = asyncio.Event()

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(self.url) as response:
            buffer = b""
            async for chunk in response.content.iter_any():
                buffer += chunk
                while b"\n\n" in buffer:
                    frame, buffer = buffer.split(b"\n\n", 1)
                    size = len(frame) + 2
                    if frame.startswith(b"event: snapshot"):
                        self.ready.set()
                        continue
                    if self.counting:
                        self.bytes += size
                        if frame.startswith(b"event: n\n"):
                            self.node_frames.append(size)


def filter_keystrokes(driver: Any, text: str) -> list[float]:
    """Type `text` into the filter one key at a time, then erase it: each key's input event to the painted
    grid (the page's `filterTimings`), in ms."""
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    box = driver.find_element("id", "filter")
    keys = list(text) + [Keys.BACKSPACE] * len(text)
    out: list[float] = []
    script: list[float] = []  # of which the page's script (input event to the grid rebuilt), for the note
    for i, key in enumerate(keys):
        box.send_keys(key)

        def repainted(d: Any, i: int = i) -> Any:
            return d.execute_script("const t = window.filterTimings; return t.length > arguments[0] "
                                    "&& t[arguments[0]];", i)

        timing = WebDriverWait(driver, 30, poll_frequency=0.01).until(repainted, "filter repainted")
        out.append(float(timing["painted"]) - float(timing["start"]))
        script.append(float(timing["applied"]) - float(timing["start"]))
    shown = driver.execute_script("return document.querySelectorAll('#grid .cell:not([hidden])').length")
    assert driver.find_element("id", "filter").get_attribute("value") == "" and int(shown) > 0
    print("# of which the page's script (ms): " + ", ".join(f"{t:.0f}" for t in script), flush=True)
    return out


async def main_async(args: argparse.Namespace) -> None:
    why = browser.missing()
    if why:
        raise SystemExit(f"cannot run: {why}")
    n = args.nodes
    async with workdir("dashboard") as work:
        sim = Sim(work, nodes=n, extra=["--heartbeat-interval", "60", "--node-grace", "600", "--no-node-links",
                                        "--history", str(max(10_000, 30 * n))])
        dash: Proc | None = None
        counter_task: asyncio.Task[None] | None = None
        try:
            await sim.start(timeout=120)
            # Creating a DaemonSet over 10,000 nodes answers only once its pods are written: more than the
            # 30 s the shared helper allows on a busy machine.
            assert sim.http is not None
            await sim.http.close()
            sim.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))
            await sim.request("POST", DS_PATH, manifest())

            async def all_ready() -> bool:
                ds = await sim.request("GET", f"{DS_PATH}/edge-app")
                return bool(int((ds.get("status") or {}).get("numberReady") or 0) == n)

            started = time.monotonic()
            await until(all_ready, 900, f"{n} pods Ready", interval=2)
            note(f"{n} nodes and pods ready after {time.monotonic() - started:.0f} s")
            pods: dict[str, str] = {}
            token = ""
            while True:
                page = await sim.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods?limit=2000"
                                                + (f"&continue={token}" if token else ""))
                for pod in page["items"]:
                    pods[pod["spec"]["nodeName"]] = pod["metadata"]["name"]
                token = str((page.get("metadata") or {}).get("continue") or "")
                if not token:
                    break
            # A new revision rolling, as the controller would show it: wave 2 of 4 (5% of the nodes reached), no
            # pod replaced yet (no controller runs: what is written here stays as written).
            await sim.request("PATCH", f"{DS_PATH}/edge-app", {"spec": {"template": {"spec": {"containers": [
                {"name": "main", "image": "app:2"}]}}}}, MERGE_PATCH)
            path = f"/apis/apps/v1/namespaces/{NAMESPACE}/controllerrevisions"

            async def two_revisions() -> bool:
                return len((await sim.request("GET", path))["items"]) >= 2

            await until(two_revisions, 60, "the second revision")
            newest = max((await sim.request("GET", path))["items"], key=lambda r: int(r.get("revision") or 0))
            revision = str(newest["metadata"]["labels"]["controller-revision-hash"])
            # Its RolloutPlan (the CRD from deploy/, a plan, and the status the controller would have written).
            crd = yaml.safe_load((ROOT / "deploy" / "crd-rolloutplan.yaml").read_text())
            await sim.request("POST", CRDS_PATH, crd)

            async def plans_served() -> bool:
                with contextlib.suppress(Exception):
                    await sim.request("GET", PLANS_PATH)
                    return True
                return False

            await until(plans_served, 60, "rolloutplans served")
            await sim.request("POST", PLANS_PATH, {
                "apiVersion": "edgeagent.io/v1alpha1", "kind": "RolloutPlan", "metadata": {"name": "edge-app"},
                "spec": {"daemonSet": "edge-app", "steps": [1, "5%", "25%", "100%"]}})
            await sim.request("PATCH", f"{PLANS_PATH}/edge-app/status", {"status": {
                "revision": revision, "phase": "Progressing", "wave": 2, "waves": 4,
                "counts": {"nodes": n, "upgraded": 0, "waiting": n, "deferred": 0, "failed": 0},
                "failures": [], "history": [], "conditions": []}}, MERGE_PATCH)

            port = free_port()
            dash = Proc("dashboard", ["dashboard", "--kubeconfig", str(sim.dir / "admin.kubeconfig"),
                                      "--port", str(port), "--log-format", "json", "--log-level", "warning"],
                        work / "dashboard.log")
            url = f"http://127.0.0.1:{port}/"
            started = time.monotonic()
            await dash.start()
            async with aiohttp.ClientSession() as session:
                async def synced() -> bool:
                    with contextlib.suppress(aiohttp.ClientError):
                        async with session.get(url + "api/snapshot") as response:
                            body = await response.json()
                            # ... and the plan read: the card shows wave 2 of 4, as the RolloutPlan's status says.
                            planned = any(d.get("w") == 2 and d.get("n") == 4 for d in body.get("daemonsets", []))
                            return bool(body["health"]["state"] == "ok" and len(body["nodes"]) == n and planned)
                    return False

                await until(synced, 300, "the dashboard's caches synced")
            report("dashboard_sync_time", time.monotonic() - started, "s")

            counter = StreamCounter(url + "api/stream")
            counter_task = asyncio.create_task(counter.run())
            await asyncio.wait_for(counter.ready.wait(), 60)

            with browser.chromium() as driver:
                from selenium.webdriver.support.ui import WebDriverWait

                renders = []
                for _ in range(args.loads):
                    await asyncio.to_thread(driver.get, url)

                    def rendered(d: Any) -> Any:
                        return d.execute_script(
                            "return document.body.getAttribute('data-rendered') === arguments[0] "
                            "&& window.gridRenderedAt;", str(n))

                    value = await asyncio.to_thread(
                        lambda: WebDriverWait(driver, 60, poll_frequency=0.05).until(rendered, "grid rendered"))
                    renders.append(float(value))
                note("grid render per load (ms): " + ", ".join(f"{r:.0f}" for r in renders))
                report("dashboard_grid_render", statistics.median(renders), "ms")
                repaints = await asyncio.to_thread(filter_keystrokes, driver, "edge-12")
                note("filter repaint per keystroke (ms): " + ", ".join(f"{r:.0f}" for r in repaints))
                report("dashboard_filter_repaint_p50", percentile(repaints, 50), "ms")
                report("dashboard_filter_repaint_max", max(repaints), "ms")
                # The cells far down are built as they are scrolled to: the last node's shows at the bottom.
                from edgeagent.fleet.live import natural_key

                last = max(pods, key=natural_key)
                t0 = time.monotonic()
                await asyncio.to_thread(driver.execute_script, "window.scrollTo(0, document.body.scrollHeight);")
                await asyncio.to_thread(lambda: WebDriverWait(driver, 30, poll_frequency=0.02).until(
                    lambda d: d.execute_script("const c = document.querySelector(`[data-node='${arguments[0]}']`);"
                                               "return c && c.textContent === arguments[0];", last),
                    "the last node's cell after scrolling to the end"))
                note(f"scrolled to the end: {last}'s cell shown after {(time.monotonic() - t0) * 1000:.0f} ms")
                await asyncio.to_thread(driver.execute_script, "window.scrollTo(0, 0);")

                counter.counting = True
                latencies = []
                rng = random.Random(20)
                nodes = rng.sample(sorted(pods), args.changes)
                for node in nodes:
                    t0 = time.time()
                    await sim.request("PATCH", f"/api/v1/namespaces/{NAMESPACE}/pods/{pods[node]}/status",
                                      {"status": {"conditions": [{
                                          "type": "UpgradeHeld", "status": "True", "reason": "HeldByOperator",
                                          "message": "benchmark"}]}}, STRATEGIC_PATCH)

                    def changed(d: Any, node: str = node) -> Any:
                        return d.execute_script(
                            "const c = window.fleetChanges.find(x => x[0] === arguments[0] && x[1] === 'h');"
                            "return c ? c[2] : null;", node)

                    wait = WebDriverWait(driver, 30, poll_frequency=0.01)
                    at_ms = await asyncio.to_thread(wait.until, changed, "cell changed")
                    latencies.append(float(at_ms) / 1000 - t0)
                    # Apart enough that each change's DaemonSet summary is sent on its own (the costly case).
                    await asyncio.sleep(args.spacing)
                await asyncio.sleep(1)  # the last DaemonSet summary (sent at most 4 times a second)
                counter.counting = False
                ms = [x * 1000 for x in latencies]
                report("dashboard_change_latency_p50", percentile(ms, 50), "ms")
                report("dashboard_change_latency_p90", percentile(ms, 90), "ms")
                report("dashboard_change_latency_max", max(ms), "ms")
                report("dashboard_bytes_per_node_change", counter.bytes / len(nodes), "B")
                report("dashboard_node_frame_bytes", statistics.mean(counter.node_frames), "B")
                report("dashboard_rss", rss_mb(dash.pid), "MiB")
                report("dashboard_nodes", n, "nodes")
        finally:
            if counter_task is not None:
                counter_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await counter_task
            if dash is not None:
                await dash.terminate(10)
            await sim.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--loads", type=int, default=3)
    parser.add_argument("--changes", type=int, default=40)
    parser.add_argument("--spacing", type=float, default=0.3, help="seconds between node changes")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
