"""CustomResourceDefinition schemas as kube-apiserver (apiextensions-apiserver, v1.36) enforces them.

Pure functions over plain JSON, one per step of the real server's handling of a custom object:

1. `prune(schema, obj)` when the body is decoded: unknown fields are dropped (their paths are what
   `fieldValidation=Strict` refuses and `Warn` reports, `unknown field "spec.foo"`), then the nulls of fields
   that are neither nullable nor defaulted. Root `apiVersion`/`kind`/`metadata` are kept; unknown `metadata`
   keys (not ObjectMeta's) are dropped and reported as `metadata.<key>`.
2. `apply_defaults(schema, obj)` right after decoding (and on every read from storage): `default` values fill
   absent fields of objects that exist, and non-nullable nulls. The real codec prunes first and defaults second;
   defaults themselves are checked at CRD creation (they must validate and must not carry unknown fields), so
   they need no pruning.
3. `validate(schema, obj, old)` in the create/update strategy: kube-openapi's schema validation with its error
   texts and field paths (`spec.steps[1].name`, `spec.labels.key`), `x-kubernetes-list-type` set/map
   uniqueness, then the CEL `x-kubernetes-validations` rules (see crd_cel), which are skipped with the real
   "some validation rules were not checked" cause when a type/required/enum/size error already exists. On
   update, errors in parts of the object that did not change are ratcheted (dropped) as the real server does
   since CRDValidationRatcheting went GA, and transition rules (those naming `oldSelf`) run only when the old
   value exists.

`check_structural(schema)` is the CRD-side check: a schema that is not structural, has an unsupported type or
a CEL rule that does not compile refuses the CRD, with the real server's field paths
(`spec.versions[0].schema.openAPIV3Schema.properties[spec].type`).

Messages follow the apimachinery `field.Error` rendering of v1.36 (`Too long: may not be more than 5 bytes`,
values of objects and arrays omitted from CEL failures: `Invalid value: failed rule: ...`).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import importlib
import ipaddress
import json
import math
import re
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from edgeagent.sim import crd_cel

JSON = dict[str, Any]

NIL_FIELD = "<nil>"  # field.Path's rendering of the root (a nil path)
CEL_BLOCKED = ("some validation rules were not checked because the object was invalid; "
               "correct the existing errors to complete validation")
SCHEMA_TYPES = ("array", "boolean", "integer", "number", "object", "string")
RULE_REASONS = ("FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired")
OBJECT_META_FIELDS = frozenset({
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences", "finalizers",
    "managedFields"})
_META_FIELDS = ("apiVersion", "kind", "metadata")
_BLOCKING = frozenset({"FieldValueNotSupported", "FieldValueRequired", "FieldValueTooLong", "FieldValueTooMany",
                       "FieldValueTypeInvalid"})


@dataclass(frozen=True)
class Cause:
    """One 422 cause, as kube-apiserver writes it in Status.details.causes (message without the field)."""

    type: str
    message: str
    field: str

    def as_status_cause(self) -> JSON:
        return {"reason": self.type, "message": self.message, "field": self.field}

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


# --- Go renderings (field.Error.ErrorBody of apimachinery) ---------------------------------------------------

class _Omitted:
    """field.OmitValueType: the value is left out of the message."""


_OMIT = _Omitted()


def go_float(value: float) -> str:
    """Go's %v of a float64: shortest digits, an exponent only below 1e-4 or from 1e21."""
    if math.isfinite(value) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    power = int(exponent)
    if -4 <= power < 21:
        return format(value, "f").rstrip("0").rstrip(".")
    return f"{mantissa}e{'-' if power < 0 else '+'}{abs(power):02d}"


def go_quote(text: str) -> str:
    """strconv.Quote: double quotes, Go escapes for control characters, printable Unicode kept."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char in "\a\b\f\n\r\t\v":
            out.append({"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
                        "\v": "\\v"}[char])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif not char.isprintable() and code > 0x7F:
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _go_json_normal(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    if isinstance(value, list):
        return [_go_json_normal(v) for v in value]
    if isinstance(value, dict):
        return {k: _go_json_normal(v) for k, v in value.items()}
    return value


def go_json(value: Any, *, sort_keys: bool = True) -> str:
    """encoding/json.Marshal: compact, map keys sorted, <, > and & escaped as Go escapes them."""
    text = json.dumps(_go_json_normal(value), sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def go_value(value: Any) -> str:
    """How a field error shows its bad value: simple values bare or quoted, anything else as JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return go_quote(value)
    return go_json(value)


def _body(kind: str, value: Any, detail: str) -> str:
    text = kind if value is _OMIT else f"{kind}: {go_value(value)}"
    return f"{text}: {detail}" if detail else text


def invalid(field: str, value: Any, detail: str) -> Cause:
    return Cause("FieldValueInvalid", _body("Invalid value", value, detail), field)


def type_invalid(field: str, value: Any, detail: str) -> Cause:
    return Cause("FieldValueTypeInvalid", _body("Invalid value", value, detail), field)


def required(field: str, detail: str = "") -> Cause:
    return Cause("FieldValueRequired", f"Required value: {detail}" if detail else "Required value", field)


def forbidden(field: str, detail: str) -> Cause:
    return Cause("FieldValueForbidden", f"Forbidden: {detail}" if detail else "Forbidden", field)


def not_supported(field: str, value: Any, supported: list[str]) -> Cause:
    detail = "supported values: " + ", ".join(go_quote(s) for s in supported) if supported else ""
    return Cause("FieldValueNotSupported", _body("Unsupported value", value, detail), field)


def too_long(field: str, maximum: int) -> Cause:
    detail = f"may not be more than {maximum} {'byte' if maximum == 1 else 'bytes'}" if maximum >= 0 \
        else "value is too long"
    return Cause("FieldValueTooLong", f"Too long: {detail}", field)


def too_many(field: str, actual: int, maximum: int) -> Cause:
    detail = f"must have at most {maximum} {'item' if maximum == 1 else 'items'}" if maximum >= 0 \
        else "has too many items"
    return Cause("FieldValueTooMany", _body("Too many", actual if actual >= 0 else _OMIT, detail), field)


def duplicate(field: str, value: Any) -> Cause:
    return Cause("FieldValueDuplicate", _body("Duplicate value", value, ""), field)


def _field(name: str) -> str:
    """The field of a kube-openapi error named `name` (errPath.Child(TrimPrefix(name, "."))), `<nil>` at the root."""
    if not name or name == ".":
        return NIL_FIELD
    return name[1:] if name.startswith(".") else name


def _child(path: str, name: str) -> str:
    """field.Path.Child; "" stands for the nil (root) path."""
    return f"{path}.{name}" if path else name


def _shown(path: str) -> str:
    return path or NIL_FIELD


# --- schema accessors -----------------------------------------------------------------------------------------

