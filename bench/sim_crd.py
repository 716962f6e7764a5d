"""The simulated API server with custom resources (issue 34): 10 CRDs, 10,000 objects of one custom kind.

Figures: the time to list the 10,000 custom objects beside listing 10,000 pods of the same size (JSON bytes; the
widgets carry an annotation to match) from the same server (goal: at
most 2x), the latency of creating and getting one custom object (schema, defaults, CEL on every create), and how
much the server's memory grows per 1,000 custom objects. Server and client share this process and its event loop
on 127.0.0.1, as in sim_throughput.py; objects are created through the Store (the same code path as a POST,
without HTTP), except the sampled creates. Prints `name value unit` lines.

    .venv/bin/python bench/sim_crd.py [--objects 10000] [--crds 10] [--lists 15]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edgeagent.sim.resources import CUSTOM_RESOURCE_DEFINITIONS, PODS, Resource
from edgeagent.sim.server import create_app
from edgeagent.sim.store import Store
from tests.support.crd_widget import widget, widget_crd

JSON = dict[str, Any]


def report(name: str, value: float, unit: str) -> None:
    print(f"{name} {value:.2f} {unit}", flush=True)


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _crd(index: int) -> JSON:
    """The Widget CRD, or a copy of it under another plural/kind (the other CRDs of the registry)."""
    crd = widget_crd()
    if index:
        plural, kind = f"widgets{index}", f"Widget{index}"
        crd["metadata"]["name"] = f"{plural}.example.com"
        crd["spec"]["names"] = {"plural": plural, "kind": kind, "categories": ["all"]}
    return crd


def _pod(i: int) -> JSON:
    return {"metadata": {"name": f"pod-{i:05d}", "namespace": "default", "labels": {"app": "agent"}},
            "spec": {"nodeName": f"edge-{i % 100}", "containers": [{"name": "agent", "image": "registry.local/a:1"}]},
            "status": {"phase": "Running"}}


def _widget(i: int, padding: int = 0) -> JSON:
    """A widget; `padding` characters of annotation make it as big as a stored pod, so that the two lists compare
    the server's work per object rather than the objects' sizes."""
    obj = widget(f"w-{i:05d}", size=("small", "medium", "large")[i % 3], replicas=i % 10, color="blue")
    obj["metadata"]["labels"] = {"app": "widget"}
    if padding > 0:
        obj["metadata"]["annotations"] = {"example.com/notes": "n" * padding}
    return obj


async def _timed_list(session: aiohttp.ClientSession, url: str, count: int, expected: int) -> tuple[list[float], int]:
    """The time of each list (ms), and the size of the last answer (bytes)."""
    times, size = [], 0
    for _ in range(count):
        started = time.perf_counter()
        async with session.get(url) as resp:
            body = await resp.read()
            if resp.status != 200 or body.count(b'"uid"') != expected:
                raise RuntimeError(f"bad list answer from {url}: {resp.status}")
        times.append((time.perf_counter() - started) * 1000)
        size = len(body)
    return times, size


async def main(objects: int, crds: int, lists: int) -> None:
    store = Store()
    for i in range(crds):
        store.create(CUSTOM_RESOURCE_DEFINITIONS, _crd(i))
    widgets = store.registry.resource_for("example.com", "v1", "widgets")
    assert isinstance(widgets, Resource)
    report("crd_count", crds, "crds")
    for i in range(objects):
        store.create(PODS, _pod(i))
    pod_size = len(store.entry(PODS, "default", "pod-00000").item_json())
    plain = store.create(widgets, _widget(objects), namespace="default")
    widget_size = len(json.dumps(plain, separators=(",", ":")))
    store.delete(widgets, "default", plain["metadata"]["name"])
    padding = max(0, pod_size - widget_size - len(',"annotations":{"example.com/notes":""}'))
    gc.collect()
    before = rss_mib()
    for i in range(objects):
        store.create(widgets, _widget(i, padding), namespace="default")
    gc.collect()
    after = rss_mib()
    report("crd_rss_per_1000_objects", (after - before) / (objects / 1000), "MiB")
    report("crd_object_bytes", len(store.entry(widgets, "default", "w-00000").item_json()), "bytes")
    report("crd_pod_bytes", pod_size, "bytes")

    runner = web.AppRunner(create_app(store))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    base = f"http://{host}:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            pods_url = f"{base}/api/v1/namespaces/default/pods"
            widgets_url = f"{base}/apis/example.com/v1/namespaces/default/widgets"
            await _timed_list(session, pods_url, 1, objects)  # warm the serialisation caches of both
            await _timed_list(session, widgets_url, 1, objects)
            pods, pods_size = await _timed_list(session, pods_url, lists, objects)
            custom, custom_size = await _timed_list(session, widgets_url, lists, objects)
            report(f"crd_list_{objects}_pods_bytes", pods_size, "bytes")
            report(f"crd_list_{objects}_custom_bytes", custom_size, "bytes")
            report(f"crd_list_{objects}_pods_p50", statistics.median(pods), "ms")
            report(f"crd_list_{objects}_custom_p50", statistics.median(custom), "ms")
            report("crd_list_ratio_custom_to_pods", statistics.median(custom) / statistics.median(pods), "x")
            creates, gets = [], []
            for i in range(200):
                body = _widget(objects + 1 + i)
                started = time.perf_counter()
                async with session.post(widgets_url, json=body) as resp:
                    await resp.read()
                    if resp.status != 201:
                        raise RuntimeError(f"create answered {resp.status}")
                creates.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                async with session.get(f"{widgets_url}/{body['metadata']['name']}") as resp:
                    await resp.read()
                gets.append((time.perf_counter() - started) * 1000)
            report("crd_create_p50", statistics.median(creates), "ms")
            report("crd_get_p50", statistics.median(gets), "ms")
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--crds", type=int, default=10)
    parser.add_argument("--lists", type=int, default=15)
    args = parser.parse_args()
    asyncio.run(main(args.objects, args.crds, args.lists))
