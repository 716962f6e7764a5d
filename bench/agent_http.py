"""`GET /pods` throughput and latency at 110 and 1,000 pods, against a bare aiohttp app; agent RSS.

For each pod count: the agent (a child process, default flags) syncs a node holding that many pods
from the sim (another child process), and its RSS is read idle. `bare_server.py` then starts,
serving the exact bytes the agent served. `loadgen.py` (a third process, 32 connections) loads the
two in turn: 5 alternating slices of 2 s each (after 0.5 s of warm-up per slice), 10 s measured per
server in all, so that a change in other load on the machine hits both alike instead of skewing the
ratio. The agent's RSS is sampled every 0.1 s while it is loaded.

With `--generator wrk` (the default) the load comes from wrk (Debian package `wrk`, installed by the
script when it runs as root, else it says how), one thread pinned to one core while the agent and the
bare app are pinned to the other: 20 pairs of 1 s runs (agent, then bare) per pod count after 1 s of
warm-up each; every response's size is checked against the body. The ratio is total requests over
total requests. Short alternation because this machine (a shared VM) has slow spells of a few seconds
that hit whichever server is loaded at the time: 5 pairs of 4 s, the same 20 s per server, put whole
spells into one side and gave 0.93-1.00 for one build, 20 pairs of 1 s gave 0.97-1.03 (docs/dev/benchmarks-history.md).
`--generator python` is the old aiohttp client pool below, which saturates before either server and
compresses the ratio toward 1.

`--middleware-baseline` adds a third server to each round: the bare app with one pass-through app
middleware, which shows what merely having a middleware costs (why the agent has none).

    .venv/bin/python bench/agent_http.py [--generator wrk] [--pairs 20] [--seconds 1] [--counts 110,1000]
                                         [--middleware-baseline]
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

from bench import wrk
from bench.common import Agent, Sim, bench_pod, median, note, percentile, report, rss_mb, workdir
from edgeagent.demo.processes import child_env, free_port

HERE = Path(__file__).resolve().parent
WARMUP = 0.5


async def loadgen(url: str, connections: int, duration: float, expect_bytes: int) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(HERE / "loadgen.py"), url, "--connections", str(connections),
        "--duration", str(duration), "--warmup", str(WARMUP), "--expect-bytes", str(expect_bytes), "--raw",
        stdout=asyncio.subprocess.PIPE, env=child_env())
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"loadgen failed with exit code {proc.returncode}")
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


class Totals:
    """Slices of one server's load, added up."""

    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.seconds = 0.0
        self.latencies: list[float] = []

    def add(self, result: dict[str, Any]) -> None:
        self.requests += int(result["requests"])
        self.errors += int(result["errors"])
        self.seconds += float(result["duration"])
        self.latencies += result["latencies_ms"]

    def report(self, prefix: str) -> float:
        rps = self.requests / self.seconds
        report(f"{prefix}_rps", rps, "requests/s")
        report(f"{prefix}_p50", median(self.latencies), "ms")
        report(f"{prefix}_p99", percentile(self.latencies, 99), "ms")
        if self.errors:
            report(f"{prefix}_errors", self.errors, "requests")
        return rps


async def start_bare(body_file: Path, *flags: str) -> tuple[asyncio.subprocess.Process, str]:
    port = free_port()
    server = await asyncio.create_subprocess_exec(sys.executable, str(HERE / "bare_server.py"), str(body_file),
                                                  str(port), *flags, env=child_env())
    url = f"http://127.0.0.1:{port}/pods"
    async with aiohttp.ClientSession() as http:
        for _ in range(500):
            try:
                async with http.get(url) as resp:
                    if resp.status == 200:
                        return server, url
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.02)
    server.terminate()
    await server.wait()
    raise RuntimeError("bare server did not start")


async def settled_body(count: int, agent: Agent, work: Path) -> tuple[bytes, Path]:
    """Once the agent serves `count` Running pods and has settled: its idle RSS is reported, and the
    `/pods` body it serves is returned and written to a file for the bare app to serve."""
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
    return body, body_file


async def measure(count: int, agent: Agent, work: Path, duration: float, slices: int, connections: int) -> None:
    body, body_file = await settled_body(count, agent, work)
    bare, bare_url = await start_bare(body_file)
    agent_totals, bare_totals = Totals(), Totals()
    samples: list[float] = []
    try:
        for _ in range(slices):
            task = asyncio.create_task(loadgen(agent.url + "/pods", connections, duration / slices, len(body)))
            while not task.done():
                samples.append(rss_mb(agent.pid))
                await asyncio.wait({task}, timeout=0.1)
            agent_totals.add(task.result())
            bare_totals.add(await loadgen(bare_url, connections, duration / slices, len(body)))
    finally:
        bare.terminate()
        await bare.wait()
    agent_rps = agent_totals.report(f"agent_get_pods_{count}")
    report(f"agent_rss_load_{count}_pods", max(samples), "MiB")
    bare_rps = bare_totals.report(f"bare_get_pods_{count}")
    report(f"get_pods_{count}_ratio_agent_to_bare", agent_rps / bare_rps, "ratio")
    _, after = await agent.get("/pods")
    if after != body:
        note(f"the pod list changed during the {count}-pod run (bodies of other sizes count as errors)")