def _props(s: JSON) -> dict[str, JSON]:
    props = s.get("properties")
    if not isinstance(props, dict):
        return {}
    return {str(k): v for k, v in props.items() if isinstance(v, dict)}


def _dicts(s: JSON, key: str) -> list[JSON]:
    """The schemas (or rules) listed under `key`; anything malformed is left out."""
    value = s.get(key)
    return [x for x in value if isinstance(x, dict)] if isinstance(value, list) else []


def _strings(s: JSON, key: str) -> list[str]:
    value = s.get(key)
    return [x for x in value if isinstance(x, str)] if isinstance(value, list) else []


def _extra(s: JSON) -> tuple[bool, JSON | None]:
    """(additionalProperties present, its schema or None) — `true` counts as present without a schema."""
    extra = s.get("additionalProperties")
    if isinstance(extra, dict):
        return True, extra
    return extra is True, None


def _items(s: JSON | None) -> JSON | None:
    items = (s or {}).get("items")
    return items if isinstance(items, dict) else None


def _types(s: JSON) -> list[str]:
    if s.get("x-kubernetes-int-or-string"):
        return ["integer", "string"]
    kind = s.get("type")
    return [kind] if isinstance(kind, str) and kind else []


_STRING_FORMATS = frozenset({
    "bsonobjectid", "uri", "email", "hostname", "ipv4", "ipv6", "cidr", "mac", "uuid", "uuid3", "uuid4", "uuid5",
    "isbn", "isbn10", "isbn13", "creditcard", "ssn", "hexcolor", "rgbcolor", "byte", "password", "date",
    "duration", "datetime", "quantity", "k8sshortname", "k8slongname"})


def _format(s: JSON) -> str:
    """The format kube-apiserver keeps: string formats it validates, int32/int64, float/double; others dropped."""
    fmt = s.get("format")
    if not isinstance(fmt, str) or not fmt:
        return ""
    types = _types(s)
    kind = types[0] if len(types) == 1 else ""
    if kind in ("", "string"):
        return fmt if fmt.replace("-", "") in _STRING_FORMATS else ""
    if kind == "integer":
        return fmt if fmt in ("int32", "int64") else ""
    if kind == "number":
        return fmt if fmt in ("float", "double") else ""
    return ""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _num(s: JSON, key: str) -> int | float | None:
    """A numeric keyword of the schema (None when absent or not a number)."""
    value = s.get(key)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _json_type(value: Any) -> tuple[str, str]:
    """kube-openapi's schemaInfoForType: the JSON type and format a decoded value has."""
    if isinstance(value, bool):
        return "boolean", ""
    if isinstance(value, int):
        return "integer", "int64"
    if isinstance(value, float):
        return "number", "float64"
    if isinstance(value, str):
        return "string", ""
    if isinstance(value, list):
        return "array", ""
    return "object", ""


# --- pruning, null pruning, defaulting -----------------------------------------------------------------------

def prune(schema: JSON, obj: JSON) -> list[str]:
    """Drop what the schema does not know, in place; return the dropped paths as Strict/Warn name them.

    In the real decoder's order: unknown root `metadata` fields (not ObjectMeta's), then the fields the schema
    prunes (sorted), then unknown `metadata` fields of embedded resources. Also drops non-nullable nulls that have
    no default (the decoder's next step), without reporting them.
    """
    meta_unknown = _drop_unknown_meta(obj.get("metadata"), "metadata")
    pruned: list[str] = []
    _prune(obj, schema, "", pruned, embedded=True)
    _prune_nulls(obj, schema)
    coerced: list[str] = []
    _coerce_embedded(obj, schema, "", coerced, root=True)
    return meta_unknown + sorted(pruned) + coerced


def _drop_unknown_meta(metadata: Any, path: str) -> list[str]:
    if not isinstance(metadata, dict):
        return []
    unknown = sorted(k for k in metadata if k not in OBJECT_META_FIELDS)
    for key in unknown:
        del metadata[key]
    return [f"{path}.{key}" for key in unknown]


def _coerce_embedded(value: Any, s: JSON | None, path: str, found: list[str], root: bool = False) -> None:
    """The metadata of an x-kubernetes-embedded-resource object is an ObjectMeta too."""
    if s is None:
        return
    if isinstance(value, dict):
        if s.get("x-kubernetes-embedded-resource") and not root:
            found.extend(_drop_unknown_meta(value.get("metadata"), _child(path, "metadata")))
        props = _props(s)
        extra = _extra(s)[1]
        for key, item in value.items():
            if key in props:
                _coerce_embedded(item, props[key], _child(path, key), found)
            elif extra is not None:
                _coerce_embedded(item, extra, _child(path, key), found)
    elif isinstance(value, list):
        items = _items(s)
        for i, item in enumerate(value):
            _coerce_embedded(item, items, f"{path}[{i}]", found)


def _prune(value: Any, s: JSON | None, path: str, pruned: list[str], embedded: bool = False) -> None:
    if s is not None and s.get("x-kubernetes-preserve-unknown-fields"):
        _skip_prune(value, s, path, pruned, embedded)
        return
    embedded = embedded or bool(s and s.get("x-kubernetes-embedded-resource"))
    if isinstance(value, dict):
        if s is None:
            for key in list(value):
                pruned.append(_child(path, key))
                del value[key]
            return
        _prune_fields(value, s, path, pruned, embedded, keep_unknown=False)
    elif isinstance(value, list):
        items = _items(s)
        for i, item in enumerate(value):
            _prune(item, items, f"{path}[{i}]", pruned)


def _skip_prune(value: Any, s: JSON, path: str, pruned: list[str], embedded: bool) -> None:
    embedded = embedded or bool(s.get("x-kubernetes-embedded-resource"))
    if isinstance(value, dict):
        _prune_fields(value, s, path, pruned, embedded, keep_unknown=True)
    elif isinstance(value, list):
        items = _items(s)
        if items is not None:
            for i, item in enumerate(value):
                _skip_prune(item, items, f"{path}[{i}]", pruned, False)


def _prune_fields(value: JSON, s: JSON, path: str, pruned: list[str], embedded: bool, *, keep_unknown: bool) -> None:
    """An object's fields: each one the schema declares (or its `additionalProperties` describes) pruned by its own
    schema, an embedded resource's apiVersion, kind and metadata left as they are, and any other field dropped
    unless the object keeps unknown fields (x-kubernetes-preserve-unknown-fields)."""
    props = _props(s)
    has_extra, extra = _extra(s)
    for key in list(value):
        if embedded and key in _META_FIELDS:
            continue
        if key in props:
            _prune(value[key], props[key], _child(path, key), pruned)
        elif has_extra:
            _prune(value[key], extra, _child(path, key), pruned)
        elif not keep_unknown:
            pruned.append(_child(path, key))
            del value[key]


