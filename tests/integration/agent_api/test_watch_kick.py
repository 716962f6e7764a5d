"""A watch in backoff is resumed as soon as a probe proves the API answers again.

A sim (or API server) restart shorter than the link monitor's hysteresis never counts as a cut link, so the
"link connected" transition that used to wake the informer never happens; the watch then sat out its backoff
(up to 10 s) while the API answered probes. Seen as a flaky 10 s resync deadline in the sim-restart test.
"""

from __future__ import annotations

import time
from pathlib import Path

import aiohttp

from tests.integration.agent_api.conftest import NODE, AgentFactory, World, write_kubeconfig
from tests.support.hook_proxy import HookProxy
from tests.support.waiting import eventually

FAILURES = 7  # the informer's backoff after these, without a kick, is 5-10 s (0.2 s doubling, jittered)


async def test_answered_probes_resume_a_watch_waiting_in_backoff(
        tmp_path: Path, world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession,
        hook_proxy: HookProxy) -> None:
    failing = hook_proxy.answer(lambda r: r.method == "GET" and r.path == "/api/v1/pods", 500, "InternalError",
                                "etcdserver: leader changed", times=FAILURES)
    agent = await agent_factory(kubeconfig=write_kubeconfig(tmp_path / "proxy.kubeconfig", hook_proxy.url))
    await eventually(lambda: failing.hits >= FAILURES, timeout=30, what="the pod list/watch failing")
    recovered_from = time.monotonic()
    pod = await world.pod()

    async def cached() -> bool:
        async with http.get(agent.url + "/pods") as response:
            names = {p["metadata"]["name"] for p in (await response.json())["items"]}
        return pod["metadata"]["name"] in names

    # Probes run every 0.1 s while the watch is unhealthy: the next one that is answered resumes the watch.
    await eventually(cached, timeout=4, what="the watch resumed by an answered probe, not after its backoff")
    assert agent.link is not None and agent.link.connected
    print(f"resynced {time.monotonic() - recovered_from:.2f} s after the last failure on {NODE}")
