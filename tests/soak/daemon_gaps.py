"""Rule 12 of the soak checker (`inplace`): through an in-place upgrade a node is without a running container of
the DaemonSet only for the container's own restart, never for a link outage.

The harness samples what every node really runs (`GET /sim/v1/containers`: the kubelet's view, which goes on
while the node's link is cut, not the API's, which freezes) and keeps, per in-place DaemonSet and node, only
the samples where the node's container changed (`ContainerLog`). The checker finds each stretch of samples
in which the node ran no container of the DaemonSet and judges it against the restart's own duration: the
image's pull (zero when pre-pulled) and the container's start, plus an allowance for a loaded machine. A
stretch longer than that is a violation, and its report says whether the node's link was cut meanwhile.

Errs towards silence, as the other rules do, where the samples cannot tell:
- a stretch is measured from inside: from the last non-running sample's start back to the first one's
  answer, the least it can have lasted;
- a stretch is cut in two where the sampler saw nothing for longer than `maxHole` (the sampler stalled, or the
  sim was down): the container may have run in between;
- a stretch that shows a bad version's image (the soak's crashing images), or that begins while the sim was
  restarting (a restart of every kubelet at once), is not the restart this rule is about.
Pure functions over recorded data, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]
RUNNING = "running"
ABSENT = "absent"  # no container of the DaemonSet on the node (its pod gone, say)


@dataclass
class ContainerLog:
    """Samples of what the in-place DaemonSets' nodes run: each sample's [sent, answered] times, and per
    `daemonset/node` the samples where its value changed, `[index, state, image, pod uid, containerID]`."""

    times: list[list[float]] = field(default_factory=list)
    changes: dict[str, list[list[Any]]] = field(default_factory=dict)

    def add(self, sent: float, answered: float, rows: Iterable[JSON], daemonsets: Iterable[str],
            namespace: str = "default") -> None:
        """One answer of `GET /sim/v1/containers`."""
        index = len(self.times)
        self.times.append([sent, answered])
        patterns = {ds: re.compile(rf"^{re.escape(namespace)}/{re.escape(ds)}-[a-z0-9]{{5}}$") for ds in daemonsets}
        found: dict[str, list[JSON]] = {}
        for row in rows:
            for ds, pattern in patterns.items():
                if pattern.match(str(row.get("pod") or "")):
                    found.setdefault(f"{ds}/{row.get('node')}", []).append(row)
        for key in set(found) | set(self.changes):
            value = _value(found.get(key, []))
            seen = self.changes.setdefault(key, [])
            if not seen or seen[-1][1:] != value:
                seen.append([index, *value])

    def to_json(self) -> JSON:
        return {"times": self.times, "changes": self.changes}


def _value(rows: list[JSON]) -> list[Any]:
    """[state, image, uid, containerID] of the node's container of the DaemonSet (a running one if any)."""
    if not rows:
        return [ABSENT, "", "", ""]
    row = next((r for r in rows if r.get("state") == RUNNING), rows[0])
    return [str(row.get("state")), str(row.get("image") or ""), str(row.get("uid") or ""),
            str(row.get("containerID") or "")]


@dataclass(frozen=True)
class Gap:
    """A stretch of samples in which the node ran no container of the DaemonSet."""

    daemonset: str
    node: str
    first: int  # sample indexes, inclusive
    last: int
    least: float  # the least it lasted: the last sample's start minus the first one's answer
    images: tuple[str, ...]


@dataclass(frozen=True)
class Restart:
    """A container of the DaemonSet running again in the same pod as a new container (an in-place restart)."""

    daemonset: str
    node: str
    at: float  # when the new container was first seen running


def gaps_and_restarts(times: list[list[float]], changes: dict[str, list[list[Any]]], max_hole: float
                      ) -> tuple[list[Gap], list[Restart]]:
    gaps: list[Gap] = []
    restarts: list[Restart] = []
    for key, seen in sorted(changes.items()):
        daemonset, _, node = key.partition("/")
        runs = [(int(c[0]), int(seen[i + 1][0]) - 1 if i + 1 < len(seen) else len(times) - 1, c[1:])
                for i, c in enumerate(seen)]
        last_running: list[Any] | None = None
        stretch: list[tuple[int, int, list[Any]]] = []
        for run in runs:
            value = run[2]
            if value[0] != RUNNING:
                if last_running is not None:
                    stretch.append(run)
                continue
            if stretch:
                gaps += _split(daemonset, node, stretch, times, max_hole)
                stretch = []
            if last_running is not None and value[2] == last_running[2] and value[3] != last_running[3]:
                restarts.append(Restart(daemonset, node, times[run[0]][1]))
            last_running = value
        if stretch:
            gaps += _split(daemonset, node, stretch, times, max_hole)
    return gaps, restarts