def _field_schema(key: str, s: JSON | None) -> JSON | None:
    if s is None:
        return None
    props = _props(s)
    if key in props:
        return props[key]
    return _extra(s)[1]


def _prune_nulls(value: Any, s: JSON | None) -> None:
    """PruneNonNullableNullsWithoutDefaults: a null that may not be null and has no default is removed."""
    if isinstance(value, dict):
        for key in list(value):
            sub = _field_schema(key, s)
            if value[key] is None and sub is not None and not sub.get("nullable") and "default" not in sub:
                del value[key]
            else:
                _prune_nulls(value[key], sub)
    elif isinstance(value, list):
        items = _items(s)
        for item in value:
            _prune_nulls(item, items)


def apply_defaults(schema: JSON, obj: JSON) -> None:
    """Fill `default`s in place: absent fields of objects that exist, and nulls of non-nullable fields."""
    _default(obj, schema)


def _default(value: Any, s: JSON | None) -> None:
    if s is None:
        return
    if isinstance(value, dict):
        for key, prop in _props(s).items():
            if "default" not in prop:
                continue
            if key not in value or (value[key] is None and not prop.get("nullable")):
                value[key] = copy.deepcopy(prop["default"])
        has_extra, extra = _extra(s)
        props = _props(s)
        for key in list(value):
            if key in props:
                _default(value[key], props[key])
            elif has_extra and extra is not None:
                if value[key] is None and not extra.get("nullable"):
                    value[key] = copy.deepcopy(extra.get("default"))
                _default(value[key], extra)
    elif isinstance(value, list):
        items = _items(s)
        if items is None:
            return
        for i, item in enumerate(value):
            if item is None and not items.get("nullable"):
                value[i] = copy.deepcopy(items.get("default"))
            _default(value[i], items)


# --- schema validation (kube-openapi) ------------------------------------------------------------------------

_REGEX_CACHE: dict[str, tuple[Callable[[str], bool] | None, str | None]] = {}


def _re2_compile(pattern: str) -> tuple[Callable[[str], bool] | None, str | None]:
    """Go's regexp is RE2: compile with google-re2 (cel-python's dependency), errors not logged to stderr."""
    if pattern in _REGEX_CACHE:
        return _REGEX_CACHE[pattern]
    result: tuple[Callable[[str], bool] | None, str | None]
    try:
        re2 = importlib.import_module("re2")
    except ImportError:  # pragma: no cover - google-re2 comes with cel-python, the sim's CEL engine
        try:
            compiled = re.compile(pattern)
            result = (lambda text: compiled.search(text) is not None), None
        except re.error as exc:
            result = None, f"error parsing regexp: {exc}"
    else:
        options = re2.Options()
        options.log_errors = False
        try:
            compiled2 = re2.compile(pattern, options)
            result = (lambda text: compiled2.search(text) is not None), None
        except Exception as exc:  # re2.error: the pattern is not RE2 syntax
            detail = exc.args[0] if exc.args else exc
            text = detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)
            result = None, f"error parsing regexp: {text}"
    _REGEX_CACHE[pattern] = result
    return result


def regex_error(pattern: str) -> str | None:
    """Why `pattern` is not a Go (RE2) regular expression, or None."""
    return _re2_compile(pattern)[1]


