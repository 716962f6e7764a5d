"""The soak's fault schedule: drawn entirely from the seed before the run starts, so a run can be replayed.

Each kind of fault arrives as a Poisson process with its own mean rate (per minute, at full size), and every
random choice it needs (which node, which mode, for how long, which DaemonSet) is drawn here, not while the
run executes: the same seed and sizing give the same list of acts. Timing on a shared machine still varies,
so a replay reproduces the faults, not every interleaving.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]

# Mean arrivals per minute for a full-size run (200 nodes, 30 agents); a smaller fleet scales them down.
RATES: dict[str, float] = {
    "link_cut": 32.0,
    "flap": 5.0,
    "agent_kill": 4.0,
    "leader_kill": 0.75,
    "sim_restart": 0.25,
    "api_burst": 14.0,
    "cred_rotate": 1.5,
    "state_full": 1.5,
    "hold": 5.0,
    "operator_upgrade": 15.0,
    "template": 1.5,
    "bad_version": 0.3,
}
# Kinds whose rate grows with the number of agents (they act on an agent), and with the number of nodes.
_PER_AGENT = frozenset({"agent_kill", "cred_rotate", "state_full", "hold", "operator_upgrade"})
_PER_NODE = frozenset({"link_cut", "flap"})
BURST_KINDS = ("429", "5xx", "slow", "lost")
BURST_SCOPES = ("all", "agents", "controller", "node")


@dataclass(frozen=True)
class Sizing:
    nodes: int = 200
    agents: int = 30
    daemonsets: tuple[str, ...] = ()
    plan_daemonsets: tuple[str, ...] = ()
    # Of those, the OTA ones: each gets a new version in the run's first seconds (make_schedule).
    ota_daemonsets: tuple[str, ...] = ()
    # The in-place ones: each gets a new version in the first seconds too, so a short run rolls them in place.
    inplace_daemonsets: tuple[str, ...] = ()
    # Fleet-wide acts (sim restarts, leader kills, template changes) keep their rate at any size; per-agent and
    # per-node ones scale with the fleet, so a small run is as dense per node as a large one.
    rate_scale: float = 1.0
    kinds: tuple[str, ...] = tuple(RATES)
    extra: JSON = field(default_factory=dict)
    # Per-kind multipliers on top of rate_scale (a short run that must see some rare kind); each kind has its
    # own random stream, so this changes that kind's acts only.
    kind_scale: dict[str, float] = field(default_factory=dict)


def _scale(kind: str, sizing: Sizing) -> float:
    rate = RATES[kind] * sizing.rate_scale * sizing.kind_scale.get(kind, 1.0)
    if kind in _PER_AGENT:
        rate *= sizing.agents / 30
    elif kind in _PER_NODE:
        rate *= sizing.nodes / 200
    return rate


def node_name(index: int) -> str:
    return f"edge-{index}"


def agent_nodes(sizing: Sizing) -> list[str]:
    """The nodes that run a real agent: spread over the fleet (every k-th node), so each zone has some."""
    step = max(1, sizing.nodes // max(1, sizing.agents))
    return [node_name(1 + i * step) for i in range(sizing.agents)]


def _act(rng: random.Random, kind: str, t: float, sizing: Sizing, agents: list[str]) -> JSON:
    nodes = sizing.nodes
    act: JSON = {"t": round(t, 3), "kind": kind}
    if kind == "link_cut":
        act.update(target=node_name(rng.randint(1, nodes)), mode=rng.choice(("refuse", "blackhole")),
                   seconds=round(rng.uniform(2, 25), 2))
    elif kind == "flap":
        act.update(target=node_name(rng.randint(1, nodes)), period=round(rng.uniform(0.5, 2.0), 2),
                   seconds=round(rng.uniform(8, 20), 2), mode=rng.choice(("refuse", "blackhole")))
    elif kind == "agent_kill":
        act.update(target=rng.choice(agents), down=round(rng.uniform(0.5, 5), 2))
    elif kind == "leader_kill":
        act.update(target="leader", down=round(rng.uniform(1, 5), 2))
    elif kind == "sim_restart":
        act.update(target="sim", signal=rng.choice(("TERM", "KILL")), down=round(rng.uniform(0.5, 3), 2))
    elif kind == "api_burst":
        burst = rng.choice(BURST_KINDS)
        scope = rng.choice(BURST_SCOPES)
        act.update(burst=burst, scope=scope, rate=round(rng.uniform(0.2, 0.8), 2), seconds=round(rng.uniform(2, 10), 2))
        if scope == "node":
            act["target"] = rng.choice(agents)
        if burst == "429":
            act["codes"] = [429]
        elif burst == "5xx":
            act["codes"] = rng.choice(([500], [503], [500, 503], [504]))
        elif burst == "slow":
            act["latency"] = round(rng.uniform(0.3, 3.0), 2)
        else:
            act["codes"] = rng.choice(([500], [503], [504]))
            act["verbs"] = rng.choice((["DELETE"], ["POST"], ["POST", "PATCH", "DELETE"]))
    elif kind == "cred_rotate":
        act.update(target=rng.choice(agents))
    elif kind == "state_full":
        act.update(target=rng.choice(agents), seconds=round(rng.uniform(5, 20), 2))
    elif kind == "hold":
        act.update(target=rng.choice(agents), seconds=round(rng.uniform(5, 40), 2), until=rng.random() < 0.3)
    elif kind == "operator_upgrade":
        act.update(target=rng.choice(agents), when_open=rng.random() < 0.5, pick=rng.random())
    elif kind in ("template", "bad_version"):
        act.update(target=rng.choice(sizing.daemonsets + sizing.plan_daemonsets),
                   rollback_after=round(rng.uniform(20, 45), 2))
    return act


def make_schedule(seed: int, seconds: float, sizing: Sizing) -> list[JSON]:
    """Every act of the run, in time order; `t` is seconds after the faults begin."""
    agents = agent_nodes(sizing)
    acts: list[JSON] = []
    for kind in sizing.kinds:
        rate = _scale(kind, sizing)
        if rate <= 0 or (kind in _PER_AGENT and not agents):
            continue
        if kind in ("template", "bad_version") and not (sizing.daemonsets or sizing.plan_daemonsets):
            continue
        stream = random.Random(f"{seed}/{kind}")  # one stream per kind: adding a kind leaves the others alone
        t = stream.expovariate(rate / 60.0)
        while t < seconds:
            acts.append(_act(stream, kind, t, sizing, agents))
            t += stream.expovariate(rate / 60.0)
    acts += opening_versions(seed, seconds, sizing)
    acts.sort(key=lambda a: (a["t"], a["kind"]))
    return acts


def opening_versions(seed: int, seconds: float, sizing: Sizing) -> list[JSON]:
    """A new version of every OTA DaemonSet (and of every in-place one) in the first seconds of the faults.

    Template changes come 1.5 a minute over every DaemonSet, so a short run often gave the OTA ones none: no pod
    needed an upgrade, every operator request was answered 403, and the invariants on accepted requests
    (`requests`, `events-once`) had nothing to check (seeds 79 and 83 at 120 s). With a version pending from the
    start, the agents with maintenance windows keep pods that need an upgrade while their window is shut, and
    operators' requests for those are accepted (now, or queued until the window opens) under the faults. Its
    own random stream: every other act of a seed stays as it was.
    """
    if "template" not in sizing.kinds or "operator_upgrade" not in sizing.kinds:
        return []
    stream = random.Random(f"{seed}/opening")
    latest = max(1.0, min(10.0, seconds / 4))
    acts = [{"t": round(stream.uniform(0.5, latest), 3), "kind": "template", "target": name, "opening": True}
            for name in sorted(sizing.ota_daemonsets)]
    # The in-place DaemonSets' first version change, from a stream of its own (the OTA ones' stay as they were):
    # their rolls run under the link cuts from the start, which is what checker rule 12 is about.
    inplace = random.Random(f"{seed}/opening-inplace")
    return acts + [{"t": round(inplace.uniform(0.5, latest), 3), "kind": "template", "target": name, "opening": True}
                   for name in sorted(sizing.inplace_daemonsets)]


def maintenance_windows(start_epoch: float, faults_seconds: float) -> list[str]:
    """Windows (UTC) that open and close every other minute while faults run, then stay open until the same
    time the next day, so that the fleet can converge afterwards. `HH:MM-HH:MM` as `--maintenance-window`."""
    first = int(start_epoch // 60) + 1
    last = int((start_epoch + faults_seconds) // 60) + 1

    def hhmm(minute: int) -> str:
        minute %= 24 * 60
        return f"{minute // 60:02d}:{minute % 60:02d}"

    windows = [f"{hhmm(m)}-{hhmm(m + 1)}" for m in range(first, last, 2)]
    # From the end of the faults until just before the first window tomorrow (the spec may cross midnight).
    windows.append(f"{hhmm(last)}-{hhmm(first - 1 + 24 * 60)}")
    return windows
