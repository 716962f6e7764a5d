"""edgeagent/rollout/api.py against deploy/crd-rolloutplan.yaml: the controller's own validation of a RolloutPlan's
spec and the CRD's schema + CEL rules accept the same plans and refuse the others with the same messages.

The CRD's rules are evaluated here with celpy (the Kubernetes CEL library functions the rules use, `isSorted` and
`substring`, supplied as Kubernetes defines them), its structural schema with jsonschema (`x-kubernetes-int-or-string`
read as integer-or-string), so a rule changed on one side only fails this test.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import pytest
import yaml
from celpy import celtypes
from celpy.adapter import json_to_cel
from hypothesis import given, settings
from hypothesis import strategies as st

from edgeagent.rollout import api
from edgeagent.rollout.plan import ON_FAILURE_ROLLBACK, Amount, Step

JSON = dict[str, Any]
CRD_PATH = Path(__file__).resolve().parents[2] / "deploy" / "crd-rolloutplan.yaml"
CRD: JSON = yaml.safe_load(CRD_PATH.read_text())
VERSION: JSON = CRD["spec"]["versions"][0]
SCHEMA: JSON = VERSION["schema"]["openAPIV3Schema"]
SPEC_SCHEMA: JSON = SCHEMA["properties"]["spec"]


def _is_sorted(values: Any) -> Any:
    items = list(values)
    return celtypes.BoolType(all(a <= b for a, b in itertools.pairwise(items)))


def _substring(text: Any, start: Any, end: Any = None) -> Any:
    return celtypes.StringType(str(text)[int(start):] if end is None else str(text)[int(start):int(end)])


_ENV = celpy.Environment()
_FUNCTIONS: dict[str, Any] = {"isSorted": _is_sorted, "substring": _substring}
_PROGRAMS: dict[str, Any] = {}


def cel_holds(rule: str, value: Any) -> bool:
    """The rule on `value`; an evaluation error refuses, as the API server refuses it."""
    program = _PROGRAMS.get(rule)
    if program is None:
        program = _PROGRAMS[rule] = _ENV.program(_ENV.compile(rule), functions=_FUNCTIONS)
    try:
        result = program.evaluate({"self": json_to_cel(value)})
    except Exception:  # celpy's evaluation errors share no base class worth naming
        return False
    return isinstance(result, celtypes.BoolType) and bool(result)


def _plain_schema(schema: Any) -> Any:
    """The structural schema as JSON Schema: int-or-string is integer or string; x- extensions dropped."""
    if isinstance(schema, list):
        return [_plain_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _plain_schema(v) for k, v in schema.items() if not k.startswith("x-kubernetes")}
    if schema.get("x-kubernetes-int-or-string"):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    return out


_VALIDATOR = jsonschema.Draft7Validator(_plain_schema(SPEC_SCHEMA))


def _rules_at(schema: JSON, value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(path, message) of every CEL rule of `schema` (and below it) that `value` breaks."""
    for rule in schema.get("x-kubernetes-validations") or []:
        if not cel_holds(rule["rule"], value):
            yield path, rule["message"]
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name in value:
                yield from _rules_at(sub, value[name], f"{path}.{name}")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            yield from _rules_at(schema["items"], item, f"{path}[{index}]")


def crd_verdict(spec: Any) -> tuple[bool, set[tuple[str, str]]]:
    """(the schema accepts it, the CEL rules it breaks). The rules are evaluated only on a spec the schema accepts,
    as the API server reports them for it."""
    if any(True for _ in _VALIDATOR.iter_errors(spec)):
        return False, set()
    return True, set(_rules_at(SPEC_SCHEMA, spec, "spec"))


def python_verdict(spec: Any) -> set[tuple[str, str]]:
    return {(e.field, e.message) for e in api.validate_spec(spec)}


GOOD: JSON = {"daemonSet": "web", "steps": [1, "5%", "25%", "100%"]}

VALID = [
    GOOD,
    {"daemonSet": "web", "steps": ["100%"]},
    {"daemonSet": "a.b-c", "steps": [1, 2, 3, "50%", "100%"], "bake": "1h30m",
     "groupLabel": "topology.kubernetes.io/zone", "maxFailed": "5%", "maxFailedPerWave": 0,
     "progressDeadlineSeconds": 1, "onFailure": "Rollback", "paused": True},
    {"daemonSet": "web", "steps": [10, "1%", "100%"], "bake": "0", "maxFailed": 0, "maxFailedPerWave": "100%"},
    {"daemonSet": "web", "steps": [1, "100%"], "bake": "0s", "groupLabel": "site"},
]