class _Validator:
    """kube-openapi's SchemaValidator.Validate, node by node, with ratcheting of unchanged parts on update."""

    def __init__(self) -> None:
        self.causes: list[Cause] = []

    def node(self, s: JSON, data: Any, path: str, old: Any = None, correlated: bool = False) -> None:
        if correlated and old is not None and _same(old, data):
            return  # ratcheted: this part did not change, its errors are not reported
        types = _types(s)
        fmt = _format(s)
        if data is None:
            self._type(types, bool(s.get("nullable")), fmt, None, path)
            self._enum(s, None, path)
            return
        self._type(types, bool(s.get("nullable")), fmt, data, path)
        self._junctors(s, data, path)
        if isinstance(data, str):
            self._string(s, data, path)
            if fmt.replace("-", "") in _STRING_FORMATS:
                self._string_format(fmt, data, path)
        if _is_number(data):
            self._number(s, data, path)
        if isinstance(data, list):
            self._array(s, data, path, old if correlated else None)
        self._enum(s, data, path)
        if isinstance(data, dict):
            self._object(s, data, path, old if correlated and isinstance(old, dict) else None)

    def _type(self, types: list[str], nullable: bool, fmt: str, data: Any, path: str) -> None:
        if not types and not fmt:
            return
        if data is None:
            if types and "null" not in types and not nullable:
                self._type_error(path, ",".join(types), "null")
            return
        kind, data_format = _json_type(data)
        float_int = kind == "number" and float(data).is_integer() and "integer" in types
        int_float = kind == "integer" and "number" in types
        if not isinstance(data, (str, list)) and fmt and \
                not (kind in types or data_format == fmt or float_int or int_float):
            self._type_error(path, fmt, data_format)
            return
        if "number" not in types and "integer" not in types and fmt and isinstance(data, (str, list)):
            return
        if not (kind in types or float_int or int_float):
            self._type_error(path, ",".join(types), kind)

    def _type_error(self, path: str, type_name: str, value: str) -> None:
        self.causes.append(type_invalid(_field(path), value,
                                        f"{path} in body must be of type {type_name}: {go_quote(value)}"))

    def _junctors(self, s: JSON, data: Any, path: str) -> None:
        any_of = _dicts(s, "anyOf")
        if any_of:
            best: list[Cause] | None = None
            for sub in any_of:
                found = self._sub(sub, data, path)
                if not found:
                    best = None
                    break
                best = best if best is not None else found
            else:
                self.causes.append(invalid(NIL_FIELD, "", f"{go_quote(path)} must validate at least one schema "
                                                          "(anyOf)"))
            self.causes.extend(best or [])
        one_of = _dicts(s, "oneOf")
        if one_of:
            results = [self._sub(sub, data, path) for sub in one_of]
            valid = sum(1 for r in results if not r)
            if valid != 1:
                extra = "Found none valid" if valid == 0 else f"Found {valid} valid alternatives"
                self.causes.append(invalid(NIL_FIELD, "", f"{go_quote(path)} must validate one and only one schema "
                                                          f"(oneOf). {extra}"))
                if valid == 0:
                    self.causes.extend(results[0])
        all_of = _dicts(s, "allOf")
        if all_of:
            results = [self._sub(sub, data, path) for sub in all_of]
            valid = sum(1 for r in results if not r)
            for result in results:
                self.causes.extend(result)
            if valid != len(all_of):
                extra = ". None validated" if valid == 0 else ""
                self.causes.append(invalid(NIL_FIELD, "", f"{go_quote(path)} must validate all the schemas "
                                                          f"(allOf){extra}"))
        not_schema = s.get("not")
        if isinstance(not_schema, dict) and not self._sub(not_schema, data, path):
            self.causes.append(invalid(NIL_FIELD, "", f"{go_quote(path)} must not validate the schema (not)"))

    @staticmethod
    def _sub(s: JSON, data: Any, path: str) -> list[Cause]:
        sub = _Validator()
        sub.node(s, data, path)
        return sub.causes

    def _string(self, s: JSON, data: str, path: str) -> None:
        field = _field(path)
        maximum, minimum, pattern = _num(s, "maxLength"), _num(s, "minLength"), s.get("pattern")
        if maximum is not None and len(data) > maximum:
            self.causes.append(too_long(field, int(maximum)))
        elif minimum is not None and len(data) < minimum:
            self.causes.append(invalid(field, data, f"{path} in body should be at least {int(minimum)} chars long"))
        elif isinstance(pattern, str) and pattern:
            matcher = _re2_compile(pattern)[0]
            if matcher is None:
                self.causes.append(invalid(field, data, f"{path} in body should match '{pattern}, but pattern is "
                                                        f"invalid: {regex_error(pattern)}'"))
            elif not matcher(data):
                self.causes.append(invalid(field, data, f"{path} in body should match '{pattern}'"))

    def _string_format(self, fmt: str, data: str, path: str) -> None:
        if not _format_valid(fmt, data):
            self.causes.append(type_invalid(_field(path), data,
                                            f"{path} in body must be of type {fmt}: {go_quote(data)}"))

    def _number(self, s: JSON, data: int | float, path: str) -> None:
        field = _field(path)
        factor = _num(s, "multipleOf")
        if factor is not None:
            if isinstance(data, int) and int(factor) != 0:
                if data % int(factor) != 0:
                    self.causes.append(invalid(field, data, f"{path} in body should be a multiple of {int(factor)}"))
            elif factor > 0:
                quotient = (1 / factor * data) if factor < 1 else (data / factor)
                if not (math.isfinite(quotient) and quotient.is_integer()):
                    self.causes.append(invalid(field, data,
                                               f"{path} in body should be a multiple of {go_float(float(factor))}"))
        bounds = (("minimum", "exclusiveMinimum", False), ("maximum", "exclusiveMaximum", True))
        for key, exclusive_key, above in bounds:
            bound = _num(s, key)
            if bound is None:
                continue
            exclusive = bool(s.get(exclusive_key))
            limit: int | float = int(bound) if isinstance(data, int) else float(bound)
            shown = str(limit) if isinstance(limit, int) else go_float(limit)
            if above and (data >= limit if exclusive else data > limit):
                relation = "less than" if exclusive else "less than or equal to"
                self.causes.append(invalid(field, data, f"{path} in body should be {relation} {shown}"))
            if not above and (data <= limit if exclusive else data < limit):
                relation = "greater than" if exclusive else "greater than or equal to"
                self.causes.append(invalid(field, data, f"{path} in body should be {relation} {shown}"))

    def _array(self, s: JSON, data: list[Any], path: str, old: Any) -> None:
        items = _items(s)
        if items is not None:
            matches = _correlate_items(s, data, old)
            for i, item in enumerate(data):
                previous = matches.get(i, _MISSING)
                self.node(items, item, f"{path}[{i}]", None if previous is _MISSING else previous,
                          previous is not _MISSING)
        field = _field(path)
        minimum, maximum = _num(s, "minItems"), _num(s, "maxItems")
        if minimum is not None and len(data) < minimum:
            self.causes.append(invalid(field, len(data), f"{path} in body should have at least {int(minimum)} items"))
        if maximum is not None and len(data) > maximum:
            self.causes.append(too_many(field, len(data), int(maximum)))
        if s.get("uniqueItems") and any(_same(a, b) for i, a in enumerate(data) for b in data[i + 1:]):
            self.causes.append(invalid(field, "", f"{path} in body shouldn't contain duplicates"))

    def _enum(self, s: JSON, data: Any, path: str) -> None:
        values = s.get("enum")
        if not isinstance(values, list) or not values:
            return
        if data is not None and any(_enum_equal(data, e) for e in values):
            return
        shown = [e if isinstance(e, str) else go_json(e) for e in values]
        self.causes.append(not_supported(_field(path), data, shown))

    def _object(self, s: JSON, data: JSON, path: str, old: JSON | None) -> None:
        field = _field(path)
        count = len(data)
        minimum, maximum = _num(s, "minProperties"), _num(s, "maxProperties")
        if minimum is not None and count < minimum:
            self.causes.append(invalid(field, count, f"{path} in body should have at least {int(minimum)} properties"))
            return
        if maximum is not None and count > maximum:
            self.causes.append(too_many(field, count, int(maximum)))
            return
        props = _props(s)
        extra = s.get("additionalProperties")
        correlated = old is not None and s.get("x-kubernetes-map-type") != "atomic"
        if extra is False:
            for key in data:
                if key not in props:
                    self.causes.append(invalid(field, key, f"{path}.{key} in body is a forbidden property"))
        elif isinstance(extra, dict):
            for key, value in data.items():
                if key not in props:
                    self._keyed(extra, value, f"{path}.{key}", old, key, correlated)
        for key, prop in props.items():
            if key in data:
                self._keyed(prop, data[key], _child(path, key), old, key, correlated)
        for key in _strings(s, "required"):
            if key not in data:
                self.causes.append(required(_field(f"{path}.{key}")))

    def _keyed(self, s: JSON, value: Any, path: str, old: JSON | None, key: str, correlated: bool) -> None:
        if correlated and old is not None and key in old:
            self.node(s, value, path, old[key], True)
        else:
            self.node(s, value, path)


class _Missing:
    pass


_MISSING = _Missing()


def _same(a: Any, b: Any) -> bool:
    """reflect.DeepEqual of decoded JSON: numbers of different Go types (1 and 1.0) differ, as bool and int do."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _enum_equal(data: Any, allowed: Any) -> bool:
    if isinstance(data, bool) or isinstance(allowed, bool):
        return isinstance(data, bool) and isinstance(allowed, bool) and data == allowed
    if _is_number(data) and _is_number(allowed):
        if isinstance(allowed, int) and isinstance(data, float):
            return math.isfinite(data) and int(data) == allowed  # Go converts the value to the enum's type
        return bool(float(data) == float(allowed))
    return _same(data, allowed)


def _map_key(item: Any, keys: list[str]) -> tuple[str, ...] | None:
    if not isinstance(item, dict):
        return None
    return tuple(go_json(item.get(k)) for k in keys)


def _correlate_items(s: JSON, data: list[Any], old: Any) -> dict[int, Any]:
    """Old values of a list's items: by the map keys of a `map` list, by value in a `set`; none in atomic lists."""
    if not isinstance(old, list):
        return {}
    kind = s.get("x-kubernetes-list-type")
    if kind == "map":
        keys = _strings(s, "x-kubernetes-list-map-keys")
        by_key = {_map_key(o, keys): o for o in old if _map_key(o, keys) is not None}
        return {i: by_key[_map_key(item, keys)] for i, item in enumerate(data) if _map_key(item, keys) in by_key}
    if kind == "set":
        return {i: item for i, item in enumerate(data) if any(_same(item, o) for o in old)}
    return {}


