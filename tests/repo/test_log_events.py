"""Every log event name is snake_case (issue 38 item 12).

Half the events read `agent listening`, `reconcile failed; will retry`, the other half `hold_set`,
`plan_check_skipped`: a `jq 'select(.event == …)'` had to guess which. An event is a name to select on;
what happened goes in its fields (`why=`, `error=`). This scans every logging call of the package.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}
_LOGGERS = re.compile(r"^(?:self\.)?_?log(?:ger)?$|^log\.get\(.*\)$")
SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")


def _names(node: ast.expr) -> list[str] | None:
    """The event names a call's first argument can be: a literal, or either side of `a if x else b`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        body, orelse = _names(node.body), _names(node.orelse)
        return None if body is None or orelse is None else body + orelse
    return None


def log_events(source: str) -> list[tuple[int, str]]:
    """(line, event) of each logging call; an event that is not a literal is reported as `<computed>`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute)
                and node.func.attr in _LEVELS):
            continue
        receiver = node.func.value
        # `(_log.debug if rejected else _log.warning)("event", …)`: the receiver is a choice of two loggers.
        receivers = [receiver.body, receiver.orelse] if isinstance(receiver, ast.IfExp) else [receiver]
        if not all(_LOGGERS.match(ast.unparse(r)) for r in receivers):
            continue
        names = _names(node.args[0])
        found.extend((node.lineno, name) for name in names or ["<computed>"])
    for node in ast.walk(ast.parse(source)):  # the informer's `(a.debug if x else a.warning)("event", …)`
        if isinstance(node, ast.Call) and isinstance(node.func, ast.IfExp) and node.args:
            sides = [node.func.body, node.func.orelse]
            if all(isinstance(s, ast.Attribute) and s.attr in _LEVELS and _LOGGERS.match(ast.unparse(s.value))
                   for s in sides):
                found.extend((node.lineno, name) for name in _names(node.args[0]) or ["<computed>"])
    return found


def test_the_scan_sees_each_form_of_logging_call() -> None:
    source = ('_log.info("agent listening")\nself._log.warning("a_b", x=1)\n'
              'self._log.info("x_on" if up else "x off")\n(_log.debug if q else _log.warning)("list failed")\n'
              'parser.error("not a log call")\n_log.info(f"{name} done")\n')
    assert sorted(log_events(source)) == [(1, "agent listening"), (2, "a_b"), (3, "x off"), (3, "x_on"),
                                          (4, "list failed"), (6, "<computed>")]


def test_every_log_event_is_a_snake_case_name() -> None:
    bad = []
    for path in sorted((ROOT / "edgeagent").rglob("*.py")):
        for line, event in log_events(path.read_text(encoding="utf-8")):
            if not SNAKE.fullmatch(event):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {event!r}")
    assert not bad, "log events must be snake_case names (details go in fields):\n" + "\n".join(bad)
