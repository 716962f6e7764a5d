"""Label and field selectors with the grammar and matching rules of k8s.io/apimachinery.

The agent lists and watches with `fieldSelector=spec.nodeName=<node>` and the DaemonSet controller matches
pods by `metav1.LabelSelector`; if the simulation were more lenient (or stricter) than a real apiserver,
bugs in those callers would only show up on a real cluster. So the parser follows labels/selector.go token
by token (including its quirks such as `in ()` meaning the empty value) and field selectors follow
fields/selector.go (escaping with backslash, `!=` tried before `==` before `=`).

It lives in kube/ rather than sim/ because both sides use it: the simulated apiserver to answer, and the
informer to re-check objects locally, and the two must never disagree about what a selector means.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

GENERIC_FIELDS: frozenset[str] = frozenset({"metadata.name", "metadata.namespace"})
POD_FIELDS: frozenset[str] = GENERIC_FIELDS | frozenset(
    {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    }
)


class SelectorError(ValueError):
    """A selector the real apiserver would reject; the message is meant for a 400 BadRequest body."""


# ---------------------------------------------------------------------------------------------- validation

_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_RULE = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)


def _validate_key(key: str) -> None:
    """IsQualifiedName: optional DNS-subdomain prefix and a `/`, then a name of at most 63 characters."""
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            raise SelectorError(f'invalid label key "{key}": prefix part must be non-empty')
        if len(prefix) > 253 or not _DNS1123_SUBDOMAIN_RE.match(prefix):
            raise SelectorError(
                f'invalid label key "{key}": prefix part must be a lowercase RFC 1123 subdomain of at most 253 '
                "characters"
            )
    if not name:
        raise SelectorError(f'invalid label key "{key}": name part must be non-empty')
    if len(name) > 63:
        raise SelectorError(f'invalid label key "{key}": name part must be no more than 63 characters')
    if not _NAME_RE.match(name):
        raise SelectorError(f'invalid label key "{key}": name part {_NAME_RULE}')


def _validate_value(key: str, value: str) -> None:
    if value == "":
        return
    if len(value) > 63:
        raise SelectorError(f'invalid label value "{value}" for key "{key}": must be no more than 63 characters')
    if not _NAME_RE.match(value):
        raise SelectorError(f'invalid label value "{value}" for key "{key}": a valid label value {_NAME_RULE}')


# ---------------------------------------------------------------------------------------------- label selectors

IN = "in"
NOT_IN = "notin"
EQUALS = "="
DOUBLE_EQUALS = "=="
NOT_EQUALS = "!="
EXISTS = "exists"
DOES_NOT_EXIST = "!"
GREATER_THAN = "gt"
LESS_THAN = "lt"
_BINARY_OPERATORS = (IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS, GREATER_THAN, LESS_THAN)


def _as_int(text: str) -> int | None:
    return int(text) if re.fullmatch(r"[+-]?[0-9]+", text) else None


@dataclass(frozen=True)
class Requirement:
    """One comma-separated term; `values` is sorted and de-duplicated like Go's sets.String."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _validate_key(self.key)
        op, n = self.operator, len(self.values)
        if op in (IN, NOT_IN):
            if n == 0:
                raise SelectorError("for 'in', 'notin' operators, values set can't be empty")
        elif op in (EQUALS, DOUBLE_EQUALS, NOT_EQUALS):
            if n != 1:
                raise SelectorError("exact-match compatibility requires one single value")
        elif op in (EXISTS, DOES_NOT_EXIST):
            if n != 0:
                raise SelectorError("values set must be empty for exists and does not exist")
        elif op in (GREATER_THAN, LESS_THAN):
            if n != 1:
                raise SelectorError("for 'Gt', 'Lt' operators, exactly one value is required")
            if _as_int(self.values[0]) is None:
                raise SelectorError("for 'Gt', 'Lt' operators, the value must be an integer")
        else:
            raise SelectorError(f"operator '{op}' is not recognized")
        for value in self.values:
            _validate_value(self.key, value)

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        present = self.key in labels
        if op == EXISTS:
            return present
        if op == DOES_NOT_EXIST:
            return not present
        if op in (NOT_EQUALS, NOT_IN):  # absent keys satisfy negative requirements
            return not present or labels[self.key] not in self.values
        if not present:
            return False
        value = labels[self.key]
        if op in (IN, EQUALS, DOUBLE_EQUALS):
            return value in self.values
        have, want = _as_int(value), _as_int(self.values[0])
        if have is None or want is None:
            return False
        return have > want if op == GREATER_THAN else have < want

    def __str__(self) -> str:
        if self.operator == EXISTS:
            return self.key
        if self.operator == DOES_NOT_EXIST:
            return f"!{self.key}"
        if self.operator in (IN, NOT_IN):
            return f"{self.key} {self.operator} ({','.join(self.values)})"
        symbol = {GREATER_THAN: ">", LESS_THAN: "<"}.get(self.operator, self.operator)
        return f"{self.key}{symbol}{self.values[0]}"