_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_MAC = re.compile(r"^([0-9A-Fa-f]{2}[:-]){5}([0-9A-Fa-f]{2})$|^([0-9A-Fa-f]{4}\.){2}[0-9A-Fa-f]{4}$")
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}"
                       r"[A-Za-z0-9])?)*\.?$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_SHORT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LONG_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _format_valid(fmt: str, data: str) -> bool:
    """The strfmt checks kube-apiserver runs for the common formats; the rare ones are accepted unchecked."""
    try:
        if fmt in ("date-time", "datetime"):
            return crd_cel.parse_timestamp(data) is not None
        if fmt == "date":
            return bool(_DATE.match(data)) and crd_cel.parse_timestamp(data + "T00:00:00Z") is not None
        if fmt == "duration":
            return crd_cel.parse_duration(data) is not None
        if fmt in ("uuid", "uuid3", "uuid4", "uuid5"):
            parsed = uuid.UUID(data)
            return len(data) == 36 and (fmt == "uuid" or parsed.version == int(fmt[-1]))
        if fmt == "ipv4":
            return isinstance(ipaddress.ip_address(data), ipaddress.IPv4Address)
        if fmt == "ipv6":
            return isinstance(ipaddress.ip_address(data), ipaddress.IPv6Address)
        if fmt == "cidr":
            ipaddress.ip_network(data, strict=False)
            return "/" in data
        if fmt == "byte":
            base64.b64decode(data, validate=True)
            return True
        if fmt == "mac":
            return bool(_MAC.match(data))
        if fmt == "hostname":
            return bool(_HOSTNAME.match(data))
        if fmt == "email":
            return bool(_EMAIL.match(data))
        if fmt == "quantity":
            return bool(_QUANTITY.match(data))
        if fmt == "k8s-short-name":
            return len(data) <= 63 and bool(_SHORT_NAME.match(data))
        if fmt == "k8s-long-name":
            return len(data) <= 253 and bool(_LONG_NAME.match(data))
    except ValueError:
        return False
    return True


# --- x-kubernetes-list-type and embedded resources -----------------------------------------------------------

def _set_key(item: Any) -> tuple[str, Any]:
    """How Go tells list items apart: compounds by their JSON, scalars by type and value (1 is not 1.0 or true)."""
    if isinstance(item, (dict, list)):
        return "json", go_json(item)
    return type(item).__name__, item


def _second_occurrences(keys: list[tuple[str, Any]]) -> list[int]:
    """validateListSet: the index of each value's second appearance (later ones are not reported again)."""
    seen: dict[tuple[str, Any], int] = {}
    found: list[int] = []
    for i, key in enumerate(keys):
        seen[key] = seen.get(key, 0) + 1
        if seen[key] == 2:
            found.append(i)
    return found


def _list_errors(s: JSON | None, value: Any, path: str, out: list[Cause]) -> None:
    """ValidateListSetsAndMaps: items of a `set` are unique, items of a `map` unique by their keys."""
    if s is None or value is None:
        return
    if isinstance(value, list):
        kind = s.get("x-kubernetes-list-type")
        if kind == "set":
            for i in _second_occurrences([_set_key(item) for item in value]):
                out.append(duplicate(f"{path}[{i}]", value[i]))
        elif kind == "map":
            _map_list_errors(_strings(s, "x-kubernetes-list-map-keys"), value, path, out)
        items = _items(s)
        for i, item in enumerate(value):
            _list_errors(items, item, f"{path}[{i}]", out)
    elif isinstance(value, dict):
        props = _props(s)
        extra = _extra(s)[1]
        for key, item in value.items():
            if key in props:
                _list_errors(props[key], item, _child(path, key), out)
            elif extra is not None:
                _list_errors(extra, item, f"{path}[{key}]", out)


def _map_list_errors(keys: list[str], value: list[Any], path: str, out: list[Cause]) -> None:
    for i, item in enumerate(value):
        if item is not None and not isinstance(item, dict):
            out.append(invalid(f"{path}[{i}]", item, "must be an object for an array of list-type map"))
            return
    identities = [{k: item[k] for k in keys if k in item} if isinstance(item, dict) else {} for item in value]
    for i in _second_occurrences([_set_key(identity) for identity in identities]):
        out.append(duplicate(f"{path}[{i}]", identities[i]))


def _embedded_errors(s: JSON | None, value: Any, path: str, out: list[Cause], root: bool = True) -> None:
    """An x-kubernetes-embedded-resource object must name its apiVersion and kind."""
    if s is None or value is None:
        return
    if isinstance(value, dict):
        if s.get("x-kubernetes-embedded-resource") and not root:
            for key in ("apiVersion", "kind"):
                if not value.get(key):
                    out.append(required(_child(path, key), "must not be empty"))
        props = _props(s)
        extra = _extra(s)[1]
        for key, item in value.items():
            if key in props:
                _embedded_errors(props[key], item, _child(path, key), out, False)
            elif extra is not None:
                _embedded_errors(extra, item, f"{path}[{key}]", out, False)
    elif isinstance(value, list):
        items = _items(s)
        for i, item in enumerate(value):
            _embedded_errors(items, item, f"{path}[{i}]", out, False)


# --- CEL rules -------------------------------------------------------------------------------------------------

def _rule_error_string(rule: JSON) -> str:
    message = str(rule.get("message") or "")
    return message.strip() if message else str(rule.get("rule") or "").strip()


def _rule_path(path: str, field_path: str) -> str:
    """The rule's fieldPath (".spec.x", "['a.b']") appended to the node's path as field.Path renders it."""
    text = field_path.strip()
    if not text:
        return path
    parts: list[str] = []
    for token in re.finditer(r"\.([^.\[\]]+)|\['((?:[^'\\]|\\.)*)'\]|\[(\d+)\]", text):
        if token.group(1) is not None:
            parts.append("." + token.group(1))
        elif token.group(2) is not None:
            parts.append("." + token.group(2).replace("\\'", "'").replace("\\\\", "\\"))
        else:
            parts.append(f"[{token.group(3)}]")
    joined = "".join(parts).lstrip(".")
    return _child(path, joined) if joined else path


def _rule_failure(rule: JSON, path: str, value: Any, detail: str) -> Cause:
    reason = rule.get("reason")
    if reason == "FieldValueForbidden":
        return forbidden(path, detail)
    if reason == "FieldValueRequired":
        return required(path, detail)
    if reason == "FieldValueDuplicate":
        return duplicate(path, value)
    return invalid(path, value, detail)


