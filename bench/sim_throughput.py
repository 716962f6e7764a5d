"""Throughput of the simulated API server on its hot paths: 110-pod lists and watch fan-out.

A node's worth of pods (110, the kubelet default maximum) listed over and over is what re-listing
agents do after a cut link; 50 watchers on the pods collection is a fleet of agents watching at once.
Everything runs in this process on 127.0.0.1 (server and clients share one event loop and one core,
so the figures are a lower bound for the server alone). Prints `name value unit` lines.

    .venv/bin/python bench/sim_throughput.py [--duration 5] [--watchers 50] [--events 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edgeagent.sim.persist import StateFile
from edgeagent.sim.resources import PODS
from edgeagent.sim.server import create_app
from edgeagent.sim.store import Store

MERGE = "application/merge-patch+json"


def _pod(i: int) -> dict[str, object]:
    return {
        "metadata": {
            "name": f"agent-{i:03d}",
            "namespace": "default",
            "labels": {"app": "agent", "controller-revision-hash": "5d8f7c9b4"},
        },
        "spec": {
            "nodeName": f"edge-{i % 10}",
            "containers": [
                {
                    "name": "agent",
                    "image": "registry.local/agent:1.2.3",
                    "env": [{"name": "NODE_NAME", "value": f"edge-{i % 10}"}],
                    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                }
            ],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}],
        },
        "status": {
            "phase": "Running",
            "podIP": f"10.0.{i // 250}.{i % 250}",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"},
            ],
        },
    }


def report(name: str, value: float, unit: str) -> None:
    print(f"{name} {value:.1f} {unit}", flush=True)


async def bench_list(url: str, duration: float, concurrency: int) -> None:
    latencies: list[float] = []
    deadline = time.monotonic() + duration
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            while time.monotonic() < deadline:
                started = time.perf_counter()
                async with session.get(url + "/api/v1/namespaces/default/pods", params={"limit": "500"}) as resp:
                    body = await resp.read()
                    if resp.status != 200 or body.count(b'"nodeName"') != 110:
                        raise RuntimeError(f"bad list answer: {resp.status}")
                latencies.append(time.perf_counter() - started)

        started = time.monotonic()
        async with asyncio.TaskGroup() as group:
            for _ in range(concurrency):
                group.create_task(worker())
        elapsed = time.monotonic() - started
    report("sim_list_110_pods", len(latencies) / elapsed, "requests/s")
    report("sim_list_110_pods_p50", statistics.median(latencies) * 1000, "ms")


async def bench_fanout(store: Store, url: str, watchers: int, events: int) -> None:
    """Every watcher must receive every event; the rate is deliveries per second, end to end."""
    start_rv = store.resource_version
    received = [0] * watchers
    all_done = asyncio.Event()
    all_connected = asyncio.Event()
    connected = 0
    connector = aiohttp.TCPConnector(limit=watchers + 1)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def watcher(index: int) -> None:
            nonlocal connected
            params = {"watch": "1", "resourceVersion": str(start_rv), "timeoutSeconds": "120"}
            async with session.get(url + "/api/v1/namespaces/default/pods", params=params) as resp:
                # Headers arrive only after the server subscribed this watch to the store.
                connected += 1
                if connected == watchers:
                    all_connected.set()
                async for chunk in resp.content.iter_any():
                    received[index] += chunk.count(b"\n")
                    if received[index] >= events:
                        break
            if all(n >= events for n in received):
                all_done.set()

        tasks = [asyncio.create_task(watcher(i)) for i in range(watchers)]
        await asyncio.wait_for(all_connected.wait(), timeout=30)
        started = time.monotonic()
        names = [f"agent-{i:03d}" for i in range(110)]
        for n in range(events):
            store.patch(PODS, "default", names[n % 110], {"metadata": {"labels": {"seq": str(n)}}}, MERGE)
            if n % 20 == 19:
                await asyncio.sleep(0)  # let the server stream while the writer keeps going
        write_elapsed = time.monotonic() - started
        await asyncio.wait_for(all_done.wait(), timeout=120)
        elapsed = time.monotonic() - started
        for task in tasks:
            await task
    report("sim_store_patch", events / write_elapsed, "writes/s")
    report(f"sim_watch_fanout_{watchers}_watchers", events * watchers / elapsed, "events/s")
    report(f"sim_watch_fanout_{watchers}_watchers_per_watcher", events / elapsed, "events/s")


def _timed_patches(store: Store, events: int) -> float:
    for i in range(110):
        store.create(PODS, _pod(i))
    names = [f"agent-{i:03d}" for i in range(110)]
    started = time.monotonic()
    for n in range(events):
        store.patch(PODS, "default", names[n % 110], {"metadata": {"labels": {"seq": str(n)}}}, MERGE)
    return events / (time.monotonic() - started)


def bench_persisted_writes(events: int) -> None:
    """Store writes alone (no watchers), in memory and written through to the state file as `sim --dir` runs."""
    report("sim_store_patch_bare", _timed_patches(Store(), events), "writes/s")
    with tempfile.TemporaryDirectory(prefix="sim-bench-") as tmp:
        store = Store()
        state = StateFile(Path(tmp))
        try:
            state.save_all(store)
            store.persist = state.record
            rate = _timed_patches(store, events)
        finally:
            state.close()
    report("sim_store_patch_persisted", rate, "writes/s")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of list load")
    parser.add_argument("--concurrency", type=int, default=16, help="concurrent list clients")
    parser.add_argument("--watchers", type=int, default=50)
    parser.add_argument("--events", type=int, default=2000, help="pod modifications every watcher must receive")
    args = parser.parse_args()

    store = Store()
    for i in range(110):
        store.create(PODS, _pod(i))
    runner = web.AppRunner(create_app(store), access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    url = f"http://{host}:{port}"
    try:
        await bench_list(url, args.duration, args.concurrency)
        await bench_fanout(store, url, args.watchers, args.events)
        bench_persisted_writes(args.events)
    finally:
        await runner.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