def _requirement(key: str, operator: str, values: Iterable[str] = ()) -> Requirement:
    return Requirement(key, operator, tuple(sorted(set(values))))


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of requirements; `nothing` is the nil metav1.LabelSelector, which selects no object."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    @property
    def empty(self) -> bool:
        """True when the selector selects everything (no requirements at all)."""
        return not self.requirements and not self.nothing

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.nothing:
            return False
        have = labels or {}
        return all(r.matches(have) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


EVERYTHING = LabelSelector()
NOTHING = LabelSelector(nothing=True)

# Lexer tokens (strings double as their literal for punctuation).
_IDENT, _EOS = "IDENT", "EOS"
_SYMBOLS = ("!=", "==", "=", "!", "(", ")", ",", ">", "<")
_SPECIAL = frozenset("=!(),<>")
_WHITESPACE = frozenset(" \t\r\n")
_KEYWORDS = frozenset({IN, NOT_IN})


def _lex(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _WHITESPACE:
            i += 1
        if i >= n:
            tokens.append((_EOS, ""))
            return tokens
        if text[i] in _SPECIAL:
            symbol = next(s for s in _SYMBOLS if text.startswith(s, i))  # every special char is a symbol
            tokens.append((symbol, symbol))
            i += len(symbol)
            continue
        start = i
        while i < n and text[i] not in _WHITESPACE and text[i] not in _SPECIAL:
            i += 1
        word = text[start:i]
        tokens.append((word if word in _KEYWORDS else _IDENT, word))


class _Parser:
    """Port of labels.Parser: keywords count as identifiers wherever a value is expected."""

    def __init__(self, text: str) -> None:
        self.tokens = _lex(text)
        self.pos = 0

    def _peek(self, values: bool = True) -> tuple[str, str]:
        tok, lit = self.tokens[self.pos]
        if values and tok in _KEYWORDS:
            tok = _IDENT
        return tok, lit

    def _next(self, values: bool = True) -> tuple[str, str]:
        tok, lit = self._peek(values)
        if tok != _EOS:
            self.pos += 1
        return tok, lit

    def parse(self) -> tuple[Requirement, ...]:
        requirements: list[Requirement] = []
        while True:
            tok, lit = self._peek()
            if tok == _EOS:
                return tuple(requirements)
            if tok not in (_IDENT, "!"):
                raise SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")
            try:
                requirements.append(self._requirement())
            except SelectorError as exc:  # labels.Parser wraps every requirement error this way
                raise SelectorError(f"unable to parse requirement: {exc}") from exc
            tok, lit = self._next()
            if tok == _EOS:
                return tuple(requirements)
            if tok != ",":
                raise SelectorError(f"found '{lit}', expected: ',' or 'end of string'")
            tok, lit = self._peek()
            if tok not in (_IDENT, "!"):
                raise SelectorError(f"found '{lit}', expected: identifier after ','")

    def _requirement(self) -> Requirement:
        negated = False
        tok, lit = self._next()
        if tok == "!":
            negated = True
            tok, lit = self._next()
        if tok != _IDENT:
            raise SelectorError(f"found '{lit}', expected: identifier")
        key = lit
        _validate_key(key)
        if negated:
            return _requirement(key, DOES_NOT_EXIST)
        if self._peek()[0] in (_EOS, ","):
            return _requirement(key, EXISTS)
        tok, lit = self._next(values=False)
        operator = {
            IN: IN,
            NOT_IN: NOT_IN,
            "=": EQUALS,
            "==": DOUBLE_EQUALS,
            "!=": NOT_EQUALS,
            ">": GREATER_THAN,
            "<": LESS_THAN,
        }.get(tok)
        if operator is None:
            raise SelectorError(f"found '{lit}', expected: {', '.join(_BINARY_OPERATORS)}")
        if operator in (IN, NOT_IN):
            return _requirement(key, operator, self._set_values())
        return _requirement(key, operator, [self._exact_value()])

    def _exact_value(self) -> str:
        tok, lit = self._peek()
        if tok in (_EOS, ","):
            return ""
        tok, lit = self._next()
        if tok != _IDENT:
            raise SelectorError(f"found '{lit}', expected: identifier")
        return lit

    def _set_values(self) -> set[str]:
        tok, lit = self._next()
        if tok != "(":
            raise SelectorError(f"found '{lit}' expected: '('")
        tok, lit = self._peek()
        if tok == ")":
            self._next()
            return {""}
        if tok not in (_IDENT, ","):
            raise SelectorError(f"found '{lit}', expected: ',', ')' or identifier")
        values = self._identifier_list()
        tok, lit = self._next()
        if tok != ")":
            raise SelectorError(f"found '{lit}', expected: ')'")
        return values

    def _identifier_list(self) -> set[str]:
        values: set[str] = set()
        while True:
            tok, lit = self._next()
            if tok == _IDENT:
                values.add(lit)
                tok2, lit2 = self._peek()
                if tok2 == ",":
                    continue
                if tok2 == ")":
                    return values
                raise SelectorError(f"found '{lit2}', expected: ',' or ')'")
            if tok == ",":
                if not values:
                    values.add("")  # "(,a)"
                tok2, _ = self._peek()
                if tok2 == ")":
                    values.add("")  # "(a,)"
                    return values
                if tok2 == ",":
                    self._next()
                    values.add("")  # "(a,,b)"
                continue
            raise SelectorError(f"found '{lit}', expected: ',', or identifier")


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse the `labelSelector` query syntax; an empty/absent selector selects everything."""
    if not text:
        return EVERYTHING
    return LabelSelector(tuple(sorted(_Parser(text).parse(), key=lambda r: r.key)))  # Go sorts ByKey too


_EXPRESSION_OPERATORS = {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST}


def label_selector_from_dict(sel: Mapping[str, Any] | None) -> LabelSelector:
    """metav1.LabelSelector → selector: nil selects nothing, `{}` selects everything (LabelSelectorAsSelector)."""
    if sel is None:
        return NOTHING
    if not isinstance(sel, Mapping):
        raise SelectorError(f"label selector must be an object, got {type(sel).__name__}")
    requirements: list[Requirement] = []
    match_labels = sel.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise SelectorError("matchLabels must be an object mapping label keys to values")
    for key, value in match_labels.items():
        if not isinstance(value, str):
            raise SelectorError(f'matchLabels["{key}"] must be a string')
        requirements.append(_requirement(str(key), EQUALS, [value]))
    expressions = sel.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise SelectorError("matchExpressions must be a list")
    for expr in expressions:
        if not isinstance(expr, Mapping):
            raise SelectorError("each matchExpressions entry must be an object")
        operator = _EXPRESSION_OPERATORS.get(str(expr.get("operator")))
        if operator is None:
            raise SelectorError(f'"{expr.get("operator")}" is not a valid label selector operator')
        values = expr.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise SelectorError("matchExpressions values must be a list of strings")
        requirements.append(_requirement(str(expr.get("key", "")), operator, values))
    return LabelSelector(tuple(sorted(requirements, key=lambda r: r.key)))


# ---------------------------------------------------------------------------------------------- field selectors


def _lookup(obj: Mapping[str, Any], path: str) -> Any:
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return None
        current = current.get(part)
    return current


def _render(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def field_value(obj: Mapping[str, Any], field: str) -> str:
    """The string a field selector compares against; missing fields read as "" (Go zero values)."""
    return _render(_lookup(obj, field))


def pod_field_value(obj: Mapping[str, Any], field: str) -> str:
    """Pod selectable fields as registry/core/pod.PodToSelectableFields renders them (and an Event's `source`).

    `spec.hostNetwork` is a bool rendered "true"/"false" (absent = "false"), and `status.podIP` is the
    first of `status.podIPs` when present, since that is the field the real server reads.
    """
    if field in ("spec.hostNetwork", "spec.unschedulable"):  # Go bools: absent reads "false"
        return "true" if _lookup(obj, field) is True else "false"
    if field == "source":  # an Event's: kube-apiserver's EventToSelectableFields renders source.component
        source = _lookup(obj, "source")
        return _render(source.get("component")) if isinstance(source, Mapping) else _render(source)
    if field == "status.podIP":
        ips = _lookup(obj, "status.podIPs")
        if isinstance(ips, list) and ips and isinstance(ips[0], Mapping):
            return _render(ips[0].get("ip"))
    return field_value(obj, field)


def _split_terms(text: str) -> list[str]:
    terms: list[str] = []
    start, escaped = 0, False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


_FIELD_OPERATORS = ("!=", "==", "=")


def _split_term(term: str) -> tuple[str, str, str] | None:
    for i in range(len(term)):
        for op in _FIELD_OPERATORS:
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
    return None


def _unescape(value: str) -> str:
    out: list[str] = []
    escaped = False
    for ch in value:
        if escaped:
            if ch not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{ch}")
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in ",=":
            raise SelectorError(f"invalid field selector: unescaped character in value: {ch!r}")
        else:
            out.append(ch)
    if escaped:
        raise SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


@dataclass(frozen=True)
class FieldTerm:
    field: str
    operator: str  # "=" or "!="  (`==` is normalised to "=")
    value: str


@dataclass(frozen=True)
class FieldSelector:
    terms: tuple[FieldTerm, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.terms

    def matches(self, obj: Mapping[str, Any]) -> bool:
        for term in self.terms:
            equal = pod_field_value(obj, term.field) == term.value
            if equal != (term.operator == "="):
                return False
        return True

    def exact_value(self, field: str) -> str | None:
        """The value `field` must equal, if some term pins it (lets a store index by e.g. spec.nodeName)."""
        for term in self.terms:
            if term.field == field and term.operator == "=":
                return term.value
        return None

    def __str__(self) -> str:
        def esc(v: str) -> str:
            return v.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")

        return ",".join(f"{t.field}{t.operator}{esc(t.value)}" for t in self.terms)


def parse_field_selector(text: str | None, allowed: frozenset[str] | None = GENERIC_FIELDS) -> FieldSelector:
    """Parse `fieldSelector`; a field the resource does not support is a 400 `field label not supported: X`.

    `allowed=None` accepts any non-empty field: a client such as the informer does not know every kind's
    selectable fields (the server checks them), but an empty one is supported by no kind at all.
    """
    if not text:
        return FieldSelector()
    terms: list[FieldTerm] = []
    for part in sorted(_split_terms(text)):
        if part == "":
            continue
        split = _split_term(part)
        if split is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        field, op, raw = split
        value = _unescape(raw)
        supported = bool(field) if allowed is None else field in allowed
        if not supported:
            raise SelectorError(f"field label not supported: {field}")
        terms.append(FieldTerm(field, "!=" if op == "!=" else "=", value))
    return FieldSelector(tuple(terms))
