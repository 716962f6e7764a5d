"""`edgeagent hold [--reason R] [--until TIME | --for DURATION]` and `edgeagent release`: the local hold.

They talk to the agent on this node (`/v1/hold`), never to the cloud, so they work while the link is
down. Both print what the node's site policy says afterwards: held or open, why, and when it next opens.
"""

from __future__ import annotations

import sys
from datetime import datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from edgeagent.agent.client.commands import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    ClientError,
    _message,
    _print_json,
    _request,
    _run,
)
from edgeagent.agent.policy.times import parse_time, rfc3339
from edgeagent.agent.policy.windows import local_zone
from edgeagent.agent.text import text_problem
from edgeagent.config import ClientConfig

HOLD_PATH = "/v1/hold"
JSON = dict[str, Any]


def render(status: JSON) -> str:
    """The policy answer for people: one line for the state, then the windows and the next opening."""
    lines = [f"{'held' if status.get('held') else 'open'}: {status.get('reason')}: {status.get('message')}"]
    windows = status.get("windows") or []
    if windows:
        inside = "yes" if status.get("windowOpen") else "no"
        lines.append(f"maintenance windows ({status.get('timezone')}): {', '.join(windows)}; inside one now: {inside}")
    else:
        lines.append("maintenance windows: none (always open)")
    if status.get("held"):
        opening = status.get("nextOpening")
        when = _node_time(opening, str(status.get("timezone") or "")) if opening else "when the hold is released"
        lines.append(f"next opening: {when}")
    return "\n".join(lines)


def _node_time(instant: str, zone: str) -> str:
    """An RFC 3339 instant shown as the message shows `until`: the node's wall time with its UTC offset.

    `zone` is the agent's zone name; where it is not an IANA name (`localtime`, a bare abbreviation) this
    host's own zone is the agent's, as the hold commands talk to the agent on this node.
    """
    try:
        t = parse_time(instant)
    except ValueError:
        return instant
    try:
        tz: tzinfo = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        tz = local_zone()
    return t.astimezone(tz).isoformat(timespec="minutes")


async def _change(cfg: ClientConfig, method: str, body: JSON | None, what: str) -> int:
    status, answer = await _request(cfg, method, HOLD_PATH, body)
    if cfg.json:
        _print_json(answer if isinstance(answer, dict) else {"status": status, "message": _message(answer, status)})
    if status != 200 or not isinstance(answer, dict):
        print(f"edgeagent: error: {what}: {status}: {_message(answer, status)}", file=sys.stderr)
        return EXIT_FAILED
    if not cfg.json:
        print(render(answer))
    return EXIT_OK


def hold(cfg: ClientConfig, reason: str, until: datetime | None) -> int:
    problem = text_problem("--reason", reason)
    if problem is not None:  # a usage error: the agent would refuse it too (400), this says which flag
        print(f"edgeagent: error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    body: JSON = {}
    if reason:
        body["reason"] = reason
    if until is not None:
        body["until"] = rfc3339(until)
    return _run(_change(cfg, "POST", body, "hold"))


def release(cfg: ClientConfig) -> int:
    return _run(_change(cfg, "DELETE", None, "release"))


__all__ = ["ClientError", "hold", "release", "render"]
