"""The Table kubectl prints for a custom kind: NAME, then the CRD version's `additionalPrinterColumns` (or AGE
when it has none), each cell evaluated from the column's JSONPath and typed as the apiextensions server does
(`date` printed as an age, `integer`/`number`/`boolean` as JSON values, `string` as kubectl's jsonpath prints
it, and no value as null, which kubectl shows as `<none>`).

Only the JSONPath subset CRDs use is understood: `.a.b`, `['a']`, `[0]`, `[*]` and `[?(@.x=="y")]` filters.
"""

from __future__ import annotations

import json
import re
from typing import Any

from edgeagent.kube.timeutil import human_duration, parse_time
from edgeagent.sim import printers
from edgeagent.sim.resources import PrinterColumn, Resource

JSON = dict[str, Any]

_NAME_DESCRIPTION = (
    "Name must be unique within a namespace. Is required when creating resources, although some resources may "
    "allow a client to request the generation of an appropriate name automatically. Name is primarily intended "
    "for creation idempotence and configuration definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_AGE_DESCRIPTION = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. It is not "
    "guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It "
    "is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More "
    "info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)
# A CRD version without printer columns gets this one (the real server's default).
DEFAULT_COLUMNS = (PrinterColumn("Age", "date", ".metadata.creationTimestamp", description=_AGE_DESCRIPTION),)
_TOKEN = re.compile(
    r"""\.\s*(?P<field>[A-Za-z0-9_\-$]+)"""
    r"""|\[\s*'(?P<quoted>[^']*)'\s*\]"""
    r"""|\[\s*"(?P<dquoted>[^"]*)"\s*\]"""
    r"""|\[\s*(?P<index>-?\d+)\s*\]"""
    r"""|\[\s*(?P<star>\*)\s*\]"""
    r"""|\[\s*\?\(\s*@(?P<path>(?:\.[A-Za-z0-9_\-$]+)+)\s*(?P<op>==|!=)\s*(?P<literal>"[^"]*"|'[^']*'|[-\d.]+|true|false)\s*\)\s*\]"""
)


class JSONPathError(ValueError):
    pass


def _steps(path: str) -> list[re.Match[str]]:
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if text.startswith("$"):
        text = text[1:]
    steps: list[re.Match[str]] = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise JSONPathError(f"unrecognized JSONPath at {text[position:]!r}")
        steps.append(match)
        position = match.end()
    return steps


def _literal(text: str) -> Any:
    if text[0] in "\"'":
        return text[1:-1]
    return json.loads(text)


def evaluate(path: str, obj: Any) -> list[Any]:
    """Every value `path` selects in `obj` (empty when nothing matches)."""
    current = [obj]
    for step in _steps(path):
        found: list[Any] = []
        for value in current:
            name = step.group("field") or step.group("quoted") or step.group("dquoted")
            if name is not None:
                if isinstance(value, dict) and name in value:
                    found.append(value[name])
            elif step.group("index") is not None:
                index = int(step.group("index"))
                if isinstance(value, list) and -len(value) <= index < len(value):
                    found.append(value[index])
            elif step.group("star"):
                if isinstance(value, list):
                    found.extend(value)
                elif isinstance(value, dict):
                    found.extend(value.values())
            elif isinstance(value, list):
                wanted, equal = _literal(step.group("literal")), step.group("op") == "=="
                for item in value:
                    selected = evaluate(step.group("path"), item)
                    if (bool(selected) and selected[0] == wanted) == equal:
                        found.append(item)
        current = found
    return current


def _text(value: Any) -> str:
    """What kubectl's jsonpath prints for a value: strings bare, other scalars as Go prints them, the rest JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"))


def cell(column: PrinterColumn, value: Any, now: float) -> Any:
    """The apiextensions table convertor's cell for one value (None: no value, printed `<none>`)."""
    if value is None:
        return None
    kind = column.type
    if kind == "string":
        return _text(value)
    if kind == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "date" and isinstance(value, str):
        at = parse_time(value)
        return "<invalid>" if at is None else human_duration(now - at)
    return None


def printer_for(res: Resource) -> printers.KindPrinter:
    assert res.custom is not None
    columns = res.custom.printer_columns or DEFAULT_COLUMNS
    header = (printers.Column("Name", format="name", description=_NAME_DESCRIPTION),
              *(printers.Column(c.name, c.type, c.priority, c.format, c.description) for c in columns))

    def cells(obj: JSON, now: float) -> list[Any]:
        row: list[Any] = [str((obj.get("metadata") or {}).get("name") or "")]
        for column in columns:
            try:
                values = evaluate(column.json_path, obj)
            except JSONPathError:
                values = []
            row.append(cell(column, values[0], now) if values else None)
        return row

    return printers.KindPrinter(header, cells)


def printer_for_resource(res: Resource) -> printers.KindPrinter:
    """A custom kind's columns come from its CRD; a built-in kind's from sim/printers.py's table."""
    return printer_for(res) if res.custom is not None else printers.printer_for(res.kind)
