"""`make bench`: every benchmark, one after the other on this machine, then the ratios and the goals.

Each script runs as its own process and prints `name value unit` lines (and `# ` notes), passed
through as they come; at the end the goals of issues 6, 15, 19, 20 and 34 are checked against the figures. The scripts
run one at a time because the machine has 2 cores: two benchmarks at once would measure each other.
A script that fails or runs past its time limit is reported, the others still run, and the exit code
is 1.

The full run (`make bench`) counts the idle link for 180 s and rolls 10,000 nodes (about 8-10 minutes), then
runs issue 19's rollout plans at 10,000 nodes and the controller at 100,000 nodes (`rollout_scale.py`: the sim
alone takes 20-25 minutes to start 100,000 pods on this 2-core machine, so plan on an hour in all);
`--quick` (`make bench-quick`) counts 60 s and uses 2,000 nodes (20,000 for `rollout_scale.py`).

    .venv/bin/python bench/run_all.py [--quick] [--only NAME,NAME] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@dataclass(frozen=True)
class Script:
    name: str
    args: tuple[str, ...] = ()
    limit: float = 240.0
    quick_args: tuple[str, ...] | None = None  # with --quick: these instead of `args`


SCRIPTS = (
    Script("sim_throughput.py", limit=120),
    Script("agent_http.py", limit=300),
    Script("watch_propagation.py", limit=120),
    Script("offline_start.py", limit=120),
    Script("reconnect_drain.py", limit=180),
    Script("disconnect_detection.py", limit=180),
    Script("idle_link_cost.py", ("--window", "180"), limit=330, quick_args=("--window", "60")),
    Script("reconnect_cost.py", limit=120),
    Script("controller_scale.py", ("--nodes", "10000"), limit=900, quick_args=("--nodes", "2000")),
    Script("rbac_overhead.py", limit=120),
    Script("prepull.py", limit=240),
    # Issue 37: in place against recreate, 200 nodes, a 10 s pull, without and with pre-pull.
    Script("inplace.py", limit=1800, quick_args=("--nodes", "40", "--pull-seconds", "2")),
    # Issue 19: rollout plans at 10,000 nodes (2,000 with --quick) and the controller at 100,000 (20,000).
    Script("rollout_waves.py", ("--nodes", "10000"), limit=2400, quick_args=("--nodes", "2000")),
    Script("rollout_scale.py", ("--nodes", "100000"), limit=4800, quick_args=("--nodes", "20000")),
    # The sim recreating 40 % of a DaemonSet's pods (what rollout_scale's wave 3 -> 4 waits for).
    Script("sim_recreate.py", ("--nodes", "20000"), limit=900, quick_args=("--nodes", "2000")),
    # Issue 20: the dashboard at 10,000 nodes in headless Chromium (skipped, as a failure, where it is missing).
    Script("dashboard.py", ("--nodes", "10000"), limit=900, quick_args=("--nodes", "2000")),
    # Issue 34: 10 CRDs and 10,000 custom objects on the sim.
    Script("sim_crd.py", limit=240),
)


@dataclass(frozen=True)
class Goal:
    text: str
    figure: str
    holds: Callable[[float], bool]


MIB_80 = 80.0
GOALS = (
    Goal("GET /pods at 1,000 pods: agent/bare aiohttp >= 0.8", "get_pods_1000_ratio_agent_to_bare",
         lambda v: v >= 0.8),
    Goal("agent RSS under load at 110 pods <= 80 MiB", "agent_rss_load_110_pods", lambda v: v <= MIB_80),
    Goal("reconnect drain of 100 entries <= 2 s (median)", "reconnect_drain_100_p50", lambda v: v <= 2000),
    Goal("reconnect drain of 100 entries <= 2 s (every trial)", "reconnect_drain_100_max", lambda v: v <= 2000),
    Goal("watch propagation p99 <= 50 ms", "watch_propagation_p99", lambda v: v <= 50),
    # Issue 15.
    Goal("idle link, 110 pods, nothing queued <= 0.1 MB/h", "idle_link_bytes_per_hour", lambda v: v <= 0.1),
    Goal("upgrade during a blackhole answered 202 within --upgrade-timeout + 1 s (4 s)",
         "upgrade_202_during_blackhole_max", lambda v: v <= 4000),
    Goal("blackhole with an entry queued reported within 3 probe intervals (6 s)",
         "disconnect_detect_blackhole_after_queued_max", lambda v: v <= 6000),
    Goal("reconnect after a partition: bytes <= 1.5x the changed objects", "reconnect_bytes_ratio_to_changed",
         lambda v: v <= 1.5),
    Goal("reconnect after a partition: no relist", "reconnect_relists", lambda v: v == 0),
    Goal("controller RSS with every pod cached <= 300 MB", "controller_rss", lambda v: v * 1.048576 <= 300),
    Goal("full OTA no-op reconcile pass <= 150 ms CPU", "controller_reconcile_cpu_ota_noop", lambda v: v <= 150),
    Goal("GET /pods at 110 pods (wrk, pinned): agent/bare >= 0.9", "get_pods_110_ratio_agent_to_bare",
         lambda v: v >= 0.9),
    Goal("agent RSS idle at 110 pods <= 55 MiB", "agent_rss_idle_110_pods", lambda v: v <= 55),
    Goal("agent RSS idle at 1,000 pods <= 75 MiB", "agent_rss_idle_1000_pods", lambda v: v <= 75),
    # Issue 19.
    # (Round 3's "a roll with a plan <= 1.1x the same roll without" is withdrawn by issue 35: at the default 10 %
    # budget 1.1x is the arithmetic floor itself; rollout_waves.py reports the ratio beside its floor.)
    Goal("wave finished -> first delete of the next wave: median <= 1 s", "rollout_wave_gap_p50",
         lambda v: v <= 1000),
    Goal("a plan adds a bounded number of writes (<= 10 per wave, never per node)", "rollout_plan_extra_writes",
         lambda v: v <= 40),
    Goal("controller RSS at 100,000 nodes x 1 DaemonSet <= 1 GiB", "rollout_scale_rss", lambda v: v <= 1024),
    Goal("controller RSS at 100,000 nodes after every wave change <= 1 GiB", "rollout_scale_rss_end",
         lambda v: v <= 1024),
    Goal("controller peak RSS at 100,000 nodes up to then <= 1 GiB", "rollout_scale_rss_peak",
         lambda v: v <= 1024),
    Goal("OTA no-op pass at 100,000 nodes <= 300 ms CPU", "rollout_scale_cpu_ota_noop", lambda v: v <= 300),
    Goal("wave planning pass at 100,000 nodes <= 300 ms CPU", "rollout_scale_cpu_wave_planning",
         lambda v: v <= 300),
    Goal("ranking 100,000 nodes into waves <= 300 ms CPU", "rollout_scale_cpu_rank", lambda v: v <= 300),
    Goal("wave-planning pass deriving every pod's facts again at 100,000 nodes <= 300 ms CPU",
         "rollout_scale_cpu_wave_planning_start_over", lambda v: v <= 300),
    Goal("first wave-planning pass after a restart (every pod's facts, the nodes ranked) at 100,000 nodes "
         "<= 300 ms CPU", "rollout_scale_cpu_wave_planning_first_pass", lambda v: v <= 300),
    Goal("planning of every pass of every wave change (each writes at most 10,000 conditions) at 100,000 nodes "
         "<= 300 ms CPU", "rollout_scale_cpu_wave_change_max", lambda v: v <= 300),
    Goal("planning of every pass that starts a new revision at 100,000 nodes <= 300 ms CPU",
         "rollout_scale_cpu_flag_pass_max", lambda v: v <= 300),
    # Issue 20 (at 10,000 nodes; 2,000 with --quick).
    Goal("dashboard: navigation to the full grid rendered <= 2 s", "dashboard_grid_render", lambda v: v <= 2000),
    Goal("sim: listing 10,000 custom objects <= 2x listing 10,000 pods", "crd_list_ratio_custom_to_pods",
         lambda v: v <= 2),
    Goal("dashboard: node change in the API to its cell, median <= 1 s", "dashboard_change_latency_p50",
         lambda v: v <= 1000),
    Goal("dashboard RSS <= 250 MiB", "dashboard_rss", lambda v: v <= 250),
    Goal("dashboard: bytes pushed per node change <= 300 B", "dashboard_bytes_per_node_change",
         lambda v: v <= 300),
)


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {kib / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return (f"{os.cpu_count()} cores ({cpu}){memory}, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


class Report(list[str]):
    """The run's lines: printed as they come (progress on a long run) and kept for --out."""

    def emit(self, line: str) -> None:
        print(line, flush=True)
        self.append(line)