async def measure_wrk(count: int, agent: Agent, sim: Sim, work: Path, pairs: int, seconds: float,
                      connections: int, middleware_baseline: bool) -> None:
    """`pairs` times (agent run, bare run) of `seconds` each with wrk on one core, the server on the other.

    `middleware_baseline`: a third server in each round, the bare app plus one pass-through middleware.
    """
    binary = wrk.ensure()
    pinning = wrk.cores()
    body, body_file = await settled_body(count, agent, work)
    bare, bare_url = await start_bare(body_file)
    servers = [bare]
    urls = {"agent": agent.url + "/pods", "bare": bare_url}
    if middleware_baseline:
        with_middleware, urls["middleware"] = await start_bare(body_file, "--middleware")
        servers.append(with_middleware)
    client_core = server_core = None
    if pinning is not None:
        client_core, server_core = pinning
        for pid in (agent.pid, *(server.pid for server in servers)):
            wrk.pin(pid, server_core)
        wrk.pin(sim.proc.pid, client_core)  # idle meanwhile (the agent serves from its cache)
    runs: dict[str, list[wrk.Run]] = {name: [] for name in urls}
    samples: list[float] = []
    try:
        for url in urls.values():  # warm-up: connections, caches, the allocator
            await wrk.run(binary, url, duration=1, connections=connections, core=client_core)
        for _ in range(pairs):
            for name, url in urls.items():
                task = asyncio.create_task(wrk.run(binary, url, duration=seconds, connections=connections,
                                                   core=client_core))
                while not task.done():
                    if name == "agent":
                        samples.append(rss_mb(agent.pid))
                    await asyncio.wait({task}, timeout=0.1)
                result = task.result()
                per_request = result.read_bytes / max(1, result.requests)
                if result.errors or abs(per_request - len(body)) > 0.02 * len(body) + 512:
                    raise RuntimeError(f"{name}: {result.errors} errors, {per_request:.0f} B per response for a "
                                       f"{len(body)} B body")
                runs[name].append(result)
    finally:
        for server in servers:
            server.terminate()
            await server.wait()
    for name, results in runs.items():
        prefix = f"{name}_get_pods_{count}"
        rps = sum(r.requests for r in results) / sum(r.seconds for r in results)
        report(f"{prefix}_rps", rps, "requests/s")
        report(f"{prefix}_p50", median([r.p50_ms for r in results]), "ms")
        report(f"{prefix}_p99", max(r.p99_ms for r in results), "ms")
    ratios = [a.rps / b.rps for a, b in zip(runs["agent"], runs["bare"], strict=True)]
    note(f"{count} pods: agent/bare per pair: {', '.join(f'{r:.3f}' for r in ratios)}")
    report(f"get_pods_{count}_ratio_median_of_pairs", median(ratios), "ratio")
    report(f"get_pods_{count}_ratio_agent_to_bare",
           sum(r.requests for r in runs["agent"]) / sum(r.requests for r in runs["bare"]), "ratio")
    if middleware_baseline:
        report(f"get_pods_{count}_ratio_middleware_to_bare",
               sum(r.requests for r in runs["middleware"]) / sum(r.requests for r in runs["bare"]), "ratio")
    report(f"agent_rss_load_{count}_pods", max(samples), "MiB")


async def bench(counts: list[int], duration: float, slices: int, connections: int, generator: str,
                pairs: int, seconds: float, middleware_baseline: bool = False) -> None:
    if generator == "wrk":
        wrk.ensure()
        pinning = wrk.cores()
        where = f"wrk pinned to core {pinning[0]}, servers to core {pinning[1]}" if pinning else "unpinned (1 core)"
        note(f"load generator: wrk -t1 -c{connections}, {where}; {pairs} pairs of {seconds:g} s runs "
             f"(agent, then bare aiohttp{', then bare aiohttp with a middleware' if middleware_baseline else ''}) "
             "per pod count, after 1 s of warm-up each")
    else:
        note(f"load generator: bench/loadgen.py (aiohttp client pool, own process), {connections} connections, "
             f"{duration:g} s measured per server in {slices} alternating slices")
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
                    if generator == "wrk":
                        await measure_wrk(count, agent, sim, work, pairs, seconds, connections,
                                          middleware_baseline)
                    else:
                        await measure(count, agent, work, duration, slices, connections)
                finally:
                    await agent.stop()
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
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per server")
    parser.add_argument("--slices", type=int, default=5, help="alternations between agent and bare app")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--counts", default="110,1000", help="pod counts, comma-separated")
    parser.add_argument("--generator", choices=("wrk", "python"), default="wrk",
                        help="wrk (Debian package, pinned) or the bench's own Python loadgen.py")
    parser.add_argument("--pairs", type=int, default=20, help="wrk: agent/bare run pairs")
    parser.add_argument("--seconds", type=float, default=1.0, help="wrk: seconds per run")
    parser.add_argument("--middleware-baseline", action="store_true",
                        help="wrk: also load the bare app with one pass-through middleware (what any middleware costs)")
    args = parser.parse_args()
    try:
        asyncio.run(bench([int(c) for c in args.counts.split(",")], args.duration, args.slices, args.connections,
                          args.generator, args.pairs, args.seconds, args.middleware_baseline))
    except wrk.WrkMissing as exc:
        print(f"agent_http.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
