"""CEL for CustomResourceDefinition `x-kubernetes-validations`, as kube-apiserver evaluates the rules.

A CRD's rules run against every write of every custom object, so each rule text is compiled once (cached by its
text) and the Kubernetes CEL library functions that rules commonly call and cel-python lacks (`lowerAscii`,
`split`, `indexOf`, `isSorted`, `sum`, `find`, ...) are supplied here. Values are converted to CEL guided by the
schema, as the real server types them: `integer` is int, `number` is double, a `date-time` string is a timestamp
and a `duration` string a duration, so `self.start < self.end` compares instants rather than strings.

The texts of evaluation errors are cel-go's ("no such key: x", "division by zero", ...) because kube-apiserver
puts them in the 422 it returns. At CRD time a rule must parse and name only what exists (self, oldSelf, macro
variables, known functions: cel-go's "undeclared reference to 'x'"; at an object's root, `self.metadata` has only
`name` and `generateName`: cel-go's "undefined field 'x'" for another); a syntax error keeps cel-go's layout with
cel-python's position. Equality is cel-go's heterogeneous equality (1 == 1.0). cel-python is the sim's optional
dependency, imported on first use. Not supported: the optional syntax (`?.`, `optional.of`; an
`optionalOldSelf` rule's `oldSelf` has `hasValue()`, `value()` and `orValue()` only), the quantity, URL, IP
and CIDR libraries, and the checker's field and argument types (a field the schema lacks, or `double + int`,
fails or passes when the rule runs instead of refusing the CRD), and the cost budget.
"""

from __future__ import annotations

import datetime
import functools
import itertools
import re
from collections.abc import Callable
from typing import Any

JSON = dict[str, Any]


class CelError(Exception):
    """A rule that does not compile or fails to evaluate; `str()` is the detail kube-apiserver reports."""


_OLD_SELF = re.compile(r"\boldSelf\b")
_STRING_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


@functools.cache
def uses_old_self(rule: str) -> bool:
    """A transition rule (one that names `oldSelf` outside a string literal) runs only when an old value exists."""
    return bool(_OLD_SELF.search(_STRING_LITERAL.sub("''", rule)))


def _celpy() -> Any:
    try:
        import celpy
    except ImportError as exc:  # pragma: no cover - the [sim] extra is installed wherever the sim runs
        raise CelError("cel-python is not installed (pip install 'edgeagent[sim]')") from exc
    return celpy


@functools.cache
def _environment() -> Any:
    return _celpy().Environment()


@functools.lru_cache(maxsize=4096)
def _compiled(rule: str) -> tuple[Any, str | None]:
    """(program, None) or (program or None, error detail); cached by rule text so 10,000 objects compile a rule
    once. A rule that parses but names an unknown variable or function gets a detail and still a program."""
    env = _environment()
    try:
        ast = env.compile(rule)
    except Exception as exc:  # celpy's parse errors share no public base class
        return None, _compile_detail(rule, exc)
    return env.program(ast, functions=_functions()), _reference_error(rule, ast)


_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_TYPE_NAMES = frozenset({"bool", "bytes", "double", "int", "list", "map", "null_type", "string", "type", "uint"})


@functools.cache
def _known_functions() -> frozenset[str]:
    base = _celpy().evaluation.base_functions
    names = {name for name in base if name.isidentifier()}
    return frozenset(names | set(_functions()) | _MACROS | {"has", "min", "max"})