async def run_script(script: Script, figures: dict[str, tuple[float, str]], out: Report, quick: bool) -> bool:
    path = HERE / script.name
    args = script.quick_args if quick and script.quick_args is not None else script.args
    out.emit(f"# --- {script.name} {' '.join(args)}".rstrip())
    started = time.monotonic()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = await asyncio.create_subprocess_exec(sys.executable, str(path), *args, cwd=str(ROOT), env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert proc.stdout is not None
    tail: list[str] = []

    async def pump() -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            parts = line.split()
            if len(parts) == 3 and _is_number(parts[1]):
                figures[parts[0]] = (float(parts[1]), parts[2])
                out.emit(line)
            elif line.startswith("#"):
                out.emit(line)
            else:
                tail.append(line)  # logs and tracebacks: shown only if the script fails

    try:
        await asyncio.wait_for(asyncio.gather(pump(), proc.wait()), script.limit)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        out.emit(f"# FAILED {script.name}: still running after {script.limit:.0f} s, killed")
        return False
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        print("\n".join(tail[-30:]), flush=True)
        out.emit(f"# FAILED {script.name}: exit code {proc.returncode} after {elapsed:.0f} s")
        return False
    out.emit(f"# {script.name} took {elapsed:.0f} s")
    return True


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def goals(figures: dict[str, tuple[float, str]]) -> list[str]:
    lines = ["# --- goals (issues 6, 15 and 19)"]
    for goal in GOALS:
        found = figures.get(goal.figure)
        if found is None:
            lines.append(f"# goal NOT MEASURED: {goal.text} ({goal.figure} missing)")
            continue
        verdict = "met" if goal.holds(found[0]) else "NOT met"
        lines.append(f"# goal {verdict}: {goal.text} — {goal.figure} = {found[0]:.3f} {found[1]}")
    return lines


async def main_async(only: set[str], quick: bool) -> tuple[int, list[str]]:
    out = Report()
    out.emit(f"# machine: {machine()}")
    out.emit("# all traffic on 127.0.0.1; sim, agent and load generator are separate processes sharing these cores")
    out.emit(f"# load average at start: {_load()} (other work on the machine skews every figure)")
    figures: dict[str, tuple[float, str]] = {}
    started = time.monotonic()
    ok = True
    for script in SCRIPTS:
        if only and script.name.removesuffix(".py") not in only:
            continue
        ok = await run_script(script, figures, out, quick) and ok
    total = time.monotonic() - started
    for line in [*goals(figures), f"# load average at end: {_load()}", f"bench_total {total:.1f} s"]:
        out.emit(line)
    return 0 if ok else 1, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="comma-separated script names without .py")
    parser.add_argument("--out", type=Path, default=None, help="also write every figure line to this file")
    parser.add_argument("--quick", action="store_true",
                        help="a shorter run (idle link counted 60 s, controller at 2,000 nodes)")
    args = parser.parse_args()
    only = {name.strip().removesuffix(".py") for name in args.only.split(",") if name.strip()}
    code, out = asyncio.run(main_async(only, args.quick))
    if args.out is not None:
        args.out.write_text("\n".join(out) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