def _message_expression(expression: str, activation: JSON) -> str | None:
    try:
        result = crd_cel.evaluate(expression, activation)
    except crd_cel.CelError:
        return None
    if not isinstance(result, str):
        return None
    text = str(result).strip()
    return text if text and "\n" not in text and len(text) <= 5 * 1024 else None


class _Rules:
    """The x-kubernetes-validations pass: every node with rules, self bound to its value, oldSelf to the old one."""

    def __init__(self) -> None:
        self.causes: list[Cause] = []

    def node(self, s: JSON, data: Any, old: Any, path: str, unchanged: bool) -> None:
        if data is None:
            return
        self._rules(s, data, old, path, unchanged)
        if isinstance(data, list):
            items = _items(s)
            if items is None:
                return
            matches = _correlate_items(s, data, old) if s.get("x-kubernetes-list-type") == "map" else {}
            for i, item in enumerate(data):
                previous = matches.get(i, _MISSING)
                if previous is _MISSING:
                    self.node(items, item, None, f"{path}[{i}]", unchanged)
                else:
                    self.node(items, item, previous, f"{path}[{i}]", _same(item, previous))
        elif isinstance(data, dict):
            old_map = old if isinstance(old, dict) and s.get("x-kubernetes-map-type") != "atomic" else None
            props = _props(s)
            extra = _extra(s)[1]
            for key, value in data.items():
                sub = props.get(key) if key in props else extra
                if sub is None:
                    continue
                sub_path = _child(path, key) if key in props else f"{path}[{key}]"
                if old_map is not None and key in old_map:
                    self.node(sub, value, old_map[key], sub_path, _same(value, old_map[key]))
                else:
                    self.node(sub, value, None, sub_path, unchanged and old_map is None)

    def _rules(self, s: JSON, data: Any, old: Any, path: str, unchanged: bool) -> None:
        rules = _dicts(s, "x-kubernetes-validations")
        if not rules:
            return
        kind = str(s.get("type") or "")
        activation: JSON | None = None
        for rule in rules:
            text = str(rule.get("rule") or "")
            if not text.strip():
                continue
            transition = crd_cel.uses_old_self(text)
            optional = transition and rule.get("optionalOldSelf") is True
            if transition and old is None and not optional:
                continue  # transition rules run only when there is an old value to compare with
            if unchanged and not transition:
                continue  # ratcheted: the real server only warns about an unchanged value
            memo_key = _memo_key(("?" if optional else "") + text, s, data, old if transition else None)
            outcome = _memo_get(memo_key, s)
            if outcome is None:
                if activation is None:
                    activation = _activation(s, data, old)
                bound = activation
                if optional:
                    bound = {**activation, "oldSelf": crd_cel.OptionalValue(activation.get("oldSelf"))}
                try:
                    outcome = (bool(_is_true(crd_cel.evaluate(text, bound))), None)
                except crd_cel.CelError as exc:
                    outcome = (False, str(exc))
                _memo_put(memo_key, s, outcome)
            passed, error = outcome
            if error is not None:
                self.causes.append(invalid(_shown(path), kind, f"{error} evaluating rule: {_rule_error_string(rule)}"))
                continue
            if passed:
                continue
            where = _shown(_rule_path(path, str(rule.get("fieldPath") or "")))
            detail = None
            if rule.get("messageExpression"):
                if activation is None:
                    activation = _activation(s, data, old)
                detail = _message_expression(str(rule["messageExpression"]), activation)
            if detail is None:
                message = str(rule.get("message") or "")
                detail = message.strip() if message else f"failed rule: {_rule_error_string(rule)}"
            value = _OMIT if kind in ("object", "array") else data  # an untyped node shows even a map
            self.causes.append(_rule_failure(rule, where, value, detail))


def _activation(s: JSON, data: Any, old: Any) -> JSON:
    activation = {"self": crd_cel.to_cel(data, s)}
    if old is not None:
        activation["oldSelf"] = crd_cel.to_cel(old, s)
    return activation


def _is_true(result: Any) -> bool:
    """Only a CEL true passes a rule (an int or a string does not)."""
    return result is True or (type(result).__name__ == "BoolType" and bool(result))


# A rule's verdict depends only on its text, the values bound to self and oldSelf, and the schema node that types
# them, and cel-python's interpreter takes a millisecond or more per rule: objects written again and again with the
# same spec (10,000 of them in the bench) reuse the verdict. The entry holds its schema node, so the node's id in
# the key cannot be reused by another schema while the entry lives.
_MEMO: OrderedDict[tuple[str, int, str, str | None], tuple[JSON, tuple[bool, str | None]]] = OrderedDict()
_MEMO_SIZE = 4096
_MEMO_VALUE_LIMIT = 2048


def _memo_key(rule: str, s: JSON, data: Any, old: Any) -> tuple[str, int, str, str | None] | None:
    try:
        value = json.dumps(data, separators=(",", ":"))
        previous = None if old is None else json.dumps(old, separators=(",", ":"))
    except (TypeError, ValueError):
        return None
    if len(value) + len(previous or "") > _MEMO_VALUE_LIMIT:
        return None
    return rule, id(s), value, previous


def _memo_get(key: tuple[str, int, str, str | None] | None, s: JSON) -> tuple[bool, str | None] | None:
    if key is None:
        return None
    entry = _MEMO.get(key)
    if entry is None or entry[0] is not s:
        return None
    with contextlib.suppress(KeyError):  # another thread may have evicted it meanwhile
        _MEMO.move_to_end(key)
    return entry[1]


def _memo_put(key: tuple[str, int, str, str | None] | None, s: JSON, outcome: tuple[bool, str | None]) -> None:
    if key is None:
        return
    _MEMO[key] = (s, outcome)
    while len(_MEMO) > _MEMO_SIZE:
        with contextlib.suppress(KeyError):
            _MEMO.popitem(last=False)


# --- the public checks ------------------------------------------------------------------------------------------

def validate(schema: JSON, obj: JSON, old: JSON | None, metadata: Iterable[Cause] = ()) -> list[Cause]:
    """The causes kube-apiserver's custom resource strategy returns for `obj` (create: old=None; update: old).

    `metadata` are the object's metadata causes, which the real strategy finds first: they lead the list, and a
    blocking one (a Required name) skips the CEL rules like a schema error does."""
    validator = _Validator()
    validator.node(schema, obj, "", old, old is not None)
    causes = [*metadata, *validator.causes]
    _embedded_errors(schema, obj, "", causes)
    list_errors: list[Cause] = []
    old_list_errors: list[Cause] = []
    if old is not None:
        _list_errors(schema, old, "", old_list_errors)
    if not old_list_errors:
        _list_errors(schema, obj, "", list_errors)
    causes.extend(list_errors)
    if _has_rules(schema):
        if any(c.type in _BLOCKING for c in causes):
            causes.append(invalid(NIL_FIELD, None, CEL_BLOCKED))
        else:
            rules = _Rules()
            root = _with_type_meta(schema)
            rules.node(root, obj, old, "", old is not None and _same(obj, old))
            causes.extend(rules.causes)
    return causes