# (spec, the fields whose rule it breaks)
INVALID: list[tuple[JSON, set[str]]] = [
    ({"steps": ["100%"]}, {"spec.daemonSet"}),
    ({"daemonSet": "Web_1", "steps": ["100%"]}, {"spec.daemonSet"}),
    ({"daemonSet": "web"}, {"spec.steps"}),
    ({"daemonSet": "web", "steps": []}, {"spec.steps"}),
    ({"daemonSet": "web", "steps": [0, "100%"]}, {"spec.steps[0]"}),
    ({"daemonSet": "web", "steps": ["0%", "100%"]}, {"spec.steps[0]"}),
    ({"daemonSet": "web", "steps": ["101%"]}, {"spec.steps[0]"}),
    ({"daemonSet": "web", "steps": ["5", "100%"]}, {"spec.steps[0]"}),
    ({"daemonSet": "web", "steps": [-1, "100%"]}, {"spec.steps[0]"}),
    ({"daemonSet": "web", "steps": ["25%", "5%", "100%"]}, {"spec.steps"}),
    ({"daemonSet": "web", "steps": [5, 5, "100%"]}, {"spec.steps"}),
    ({"daemonSet": "web", "steps": [5, 2, "100%"]}, {"spec.steps"}),
    ({"daemonSet": "web", "steps": ["5%", "50%"]}, {"spec.steps"}),
    ({"daemonSet": "web", "steps": [1, 100]}, {"spec.steps"}),
    ({**GOOD, "bake": "10 minutes"}, {"spec.bake"}),
    ({**GOOD, "bake": "1.5h"}, {"spec.bake"}),
    ({**GOOD, "bake": ""}, {"spec.bake"}),
    ({**GOOD, "groupLabel": "bad key!"}, {"spec.groupLabel"}),
    ({**GOOD, "groupLabel": "/zone"}, {"spec.groupLabel"}),
    ({**GOOD, "maxFailed": -1}, {"spec.maxFailed"}),
    ({**GOOD, "maxFailed": "two"}, {"spec.maxFailed"}),
    ({**GOOD, "maxFailed": "150%"}, {"spec.maxFailed"}),
    ({**GOOD, "maxFailedPerWave": "-5%"}, {"spec.maxFailedPerWave"}),
    ({**GOOD, "maxFailedPerWave": "x"}, {"spec.maxFailedPerWave"}),
    ({**GOOD, "progressDeadlineSeconds": 0}, {"spec.progressDeadlineSeconds"}),
    ({**GOOD, "progressDeadlineSeconds": -600}, {"spec.progressDeadlineSeconds"}),
    ({**GOOD, "progressDeadlineSeconds": "600"}, {"spec.progressDeadlineSeconds"}),
    ({**GOOD, "onFailure": "rollback"}, {"spec.onFailure"}),
    ({**GOOD, "onFailure": "Retry"}, {"spec.onFailure"}),
    ({**GOOD, "paused": "yes"}, {"spec.paused"}),
]


@pytest.mark.parametrize("spec", VALID)
def test_valid_plans_pass_both(spec: JSON) -> None:
    assert crd_verdict(spec) == (True, set())
    assert python_verdict(spec) == set()


@pytest.mark.parametrize(("spec", "fields"), INVALID, ids=[str(i) for i in range(len(INVALID))])
def test_invalid_plans_are_refused_by_both_naming_the_field(spec: JSON, fields: set[str]) -> None:
    schema_ok, broken = crd_verdict(spec)
    found = python_verdict(spec)
    assert {field for field, _ in found} == fields
    if schema_ok:
        # Refused by a CEL rule: the same rule, the same words, at the same place.
        assert broken == found
    for field, message in found:
        assert message.startswith(field.split("[")[0]), "the message names the field"


def test_every_cel_rule_has_a_message_naming_its_field_and_every_field_a_description() -> None:
    def walk(schema: JSON, path: str) -> Iterator[tuple[str, JSON]]:
        yield path, schema
        for name, sub in (schema.get("properties") or {}).items():
            yield from walk(sub, f"{path}.{name}")
        if "items" in schema:
            yield from walk(schema["items"], path)

    for path, schema in walk(SCHEMA, ""):
        if path not in ("", ".metadata"):
            assert schema.get("description"), f"{path} has no description for kubectl explain"
        for rule in schema.get("x-kubernetes-validations") or []:
            field = path.lstrip(".")
            assert rule["message"].startswith(field), (path, rule["message"])


