"""CRD schemas as kube-apiserver enforces them: every keyword's cause, message and field path, pruning, defaults.

The expected texts are apiextensions-apiserver's (kube-openapi's validator messages wrapped in apimachinery's
field errors, v1.36 rendering); a change of wording here is a change of what kubectl users read.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from edgeagent.sim import crd_cel
from edgeagent.sim.crd_schema import (
    CEL_BLOCKED,
    Cause,
    apply_defaults,
    check_structural,
    go_float,
    go_quote,
    prune,
    validate,
)
from tests.support.resource_schema import resource_schema

JSON = dict[str, Any]

WIDGET: JSON = resource_schema(
    ["image"],
    {
        "image": {"type": "string", "minLength": 1, "maxLength": 20, "pattern": "^[a-z0-9.:/-]+$"},
        "replicas": {"type": "integer", "minimum": 0, "maximum": 10, "default": 1},
        "ratio": {"type": "number", "exclusiveMinimum": True, "minimum": 0, "exclusiveMaximum": True,
                  "maximum": 1.5, "multipleOf": 0.25},
        "batch": {"type": "integer", "multipleOf": 5},
        "mode": {"type": "string", "enum": ["fast", "slow"], "default": "slow"},
        "level": {"type": "integer", "enum": [1, 2]},
        "paused": {"type": "boolean"},
        "port": {"x-kubernetes-int-or-string": True},
        "note": {"type": "string", "nullable": True},
        "at": {"type": "string", "format": "date-time"},
        "steps": {"type": "array", "minItems": 1, "maxItems": 3,
                  "items": {"type": "object", "required": ["name"],
                            "properties": {"name": {"type": "string", "maxLength": 1},
                                           "pause": {"type": "integer", "default": 0}}}},
        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
        "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                  "items": {"type": "object", "properties": {"name": {"type": "string"},
                                                             "port": {"type": "integer"}}}},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 3,
                   "minProperties": 1},
        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                  "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}}},
        "template": {"type": "object", "x-kubernetes-embedded-resource": True,
                     "x-kubernetes-preserve-unknown-fields": True},
    },
    {"type": "object", "properties": {"ready": {"type": "integer"}}},
)


def widget(**spec: Any) -> JSON:
    body: JSON = {"image": "nginx"}
    body.update(spec)
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": body}


def causes(obj: JSON, schema: JSON = WIDGET, old: JSON | None = None) -> list[tuple[str, str, str]]:
    return [(c.field, c.type, c.message) for c in validate(schema, obj, old)]


def test_a_valid_widget_has_no_cause() -> None:
    assert validate(WIDGET, widget(replicas=3, mode="fast", port="80%", steps=[{"name": "a"}]), None) == []


def test_cause_renders_as_a_status_cause() -> None:
    cause = Cause("FieldValueRequired", "Required value", "spec.image")
    assert cause.as_status_cause() == {"reason": "FieldValueRequired", "message": "Required value",
                                       "field": "spec.image"}
    assert str(cause) == "spec.image: Required value"


# ------------------------------------------------------------------------------------------------- types


@pytest.mark.parametrize(("value", "seen"), [("3", "string"), (1.5, "number"), (True, "boolean"), ([1], "array"),
                                             ({"a": 1}, "object")])
def test_an_integer_field_refuses_other_types_with_the_type_it_got(value: Any, seen: str) -> None:
    assert causes(widget(replicas=value)) == [
        ("spec.replicas", "FieldValueTypeInvalid",
         f'Invalid value: "{seen}": spec.replicas in body must be of type integer: "{seen}"')]


def test_an_integral_number_passes_as_an_integer_and_an_integer_as_a_number() -> None:
    assert causes(widget(replicas=3.0, ratio=1.0)) == []
    assert causes({"n": 2}, {"type": "object", "properties": {"n": {"type": "number"}}}) == []


def test_an_integer_is_compared_with_a_bound_cut_to_an_integer_as_kube_openapi_does() -> None:
    assert causes(widget(ratio=1)) == [
        ("spec.ratio", "FieldValueInvalid", "Invalid value: 1: spec.ratio in body should be less than 1")]


@pytest.mark.parametrize(("field", "value", "kind", "seen"), [
    ("image", 5, "string", "integer"), ("paused", "yes", "boolean", "string"), ("steps", {"a": 1}, "array", "object"),
    ("labels", ["a"], "object", "array"), ("ratio", "1", "number", "string")])
def test_each_type_refuses_a_value_of_another_type(field: str, value: Any, kind: str, seen: str) -> None:
    found = [c for c in causes(widget(**{field: value})) if c[0] == f"spec.{field}"]
    assert found[0] == (f"spec.{field}", "FieldValueTypeInvalid",
                        f'Invalid value: "{seen}": spec.{field} in body must be of type {kind}: "{seen}"')


def test_int_or_string_takes_both_and_refuses_the_rest() -> None:
    assert causes(widget(port=80)) == causes(widget(port="http")) == []
    assert causes(widget(port=True)) == [
        ("spec.port", "FieldValueTypeInvalid",
         'Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean"')]


def test_null_is_accepted_where_nullable_and_refused_elsewhere() -> None:
    assert causes(widget(note=None)) == []
    assert causes(widget(tags=["a", None])) == [
        ("spec.tags[1]", "FieldValueTypeInvalid",
         'Invalid value: "null": spec.tags[1] in body must be of type string: "null"')]


# --------------------------------------------------------------------------------------- required and enum


def test_a_missing_required_field_is_required_at_its_path() -> None:
    obj = widget()
    del obj["spec"]["image"]
    assert causes(obj) == [("spec.image", "FieldValueRequired", "Required value")]
    assert causes({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}) == [
        ("spec", "FieldValueRequired", "Required value")]


def test_a_required_field_of_a_list_item_names_the_item() -> None:
    assert causes(widget(steps=[{"name": "a"}, {}])) == [("spec.steps[1].name", "FieldValueRequired",
                                                          "Required value")]


def test_enum_lists_the_supported_values_quoted() -> None:
    assert causes(widget(mode="turbo")) == [
        ("spec.mode", "FieldValueNotSupported", 'Unsupported value: "turbo": supported values: "fast", "slow"')]
    assert causes(widget(level=3)) == [
        ("spec.level", "FieldValueNotSupported", 'Unsupported value: 3: supported values: "1", "2"')]


def test_enum_compares_numbers_across_int_and_float_but_not_booleans() -> None:
    assert causes(widget(level=2.0)) == []
    assert causes(widget(level=True))[-1][1] == "FieldValueNotSupported"


# ------------------------------------------------------------------------------------------------ strings


def test_string_length_and_pattern() -> None:
    assert causes(widget(image="")) == [
        ("spec.image", "FieldValueInvalid", 'Invalid value: "": spec.image in body should be at least 1 chars long')]
    assert causes(widget(image="a" * 21)) == [("spec.image", "FieldValueTooLong",
                                               "Too long: may not be more than 20 bytes")]
    assert causes(widget(steps=[{"name": "ab"}])) == [("spec.steps[0].name", "FieldValueTooLong",
                                                       "Too long: may not be more than 1 byte")]
    assert causes(widget(image="Nginx")) == [
        ("spec.image", "FieldValueInvalid",
         "Invalid value: \"Nginx\": spec.image in body should match '^[a-z0-9.:/-]+$'")]


def test_length_counts_characters_not_bytes() -> None:
    assert causes(widget(steps=[{"name": "é"}])) == []


def test_a_date_time_string_must_be_one() -> None:
    assert causes(widget(at="2026-11-28T10:00:00Z")) == []
    assert causes(widget(at="yesterday")) == [
        ("spec.at", "FieldValueTypeInvalid",
         'Invalid value: "yesterday": spec.at in body must be of type date-time: "yesterday"')]


# ------------------------------------------------------------------------------------------------ numbers


def test_inclusive_bounds() -> None:
    assert causes(widget(replicas=0)) == causes(widget(replicas=10)) == []
    assert causes(widget(replicas=-1)) == [
        ("spec.replicas", "FieldValueInvalid",
         "Invalid value: -1: spec.replicas in body should be greater than or equal to 0")]
    assert causes(widget(replicas=11)) == [
        ("spec.replicas", "FieldValueInvalid",
         "Invalid value: 11: spec.replicas in body should be less than or equal to 10")]


def test_exclusive_bounds_and_multiple_of_a_fraction() -> None:
    assert causes(widget(ratio=0.5)) == []
    assert causes(widget(ratio=0)) == [
        ("spec.ratio", "FieldValueInvalid", "Invalid value: 0: spec.ratio in body should be greater than 0")]
    assert causes(widget(ratio=1.5)) == [
        ("spec.ratio", "FieldValueInvalid", "Invalid value: 1.5: spec.ratio in body should be less than 1.5")]
    assert causes(widget(ratio=0.3)) == [
        ("spec.ratio", "FieldValueInvalid", "Invalid value: 0.3: spec.ratio in body should be a multiple of 0.25")]


def test_integer_multiple_of() -> None:
    assert causes(widget(batch=10)) == []
    assert causes(widget(batch=7)) == [
        ("spec.batch", "FieldValueInvalid", "Invalid value: 7: spec.batch in body should be a multiple of 5")]


# --------------------------------------------------------------------------------------- arrays and objects


def test_item_counts() -> None:
    assert causes(widget(steps=[])) == [
        ("spec.steps", "FieldValueInvalid", "Invalid value: 0: spec.steps in body should have at least 1 items")]
    assert causes(widget(steps=[{"name": n} for n in "abcd"])) == [
        ("spec.steps", "FieldValueTooMany", "Too many: 4: must have at most 3 items")]


def test_unique_items() -> None:
    schema = {"type": "object", "properties": {"s": {"type": "array", "uniqueItems": True,
                                                     "items": {"type": "integer"}}}}
    assert causes({"s": [1, 2]}, schema) == []
    assert causes({"s": [1, 2, 1]}, schema) == [
        ("s", "FieldValueInvalid", 'Invalid value: "": s in body shouldn\'t contain duplicates')]


def test_a_map_checks_its_values_and_its_size() -> None:
    assert causes(widget(labels={"a": "x"})) == []
    assert causes(widget(labels={"a": 1})) == [
        ("spec.labels.a", "FieldValueTypeInvalid",
         'Invalid value: "integer": spec.labels.a in body must be of type string: "integer"')]
    assert causes(widget(labels={k: "x" for k in "abcd"})) == [
        ("spec.labels", "FieldValueTooMany", "Too many: 4: must have at most 3 items")]
    assert causes(widget(labels={})) == [
        ("spec.labels", "FieldValueInvalid", "Invalid value: 0: spec.labels in body should have at least 1 properties")]


def test_list_type_set_and_map_refuse_duplicates() -> None:
    assert causes(widget(tags=["a", "b", "a"])) == [("spec.tags[2]", "FieldValueDuplicate",
                                                     'Duplicate value: "a"')]
    ports = [{"name": "http", "port": 80}, {"name": "http", "port": 81}]
    assert causes(widget(ports=ports)) == [("spec.ports[1]", "FieldValueDuplicate",
                                            'Duplicate value: {"name":"http"}')]


def test_an_embedded_resource_names_its_api_version_and_kind() -> None:
    assert causes(widget(template={"apiVersion": "v1", "kind": "Pod", "spec": {}})) == []
    assert causes(widget(template={"spec": {}})) == [
        ("spec.template.apiVersion", "FieldValueRequired", "Required value: must not be empty"),
        ("spec.template.kind", "FieldValueRequired", "Required value: must not be empty")]


def test_several_causes_are_all_reported() -> None:
    found = {c[0] for c in causes(widget(image="", replicas=50, mode="x"))}
    assert found == {"spec.image", "spec.replicas", "spec.mode"}


# ------------------------------------------------------------------------------------------------ pruning


def test_prune_drops_unknown_fields_and_reports_their_paths_sorted() -> None:
    obj = widget(zeta=1, steps=[{"name": "a", "x": 1}], extra={"anything": {"goes": 1}, "known": {"a": "b", "c": 1}})
    obj["status"] = {"ready": 1, "bogus": True}
    obj["top"] = 1
    obj["metadata"]["surprise"] = 1
    obj["spec"]["template"] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "odd": 1}}
    assert prune(WIDGET, obj) == ["metadata.surprise", "spec.extra.known.c", "spec.steps[0].x", "spec.zeta",
                                  "status.bogus", "top", "spec.template.metadata.odd"]
    assert obj["spec"]["template"]["metadata"] == {"name": "p"}
    assert obj["spec"]["extra"] == {"anything": {"goes": 1}, "known": {"a": "b"}}
    assert obj["apiVersion"] == "example.com/v1" and obj["kind"] == "Widget" and obj["metadata"] == {"name": "w"}
    assert obj["spec"]["steps"] == [{"name": "a"}]


def test_prune_keeps_what_an_embedded_resource_and_a_map_declare() -> None:
    template = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": 1}}
    obj = widget(template=copy.deepcopy(template), labels={"a": "b"})
    assert prune(WIDGET, obj) == []
    assert obj["spec"]["template"] == template and obj["spec"]["labels"] == {"a": "b"}


def test_prune_drops_non_nullable_nulls_without_default_and_keeps_the_others() -> None:
    obj = widget(paused=None, note=None, replicas=None)
    assert prune(WIDGET, obj) == []
    assert "paused" not in obj["spec"]
    assert obj["spec"]["note"] is None and obj["spec"]["replicas"] is None


def test_prune_of_an_object_without_properties_drops_all_its_keys() -> None:
    schema = {"type": "object", "properties": {"spec": {"type": "object"}}}
    obj = {"spec": {"a": 1, "b": {"c": 2}}}
    assert prune(schema, obj) == ["spec.a", "spec.b"]
    assert obj == {"spec": {}}


# ------------------------------------------------------------------------------------------------ defaults


def test_defaults_fill_absent_fields_and_non_nullable_nulls() -> None:
    obj = widget(mode=None, steps=[{"name": "a"}])
    apply_defaults(WIDGET, obj)
    assert obj["spec"]["replicas"] == 1 and obj["spec"]["mode"] == "slow"
    assert obj["spec"]["steps"] == [{"name": "a", "pause": 0}]


def test_defaults_apply_only_inside_objects_that_exist() -> None:
    obj: JSON = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    apply_defaults(WIDGET, obj)
    assert "spec" not in obj


def test_a_defaulted_parent_gets_its_childrens_defaults() -> None:
    schema: JSON = {"type": "object", "properties": {"spec": {"type": "object", "default": {}, "properties": {
        "a": {"type": "integer", "default": 3}}}}}
    obj: JSON = {}
    apply_defaults(schema, obj)
    assert obj == {"spec": {"a": 3}}
    assert schema["properties"]["spec"]["default"] == {}  # the schema's default was copied, not shared


def test_a_nullable_null_keeps_its_null() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "nullable": True, "default": "x"}}}
    obj: JSON = {"a": None}
    apply_defaults(schema, obj)
    assert obj == {"a": None}


def test_map_values_and_list_items_that_are_null_take_the_default() -> None:
    schema = {"type": "object", "properties": {
        "m": {"type": "object", "additionalProperties": {"type": "string", "default": "d"}},
        "l": {"type": "array", "items": {"type": "integer", "default": 7}}}}
    obj: JSON = {"m": {"k": None}, "l": [1, None]}
    apply_defaults(schema, obj)
    assert obj == {"m": {"k": "d"}, "l": [1, 7]}


# ---------------------------------------------------------------------------------------------- CEL rules

RULED: JSON = {
    "type": "object",
    "x-kubernetes-validations": [{"rule": "self.metadata.name.startsWith('w')", "message": "name must start with w"}],
    "properties": {
        "spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.replicas <= self.maxReplicas"},
                {"rule": "!has(self.paused) || !self.paused || self.replicas == 0",
                 "message": "a paused widget has no replicas", "fieldPath": ".replicas",
                 "reason": "FieldValueForbidden"},
                {"rule": "self.replicas != 7", "messageExpression": "'replicas may not be ' + string(self.replicas)"},
            ],
            "properties": {
                "replicas": {"type": "integer", "x-kubernetes-validations": [
                    {"rule": "self >= oldSelf", "message": "replicas may not shrink"},
                    {"rule": "self != 13"}]},
                "maxReplicas": {"type": "integer"},
                "paused": {"type": "boolean"},
                "name": {"type": "string", "x-kubernetes-validations": [
                    {"rule": "self == self.lowerAscii()", "message": "lower case only",
                     "reason": "FieldValueRequired"}]},
                "parts": {"type": "string", "x-kubernetes-validations": [
                    {"rule": "self.split(',').size() <= 2 && self.indexOf(',') != 0", "message": "at most two parts"}]},
                "order": {"type": "array", "items": {"type": "integer"},
                          "x-kubernetes-validations": [{"rule": "self.isSorted() && self.sum() < 100"}]},
                "start": {"type": "string", "format": "date-time"},
                "end": {"type": "string", "format": "date-time"},
                "window": {"type": "object", "properties": {
                    "start": {"type": "string", "format": "date-time"},
                    "end": {"type": "string", "format": "date-time"}},
                    "x-kubernetes-validations": [{"rule": "self.start < self.end", "message": "start before end"}]},
                "limits": {"type": "object", "additionalProperties": {
                    "type": "integer", "x-kubernetes-validations": [{"rule": "self > 0"}]}},
                "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                          "items": {"type": "object", "properties": {"name": {"type": "string"},
                                                                     "size": {"type": "integer"}},
                                    "x-kubernetes-validations": [{"rule": "self.size >= oldSelf.size",
                                                                  "message": "items only grow"}]}},
            },
        },
    },
}


def ruled(name: str = "w1", **spec: Any) -> JSON:
    body: JSON = {"replicas": 1, "maxReplicas": 3}
    body.update(spec)
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": body}


def test_rules_pass_on_a_valid_object() -> None:
    obj = ruled(parts="a,b", order=[1, 2, 3], limits={"cpu": 2},
                window={"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z"})
    obj["spec"]["name"] = "lower"
    assert validate(RULED, obj, None) == []


def test_a_rule_without_message_on_an_object_omits_the_value() -> None:
    assert causes(ruled(replicas=5), RULED) == [
        ("spec", "FieldValueInvalid", "Invalid value: failed rule: self.replicas <= self.maxReplicas")]


def test_a_rule_without_message_on_a_scalar_shows_the_value() -> None:
    assert causes(ruled(replicas=13, maxReplicas=20), RULED) == [
        ("spec.replicas", "FieldValueInvalid", "Invalid value: 13: failed rule: self != 13")]


def test_a_root_rule_reports_the_nil_path_with_its_message() -> None:
    assert causes(ruled(name="x1"), RULED) == [("<nil>", "FieldValueInvalid", "Invalid value: name must start with w")]


def test_field_path_reason_and_message_expression() -> None:
    assert causes(ruled(paused=True), RULED) == [
        ("spec.replicas", "FieldValueForbidden", "Forbidden: a paused widget has no replicas")]
    assert causes(ruled(replicas=7, maxReplicas=9), RULED) == [
        ("spec", "FieldValueInvalid", "Invalid value: replicas may not be 7")]


def test_a_required_reason_and_the_string_library() -> None:
    obj = ruled()
    obj["spec"]["name"] = "Upper"
    assert causes(obj, RULED) == [("spec.name", "FieldValueRequired", "Required value: lower case only")]
    assert causes(ruled(parts="a,b,c"), RULED) == [("spec.parts", "FieldValueInvalid",
                                                    'Invalid value: "a,b,c": at most two parts')]
    assert causes(ruled(parts=",a"), RULED)[0][0] == "spec.parts"


def test_the_list_library_and_timestamps() -> None:
    assert causes(ruled(order=[2, 1]), RULED) == [
        ("spec.order", "FieldValueInvalid", "Invalid value: failed rule: self.isSorted() && self.sum() < 100")]
    assert causes(ruled(order=[50, 60]), RULED)[0][0] == "spec.order"
    window = {"start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00+01:00"}
    assert causes(ruled(window=window), RULED) == [("spec.window", "FieldValueInvalid",
                                                    "Invalid value: start before end")]


def test_a_map_value_rule_names_the_key_in_brackets() -> None:
    assert causes(ruled(limits={"cpu": 0}), RULED) == [
        ("spec.limits[cpu]", "FieldValueInvalid", "Invalid value: 0: failed rule: self > 0")]


def test_a_rule_that_fails_to_evaluate_says_why() -> None:
    assert causes(ruled(window={"start": "2026-01-02T00:00:00Z"}), RULED) == [
        ("spec.window", "FieldValueInvalid",
         'Invalid value: "object": no such key: end evaluating rule: start before end')]


def test_transition_rules_run_only_on_update_with_an_old_value() -> None:
    old = ruled(replicas=3)
    assert causes(ruled(replicas=1), RULED) == []
    assert causes(ruled(replicas=1), RULED, old) == [
        ("spec.replicas", "FieldValueInvalid", "Invalid value: 1: replicas may not shrink")]
    assert causes(ruled(replicas=3), RULED, old) == []


def test_a_map_list_item_is_compared_with_the_old_item_of_the_same_key() -> None:
    old = ruled(items=[{"name": "a", "size": 2}, {"name": "b", "size": 5}])
    grown = ruled(items=[{"name": "b", "size": 5}, {"name": "a", "size": 3}, {"name": "c", "size": 0}])
    assert causes(grown, RULED, old) == []
    shrunk = ruled(items=[{"name": "b", "size": 4}, {"name": "a", "size": 2}])
    assert causes(shrunk, RULED, old) == [("spec.items[0]", "FieldValueInvalid", "Invalid value: items only grow")]


def test_schema_errors_block_the_rules_with_the_real_cause() -> None:
    assert causes(ruled(replicas="x"), RULED) == [
        ("spec.replicas", "FieldValueTypeInvalid",
         'Invalid value: "string": spec.replicas in body must be of type integer: "string"'),
        ("<nil>", "FieldValueInvalid", f"Invalid value: null: {CEL_BLOCKED}")]


def test_an_update_ratchets_what_did_not_change() -> None:
    stale = widget(replicas=50, mode="turbo")  # valid under an older schema, say
    assert causes(copy.deepcopy(stale), WIDGET, stale) == []
    changed = copy.deepcopy(stale)
    changed["spec"]["replicas"] = 60
    assert causes(changed, WIDGET, stale) == [
        ("spec.replicas", "FieldValueInvalid",
         "Invalid value: 60: spec.replicas in body should be less than or equal to 10")]
    unchanged_rule = ruled(replicas=5)
    assert causes(copy.deepcopy(unchanged_rule), RULED, unchanged_rule) == []


def test_a_rule_is_compiled_once_per_text() -> None:
    rule = "self.replicas < 1000 && size(self) > 0"
    schema = {"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-validations": [{"rule": rule}],
                                                        "properties": {"replicas": {"type": "integer"}}}}}
    assert validate(schema, {"spec": {"replicas": 0}}, None) == []
    before = crd_cel._compiled.cache_info()
    for n in range(1, 21):
        assert validate(schema, {"spec": {"replicas": n}}, None) == []
    after = crd_cel._compiled.cache_info()
    assert after.misses == before.misses and after.hits >= before.hits + 20


def test_a_verdict_is_reused_for_the_same_value_and_schema_node_only(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = crd_cel.evaluate

    def counting(rule: str, activation: JSON) -> Any:
        calls.append(rule)
        return real(rule, activation)

    monkeypatch.setattr(crd_cel, "evaluate", counting)
    rule = {"rule": "self < '2026'"}
    as_string = {"type": "object", "properties": {"at": {"type": "string", "x-kubernetes-validations": [rule]}}}
    as_time = {"type": "object", "properties": {"at": {"type": "string", "format": "date-time",
                                                       "x-kubernetes-validations": [rule]}}}
    obj = {"at": "2025-06-01T00:00:00Z"}
    assert validate(as_string, obj, None) == validate(as_string, copy.deepcopy(obj), None) == []
    assert len(calls) == 1
    # the same text and value typed by another schema node (a timestamp, not a string) is evaluated again
    assert causes(obj, as_time) == [
        ("at", "FieldValueInvalid", 'Invalid value: "string": no such overload evaluating rule: self < \'2026\'')]
    assert len(calls) == 2


# ------------------------------------------------------------------------------------------ CRD-time checks

BASE = "spec.versions[0].schema.openAPIV3Schema"


def structural(schema: JSON) -> list[tuple[str, str, str]]:
    return [(c.field, c.type, c.message) for c in check_structural(schema)]


def test_the_widget_schemas_are_structural() -> None:
    assert check_structural(WIDGET) == []
    assert check_structural(RULED) == []
    int_or_string = {"type": "object", "properties": {"p": {"x-kubernetes-int-or-string": True, "anyOf": [
        {"type": "integer"}, {"type": "string"}]}}}
    assert check_structural(int_or_string) == []


def test_missing_types_are_required_where_they_are_missing() -> None:
    schema = {"properties": {"spec": {"properties": {"a": {}, "l": {"type": "array", "items": {}}}}}}
    assert structural(schema) == [
        (f"{BASE}.properties[spec].properties[a].type", "FieldValueRequired",
         "Required value: must not be empty for specified object fields"),
        (f"{BASE}.properties[spec].properties[l].items.type", "FieldValueRequired",
         "Required value: must not be empty for specified array items"),
        (f"{BASE}.properties[spec].type", "FieldValueRequired",
         "Required value: must not be empty for specified object fields"),
        (f"{BASE}.type", "FieldValueRequired", "Required value: must not be empty at the root")]


def test_structural_invariants() -> None:
    assert structural({"type": "string"}) == [(f"{BASE}.type", "FieldValueInvalid",
                                               'Invalid value: "string": must be object at the root')]
    assert structural({"type": "object", "properties": {"l": {"type": "array"}}}) == [
        (f"{BASE}.properties[l].items", "FieldValueRequired", "Required value: must be specified")]
    assert structural({"type": "object", "additionalProperties": {"type": "string"}}) == [
        (f"{BASE}.additionalProperties", "FieldValueForbidden", "Forbidden: must not be used at the root")]
    assert structural({"type": "object", "properties": {"metadata": {"type": "object", "properties": {
        "labels": {"type": "object"}}}}}) == [
        (f"{BASE}.properties[metadata]", "FieldValueForbidden",
         "Forbidden: must not specify anything other than name and generateName, but metadata is implicitly "
         "specified")]
    assert structural({"type": "object", "properties": {"p": {"type": "string", "anyOf": [{"type": "string"}]}}}) == [
        (f"{BASE}.properties[p].anyOf[0].type", "FieldValueForbidden", "Forbidden: must be empty to be structural")]


def test_openapi_checks_of_a_crd_schema() -> None:
    assert structural({"type": "object", "properties": {"a": {"type": "map"}}}) == [
        (f"{BASE}.properties[a].type", "FieldValueNotSupported",
         'Unsupported value: "map": supported values: "array", "boolean", "integer", "number", "object", "string"')]
    assert structural({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True,
                                                              "items": {"type": "string"}}}}) == [
        (f"{BASE}.properties[a].uniqueItems", "FieldValueForbidden",
         "Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic")]
    assert structural({"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=x)"}}})[0][:2] == (
        f"{BASE}.properties[a].pattern", "FieldValueInvalid")
    assert structural({"type": "object", "properties": {"a": {"type": "integer", "default": "x"}}}) == [
        (f"{BASE}.properties[a].default", "FieldValueTypeInvalid",
         'Invalid value: "string":  in body must be of type integer: "string"')]
    assert structural({"type": "object", "properties": {"a": {"type": "object", "default": {"b": "x", "c": 1},
                                                              "properties": {"b": {"type": "integer"}}}}}) == [
        (f"{BASE}.properties[a].default", "FieldValueInvalid",
         'Invalid value: {"b":"x","c":1}: must not have unknown fields'),
        (f"{BASE}.properties[a].default.b", "FieldValueTypeInvalid",
         'Invalid value: "string": b in body must be of type integer: "string"')]


def test_a_rule_that_does_not_compile_refuses_the_crd() -> None:
    schema = {"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-validations": [
        {"rule": "self.a >"}, {"rule": "true", "reason": "Bogus"}]}}}
    found = structural(schema)
    assert found[0][0] == f"{BASE}.properties[spec].x-kubernetes-validations[0].rule"
    assert found[0][1] == "FieldValueInvalid"
    assert found[0][2].startswith('Invalid value: {"rule":"self.a \\u003e"}: compilation failed: ERROR: <input>:1:')
    assert found[1] == (f"{BASE}.properties[spec].x-kubernetes-validations[1].reason", "FieldValueNotSupported",
                        'Unsupported value: "Bogus": supported values: "FieldValueDuplicate", "FieldValueForbidden", '
                        '"FieldValueInvalid", "FieldValueRequired"')


def test_check_structural_takes_the_path_of_the_version() -> None:
    assert check_structural({}, base="spec.versions[2].schema.openAPIV3Schema")[0].field == \
        "spec.versions[2].schema.openAPIV3Schema.type"


# ------------------------------------------------------------------------------------------- Go renderings


@pytest.mark.parametrize(("value", "text"), [
    (1.0, "1"), (1.5, "1.5"), (0.25, "0.25"), (1e21, "1e+21"), (1e-05, "1e-05"), (0.0001, "0.0001"), (-2.0, "-2"),
    (1e20, "100000000000000000000")])
def test_go_float(value: float, text: str) -> None:
    assert go_float(value) == text


def test_go_quote() -> None:
    assert go_quote('a"b\\c\n\x01é') == '"a\\"b\\\\c\\n\\x01é"'


def test_a_rule_names_old_self_only_outside_string_literals() -> None:
    assert crd_cel.uses_old_self("self >= oldSelf")
    assert not crd_cel.uses_old_self("self.note != 'oldSelf'")
    assert not crd_cel.uses_old_self("self.oldSelfish == 1")


def test_a_message_expression_that_fails_falls_back_to_the_message() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "x-kubernetes-validations": [
        {"rule": "self < 5", "message": "too big", "messageExpression": "self.nope"},
        {"rule": "self < 4", "messageExpression": "'multi\\nline'"}]}}}
    assert causes({"n": 9}, schema) == [("n", "FieldValueInvalid", "Invalid value: 9: too big"),
                                        ("n", "FieldValueInvalid", "Invalid value: 9: failed rule: self < 4")]


@pytest.mark.parametrize(("fmt", "good", "bad"), [
    ("duration", "1h30m", "90 minutes"), ("date", "2026-11-28", "28/11/2026"),
    ("uuid", "123e4567-e89b-12d3-a456-426614174000", "123"), ("ipv4", "10.0.0.1", "10.0.0.300"),
    ("byte", "aGVsbG8=", "hello!")])
def test_string_formats(fmt: str, good: str, bad: str) -> None:
    schema = {"type": "object", "properties": {"v": {"type": "string", "format": fmt}}}
    assert causes({"v": good}, schema) == []
    assert causes({"v": bad}, schema) == [
        ("v", "FieldValueTypeInvalid", f'Invalid value: "{bad}": v in body must be of type {fmt}: "{bad}"')]


def test_a_rule_with_a_duration_field_compares_durations() -> None:
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "timeout": {"type": "string", "format": "duration"}},
        "x-kubernetes-validations": [{"rule": "self.timeout <= duration('1h')", "message": "at most an hour"}]}}}
    assert causes({"spec": {"timeout": "59m"}}, schema) == []
    assert causes({"spec": {"timeout": "2h"}}, schema) == [("spec", "FieldValueInvalid",
                                                            "Invalid value: at most an hour")]


def test_an_optional_old_self_rule_runs_on_create_too() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "x-kubernetes-validations": [
        {"rule": "!oldSelf.hasValue() || self >= oldSelf.value()", "optionalOldSelf": True,
         "message": "may not shrink"},
        {"rule": "self != oldSelf.orValue(3)", "optionalOldSelf": True, "message": "not 3 at first"}]}}}
    assert causes({"n": 1}, schema) == []
    assert causes({"n": 3}, schema) == [("n", "FieldValueInvalid", "Invalid value: 3: not 3 at first")]
    assert causes({"n": 5}, schema, {"n": 4}) == []
    assert causes({"n": 2}, schema, {"n": 4}) == [("n", "FieldValueInvalid", "Invalid value: 2: may not shrink")]


def test_a_duplicate_is_reported_once_at_its_second_appearance_and_types_tell_items_apart() -> None:
    assert causes(widget(tags=["a", "a", "a", "b", "b"])) == [
        ("spec.tags[1]", "FieldValueDuplicate", 'Duplicate value: "a"'),
        ("spec.tags[4]", "FieldValueDuplicate", 'Duplicate value: "b"')]
    schema = {"type": "object", "properties": {"s": {"type": "array", "x-kubernetes-list-type": "set",
                                                     "items": {"x-kubernetes-int-or-string": True}}}}
    assert causes({"s": [1, "1", 2]}, schema) == []


def test_map_list_items_without_their_key_share_the_empty_key() -> None:
    assert causes(widget(ports=[{"port": 1}, {"port": 2}])) == [
        ("spec.ports[1]", "FieldValueDuplicate", "Duplicate value: {}")]


def test_root_metadata_may_restrict_name_and_generate_name_only() -> None:
    name_only = {"type": "object", "properties": {"metadata": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 10, "description": "short"}}}}}
    assert check_structural(name_only) == []


def test_an_int32_field_names_its_format_when_a_value_is_not_an_integer() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "format": "int32"},
                                               "f": {"type": "number", "format": "bogus"}}}
    assert causes({"n": 3, "f": True}, schema) == [
        ("f", "FieldValueTypeInvalid", 'Invalid value: "boolean": f in body must be of type number: "boolean"')]
    assert causes({"n": 1.5}, schema) == [
        ("n", "FieldValueTypeInvalid", 'Invalid value: "float64": n in body must be of type int32: "float64"')]
    assert causes({"n": "3"}, schema) == [
        ("n", "FieldValueTypeInvalid", 'Invalid value: "string": n in body must be of type integer: "string"')]


def test_a_failed_rule_on_an_untyped_node_shows_the_value() -> None:
    schema = {"type": "object", "properties": {"free": {"x-kubernetes-preserve-unknown-fields": True,
                                                        "x-kubernetes-validations": [{"rule": "size(self) < 2"}]}}}
    assert causes({"free": {"a": 1, "b": 2}}, schema) == [
        ("free", "FieldValueInvalid", 'Invalid value: {"a":1,"b":2}: failed rule: size(self) < 2')]


@pytest.mark.parametrize(("rule", "result"), [
    ("self.ratio == 1", True), ("self.ratio != 1", False), ("self.count == 1.0", True), ("self.name == 1", False),
    ("self.flag == 1", False), ("self.flag != 0", True), ("[1, 2] == [1, 2]", True)])
def test_equality_across_types_is_cel_gos_heterogeneous_equality(rule: str, result: bool) -> None:
    schema = {"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-validations": [{"rule": rule}],
                                                        "properties": {"ratio": {"type": "number"},
                                                                       "count": {"type": "integer"},
                                                                       "name": {"type": "string"},
                                                                       "flag": {"type": "boolean"}}}}}
    found = validate(schema, {"spec": {"ratio": 1.0, "count": 1, "name": "n", "flag": True}}, None)
    assert (found == []) is result, found


def test_a_rule_naming_an_unknown_variable_or_function_refuses_the_crd() -> None:
    schema = {"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-validations": [
        {"rule": "self.items.all(i, i.size() > 0 && i.lowerAscii() == i)"},
        {"rule": "self.items.all(i, i.shout())"},
        {"rule": "replicas > 1"}]}}}
    found = structural(schema)
    assert [f[0].rsplit(".", 2)[-2] for f in found] == ["x-kubernetes-validations[1]", "x-kubernetes-validations[2]"]
    assert found[0][2].endswith("undeclared reference to 'shout' (in container '')\n"
                                " | self.items.all(i, i.shout())\n | ....................^")
    assert "undeclared reference to 'replicas'" in found[1][2]