_TYPE_META: OrderedDict[int, tuple[JSON, JSON]] = OrderedDict()


def _with_type_meta(schema: JSON) -> JSON:
    """model.WithTypeAndObjectMeta: `self` at the root also sees apiVersion, kind and metadata name fields.

    Built once per schema (the entry holds the schema, so its id is not reused while cached), so that the root
    node keeps one identity across objects and its rules' verdicts can be reused."""
    cached = _TYPE_META.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    props = dict(_props(schema))
    props.setdefault("apiVersion", {"type": "string"})
    props.setdefault("kind", {"type": "string"})
    # Whatever the schema says of metadata, CEL sees only these two of its fields (crd_cel.OBJECT_ROOT_METADATA).
    props["metadata"] = {"type": "object", "properties": {name: {"type": "string"}
                                                          for name in crd_cel.OBJECT_ROOT_METADATA}}
    root = {**schema, "properties": props}
    _TYPE_META[id(schema)] = (schema, root)
    if len(_TYPE_META) > 256:
        _TYPE_META.popitem(last=False)
    return root


def _has_rules(s: Any) -> bool:
    if not isinstance(s, dict):
        return False
    if s.get("x-kubernetes-validations"):
        return True
    if any(_has_rules(p) for p in _props(s).values()):
        return True
    return _has_rules(s.get("items")) or _has_rules(s.get("additionalProperties"))


# --- CRD-time checks -------------------------------------------------------------------------------------------

_ROOT, _ITEM, _FIELD = "root", "item", "field"
_NESTED_FORBIDDEN = (
    ("additionalProperties", "must be undefined to be structural"),
    ("default", "must be undefined to be structural"),
    ("title", "must be empty to be structural"),
    ("description", "must be empty to be structural"),
    ("nullable", "must be false to be structural"),
    ("externalDocs", "must be undefined to be structural"),
    ("x-kubernetes-preserve-unknown-fields", "must be false to be structural"),
    ("x-kubernetes-embedded-resource", "must be false to be structural"),
    ("x-kubernetes-int-or-string", "must be false to be structural"),
    ("x-kubernetes-list-map-keys", "must be empty to be structural"),
    ("x-kubernetes-list-type", "must be undefined to be structural"),
    ("x-kubernetes-map-type", "must be undefined to be structural"),
    ("x-kubernetes-validations", "must be empty to be structural"),
)
_INT_OR_STRING_ANY_OF = [{"type": "integer"}, {"type": "string"}]


def check_structural(schema: JSON, base: str = "spec.versions[0].schema.openAPIV3Schema") -> list[Cause]:
    """Why kube-apiserver refuses a CRD version's schema (empty if it accepts it); paths start at `base`."""
    causes: list[Cause] = []
    _openapi_checks(schema, base, causes, root=True)
    structural: list[Cause] = []
    _invariants(schema, _ROOT, base, structural)
    structural.sort(key=str)
    return causes + structural


def _openapi_checks(s: JSON, path: str, out: list[Cause], root: bool = False) -> None:
    """ValidateCustomResourceDefinitionOpenAPISchema: types, extensions, defaults and rules of every node."""
    kind = s.get("type")
    if kind is not None and kind not in SCHEMA_TYPES:
        out.append(not_supported(f"{path}.type", kind, list(SCHEMA_TYPES)))
    if s.get("uniqueItems") is True:
        out.append(forbidden(f"{path}.uniqueItems",
                             "uniqueItems cannot be set to true since the runtime complexity becomes quadratic"))
    extra = s.get("additionalProperties")
    if extra is not None and s.get("properties"):
        out.append(forbidden(f"{path}.additionalProperties",
                             "additionalProperties and properties are mutual exclusive"))
    if extra is False:
        out.append(forbidden(f"{path}.additionalProperties", "additionalProperties cannot be set to false"))
    if s.get("x-kubernetes-preserve-unknown-fields") is False:
        out.append(invalid(f"{path}.x-kubernetes-preserve-unknown-fields", False, "must be true or undefined"))
    list_type = s.get("x-kubernetes-list-type")
    if list_type is not None:
        if list_type not in ("atomic", "map", "set"):
            out.append(not_supported(f"{path}.x-kubernetes-list-type", list_type, ["atomic", "map", "set"]))
        elif list_type == "map" and not s.get("x-kubernetes-list-map-keys"):
            out.append(required(f"{path}.x-kubernetes-list-map-keys",
                                "must not be empty if x-kubernetes-list-type is map"))
    if "default" in s and s.get("default") is not None:
        _default_checks(s, path, out)
    _rule_checks(s, path, out, root or s.get("x-kubernetes-embedded-resource") is True)
    for key, prop in _props(s).items():
        if isinstance(prop, dict):
            _openapi_checks(prop, f"{path}.properties[{key}]", out)
    if isinstance(s.get("items"), dict):
        _openapi_checks(s["items"], f"{path}.items", out)
    if isinstance(extra, dict):
        _openapi_checks(extra, f"{path}.additionalProperties", out)


def _default_checks(s: JSON, path: str, out: list[Cause]) -> None:
    """A default must carry no field the schema would prune, and be valid against its own node of the schema
    (errors named from the default: `<node>.default` for a scalar, `<node>.default.x` inside an object)."""
    value = copy.deepcopy(s["default"])
    node = {k: v for k, v in s.items() if k != "x-kubernetes-validations"}
    pruned: list[str] = []
    _prune(copy.deepcopy(value), node, "", pruned, embedded=bool(s.get("x-kubernetes-embedded-resource")))
    if pruned:
        out.append(invalid(f"{path}.default", s["default"], "must not have unknown fields"))
    validator = _Validator()
    validator.node(node, value, "")
    for cause in validator.causes:
        field = f"{path}.default" if cause.field == NIL_FIELD else f"{path}.default.{cause.field}"
        out.append(Cause(cause.type, cause.message, field))


def _rule_json(rule: JSON) -> str:
    """A ValidationRule as Go marshals the struct: its fields in declaration order, empty ones left out."""
    fields = [("rule", rule.get("rule") or "")]
    for key in ("message", "messageExpression", "reason", "fieldPath", "optionalOldSelf"):
        if rule.get(key) not in (None, ""):
            fields.append((key, rule[key]))
    return go_json(dict(fields), sort_keys=False)


