"""Selectors must accept, reject and match exactly like the real apiserver's label/field selector code."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgeagent.kube.selectors import (
    GENERIC_FIELDS,
    POD_FIELDS,
    FieldSelector,
    LabelSelector,
    Requirement,
    SelectorError,
    field_value,
    label_selector_from_dict,
    parse_field_selector,
    parse_label_selector,
    pod_field_value,
)


def sel(text: str) -> LabelSelector:
    return parse_label_selector(text)


# ------------------------------------------------------------------------------------------- label: parsing


@pytest.mark.parametrize("text", ["", None])
def test_empty_label_selector_selects_everything(text: str | None) -> None:
    s = parse_label_selector(text)
    assert s.empty
    assert s.matches({})
    assert s.matches({"a": "b"})


def test_whitespace_only_selector_is_empty() -> None:
    assert sel("   ").empty


def test_equals() -> None:
    assert sel("app=web").matches({"app": "web"})
    assert not sel("app=web").matches({"app": "db"})
    assert not sel("app=web").matches({})


def test_double_equals() -> None:
    assert sel("app==web").matches({"app": "web"})
    assert not sel("app==web").matches({"app": "db"})


def test_not_equals_matches_missing_key() -> None:
    assert sel("app!=web").matches({})
    assert sel("app!=web").matches({"app": "db"})
    assert not sel("app!=web").matches({"app": "web"})


def test_in() -> None:
    s = sel("env in (prod, staging)")
    assert s.matches({"env": "prod"})
    assert s.matches({"env": "staging"})
    assert not s.matches({"env": "dev"})
    assert not s.matches({})


def test_notin_matches_missing_key() -> None:
    s = sel("env notin (prod,staging)")
    assert s.matches({})
    assert s.matches({"env": "dev"})
    assert not s.matches({"env": "prod"})


def test_exists() -> None:
    assert sel("app").matches({"app": ""})
    assert not sel("app").matches({"other": "x"})


def test_does_not_exist() -> None:
    assert sel("!app").matches({"other": "x"})
    assert not sel("!app").matches({"app": "x"})


def test_does_not_exist_allows_space_after_bang() -> None:
    assert sel("! app").matches({})


def test_comma_is_and() -> None:
    s = sel("app=web,tier!=db,!canary")
    assert s.matches({"app": "web", "tier": "fe"})
    assert not s.matches({"app": "web", "tier": "db"})
    assert not s.matches({"app": "web", "canary": "1"})
    assert not s.matches({"tier": "fe"})


def test_whitespace_around_tokens_is_ignored() -> None:
    assert sel("  app = web ,  env in ( a , b ) ").matches({"app": "web", "env": "b"})


def test_empty_exact_value_matches_empty_label() -> None:
    s = sel("app=")
    assert s.matches({"app": ""})
    assert not s.matches({"app": "x"})
    assert not s.matches({})


def test_empty_parens_mean_the_empty_value() -> None:
    s = sel("app in ()")
    assert s.matches({"app": ""})
    assert not s.matches({"app": "x"})


def test_set_with_trailing_comma_includes_empty_value() -> None:
    s = sel("app in (a,)")
    assert s.matches({"app": ""})
    assert s.matches({"app": "a"})


def test_keywords_are_values_inside_sets() -> None:
    assert sel("op in (in,notin)").matches({"op": "notin"})


def test_keyword_as_exact_value() -> None:
    assert sel("op=in").matches({"op": "in"})


def test_prefixed_key() -> None:
    assert sel("apps.kubernetes.io/name=web").matches({"apps.kubernetes.io/name": "web"})


def test_greater_and_less_than() -> None:
    assert sel("gen>3").matches({"gen": "4"})
    assert not sel("gen>3").matches({"gen": "3"})
    assert sel("gen<3").matches({"gen": "2"})
    assert not sel("gen<3").matches({"gen": "x"})
    assert not sel("gen<3").matches({})


def test_requirements_are_sorted_by_key_like_go() -> None:
    assert [r.key for r in sel("b=1,a=2,c").requirements] == ["a", "b", "c"]
    assert sel("b=1,a=2") == sel("a=2,b=1")


def test_values_are_sorted_and_deduplicated() -> None:
    assert sel("a in (c,b,c)").requirements[0].values == ("b", "c")


def test_str_round_trips() -> None:
    text = "a=b,c!=d,e in (f,g),h notin (i),j,!k"
    assert parse_label_selector(str(sel(text))) == sel(text)


def test_matches_accepts_none_labels() -> None:
    assert sel("!a").matches(None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a=b=c", "found '=', expected: ',' or 'end of string'"),
        ("a in x", "unable to parse requirement: found 'x' expected: '('"),
        ("!a=b", "found '=', expected: ',' or 'end of string'"),
        ("a,", "found '', expected: identifier after ','"),
        ("=a", "found '=', expected: !, identifier, or 'end of string'"),
        ("a in (b", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        ("a in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier"),
        ("a in (b c)", "unable to parse requirement: found 'c', expected: ',' or ')'"),
        ("a=(", "unable to parse requirement: found '(', expected: identifier"),
        ("!", "unable to parse requirement: found '', expected: identifier"),
    ],
)
def test_parse_errors_use_the_real_messages(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as info:
        parse_label_selector(text)
    assert str(info.value) == message


def test_selector_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_label_selector("a in")


@pytest.mark.parametrize("text", ["-a=b", "a_=b", "Foo.Com/a=b", "/a=b", "x/=b", "a" * 64 + "=b"])
def test_invalid_keys_are_rejected(text: str) -> None:
    with pytest.raises(SelectorError, match="invalid label key"):
        parse_label_selector(text)


@pytest.mark.parametrize("text", ["a=-b", "a=b-", "a in (ok,b_)", "a=" + "v" * 64])
def test_invalid_values_are_rejected(text: str) -> None:
    with pytest.raises(SelectorError, match="invalid label value"):
        parse_label_selector(text)


def test_gt_needs_an_integer() -> None:
    with pytest.raises(SelectorError, match="must be an integer"):
        parse_label_selector("a>b")


def test_requirement_validates_operator() -> None:
    with pytest.raises(SelectorError, match="not recognized"):
        Requirement("a", "~", ("b",))


def test_requirement_equals_needs_one_value() -> None:
    with pytest.raises(SelectorError, match="one single value"):
        Requirement("a", "=", ("b", "c"))


def test_requirement_exists_takes_no_values() -> None:
    with pytest.raises(SelectorError, match="must be empty"):
        Requirement("a", "exists", ("b",))


# ------------------------------------------------------------------------------------------- label: dict form


def test_dict_match_labels() -> None:
    s = label_selector_from_dict({"matchLabels": {"app": "web", "tier": "fe"}})
    assert s.matches({"app": "web", "tier": "fe", "x": "y"})
    assert not s.matches({"app": "web"})


def test_dict_match_expressions() -> None:
    s = label_selector_from_dict(
        {
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod"]},
                {"key": "tier", "operator": "NotIn", "values": ["db"]},
                {"key": "app", "operator": "Exists"},
                {"key": "canary", "operator": "DoesNotExist"},
            ]
        }
    )
    assert s.matches({"env": "prod", "app": "x"})
    assert not s.matches({"env": "prod", "app": "x", "tier": "db"})
    assert not s.matches({"env": "prod", "app": "x", "canary": "1"})
    assert not s.matches({"env": "prod"})


def test_dict_labels_and_expressions_combine() -> None:
    s = label_selector_from_dict({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]})
    assert s.matches({"a": "1", "b": ""})
    assert not s.matches({"a": "1"})


def test_empty_dict_selects_everything() -> None:
    s = label_selector_from_dict({})
    assert s.empty
    assert s.matches({"x": "y"})


def test_none_selects_nothing() -> None:
    s = label_selector_from_dict(None)
    assert not s.empty
    assert not s.matches({})
    assert not s.matches({"a": "b"})


def test_dict_unknown_operator() -> None:
    with pytest.raises(SelectorError, match='"Equals" is not a valid label selector operator'):
        label_selector_from_dict({"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["b"]}]})


def test_dict_in_needs_values() -> None:
    with pytest.raises(SelectorError, match="values set can't be empty"):
        label_selector_from_dict({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]})


def test_dict_exists_rejects_values() -> None:
    with pytest.raises(SelectorError, match="must be empty"):
        label_selector_from_dict({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["b"]}]})


def test_dict_bad_key() -> None:
    with pytest.raises(SelectorError, match="invalid label key"):
        label_selector_from_dict({"matchLabels": {"bad key": "x"}})


def test_dict_non_string_label_value() -> None:
    with pytest.raises(SelectorError, match="must be a string"):
        label_selector_from_dict({"matchLabels": {"a": 1}})


@pytest.mark.parametrize(
    "bad",
    [
        {"matchLabels": ["a"]},
        {"matchExpressions": {"key": "a"}},
        {"matchExpressions": ["a"]},
        {"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]},
    ],
)
def test_dict_malformed_shapes(bad: dict[str, Any]) -> None:
    with pytest.raises(SelectorError):
        label_selector_from_dict(bad)


def test_dict_not_a_mapping() -> None:
    with pytest.raises(SelectorError, match="must be an object"):
        label_selector_from_dict(["a"])  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------- label: properties

_label_text = st.from_regex(r"\A[a-z0-9]([a-z0-9._-]{0,8}[a-z0-9])?\Z")
_labels = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(["x", "y", "z", ""]), max_size=4)


@given(key=st.sampled_from(["a", "b", "c"]), value=_label_text, labels=_labels)
def test_not_equals_is_negation_of_equals(key: str, value: str, labels: dict[str, str]) -> None:
    assert sel(f"{key}!={value}").matches(labels) == (not sel(f"{key}={value}").matches(labels))


@given(key=st.sampled_from(["a", "b", "c"]), values=st.lists(_label_text, min_size=1, max_size=3), labels=_labels)
def test_notin_is_negation_of_in(key: str, values: list[str], labels: dict[str, str]) -> None:
    body = ",".join(values)
    assert sel(f"{key} notin ({body})").matches(labels) == (not sel(f"{key} in ({body})").matches(labels))


@given(labels=st.dictionaries(_label_text.filter(bool), _label_text, max_size=5))
def test_match_labels_dict_matches_its_own_labels(labels: dict[str, str]) -> None:
    assert label_selector_from_dict({"matchLabels": labels}).matches(labels)


@given(labels=st.dictionaries(_label_text.filter(bool), _label_text, min_size=1, max_size=5))
def test_rendered_equality_selector_round_trips(labels: dict[str, str]) -> None:
    s = label_selector_from_dict({"matchLabels": labels})
    assert parse_label_selector(str(s)) == s


# ------------------------------------------------------------------------------------------- field selectors

POD: dict[str, Any] = {
    "metadata": {"name": "web-1", "namespace": "default"},
    "spec": {"nodeName": "edge-1", "restartPolicy": "Always", "schedulerName": "default-scheduler"},
    "status": {"phase": "Running", "podIP": "10.0.0.5"},
}


def fsel(text: str, allowed: frozenset[str] = POD_FIELDS) -> FieldSelector:
    return parse_field_selector(text, allowed)


def test_field_sets() -> None:
    assert frozenset({"metadata.name", "metadata.namespace"}) == GENERIC_FIELDS
    assert GENERIC_FIELDS < POD_FIELDS
    assert "spec.nodeName" in POD_FIELDS
    assert "status.nominatedNodeName" in POD_FIELDS
    assert len(POD_FIELDS) == 10


@pytest.mark.parametrize("text", ["", None])
def test_empty_field_selector_matches_everything(text: str | None) -> None:
    s = parse_field_selector(text, POD_FIELDS)
    assert s.empty
    assert s.matches({})


def test_field_equals() -> None:
    assert fsel("spec.nodeName=edge-1").matches(POD)
    assert not fsel("spec.nodeName=edge-2").matches(POD)


def test_field_double_equals() -> None:
    assert fsel("metadata.name==web-1").matches(POD)


def test_field_not_equals() -> None:
    assert fsel("status.phase!=Succeeded").matches(POD)
    assert not fsel("status.phase!=Running").matches(POD)


def test_field_comma_is_and() -> None:
    assert fsel("spec.nodeName=edge-1,status.phase!=Failed").matches(POD)
    assert not fsel("spec.nodeName=edge-1,status.phase=Failed").matches(POD)


def test_missing_field_compares_as_empty() -> None:
    unbound = {"metadata": {"name": "p"}, "spec": {}}
    assert fsel("spec.nodeName=").matches(unbound)
    assert not fsel("spec.nodeName=").matches(POD)
    assert fsel("spec.nodeName!=").matches(POD)


def test_unknown_field_is_rejected_with_real_message() -> None:
    with pytest.raises(SelectorError) as info:
        fsel("spec.foo=bar")
    assert str(info.value) == "field label not supported: spec.foo"


def test_pod_only_field_rejected_for_generic_kinds() -> None:
    with pytest.raises(SelectorError, match=r"field label not supported: spec\.nodeName"):
        parse_field_selector("spec.nodeName=x", GENERIC_FIELDS)


def test_generic_allowed_is_default() -> None:
    assert parse_field_selector("metadata.name=a").matches({"metadata": {"name": "a"}})


def test_any_field_allowed_but_an_empty_one() -> None:
    assert parse_field_selector("spec.unschedulable=true", None).matches({"spec": {"unschedulable": True}})
    with pytest.raises(SelectorError) as info:
        parse_field_selector("=x", None)
    assert str(info.value) == "field label not supported: "


def test_field_term_without_operator() -> None:
    with pytest.raises(SelectorError) as info:
        fsel("spec.nodeName")
    assert str(info.value) == "invalid selector: 'spec.nodeName'; can't understand 'spec.nodeName'"


def test_field_escaped_comma_and_equals_in_value() -> None:
    obj = {"metadata": {"name": "a,b=c"}}
    s = fsel(r"metadata.name=a\,b\=c")
    assert s.terms[0].value == "a,b=c"
    assert s.matches(obj)


def test_field_unescaped_equals_in_value_is_rejected() -> None:
    with pytest.raises(SelectorError, match="unescaped character"):
        fsel("metadata.name=a=b")


def test_field_invalid_escape_is_rejected() -> None:
    with pytest.raises(SelectorError, match=r"invalid escape sequence: \\x"):
        fsel(r"metadata.name=a\x")


def test_field_trailing_backslash_is_rejected() -> None:
    with pytest.raises(SelectorError, match="invalid escape sequence"):
        fsel("metadata.name=a\\")


def test_field_empty_terms_are_skipped() -> None:
    assert len(fsel("metadata.name=web-1,,").terms) == 1


def test_field_not_equals_operator_wins_over_equals() -> None:
    term = fsel("status.phase!=x").terms[0]
    assert (term.field, term.operator, term.value) == ("status.phase", "!=", "x")


def test_field_double_equals_is_normalised() -> None:
    assert fsel("status.phase==x").terms[0].operator == "="


def test_field_exact_value() -> None:
    s = fsel("status.phase!=Failed,spec.nodeName=edge-1")
    assert s.exact_value("spec.nodeName") == "edge-1"
    assert s.exact_value("status.phase") is None
    assert s.exact_value("metadata.name") is None


def test_field_str_round_trips_with_escapes() -> None:
    s = fsel(r"metadata.name=a\,b,status.phase!=x")
    assert parse_field_selector(str(s), POD_FIELDS) == s


def test_host_network_renders_as_bool() -> None:
    assert pod_field_value(POD, "spec.hostNetwork") == "false"
    assert pod_field_value({"spec": {"hostNetwork": True}}, "spec.hostNetwork") == "true"
    assert fsel("spec.hostNetwork=false").matches(POD)


def test_pod_ip_prefers_pod_ips() -> None:
    pod = {"status": {"podIP": "1.1.1.1", "podIPs": [{"ip": "2.2.2.2"}]}}
    assert pod_field_value(pod, "status.podIP") == "2.2.2.2"
    assert pod_field_value(POD, "status.podIP") == "10.0.0.5"


def test_field_value_of_cluster_scoped_namespace_is_empty() -> None:
    assert field_value({"metadata": {"name": "n"}}, "metadata.namespace") == ""


def test_field_value_through_non_mapping_is_empty() -> None:
    assert field_value({"spec": "weird"}, "spec.nodeName") == ""


def test_field_value_renders_numbers() -> None:
    assert field_value({"spec": {"n": 3}}, "spec.n") == "3"


@given(node=st.from_regex(r"\A[a-z0-9-]{0,12}\Z"), other=st.from_regex(r"\A[a-z0-9-]{0,12}\Z"))
def test_node_name_equality_and_inequality_partition(node: str, other: str) -> None:
    pod = {"spec": {"nodeName": other}} if other else {"spec": {}}
    assert fsel(f"spec.nodeName={node}").matches(pod) == (node == other)
    assert fsel(f"spec.nodeName!={node}").matches(pod) == (node != other)
