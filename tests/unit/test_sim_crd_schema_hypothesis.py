"""The CRD schema validator against generated objects: what the schema allows passes, each single mutation is
refused at the mutated field's path, defaulting and pruning are idempotent and pruning never drops a declared
field. Objects are drawn from a fixed, rich schema (maps, lists, int-or-string, nullable, enums, patterns,
bounds) by a strategy derived from the schema itself, so the generator and the validator read the same rules.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from edgeagent.sim.crd_schema import apply_defaults, check_structural, prune, validate
from tests.support.resource_schema import resource_schema

JSON = dict[str, Any]

PLAN: JSON = resource_schema(
    ["selector", "waves"],
    {
        "selector": {"type": "object", "maxProperties": 4,
                     "additionalProperties": {"type": "string", "maxLength": 16}},
        "strategy": {"type": "string", "enum": ["waves", "canary", "all"]},
        "maxUnavailable": {"x-kubernetes-int-or-string": True},
        "bakeSeconds": {"type": "integer", "minimum": 0, "maximum": 86400, "default": 60},
        "ratio": {"type": "number", "minimum": 0, "maximum": 1},
        "paused": {"type": "boolean"},
        "image": {"type": "string", "pattern": "^[a-z0-9]+(:[a-z0-9.]+)?$", "minLength": 1, "maxLength": 40},
        "note": {"type": "string", "nullable": True, "maxLength": 30},
        "waves": {
            "type": "array", "minItems": 1, "maxItems": 5,
            "items": {
                "type": "object",
                "required": ["name", "nodes"],
                "properties": {
                    "name": {"type": "string", "pattern": "^[a-z][a-z0-9-]*$", "minLength": 1, "maxLength": 12},
                    "nodes": {"type": "integer", "minimum": 1, "maximum": 100},
                    "pauseAfter": {"type": "boolean", "default": False},
                    "labels": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 8}},
                },
            },
        },
    },
    {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
)

KEYS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=6)


def values(s: JSON) -> st.SearchStrategy[Any]:
    """Any value `s` accepts (defaults left out, so defaulting has something to do)."""
    base = _values(s)
    return st.one_of(st.none(), base) if s.get("nullable") else base


def _values(s: JSON) -> st.SearchStrategy[Any]:
    if s.get("x-kubernetes-int-or-string"):
        return st.one_of(st.integers(-5, 5), st.text(max_size=5))
    if "enum" in s:
        return st.sampled_from(s["enum"])
    kind = s.get("type")
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        return st.integers(s.get("minimum", -1000), s.get("maximum", 1000))
    if kind == "number":
        return st.floats(s.get("minimum", -1e6), s.get("maximum", 1e6), allow_nan=False)
    if kind == "string":
        low, high = s.get("minLength", 0), s.get("maxLength", 20)
        if "pattern" in s:
            pattern: str = s["pattern"]
            return st.from_regex(pattern, fullmatch=True).filter(lambda t: low <= len(t) <= high and "\n" not in t)
        return st.text(alphabet="abc xyz-é", min_size=low, max_size=high)
    if kind == "array":
        return st.lists(values(s["items"]), min_size=s.get("minItems", 0), max_size=s.get("maxItems", 4))
    if kind == "object":
        if isinstance(s.get("additionalProperties"), dict):
            return st.dictionaries(KEYS, values(s["additionalProperties"]), max_size=s.get("maxProperties", 4))
        props = s.get("properties") or {}
        needed = set(s.get("required") or [])
        return st.fixed_dictionaries({k: values(v) for k, v in props.items() if k in needed},
                                     optional={k: values(v) for k, v in props.items() if k not in needed})
    return st.just({})


def plans() -> st.SearchStrategy[JSON]:
    return st.builds(lambda spec: {"apiVersion": "example.com/v1", "kind": "Plan", "metadata": {"name": "p"},
                                   "spec": spec}, values(PLAN["properties"]["spec"]))


def nodes(s: JSON, value: Any, path: str) -> list[tuple[JSON, Any, str, list[Any]]]:
    """Every (schema, value, path, location) of a value under `s`, location being the keys/indexes from the root."""
    found: list[tuple[JSON, Any, str, list[Any]]] = []

    def walk(node: JSON, item: Any, where: str, location: list[Any]) -> None:
        found.append((node, item, where, location))
        if isinstance(item, dict) and node.get("type") == "object":
            props = node.get("properties") or {}
            extra = node.get("additionalProperties")
            for key, sub in item.items():
                child = props.get(key, extra if isinstance(extra, dict) else None)
                if child is not None:
                    walk(child, sub, f"{where}.{key}" if where else key, [*location, key])
        elif isinstance(item, list) and isinstance(node.get("items"), dict):
            for i, sub in enumerate(item):
                walk(node["items"], sub, f"{where}[{i}]", [*location, i])

    walk(s, value, path, [])
    return found


def put(obj: Any, location: list[Any], value: Any) -> None:
    for step in location[:-1]:
        obj = obj[step]
    obj[location[-1]] = value


def other_type(s: JSON) -> list[Any]:
    """Values of a JSON type `s` does not allow."""
    kind = s.get("type")
    candidates: list[Any] = [True, "text", 7, 2.5, [1], {"k": 1}]
    if s.get("x-kubernetes-int-or-string"):
        return [True, 2.5, [1], {"k": 1}]
    refused = {"boolean": (bool,), "string": (str,), "integer": (int,), "number": (int, float), "array": (list,),
               "object": (dict,)}[str(kind)]
    return [c for c in candidates if not isinstance(c, refused) or (kind != "boolean" and isinstance(c, bool))]


KINDS = ("type", "enum", "range", "too-long", "pattern", "too-short", "too-many-items", "too-few-items", "required",
         "too-many-properties")


def mutations(s: JSON, value: Any) -> list[tuple[str, str, Any, str]]:
    """(kind, expected cause type, mutated value, path suffix) for each single mutation that applies to this node."""
    kind = s.get("type")
    found: list[tuple[str, str, Any, str]] = [("type", "FieldValueTypeInvalid", v, "") for v in other_type(s)]
    if "enum" in s:
        found.append(("enum", "FieldValueNotSupported", "not-in-enum", ""))
    if kind in ("integer", "number"):
        if "maximum" in s:
            found.append(("range", "FieldValueInvalid", s["maximum"] + 1, ""))
        if "minimum" in s:
            found.append(("range", "FieldValueInvalid", s["minimum"] - 1, ""))
    if kind == "string" and "maxLength" in s:
        found.append(("too-long", "FieldValueTooLong", "a" * (s["maxLength"] + 1), ""))
    if kind == "string" and "pattern" in s:
        bad = "!" * max(s.get("minLength", 1), 1)
        assert not re.search(s["pattern"], bad)
        found.append(("pattern", "FieldValueInvalid", bad, ""))
    if kind == "string" and s.get("minLength", 0) > 0:
        found.append(("too-short", "FieldValueInvalid", "", ""))
    if kind == "array" and "maxItems" in s and isinstance(value, list) and value:
        longer = value + [copy.deepcopy(value[0])] * (s["maxItems"] + 1 - len(value))
        found.append(("too-many-items", "FieldValueTooMany", longer, ""))
    if kind == "array" and s.get("minItems", 0) > 0:
        found.append(("too-few-items", "FieldValueInvalid", [], ""))
    if kind == "object" and isinstance(value, dict):
        for key in s.get("required") or []:
            found.append(("required", "FieldValueRequired", {k: v for k, v in value.items() if k != key}, key))
        if "maxProperties" in s:
            extra = {f"k{i}": "v" for i in range(s["maxProperties"] + 1)}
            found.append(("too-many-properties", "FieldValueTooMany", extra, ""))
    return found


def test_the_plan_schema_is_structural() -> None:
    assert check_structural(PLAN) == []


@settings(max_examples=150, deadline=None)
@given(plans())
def test_every_generated_object_is_valid(obj: JSON) -> None:
    assert validate(PLAN, obj, None) == []


@settings(max_examples=300, deadline=None)
@given(plans(), st.sampled_from(KINDS), st.data())
def test_each_single_mutation_is_refused_at_its_path(obj: JSON, kind: str, data: st.DataObject) -> None:
    candidates = [(path, location, m) for schema, value, path, location in nodes(PLAN, obj, "") if location
                  for m in mutations(schema, value) if m[0] == kind]
    assume(candidates)
    path, location, (_kind, expected, mutated, suffix) = data.draw(st.sampled_from(candidates))
    if suffix:
        path = f"{path}.{suffix}"
    broken = copy.deepcopy(obj)
    put(broken, location, mutated)
    found = validate(PLAN, broken, None)
    assert {c.field for c in found} == {path}, found
    assert expected in {c.type for c in found}, found


@settings(max_examples=150, deadline=None)
@given(plans())
def test_defaults_are_idempotent_and_keep_an_object_valid(obj: JSON) -> None:
    once = copy.deepcopy(obj)
    apply_defaults(PLAN, once)
    twice = copy.deepcopy(once)
    apply_defaults(PLAN, twice)
    assert twice == once
    assert once["spec"].get("bakeSeconds", None) is not None
    assert all("pauseAfter" in wave for wave in once["spec"]["waves"])
    assert validate(PLAN, once, None) == []


@settings(max_examples=150, deadline=None)
@given(plans(), st.data())
def test_pruning_removes_exactly_the_unknown_fields_and_is_idempotent(obj: JSON, data: st.DataObject) -> None:
    objects = [n for n in nodes(PLAN, obj, "") if isinstance(n[1], dict) and n[0].get("properties")]
    plain = copy.deepcopy(obj)
    assert prune(PLAN, plain) == [] and plain == obj  # declared fields are never dropped
    dirty = copy.deepcopy(obj)
    added: list[str] = []
    for _schema, _value, path, location in data.draw(st.lists(st.sampled_from(objects), max_size=4, unique_by=str)):
        key = data.draw(st.sampled_from(["zz", "unknownField", "x1"]))
        target: Any = dirty
        for step in location:
            target = target[step]
        target[key] = {"nested": 1}
        added.append(f"{path}.{key}" if path else key)
    assert prune(PLAN, dirty) == sorted(set(added))
    assert dirty == obj
    assert prune(PLAN, dirty) == [] and dirty == obj


@settings(max_examples=100, deadline=None)
@given(plans(), st.dictionaries(KEYS, st.integers(), max_size=3))
def test_status_preserves_unknown_fields(obj: JSON, status: JSON) -> None:
    obj["status"] = copy.deepcopy(status)
    assert prune(PLAN, obj) == [] and obj["status"] == status


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=10)
SCHEMA_KEYS = st.sampled_from([
    "type", "properties", "items", "additionalProperties", "required", "enum", "pattern", "minimum", "maximum",
    "maxLength", "minLength", "nullable", "default", "x-kubernetes-validations", "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "anyOf", "allOf",
    "oneOf", "not", "format", "multipleOf", "maxItems", "minItems", "x-kubernetes-embedded-resource",
    "maxProperties", "uniqueItems", "exclusiveMinimum"])
ANY_SCHEMA = st.recursive(
    st.dictionaries(SCHEMA_KEYS, JSON_VALUES, max_size=4),
    lambda inner: st.dictionaries(SCHEMA_KEYS, inner | JSON_VALUES | st.lists(inner, max_size=2)
                                  | st.dictionaries(st.text(max_size=3), inner, max_size=2), max_size=4),
    max_leaves=15)


@settings(max_examples=300, deadline=None)
@given(ANY_SCHEMA, st.dictionaries(st.text(max_size=4), JSON_VALUES, max_size=4), JSON_VALUES)
def test_a_malformed_schema_or_object_never_breaks_the_checks(schema: JSON, obj: JSON, old: Any) -> None:
    check_structural(schema)
    prune(schema, obj)
    apply_defaults(schema, obj)
    validate(schema, obj, old if isinstance(old, dict) else None)