def _rule_checks(s: JSON, path: str, out: list[Cause], object_root: bool = False) -> None:
    rules = s.get("x-kubernetes-validations")
    for i, rule in enumerate(rules if isinstance(rules, list) else []):
        where = f"{path}.x-kubernetes-validations[{i}]"
        if not isinstance(rule, dict):
            continue
        text = str(rule.get("rule") or "")
        if not text.strip():
            out.append(required(f"{where}.rule", ""))
            continue
        error = crd_cel.compile_error(text, object_root=object_root)
        if error:
            out.append(Cause("FieldValueInvalid", f"Invalid value: {_rule_json(rule)}: {error}", f"{where}.rule"))
        expression = rule.get("messageExpression")
        if expression:
            expression_error = crd_cel.compile_error(str(expression))
            if expression_error:
                out.append(Cause("FieldValueInvalid",
                                 f"Invalid value: {_rule_json(rule)}: messageExpression {expression_error}",
                                 f"{where}.messageExpression"))
        reason = rule.get("reason")
        if reason is not None and reason not in RULE_REASONS:
            out.append(not_supported(f"{where}.reason", reason, list(RULE_REASONS)))


def _invariants(s: JSON, level: str, path: str, out: list[Cause]) -> None:
    """validateStructuralInvariants of apiextensions-apiserver's structural schema validation."""
    kind = s.get("type") if isinstance(s.get("type"), str) else ""
    items = s.get("items")
    if kind == "array" and not isinstance(items, dict):
        out.append(required(f"{path}.items", "must be specified"))
    if isinstance(items, dict):
        _invariants(items, _ITEM, f"{path}.items", out)
    for key, prop in _props(s).items():
        if isinstance(prop, dict):
            _invariants(prop, _FIELD, f"{path}.properties[{key}]", out)
    extra = s.get("additionalProperties")
    if extra is not None and extra is not False:
        if level == _ROOT:
            out.append(forbidden(f"{path}.additionalProperties", "must not be used at the root"))
        if isinstance(extra, dict):
            _invariants(extra, _FIELD, f"{path}.additionalProperties", out)
    int_or_string = bool(s.get("x-kubernetes-int-or-string"))
    preserve = bool(s.get("x-kubernetes-preserve-unknown-fields"))
    embedded = bool(s.get("x-kubernetes-embedded-resource"))
    if int_or_string and preserve:
        out.append(invalid(f"{path}.x-kubernetes-preserve-unknown-fields", True,
                           "must be false if x-kubernetes-int-or-string is true"))
    if int_or_string and embedded:
        out.append(invalid(f"{path}.x-kubernetes-embedded-resource", True,
                           "must be false if x-kubernetes-int-or-string is true"))
    _value_validation(s, level, path, out)
    if embedded and kind != "object":
        if not kind:
            out.append(required(f"{path}.type", "must be object if x-kubernetes-embedded-resource is true"))
        else:
            out.append(invalid(f"{path}.type", kind, "must be object if x-kubernetes-embedded-resource is true"))
    elif not kind and not int_or_string and not preserve:
        detail = {_ROOT: "must not be empty at the root", _ITEM: "must not be empty for specified array items",
                  _FIELD: "must not be empty for specified object fields"}[level]
        out.append(required(f"{path}.type", detail))
    if embedded and extra is not None:
        out.append(forbidden(f"{path}.additionalProperties",
                             "must not be used if x-kubernetes-embedded-resource is set"))
    if level == _ROOT and kind and kind != "object":
        out.append(invalid(f"{path}.type", kind, "must be object at the root"))
    props = _props(s)
    check_meta = level == _ROOT or embedded
    for key in ("kind", "apiVersion"):
        if key in props and check_meta and props[key].get("type") != "string":
            out.append(invalid(f"{path}.properties[{key}].type", props[key].get("type") or "", "must be string"))
    if "metadata" in props and isinstance(props["metadata"], dict):
        _metadata_invariants(props["metadata"], check_meta, level, f"{path}.properties[metadata]", out)
    if embedded and not preserve and not props:
        out.append(required(f"{path}.properties", "must not be empty if x-kubernetes-embedded-resource is true "
                                                  "without x-kubernetes-preserve-unknown-fields"))


def _metadata_invariants(s: JSON, check_meta: bool, level: str, path: str, out: list[Cause]) -> None:
    if check_meta and s.get("type") != "object":
        out.append(invalid(f"{path}.type", s.get("type") or "", "must be object"))
    if level == _ROOT:
        rest = {k: v for k, v in s.items() if k not in ("type", "default", "properties")}
        names = set(_props(s))
        if rest or not names <= {"name", "generateName"}:
            out.append(forbidden(path, "must not specify anything other than name and generateName, but metadata "
                                       "is implicitly specified"))


def _value_validation(s: JSON, level: str, path: str, out: list[Cause]) -> None:
    any_of = s.get("anyOf")
    all_of = s.get("allOf")
    skip_any_of = any_of == _INT_OR_STRING_ANY_OF
    skip_first_all_of = isinstance(all_of, list) and bool(all_of) and isinstance(all_of[0], dict) and \
        all_of[0].get("anyOf") == _INT_OR_STRING_ANY_OF
    if isinstance(any_of, list) and not skip_any_of:
        for i, sub in enumerate(any_of):
            _nested(sub, False, level, f"{path}.anyOf[{i}]", out)
    if isinstance(all_of, list):
        for i, sub in enumerate(all_of):
            _nested(sub, skip_first_all_of and i == 0, level, f"{path}.allOf[{i}]", out)
    if isinstance(s.get("oneOf"), list):
        for i, sub in enumerate(s["oneOf"]):
            _nested(sub, False, level, f"{path}.oneOf[{i}]", out)
    if isinstance(s.get("not"), dict):
        _nested(s["not"], False, level, f"{path}.not", out)
    pattern = s.get("pattern")
    if isinstance(pattern, str) and pattern:
        error = regex_error(pattern)
        if error:
            out.append(invalid(f"{path}.pattern", pattern, f"must be a valid regular expression, but isn't: {error}"))


def _nested(s: Any, skip_any_of: bool, level: str, path: str, out: list[Cause]) -> None:
    if not isinstance(s, dict):
        return
    inner = dict(s)
    if skip_any_of:
        inner.pop("anyOf", None)
    _value_validation(inner, level, path, out)
    if isinstance(s.get("items"), dict):
        _nested(s["items"], False, level, f"{path}.items", out)
    for key, prop in _props(s).items():
        _nested(prop, False, _FIELD, f"{path}.properties[{key}]", out)
    if s.get("type"):
        out.append(forbidden(f"{path}.type", "must be empty to be structural"))
    for key, detail in _NESTED_FORBIDDEN:
        if s.get(key) not in (None, False, "", []):
            out.append(forbidden(f"{path}.{key}", detail))
    if "metadata" in _props(s):
        out.append(forbidden(f"{path}.properties[metadata]", "must not be specified in a nested context"))