def _reference_error(rule: str, ast: Any) -> str | None:
    """cel-go's check of names: only self, oldSelf, macro variables, known functions and type names exist."""
    import lark

    known = _known_functions()

    def token(node: Any, index: int) -> Any:
        child = node.children[index] if len(node.children) > index else None
        return child if isinstance(child, lark.Token) else None

    def undeclared(name_token: Any) -> str:
        line, column = int(name_token.line or 1), int(name_token.column or 1)
        lines = rule.splitlines() or [""]
        source = lines[min(line, len(lines)) - 1]
        return (f"compilation failed: ERROR: <input>:{line}:{column}: undeclared reference to '{name_token}' "
                f"(in container '')\n | {source}\n | {'.' * max(column - 1, 0)}^")

    def first_ident(node: Any) -> str | None:
        if not isinstance(node, lark.Tree):
            return None
        if node.data == "ident":
            name = token(node, 0)
            return str(name) if name is not None else None
        for child in node.children:
            found = first_ident(child)
            if found:
                return found
        return None

    def walk(node: Any, bound: frozenset[str]) -> str | None:
        if not isinstance(node, lark.Tree):
            return None
        if node.data == "ident":
            name = token(node, 0)
            if name is not None and str(name) not in bound | _TYPE_NAMES | {"self", "oldSelf"}:
                return undeclared(name)
            return None
        if node.data in ("ident_arg", "member_dot_arg"):
            offset = 0 if node.data == "ident_arg" else 1
            name = token(node, offset)
            if name is not None and str(name) not in known:
                return undeclared(name)
            args = [c for c in node.children[offset + 1:] if isinstance(c, lark.Tree)]
            exprs = [c for a in args for c in a.children] if args and args[0].data == "exprlist" else args
            if node.data == "member_dot_arg":
                found = walk(node.children[0], bound)
                if found:
                    return found
            if name is not None and str(name) in _MACROS and exprs:
                variable = first_ident(exprs[0])
                inner = bound | {variable} if variable else bound
                for expr in exprs[1:]:
                    found = walk(expr, inner)
                    if found:
                        return found
                return None
            if name is not None and str(name) == "has":
                return None  # has(self.field): the selection is not evaluated
            for expr in exprs:
                found = walk(expr, bound)
                if found:
                    return found
            return None
        for child in node.children:
            found = walk(child, bound)
            if found:
                return found
        return None

    return walk(ast, frozenset())


def _compile_detail(rule: str, exc: Exception) -> str:
    """cel-go's layout of a syntax error (position, then the line and a caret); the wording is cel-python's."""
    line = int(getattr(exc, "line", 1) or 1)
    column = int(getattr(exc, "column", 1) or 1)
    lines = rule.splitlines() or [""]
    source = lines[min(line, len(lines)) - 1]
    return (f"compilation failed: ERROR: <input>:{line}:{column}: Syntax error: unexpected input\n"
            f" | {source}\n | {'.' * max(column - 1, 0)}^")


def compile_error(rule: str, *, object_root: bool = False) -> str | None:
    """Why `rule` does not compile (kube-apiserver refuses such a CRD), or None.

    `object_root` says the rule sits where `self` is a whole object (the schema's root, or an embedded resource):
    there kube-apiserver declares `self.metadata` with `name` and `generateName` only, so another metadata field
    is cel-go's "undefined field" error."""
    error = _compiled(rule)[1]
    if error is None and object_root:
        return _root_metadata_error(rule)
    return error


OBJECT_ROOT_METADATA = ("name", "generateName")


@functools.lru_cache(maxsize=1024)
def _root_metadata_error(rule: str) -> str | None:
    """cel-go's checker on `self.metadata.<field>` (and `oldSelf.metadata.<field>`) at an object's root: every
    field but name and generateName is undefined. Errors are listed in source order, at the selecting dot."""
    import lark

    try:
        ast = _environment().compile(rule)
    except Exception:  # a syntax error is reported by _compiled
        return None
    lines = rule.splitlines() or [""]
    found: list[tuple[int, int, str]] = []
    for node in ast.iter_subtrees():
        if node.data != "member_dot" or len(node.children) < 2 or not isinstance(node.children[1], lark.Token):
            continue
        if _dotted(node.children[0]) not in (["self", "metadata"], ["oldSelf", "metadata"]):
            continue
        field = node.children[1]
        if str(field) in OBJECT_ROOT_METADATA:
            continue
        line, column = int(field.line or 1), max(int(field.column or 1) - 1, 1)  # the dot before the field
        source = lines[min(line, len(lines)) - 1]
        found.append((line, column, f"ERROR: <input>:{line}:{column}: undefined field '{field}'\n | {source}\n"
                                    f" | {'.' * (column - 1)}^"))
    if not found:
        return None
    return "compilation failed: " + "\n".join(text for _, _, text in sorted(found))


def _dotted(node: Any) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"] when the member chain is plain identifiers, else None."""
    import lark

    names: list[str] = []
    while isinstance(node, lark.Tree):
        if node.data in ("member", "primary") and len(node.children) == 1:
            node = node.children[0]
        elif node.data == "member_dot" and len(node.children) == 2 and isinstance(node.children[1], lark.Token):
            names.insert(0, str(node.children[1]))
            node = node.children[0]
        elif node.data == "ident" and node.children and isinstance(node.children[0], lark.Token):
            names.insert(0, str(node.children[0]))
            return names
        else:
            return None
    return None


