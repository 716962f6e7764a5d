"""`make soak SECONDS=N SEED=S`: a seeded fault campaign against a simulated fleet, judged by the checker.

One sim process, two leader-elected controllers, a real `edgeagent run` on some nodes (the controller alone
handles the rest), several DaemonSets; a schedule drawn from the seed cuts and flaps links, kills agents,
the leader and the sim, bursts 429/5xx/slow/lost answers, rotates credentials, fills state directories
up, holds and releases nodes, sends operators' upgrades and changes templates (bad versions too).
Then the faults stop and the fleet must converge. Exit 0 only with zero violations.

Prints a summary and, as every bench here, `name value unit` lines. Only loopback is touched.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.soak.harness import Soak, SoakConfig


def parse(argv: list[str]) -> SoakConfig:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=600.0, help="how long faults are injected")
    parser.add_argument("--seed", type=int, default=1, help="the schedule's seed (same seed: same faults)")
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--agents", type=int, default=30, help="nodes with a real agent process")
    parser.add_argument("--convergence-bound", type=float, default=300.0,
                        help="seconds the fleet may take to converge after the last fault")
    parser.add_argument("--rate-scale", type=float, default=1.0, help="multiply every fault rate")
    parser.add_argument("--workdir", type=Path, help="keep everything here (default: a temporary directory)")
    parser.add_argument("--sim-port-range", default="12000-15999",
                        help="the sim's --port-range: ports no other sim on the machine draws (their default is 20000 "
                        "and up; the one-minute soak in make test uses 16000-19999), so its restarts find them free")
    parser.add_argument("--keep", action="store_true", help="keep the workdir even when the run passes")
    args = parser.parse_args(argv)
    if args.agents > args.nodes:
        parser.error("--agents: at most --nodes")
    return SoakConfig(seconds=args.seconds, seed=args.seed, nodes=args.nodes, agents=args.agents,
                      convergence_bound=args.convergence_bound, rate_scale=args.rate_scale, workdir=args.workdir,
                      keep=args.keep or args.workdir is not None, sim_port_range=args.sim_port_range)


def main(argv: list[str] | None = None) -> int:
    cfg = parse(sys.argv[1:] if argv is None else argv)
    soak = Soak(cfg)
    history, result = asyncio.run(soak.run())
    kinds = soak.faults_by_kind()
    total = sum(n for k, n in kinds.items() if k != "flap")
    print(f"soak_faults_total {total} faults")
    for name, n in result.checked.items():
        print(f"soak_checked_{name.replace('-', '_')} {n} facts")
    print(f"soak_violations {len(result.violations)} violations")
    if history.converged_at is not None and history.faults_stopped_at is not None:
        print(f"soak_convergence {history.converged_at - history.faults_stopped_at:.1f} s")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