def test_the_crd_is_what_the_contract_says() -> None:
    assert CRD["spec"]["group"] == api.GROUP and VERSION["name"] == api.VERSION
    assert CRD["spec"]["scope"] == "Namespaced"
    names = CRD["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"]) == (api.KIND, api.PLURAL, [api.SHORT_NAME])
    assert VERSION["subresources"] == {"status": {}}
    columns = [c["name"].upper() for c in VERSION["additionalPrinterColumns"]]
    assert columns == ["DAEMONSET", "REVISION", "WAVE", "PHASE", "UPGRADED", "FAILED", "AGE"]
    props = SPEC_SCHEMA["properties"]
    defaults = {name: props[name].get("default") for name in props if "default" in props[name]}
    assert defaults == {"bake": api.DEFAULT_BAKE, "maxFailed": api.DEFAULT_MAX_FAILED,
                        "progressDeadlineSeconds": api.DEFAULT_PROGRESS_DEADLINE_SECONDS,
                        "onFailure": api.DEFAULT_ON_FAILURE, "paused": False}
    assert props["onFailure"]["enum"] == list(api.ON_FAILURE_VALUES)
    status = SCHEMA["properties"]["status"]["properties"]
    assert set(status) == {"observedGeneration", "revision", "stableRevision", "phase", "wave", "waves",
                           "waveStartedAt", "bakeStartedAt", "counts", "failures", "history", "conditions", "steer"}
    # The last steering request handled (rollout/steer.py writes the request, the controller its outcome here).
    assert set(status["steer"]["properties"]) == {"id", "verb", "result", "message", "at"}
    assert status["steer"]["properties"]["result"]["enum"] == ["Done", "Ignored"]
    assert status["failures"]["maxItems"] == 20 and status["history"]["maxItems"] == 10


def test_parse_spec_applies_the_defaults_and_reads_every_field() -> None:
    spec, errors = api.parse_spec(GOOD)
    assert errors == [] and spec is not None
    assert spec.steps == (Step(1, False), Step(5, True), Step(25, True), Step(100, True))
    assert (spec.bake_seconds, spec.max_failed, spec.max_failed_per_wave, spec.progress_deadline_seconds,
            spec.on_failure, spec.paused) == (0.0, Amount(1, False), None, 600, "pause", False)
    full, _ = api.parse_spec(VALID[2])
    assert full is not None
    assert (full.bake_seconds, full.group_label, full.max_failed, full.max_failed_per_wave, full.on_failure,
            full.paused) == (5400.0, "topology.kubernetes.io/zone", Amount(5, True), Amount(0, False),
                             ON_FAILURE_ROLLBACK, True)
    assert api.parse_spec({"steps": "x"})[0] is None


def test_an_amount_rounds_up_and_never_reaches_zero() -> None:
    assert Amount(5, True).of(10) == 1  # 5% of 10 nodes: 1, not 0
    assert Amount(50, True).of(3) == 2
    assert Amount(0, False).of(100) == 1
    assert Amount(0, True).of(100) == 1
    assert Amount(3, False).of(2) == 3


_step = st.one_of(st.integers(-2, 120), st.from_regex(r"\A-?[0-9]{1,3}%?\Z"), st.sampled_from(["100%", "1%", "x"]))
_amount = st.one_of(st.integers(-3, 120), st.from_regex(r"\A-?[0-9]{1,3}%?\Z"), st.just("two"))
_spec = st.fixed_dictionaries(
    {"daemonSet": st.sampled_from(["web", "Web", "a.b", "-x", ""]),
     "steps": st.lists(_step, min_size=0, max_size=6)},
    optional={"bake": st.sampled_from(["0", "0s", "10m", "1h30m", "1.5h", "10", "m", "1d"]),
              "groupLabel": st.sampled_from(["zone", "a.b/zone", "bad key", "/x", "x/"]),
              "maxFailed": _amount, "maxFailedPerWave": _amount,
              "progressDeadlineSeconds": st.integers(-2, 700),
              "onFailure": st.sampled_from(["Pause", "Rollback", "pause"]),
              "paused": st.booleans()})


@settings(max_examples=120, deadline=None)
@given(_spec)
def test_the_crd_and_the_controller_agree_on_any_plan(spec: JSON) -> None:
    schema_ok, broken = crd_verdict(copy.deepcopy(spec))
    found = python_verdict(spec)
    assert (schema_ok and not broken) == (not found)
    if schema_ok:
        assert broken == found