def evaluate(rule: str, activation: JSON) -> Any:
    """The rule's value for `activation` ({"self": ..., "oldSelf": ...} of CEL values); CelError on failure."""
    program, error = _compiled(rule)
    if program is None:
        raise CelError(error or "compilation failed")
    try:
        result = program.evaluate(activation)
    except Exception as exc:
        raise CelError(_eval_detail(exc)) from exc
    if _is_error(result):
        raise CelError(_eval_detail(result))
    return result


def _is_error(value: Any) -> bool:
    return type(value).__name__ == "CELEvalError"


_NO_MEMBER = re.compile(r"no such member in mapping: '?([^']*)'?")


def _eval_detail(exc: Any) -> str:
    """cel-go's wording of the common runtime failures (kube-apiserver quotes them), else cel-python's text."""
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    text = str(args[0]) if args else str(exc)
    kind = args[1] if len(args) > 1 else None
    found = _NO_MEMBER.search(text)
    if found:
        return f"no such key: {found.group(1)}"
    if kind is IndexError or "index out of range" in text:
        return "index out of bounds"
    if kind is ZeroDivisionError or "divide by zero" in text:
        return "division by zero"
    if "no matching overload" in text or "no such overload" in text:
        return "no such overload"
    if "undeclared reference to '" in text:
        name = text.split("undeclared reference to '", 1)[1].split("'", 1)[0]
        return f"no such overload: {name}" if name else "no such overload"
    return text


# --- values -------------------------------------------------------------------------------------------------

