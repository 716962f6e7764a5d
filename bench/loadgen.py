"""HTTP load generator: a pool of aiohttp clients hammering one URL, run as its own process.

Why our own instead of wrk: it needs nothing outside the project's Python environment, and it reads
every body completely and checks its size, so a fast error page cannot pass for throughput. Being
Python, it costs more CPU per request than wrk; on this 2-core machine it takes one core while the
server under test takes the other, so the same generator is used for the agent and for the bare
aiohttp reference, and the ratio between the two is the figure that matters.

    .venv/bin/python bench/loadgen.py URL [--connections 32] [--duration 10] [--warmup 1] [--expect-bytes N]

Prints one JSON object: requests, errors, duration, rps, p50_ms, p99_ms, bytes (and with --raw, every
latency in ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import aiohttp


def _percentile(ordered: list[float], q: float) -> float:
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


async def run(url: str, connections: int, duration: float, warmup: float, expect_bytes: int | None,
              raw: bool = False) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0
    received = 0
    connector = aiohttp.TCPConnector(limit=connections, force_close=False)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.monotonic()
        measure_from = start + warmup
        stop_at = measure_from + duration

        async def worker() -> None:
            nonlocal errors, received
            while True:
                began = time.perf_counter()
                now = time.monotonic()
                if now >= stop_at:
                    return
                try:
                    async with session.get(url) as resp:
                        body = await resp.read()
                        good = resp.status == 200 and (expect_bytes is None or len(body) == expect_bytes)
                except (aiohttp.ClientError, TimeoutError):
                    good, body = False, b""
                finished = time.perf_counter()
                if now < measure_from:
                    continue
                if good:
                    latencies.append(finished - began)
                    received += len(body)
                else:
                    errors += 1

        async with asyncio.TaskGroup() as group:
            for _ in range(connections):
                group.create_task(worker())
    latencies.sort()
    result: dict[str, Any] = {
        "requests": len(latencies),
        "errors": errors,
        "duration": duration,
        "rps": len(latencies) / duration,
        "p50_ms": _percentile(latencies, 50) * 1000,
        "p99_ms": _percentile(latencies, 99) * 1000,
        "bytes": received,
    }
    if raw:
        result["latencies_ms"] = [round(x * 1000, 3) for x in latencies]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of load before measuring")
    parser.add_argument("--expect-bytes", type=int, default=None, help="a body of another size is an error")
    parser.add_argument("--raw", action="store_true", help="also print every latency (latencies_ms)")
    args = parser.parse_args()
    result = asyncio.run(run(args.url, args.connections, args.duration, args.warmup, args.expect_bytes, args.raw))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
