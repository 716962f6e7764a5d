"""`GET /pods` throughput and latency at 110 and 1,000 pods, against a bare aiohttp app; agent RSS.

For each pod count: the agent (a child process, default flags) syncs a node holding that many pods
from the sim (another child process); its RSS is read idle; then `loadgen.py` (a third process: 32
connections, 1 s warm-up, 10 s measured) loads `GET /pods` while the agent's RSS is sampled every
0.1 s; then the same generator loads `bare_server.py` serving the exact bytes the agent served.

    .venv/bin/python bench/agent_http.py [--duration 10] [--connections 32] [--counts 110,1000]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Agent, Sim, bench_pod, median, note, report, rss_mb, workdir
from edgeagent.demo_procs import child_env, free_port

HERE = Path(__file__).resolve().parent


async def loadgen(url: str, connections: int, duration: float, expect_bytes: int) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(HERE / "loadgen.py"), url, "--connections", str(connections),
        "--duration", str(duration), "--expect-bytes", str(expect_bytes),
        stdout=asyncio.subprocess.PIPE, env=child_env())
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"loadgen failed with exit code {proc.returncode}")
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


async def load_with_rss(pid: int, url: str, connections: int, duration: float,
                        expect_bytes: int) -> tuple[dict[str, Any], list[float]]:
    samples: list[float] = []
    task = asyncio.create_task(loadgen(url, connections, duration, expect_bytes))
    while not task.done():
        samples.append(rss_mb(pid))
        await asyncio.wait({task}, timeout=0.1)
    return task.result(), samples


async def bare_reference(body_file: Path, connections: int, duration: float, expect_bytes: int) -> dict[str, Any]:
    port = free_port()
    server = await asyncio.create_subprocess_exec(sys.executable, str(HERE / "bare_server.py"), str(body_file),
                                                  str(port), env=child_env())
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(300):
                try:
                    async with http.get(f"http://127.0.0.1:{port}/pods") as resp:
                        if resp.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.02)
            else:
                raise RuntimeError("bare server did not start")
        return await loadgen(f"http://127.0.0.1:{port}/pods", connections, duration, expect_bytes)
    finally:
        server.terminate()
        await server.wait()


def _report_load(prefix: str, result: dict[str, Any]) -> None:
    report(f"{prefix}_rps", result["rps"], "requests/s")
    report(f"{prefix}_p50", result["p50_ms"], "ms")
    report(f"{prefix}_p99", result["p99_ms"], "ms")
    if result["errors"]:
        report(f"{prefix}_errors", result["errors"], "requests")


async def bench(counts: list[int], duration: float, connections: int) -> None:
    note(f"load generator: bench/loadgen.py (aiohttp client pool, own process), {connections} connections, "
         f"{duration:g} s measured after 1 s warm-up")
    async with workdir("http") as work:
        sim = Sim(work, nodes=len(counts))
        await sim.start()
        try:
            for index, count in enumerate(counts):
                node = f"edge-{index + 1}"
                await sim.create_pods([bench_pod(f"app-{node}-{i:04d}", node) for i in range(count)])
                agent = Agent(work, sim, node)
                await agent.start()
                try:
                    await agent.wait_pods(count)
                    # Let the kubelet sim finish starting the pods and the snapshot writes settle.
                    await agent.wait_for("pods running", functools.partial(_all_running, agent, count), timeout=60)
                    await asyncio.sleep(2.0)
                    idle = [rss_mb(agent.pid)]
                    for _ in range(4):
                        await asyncio.sleep(0.25)
                        idle.append(rss_mb(agent.pid))
                    report(f"agent_rss_idle_{count}_pods", median(idle), "MiB")
                    status, body = await agent.get("/pods")
                    assert status == 200
                    body_file = work / f"pods-{count}.json"
                    body_file.write_bytes(body)
                    report(f"get_pods_{count}_body", len(body) / 1024, "KiB")
                    result, samples = await load_with_rss(agent.pid, agent.url + "/pods", connections, duration,
                                                          len(body))
                    _report_load(f"agent_get_pods_{count}", result)
                    report(f"agent_rss_load_{count}_pods", max(samples), "MiB")
                    status, after = await agent.get("/pods")
                    if after != body:
                        note(f"the pod list changed during the {count}-pod run (bodies of other sizes count as errors)")
                finally:
                    await agent.stop()
                bare = await bare_reference(body_file, connections, duration, len(body))
                _report_load(f"bare_get_pods_{count}", bare)
                report(f"get_pods_{count}_ratio_agent_to_bare", result["rps"] / bare["rps"], "ratio")
        finally:
            await sim.stop()


async def _all_running(agent: Agent, count: int) -> bool:
    status, body = await agent.get("/pods")
    if status != 200:
        return False
    items = json.loads(body)["items"]
    return len(items) == count and all((p.get("status") or {}).get("phase") == "Running" for p in items)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--counts", default="110,1000", help="pod counts, comma-separated")
    args = parser.parse_args()
    asyncio.run(bench([int(c) for c in args.counts.split(",")], args.duration, args.connections))
    return 0


if __name__ == "__main__":
    sys.exit(main())