class OptionalValue:
    """`oldSelf` of a rule with `optionalOldSelf: true`: optional.of(old) on update, optional.none() on create.

    Only the optional's methods are supported (`hasValue()`, `value()`, `orValue(x)`): cel-python cannot parse
    the `?.` syntax."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"optional({self.value!r})"


def to_cel(value: Any, schema: JSON | None) -> Any:
    """A JSON value as the CEL value kube-apiserver binds to `self` for a node of `schema`."""
    celtypes = _celpy().celtypes
    if value is None:
        return None
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    node = schema or {}
    kind = node.get("type")
    if isinstance(value, int):
        return celtypes.DoubleType(float(value)) if kind == "number" else celtypes.IntType(value)
    if isinstance(value, float):
        if kind == "integer" and value.is_integer():
            return celtypes.IntType(int(value))
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        fmt = node.get("format")
        if kind == "string" and fmt == "date-time":
            stamp = parse_timestamp(value)
            if stamp is not None:
                return celtypes.TimestampType(stamp)
        if kind == "string" and fmt == "duration":
            seconds = parse_duration(value)
            if seconds is not None:
                return celtypes.DurationType(datetime.timedelta(seconds=seconds))
        return celtypes.StringType(value)
    if isinstance(value, list):
        items = node.get("items") if isinstance(node.get("items"), dict) else None
        return celtypes.ListType([to_cel(item, items) for item in value])
    if isinstance(value, dict):
        properties = node.get("properties") or {}
        extra = node.get("additionalProperties")
        extra_schema = extra if isinstance(extra, dict) else None
        return celtypes.MapType({celtypes.StringType(k): to_cel(v, properties.get(k, extra_schema))
                                 for k, v in value.items()})
    return value


_TIMESTAMP = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})?$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_timestamp(text: str) -> datetime.datetime | None:
    """An RFC 3339 date-time (the `date-time` format of kube-openapi's strfmt); None if it is not one."""
    found = _TIMESTAMP.match(text)
    if not found:
        return None
    year, month, day, hour, minute, second = (int(found.group(i)) for i in range(1, 7))
    fraction = found.group(7) or ""
    zone = found.group(8) or "Z"
    try:
        tz = datetime.UTC
        if zone not in ("Z", "z"):
            sign = -1 if zone[0] == "-" else 1
            tz = datetime.timezone(sign * datetime.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
        micro = int((fraction[1:] + "000000")[:6]) if fraction else 0
        return datetime.datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)
    except ValueError:
        return None


def parse_duration(text: str) -> float | None:
    """A Go duration ("1h30m", "-2.5s", "0") in seconds, as the `duration` format accepts; None otherwise."""
    body = text.strip()
    sign = -1.0 if body.startswith("-") else 1.0
    body = body.lstrip("+-")
    if body == "0":
        return 0.0
    total, pos = 0.0, 0
    for part in _DURATION_PART.finditer(body):
        if part.start() != pos:
            return None
        total += float(part.group(1)) * _DURATION_UNITS[part.group(2)]
        pos = part.end()
    return sign * total if pos == len(body) and pos > 0 else None


# --- the Kubernetes CEL library functions cel-python lacks -------------------------------------------------

def _functions() -> dict[str, Callable[..., Any]]:
    celtypes = _celpy().celtypes
    string, integer, boolean, lst = celtypes.StringType, celtypes.IntType, celtypes.BoolType, celtypes.ListType

    def char_at(s: Any, i: Any) -> Any:
        text = str(s)
        if not 0 <= int(i) <= len(text):
            raise ValueError("index out of range")
        return string(text[int(i)] if int(i) < len(text) else "")

    def index_of(target: Any, item: Any, start: Any = 0) -> Any:
        if isinstance(target, str):
            return integer(str(target).find(str(item), int(start)))
        values = list(target)
        return integer(values.index(item) if item in values else -1)

    def last_index_of(target: Any, item: Any) -> Any:
        if isinstance(target, str):
            return integer(str(target).rfind(str(item)))
        values = list(target)
        return integer(len(values) - 1 - values[::-1].index(item) if item in values else -1)

    def replace(s: Any, old: Any, new: Any, count: Any = -1) -> Any:
        return string(str(s).replace(str(old), str(new), int(count)))

    def split(s: Any, sep: Any, count: Any = -1) -> Any:
        if int(count) == 0:
            return lst([])
        parts = str(s).split(str(sep), int(count) - 1 if int(count) > 0 else -1) if str(sep) else list(str(s))
        return lst([string(p) for p in parts])

    def substring(s: Any, start: Any, end: Any = None) -> Any:
        text = str(s)
        stop = len(text) if end is None else int(end)
        if not 0 <= int(start) <= stop <= len(text):
            raise ValueError("index out of range")
        return string(text[int(start):stop])

    def join(values: Any, sep: Any = "") -> Any:
        return string(str(sep).join(str(v) for v in values))

    def is_sorted(values: Any) -> Any:
        items = list(values)
        return boolean(all(a <= b for a, b in itertools.pairwise(items)))

    def total(values: Any) -> Any:
        items = list(values)
        if not items:
            return integer(0)
        result = items[0]
        for item in items[1:]:
            result = result + item
        return result

    def find(s: Any, pattern: Any) -> Any:
        found = re.search(str(pattern), str(s))
        return string(found.group(0) if found else "")

    def find_all(s: Any, pattern: Any, limit: Any = -1) -> Any:
        found = [string(m.group(0)) for m in re.finditer(str(pattern), str(s))]
        return lst(found if int(limit) < 0 else found[:int(limit)])

    def has_value(target: Any) -> Any:
        return boolean(not isinstance(target, OptionalValue) or target.value is not None)

    def value(target: Any) -> Any:
        if isinstance(target, OptionalValue):
            if target.value is None:
                raise ValueError("optional.none() dereference")
            return target.value
        return target

    def or_value(target: Any, default: Any) -> Any:
        if isinstance(target, OptionalValue):
            return default if target.value is None else target.value
        return target

    numeric = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)

    def equal(a: Any, b: Any) -> Any:
        """CEL's heterogeneous equality (cel-go, as Kubernetes runs it): 1 == 1.0, and values of unrelated types are
        unequal rather than an error."""
        if isinstance(a, numeric) and isinstance(b, numeric) and not isinstance(a, celtypes.BoolType) \
                and not isinstance(b, celtypes.BoolType):
            return boolean(float(a) == float(b) if isinstance(a, celtypes.DoubleType) or
                           isinstance(b, celtypes.DoubleType) else int(a) == int(b))
        if _is_error(a) or _is_error(b):
            return a if _is_error(a) else b
        if isinstance(a, celtypes.BoolType) != isinstance(b, celtypes.BoolType):
            return boolean(False)
        try:
            return boolean(a == b)
        except TypeError:
            return boolean(False)

    def not_equal(a: Any, b: Any) -> Any:
        result = equal(a, b)
        return result if _is_error(result) else boolean(not result)

    return {
        "_==_": equal, "_!=_": not_equal,
        "hasValue": has_value, "value": value, "orValue": or_value,
        "charAt": char_at, "indexOf": index_of, "lastIndexOf": last_index_of,
        "lowerAscii": lambda s: string("".join(c.lower() if c.isascii() else c for c in str(s))),
        "upperAscii": lambda s: string("".join(c.upper() if c.isascii() else c for c in str(s))),
        "replace": replace, "split": split, "substring": substring, "trim": lambda s: string(str(s).strip()),
        "join": join, "isSorted": is_sorted, "sum": total, "find": find, "findAll": find_all,
    }