def _split(daemonset: str, node: str, stretch: list[tuple[int, int, list[Any]]], times: list[list[float]],
           max_hole: float) -> list[Gap]:
    """The stretch's samples, cut where the sampler saw nothing for longer than `max_hole`."""
    samples = [(i, value) for first, last, value in stretch for i in range(first, last + 1)]
    out: list[Gap] = []
    group: list[tuple[int, list[Any]]] = []
    for i, value in samples:
        if group and times[i][0] - times[group[-1][0]][1] > max_hole:
            out.append(_gap(daemonset, node, group, times))
            group = []
        group.append((i, value))
    if group:
        out.append(_gap(daemonset, node, group, times))
    return out


def _gap(daemonset: str, node: str, group: list[tuple[int, list[Any]]], times: list[list[float]]) -> Gap:
    first, last = group[0][0], group[-1][0]
    images = tuple(sorted({str(v[1]) for _, v in group if v[1]}))
    return Gap(daemonset, node, first, last, max(0.0, times[last][0] - times[first][1]), images)


def _bad(images: Iterable[str], bad_images: Iterable[str]) -> bool:
    """An image of a bad version (the runtime may name it with its registry: docker.io/library/...)."""
    bad = [b for b in bad_images if b]
    return any(image == b or image.endswith("/" + b) for image in images for b in bad)


def windows(schedule: Iterable[JSON], node: str) -> list[tuple[float, float]]:
    """When the node's link was cut (link cuts and flaps, from their start to their planned end)."""
    out: list[tuple[float, float]] = []
    for act in schedule:
        if act.get("kind") in ("link_cut", "flap") and act.get("target") == node and act.get("at") is not None:
            start = float(act["at"])
            out.append((start, start + float(act.get("seconds") or 0.0)))
    return out


def sim_restarts(schedule: Iterable[JSON], grace: float) -> list[tuple[float, float]]:
    """When the sim was down or just back (every kubelet restarting), from the kill to `grace` after it answered."""
    out: list[tuple[float, float]] = []
    for act in schedule:
        if act.get("kind") == "sim_restart" and act.get("at") is not None:
            start = float(act["at"])
            up = float(act.get("up") or start + float(act.get("down") or 0.0) + 60.0)
            out.append((start, up + grace))
    return out


def judge(samples: JSON, settings: JSON, schedule: list[JSON]) -> tuple[list[JSON], int, JSON]:
    """(violations as {"message", "t", "node", "pod", "evidence"}, facts checked, a summary) of rule 12.

    `samples`: ContainerLog.to_json(); `settings`: {"restartSeconds", "slack", "maxHole", "badImages",
    "simGrace"}."""
    times = [list(map(float, t)) for t in samples.get("times") or []]
    changes = samples.get("changes") or {}
    if not times or not changes:
        return [], 0, {"restarts": 0, "gaps": 0, "longest": 0.0, "afterCut": 0}
    restart = float(settings.get("restartSeconds") or 0.0)
    bound = restart + float(settings.get("slack") or 0.0)
    gaps, restarts = gaps_and_restarts(times, changes, float(settings.get("maxHole") or 2.0))
    down = sim_restarts(schedule, float(settings.get("simGrace") or 10.0))
    bad_images = [str(i) for i in settings.get("badImages") or []]
    out: list[JSON] = []
    judged = 0
    longest = 0.0
    for gap in gaps:
        start, end = times[gap.first][1], times[gap.last][0]
        if _bad(gap.images, bad_images) or any(a <= times[gap.first][0] <= b for a, b in down):
            continue
        judged += 1
        longest = max(longest, gap.least)
        if gap.least <= bound:
            continue
        cuts = [(a, b) for a, b in windows(schedule, gap.node) if a <= times[gap.last][1] and b >= times[gap.first][0]]
        why = (f"; its link was cut meanwhile ({', '.join(f'{b - a:.1f} s from t={a:.1f}' for a, b in cuts)}): "
               "the node was without its daemon for a link outage" if cuts else "")
        out.append({"message": f"{gap.daemonset} on {gap.node}: no running container of the DaemonSet for at least "
                               f"{gap.least:.2f} s (samples {gap.first}-{gap.last}), longer than its restart "
                               f"({restart:.1f} s, {bound:.1f} s with the allowance for load){why}",
                    "t": start, "node": gap.node, "end": end,
                    "evidence": tuple(f"sample t={times[i][0]:.2f}-{times[i][1]:.2f}"
                                      for i in range(gap.first, min(gap.last, gap.first + 5) + 1))})
    after_cut = sum(1 for r in restarts if any(b <= r.at <= b + 10.0 or a <= r.at <= b
                                               for a, b in windows(schedule, r.node)))
    summary = {"restarts": len(restarts), "gaps": judged, "longest": longest, "afterCut": after_cut,
               "bound": bound}
    return out, judged + len(restarts), summary
