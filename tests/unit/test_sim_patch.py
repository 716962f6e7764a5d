"""PATCH semantics of the simulated apiserver: RFC 6902, RFC 7386 and Kubernetes strategic merge."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgeagent.sim.patch import (
    CONTENT_TYPES,
    PatchError,
    UnsupportedPatchType,
    apply_patch,
    json_equal,
    json_patch,
    media_type,
    merge_keys_for,
    merge_patch,
    strategic_merge_patch,
)

# ------------------------------------------------------------------------------------------- JSON patch


def test_add_object_member() -> None:
    assert json_patch({"a": 1}, [{"op": "add", "path": "/b", "value": 2}]) == {"a": 1, "b": 2}


def test_add_replaces_existing_member() -> None:
    assert json_patch({"a": 1}, [{"op": "add", "path": "/a", "value": 2}]) == {"a": 2}


def test_add_inserts_into_array() -> None:
    assert json_patch({"a": [1, 3]}, [{"op": "add", "path": "/a/1", "value": 2}]) == {"a": [1, 2, 3]}


def test_add_dash_appends() -> None:
    assert json_patch({"a": [1]}, [{"op": "add", "path": "/a/-", "value": 2}]) == {"a": [1, 2]}


def test_add_at_array_length_appends() -> None:
    assert json_patch({"a": [1]}, [{"op": "add", "path": "/a/1", "value": 2}]) == {"a": [1, 2]}


def test_add_past_array_end_fails() -> None:
    with pytest.raises(PatchError, match="out of bounds") as info:
        json_patch({"a": [1]}, [{"op": "add", "path": "/a/2", "value": 2}])
    assert info.value.code == 422


def test_add_with_missing_parent_fails() -> None:
    with pytest.raises(PatchError, match="doc is missing path: /x/y"):
        json_patch({}, [{"op": "add", "path": "/x/y", "value": 1}])


def test_add_through_scalar_fails() -> None:
    with pytest.raises(PatchError, match="doc is missing path"):
        json_patch({"a": 1}, [{"op": "add", "path": "/a/b", "value": 1}])


def test_add_root_replaces_document() -> None:
    assert json_patch({"a": 1}, [{"op": "add", "path": "", "value": {"b": 2}}]) == {"b": 2}


def test_escaped_pointer_tokens() -> None:
    doc: dict[str, Any] = {"metadata": {"labels": {}}}
    out = json_patch(doc, [{"op": "add", "path": "/metadata/labels/example.com~1role", "value": "x"}])
    assert out["metadata"]["labels"] == {"example.com/role": "x"}
    out = json_patch({}, [{"op": "add", "path": "/a~0b", "value": 1}])
    assert out == {"a~b": 1}


def test_tilde_01_decodes_to_literal_tilde_1() -> None:
    assert json_patch({}, [{"op": "add", "path": "/~01", "value": 1}]) == {"~1": 1}


def test_remove_member() -> None:
    assert json_patch({"a": 1, "b": 2}, [{"op": "remove", "path": "/a"}]) == {"b": 2}


def test_remove_array_element() -> None:
    assert json_patch({"a": [1, 2, 3]}, [{"op": "remove", "path": "/a/1"}]) == {"a": [1, 3]}


def test_remove_missing_fails() -> None:
    with pytest.raises(PatchError, match="remove operation does not apply: doc is missing path: /a"):
        json_patch({}, [{"op": "remove", "path": "/a"}])


def test_remove_dash_is_invalid() -> None:
    with pytest.raises(PatchError, match="invalid array index"):
        json_patch({"a": [1]}, [{"op": "remove", "path": "/a/-"}])


def test_remove_root_fails() -> None:
    with pytest.raises(PatchError, match="whole document"):
        json_patch({"a": 1}, [{"op": "remove", "path": ""}])


def test_replace_member() -> None:
    assert json_patch({"a": 1}, [{"op": "replace", "path": "/a", "value": [1]}]) == {"a": [1]}


def test_replace_array_element() -> None:
    assert json_patch({"a": [1, 2]}, [{"op": "replace", "path": "/a/0", "value": 9}]) == {"a": [9, 2]}


def test_replace_missing_member_fails() -> None:
    with pytest.raises(PatchError, match="replace operation does not apply: doc is missing key: /a"):
        json_patch({}, [{"op": "replace", "path": "/a", "value": 1}])


def test_replace_root() -> None:
    assert json_patch({"a": 1}, [{"op": "replace", "path": "", "value": {"z": 0}}]) == {"z": 0}


def test_leading_zero_index_is_invalid() -> None:
    with pytest.raises(PatchError, match="invalid array index"):
        json_patch({"a": [1, 2]}, [{"op": "replace", "path": "/a/01", "value": 0}])


def test_move_member() -> None:
    assert json_patch({"a": {"x": 1}}, [{"op": "move", "from": "/a/x", "path": "/b"}]) == {"a": {}, "b": 1}


def test_move_within_array() -> None:
    assert json_patch({"a": [1, 2, 3]}, [{"op": "move", "from": "/a/0", "path": "/a/-"}]) == {"a": [2, 3, 1]}


def test_move_to_same_path_is_noop() -> None:
    assert json_patch({"a": 1}, [{"op": "move", "from": "/a", "path": "/a"}]) == {"a": 1}


def test_move_into_own_child_fails() -> None:
    with pytest.raises(PatchError, match="into its child"):
        json_patch({"a": {"b": {}}}, [{"op": "move", "from": "/a", "path": "/a/b/c"}])


def test_move_missing_from_fails() -> None:
    with pytest.raises(PatchError, match="doc is missing from path: /nope"):
        json_patch({}, [{"op": "move", "from": "/nope", "path": "/a"}])


def test_copy_is_deep() -> None:
    out = json_patch({"a": {"x": [1]}}, [{"op": "copy", "from": "/a", "path": "/b"}])
    assert out == {"a": {"x": [1]}, "b": {"x": [1]}}
    out["b"]["x"].append(2)
    assert out["a"]["x"] == [1]


def test_copy_missing_from_member_fails() -> None:
    with pytest.raises(PatchError, match="missing the 'from' member"):
        json_patch({"a": 1}, [{"op": "copy", "path": "/b"}])


def test_test_passes_then_continues() -> None:
    ops = [{"op": "test", "path": "/a", "value": {"x": [1]}}, {"op": "add", "path": "/b", "value": 1}]
    assert json_patch({"a": {"x": [1]}}, ops) == {"a": {"x": [1]}, "b": 1}


def test_test_failure_aborts_whole_patch() -> None:
    doc = {"a": 1}
    ops = [{"op": "add", "path": "/b", "value": 1}, {"op": "test", "path": "/a", "value": 2}]
    with pytest.raises(PatchError, match="testing value /a failed: test failed") as info:
        json_patch(doc, ops)
    assert info.value.code == 422
    assert doc == {"a": 1}


def test_test_distinguishes_bool_from_number() -> None:
    with pytest.raises(PatchError):
        json_patch({"a": True}, [{"op": "test", "path": "/a", "value": 1}])


def test_test_accepts_int_float_equality() -> None:
    assert json_patch({"a": 1}, [{"op": "test", "path": "/a", "value": 1.0}]) == {"a": 1}


def test_test_missing_member_fails() -> None:
    with pytest.raises(PatchError, match="test failed"):
        json_patch({}, [{"op": "test", "path": "/a", "value": "x"}])


def test_test_missing_member_against_null_passes() -> None:
    assert json_patch({}, [{"op": "test", "path": "/a", "value": None}]) == {}


def test_test_missing_parent_fails_even_against_null() -> None:
    with pytest.raises(PatchError, match="test failed"):
        json_patch({}, [{"op": "test", "path": "/a/b", "value": None}])


def test_test_whole_document() -> None:
    assert json_patch({"a": 1}, [{"op": "test", "path": "", "value": {"a": 1}}]) == {"a": 1}


def test_unknown_op() -> None:
    with pytest.raises(PatchError, match="Unexpected kind: frob"):
        json_patch({}, [{"op": "frob", "path": "/a"}])


def test_missing_path_member_is_bad_request() -> None:
    with pytest.raises(PatchError, match="missing the 'path' member") as info:
        json_patch({}, [{"op": "add", "value": 1}])
    assert info.value.code == 400


def test_missing_value_member_is_bad_request() -> None:
    with pytest.raises(PatchError, match="missing the 'value' member") as info:
        json_patch({}, [{"op": "add", "path": "/a"}])
    assert info.value.code == 400


def test_add_null_value_is_allowed() -> None:
    assert json_patch({}, [{"op": "add", "path": "/a", "value": None}]) == {"a": None}


def test_non_string_path_is_bad_request() -> None:
    with pytest.raises(PatchError, match="must be a string"):
        json_patch({}, [{"op": "remove", "path": 3}])


def test_pointer_without_leading_slash_fails() -> None:
    with pytest.raises(PatchError, match="must start with '/'"):
        json_patch({"a": 1}, [{"op": "remove", "path": "a"}])


def test_ops_must_be_a_list() -> None:
    with pytest.raises(PatchError, match=r"cannot unmarshal object into Go value of type jsonpatch\.Patch"):
        json_patch({}, {"op": "add"})  # type: ignore[arg-type]


def test_each_op_must_be_an_object() -> None:
    with pytest.raises(PatchError, match=r"jsonpatch\.Operation"):
        json_patch({}, ["add"])


def test_result_must_stay_an_object() -> None:
    with pytest.raises(PatchError, match="not an object"):
        json_patch({}, [{"op": "replace", "path": "", "value": [1]}])


def test_json_patch_does_not_mutate_input_or_share_values() -> None:
    doc = {"a": {"b": [1]}}
    value = {"v": [1]}
    out = json_patch(doc, [{"op": "add", "path": "/a/b/-", "value": value}, {"op": "remove", "path": "/a/b/0"}])
    assert doc == {"a": {"b": [1]}}
    out["a"]["b"][0]["v"].append(2)
    assert value == {"v": [1]}


def test_empty_ops_returns_equal_copy() -> None:
    doc = {"a": [1]}
    out = json_patch(doc, [])
    assert out == doc
    assert out is not doc
    assert out["a"] is not doc["a"]


_keys = st.text(alphabet="ab/~c", min_size=1, max_size=4)
_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
_values = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3), max_leaves=8
)
_docs = st.dictionaries(_keys, _values, max_size=4)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


@given(doc=_docs, key=_keys, value=_values)
def test_add_then_remove_round_trips(doc: dict[str, Any], key: str, value: Any) -> None:
    if key in doc:
        return
    path = "/" + _escape(key)
    added = json_patch(doc, [{"op": "add", "path": path, "value": value}])
    assert json_equal(added[key], value)
    assert json_patch(added, [{"op": "remove", "path": path}]) == doc


@given(doc=_docs, key=_keys, value=_values)
def test_add_then_test_succeeds(doc: dict[str, Any], key: str, value: Any) -> None:
    path = "/" + _escape(key)
    json_patch(doc, [{"op": "add", "path": path, "value": value}, {"op": "test", "path": path, "value": value}])


@given(doc=_docs)
def test_json_patch_never_mutates_input(doc: dict[str, Any]) -> None:
    before = copy.deepcopy(doc)
    ops: list[Any] = [{"op": "remove", "path": "/" + _escape(k)} for k in doc]
    assert json_patch(doc, ops) == {}
    assert doc == before


# ------------------------------------------------------------------------------------------- merge patch


def test_merge_sets_and_overwrites() -> None:
    assert merge_patch({"a": 1, "b": 2}, {"b": 3, "c": 4}) == {"a": 1, "b": 3, "c": 4}


def test_merge_null_deletes() -> None:
    assert merge_patch({"a": 1, "b": 2}, {"a": None}) == {"b": 2}


def test_merge_null_for_missing_key_is_noop() -> None:
    assert merge_patch({"a": 1}, {"z": None}) == {"a": 1}


def test_merge_recurses_into_objects() -> None:
    doc = {"metadata": {"labels": {"a": "1", "b": "2"}}}
    assert merge_patch(doc, {"metadata": {"labels": {"b": None, "c": "3"}}}) == {
        "metadata": {"labels": {"a": "1", "c": "3"}}
    }


def test_merge_replaces_lists_whole() -> None:
    doc = {"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "status": "True"}]}}
    out = merge_patch(doc, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "False"}]


def test_merge_object_over_scalar() -> None:
    assert merge_patch({"a": 1}, {"a": {"b": 1, "c": None}}) == {"a": {"b": 1}}


def test_merge_scalar_over_object() -> None:
    assert merge_patch({"a": {"b": 1}}, {"a": "x"}) == {"a": "x"}


def test_merge_nested_nulls_in_new_object_are_stripped() -> None:
    assert merge_patch({}, {"a": {"b": None, "c": {"d": None}}}) == {"a": {"c": {}}}


def test_merge_keeps_nulls_inside_lists() -> None:
    assert merge_patch({}, {"a": [None, {"b": None}]}) == {"a": [None, {"b": None}]}


def test_merge_patch_must_be_object() -> None:
    with pytest.raises(PatchError, match="cannot unmarshal array"):
        merge_patch({}, [1])  # type: ignore[arg-type]


def test_merge_does_not_mutate_or_share() -> None:
    doc = {"a": {"b": 1}}
    patch = {"a": {"c": [1]}}
    out = merge_patch(doc, patch)
    out["a"]["c"].append(2)
    assert doc == {"a": {"b": 1}}
    assert patch == {"a": {"c": [1]}}


def _null_free(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _null_free(v) for k, v in value.items() if v is not None}
    return value


@given(doc=_docs)
def test_merge_with_itself_is_identity_for_null_free_docs(doc: dict[str, Any]) -> None:
    clean = _null_free(doc)
    assert merge_patch(clean, clean) == clean


@given(doc=_docs, target=_docs)
def test_merge_of_full_diff_reaches_target(doc: dict[str, Any], target: dict[str, Any]) -> None:
    """A patch that nulls every old key and sets every new one turns any doc into the (null-free) target."""
    target = _null_free(target)
    patch: dict[str, Any] = {k: None for k in doc if k not in target}
    patch.update({k: v for k, v in target.items()})
    out = merge_patch(doc, patch)
    assert set(out) == set(target)
    for key, value in target.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            continue  # objects merge into the old value instead of replacing it
        assert json_equal(out[key], value)


@given(doc=_docs, patch=_docs)
def test_merge_is_idempotent(doc: dict[str, Any], patch: dict[str, Any]) -> None:
    once = merge_patch(doc, patch)
    assert merge_patch(once, patch) == once


# ------------------------------------------------------------------------------------------- strategic merge


def pod(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "nodeName": "edge-1",
            "containers": [
                {
                    "name": "main",
                    "image": "img:1",
                    "env": [{"name": "A", "value": "1"}],
                    "ports": [{"containerPort": 80}],
                },
                {"name": "side", "image": "side:1"},
            ],
            "tolerations": [{"key": "a", "operator": "Exists"}],
        },
        "status": status
        or {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Up", "lastTransitionTime": "t0"},
                {"type": "PodNeedUpgrade", "status": "False", "message": "v1"},
            ],
            "containerStatuses": [{"name": "main", "ready": True}, {"name": "side", "ready": True}],
        },
    }


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in obj["status"]["conditions"]}


def test_smp_condition_merges_by_type_keeping_unmentioned_fields() -> None:
    out = strategic_merge_patch(pod(), {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, "Pod")
    ready = conditions(out)["Ready"]
    assert ready == {"type": "Ready", "status": "False", "reason": "Up", "lastTransitionTime": "t0"}
    assert conditions(out)["PodNeedUpgrade"]["status"] == "False"


def test_smp_condition_order_is_preserved() -> None:
    patch = {"status": {"conditions": [{"type": "PodNeedUpgrade", "status": "True"}]}}
    out = strategic_merge_patch(pod(), patch, "Pod")
    assert [c["type"] for c in out["status"]["conditions"]] == ["Ready", "PodNeedUpgrade"]


def test_smp_new_condition_goes_first() -> None:
    """As the apiserver orders it (kube-apiserver v1.24, measured): patch items not on the server lead."""
    out = strategic_merge_patch(pod(), {"status": {"conditions": [{"type": "Initialized", "status": "True"}]}}, "Pod")
    assert [c["type"] for c in out["status"]["conditions"]] == ["Initialized", "Ready", "PodNeedUpgrade"]


def test_smp_updated_condition_keeps_its_place() -> None:
    patch = {"status": {"conditions": [{"type": "PodNeedUpgrade", "status": "False"}]}}
    out = strategic_merge_patch(pod(), patch, "Pod")
    assert [c["type"] for c in out["status"]["conditions"]] == ["Ready", "PodNeedUpgrade"]


def test_smp_set_element_order_directive_keeps_the_merged_order() -> None:
    patch = {"status": {"$setElementOrder/conditions": [{"type": "Ready"}, {"type": "PodNeedUpgrade"},
                                                        {"type": "Initialized"}],
                        "conditions": [{"type": "Initialized", "status": "True"}]}}
    out = strategic_merge_patch(pod(), patch, "Pod")
    assert [c["type"] for c in out["status"]["conditions"]] == ["Ready", "PodNeedUpgrade", "Initialized"]


def test_smp_patch_delete_removes_element() -> None:
    patch = {"status": {"conditions": [{"type": "PodNeedUpgrade", "$patch": "delete"}]}}
    out = strategic_merge_patch(pod(), patch, "Pod")
    assert list(conditions(out)) == ["Ready"]


def test_smp_patch_delete_of_absent_element_is_noop() -> None:
    out = strategic_merge_patch(pod(), {"status": {"conditions": [{"type": "Nope", "$patch": "delete"}]}}, "Pod")
    assert out == pod()


def test_smp_delete_directive_never_stored_when_list_was_absent() -> None:
    doc: dict[str, Any] = {"status": {}}
    out = strategic_merge_patch(doc, {"status": {"conditions": [{"type": "X", "$patch": "delete"}]}}, "Pod")
    assert out == {"status": {"conditions": []}}


def test_smp_null_inside_element_deletes_field() -> None:
    out = strategic_merge_patch(pod(), {"status": {"conditions": [{"type": "Ready", "reason": None}]}}, "Pod")
    assert "reason" not in conditions(out)["Ready"]


def test_smp_null_deletes_key() -> None:
    out = strategic_merge_patch(pod(), {"metadata": {"labels": None}}, "Pod")
    assert "labels" not in out["metadata"]


def test_smp_nested_maps_merge() -> None:
    out = strategic_merge_patch(pod(), {"metadata": {"labels": {"v": "2"}}}, "Pod")
    assert out["metadata"]["labels"] == {"app": "web", "v": "2"}


def test_smp_container_status_list_is_atomic() -> None:
    patch = {"status": {"containerStatuses": [{"name": "main", "ready": False}]}}
    out = strategic_merge_patch(pod(), patch, "Pod")
    assert out["status"]["containerStatuses"] == [{"name": "main", "ready": False}]


def test_smp_tolerations_are_atomic() -> None:
    out = strategic_merge_patch(pod(), {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}, "Pod")
    assert out["spec"]["tolerations"] == [{"key": "b", "operator": "Exists"}]


def test_smp_containers_merge_by_name() -> None:
    out = strategic_merge_patch(pod(), {"spec": {"containers": [{"name": "main", "image": "img:2"}]}}, "Pod")
    containers = out["spec"]["containers"]
    assert [c["name"] for c in containers] == ["main", "side"]
    assert containers[0]["image"] == "img:2"
    assert containers[0]["env"] == [{"name": "A", "value": "1"}]


def test_smp_container_env_merges_by_name() -> None:
    patch = {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "2"}]}]}}
    out = strategic_merge_patch(pod(), patch, "Pod")
    assert out["spec"]["containers"][0]["env"] == [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]


def test_smp_container_ports_merge_by_container_port() -> None:
    patch = {"spec": {"containers": [{"name": "main", "ports": [{"containerPort": 80, "name": "http"}]}]}}
    out = strategic_merge_patch(pod(), patch, "Pod")
    assert out["spec"]["containers"][0]["ports"] == [{"containerPort": 80, "name": "http"}]


def test_smp_volumes_merge_by_name() -> None:
    doc = {"spec": {"volumes": [{"name": "a", "emptyDir": {}}]}}
    out = strategic_merge_patch(doc, {"spec": {"volumes": [{"name": "b", "emptyDir": {}}]}}, "Pod")
    assert [v["name"] for v in out["spec"]["volumes"]] == ["b", "a"]  # new patch items lead


def test_smp_owner_references_merge_by_uid() -> None:
    doc = {"metadata": {"ownerReferences": [{"uid": "1", "kind": "DaemonSet", "name": "ds"}]}}
    patch = {"metadata": {"ownerReferences": [{"uid": "1", "controller": True}, {"uid": "2", "name": "other"}]}}
    out = strategic_merge_patch(doc, patch, "Lease")
    assert out["metadata"]["ownerReferences"] == [
        {"uid": "1", "kind": "DaemonSet", "name": "ds", "controller": True},
        {"uid": "2", "name": "other"},
    ]


def test_smp_finalizers_are_a_merged_set() -> None:
    doc = {"metadata": {"finalizers": ["a", "b"]}}
    out = strategic_merge_patch(doc, {"metadata": {"finalizers": ["b", "c"]}}, "Pod")
    assert out["metadata"]["finalizers"] == ["a", "b", "c"]


def test_smp_delete_from_primitive_list() -> None:
    doc = {"metadata": {"finalizers": ["a", "b"]}}
    out = strategic_merge_patch(doc, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}, "Pod")
    assert out["metadata"]["finalizers"] == ["b"]


def test_smp_set_element_order_directive_is_dropped() -> None:
    patch = {"status": {"$setElementOrder/conditions": [{"type": "Ready"}], "conditions": [{"type": "Ready"}]}}
    out = strategic_merge_patch(pod(), patch, "Pod")
    assert not any(k.startswith("$") for k in out["status"])


def test_smp_retain_keys_clears_other_fields() -> None:
    doc = {"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}
    patch = {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}
    out = strategic_merge_patch(doc, patch, "Deployment")
    assert out == {"spec": {"strategy": {"type": "Recreate"}}}


def test_smp_retain_keys_must_be_a_list() -> None:
    with pytest.raises(PatchError, match="retainKeys"):
        strategic_merge_patch({}, {"a": {"$retainKeys": "x"}}, "Pod")


def test_smp_patch_replace_on_map() -> None:
    doc = {"metadata": {"labels": {"a": "1", "b": "2"}}}
    out = strategic_merge_patch(doc, {"metadata": {"labels": {"$patch": "replace", "c": "3"}}}, "Pod")
    assert out["metadata"]["labels"] == {"c": "3"}


def test_smp_patch_delete_on_map_empties_it() -> None:
    out = strategic_merge_patch({"spec": {"x": {"a": 1}}}, {"spec": {"x": {"$patch": "delete"}}}, "Pod")
    assert out == {"spec": {"x": {}}}


def test_smp_unknown_map_directive_fails() -> None:
    with pytest.raises(PatchError, match="Unknown patch type: frob"):
        strategic_merge_patch({}, {"a": {"$patch": "frob"}}, "Pod")


def test_smp_patch_replace_on_merging_list() -> None:
    patch = {"status": {"conditions": [{"$patch": "replace"}, {"type": "Only", "status": "True"}]}}
    out = strategic_merge_patch(pod(), patch, "Pod")
    assert out["status"]["conditions"] == [{"type": "Only", "status": "True"}]


def test_smp_element_without_merge_key_fails() -> None:
    with pytest.raises(PatchError, match="does not contain declared merge key: type") as info:
        strategic_merge_patch(pod(), {"status": {"conditions": [{"status": "True"}]}}, "Pod")
    assert info.value.code == 400


def test_smp_scalar_element_in_merging_list_fails() -> None:
    with pytest.raises(PatchError, match="merged by 'type'"):
        strategic_merge_patch(pod(), {"status": {"conditions": ["Ready"]}}, "Pod")


def test_smp_unknown_lists_are_atomic() -> None:
    out = strategic_merge_patch({"spec": {"args": ["a", "b"]}}, {"spec": {"args": ["c"]}}, "Pod")
    assert out["spec"]["args"] == ["c"]


def test_smp_node_conditions_and_addresses_merge_by_type() -> None:
    node = {
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "n"}],
        }
    }
    patch = {
        "status": {
            "conditions": [{"type": "Ready", "status": "Unknown"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}],
        }
    }
    out = strategic_merge_patch(node, patch, "Node")
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "Unknown", "reason": "KubeletReady"}]
    assert out["status"]["addresses"] == [
        {"type": "InternalIP", "address": "10.0.0.2"},
        {"type": "Hostname", "address": "n"},
    ]


def test_smp_node_taints_are_atomic() -> None:
    node = {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}
    out = strategic_merge_patch(node, {"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}}, "Node")
    assert out["spec"]["taints"] == [{"key": "b", "effect": "NoExecute"}]


def test_smp_daemonset_status_conditions_and_template_containers() -> None:
    ds = {
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "v1", "args": ["x"]}]}}},
        "status": {"conditions": [{"type": "A", "status": "True", "message": "m"}]},
    }
    patch = {
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "v2"}]}}},
        "status": {"conditions": [{"type": "A", "status": "False"}]},
    }
    out = strategic_merge_patch(ds, patch, "DaemonSet")
    assert out["spec"]["template"]["spec"]["containers"] == [{"name": "c", "image": "v2", "args": ["x"]}]
    assert out["status"]["conditions"] == [{"type": "A", "status": "False", "message": "m"}]


def test_smp_kind_lookup_accepts_plural_and_lowercase() -> None:
    assert merge_keys_for("pods") == merge_keys_for("Pod") == merge_keys_for("pod")
    assert merge_keys_for("daemonsets")[("status", "conditions")] == "type"
    assert merge_keys_for("nodes")[("status", "addresses")] == "type"


def test_smp_unknown_kind_only_merges_metadata() -> None:
    keys = merge_keys_for("Widget")
    assert set(keys) == {("metadata", "ownerReferences"), ("metadata", "finalizers")}


def test_smp_conditions_of_unknown_kind_are_atomic() -> None:
    doc = {"status": {"conditions": [{"type": "A"}, {"type": "B"}]}}
    out = strategic_merge_patch(doc, {"status": {"conditions": [{"type": "A", "x": 1}]}}, "Widget")
    assert out["status"]["conditions"] == [{"type": "A", "x": 1}]


def test_smp_type_change_list_to_map_replaces() -> None:
    assert strategic_merge_patch({"a": [1]}, {"a": {"b": 1}}, "Pod") == {"a": {"b": 1}}


def test_smp_patch_must_be_object() -> None:
    with pytest.raises(PatchError):
        strategic_merge_patch({}, [], "Pod")  # type: ignore[arg-type]


def test_smp_does_not_mutate_inputs() -> None:
    doc = pod()
    patch = {"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "X", "$patch": "delete"}]}}
    doc_before, patch_before = copy.deepcopy(doc), copy.deepcopy(patch)
    out = strategic_merge_patch(doc, patch, "Pod")
    out["status"]["conditions"][0]["status"] = "changed"
    out["spec"]["containers"][0]["env"].append({"name": "Z"})
    assert doc == doc_before
    assert patch == patch_before


@given(doc=_docs, patch=_docs)
def test_smp_equals_merge_patch_without_merge_keys_or_directives(doc: dict[str, Any], patch: dict[str, Any]) -> None:
    """For a kind with no list-merge keys in play, strategic merge degenerates to RFC 7386."""
    safe_doc = {"x" + k: v for k, v in doc.items() if "$" not in k}
    safe_patch = {"x" + k: v for k, v in patch.items()}
    assert strategic_merge_patch(safe_doc, safe_patch, "Widget") == merge_patch(safe_doc, safe_patch)


_condition_types = st.sampled_from(["Ready", "PodNeedUpgrade", "Initialized", "ContainersReady"])


@given(
    existing=st.dictionaries(_condition_types, st.sampled_from(["True", "False"]), max_size=4),
    updates=st.dictionaries(_condition_types, st.sampled_from(["True", "False", "Unknown"]), max_size=4),
)
def test_smp_conditions_union_by_type(existing: dict[str, str], updates: dict[str, str]) -> None:
    doc = {"status": {"conditions": [{"type": t, "status": s, "keep": t} for t, s in existing.items()]}}
    patch = {"status": {"conditions": [{"type": t, "status": s} for t, s in updates.items()]}}
    out = conditions(strategic_merge_patch(doc, patch, "Pod"))
    assert set(out) == set(existing) | set(updates)
    for t in out:
        assert out[t]["status"] == updates.get(t, existing.get(t))
        assert (out[t].get("keep") == t) == (t in existing)


# ------------------------------------------------------------------------------------------- dispatch


def test_content_types() -> None:
    assert {
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
    } == CONTENT_TYPES


def test_media_type_strips_parameters() -> None:
    assert media_type(" Application/Merge-Patch+JSON ; charset=utf-8") == "application/merge-patch+json"


def test_apply_json_patch_bytes() -> None:
    body = json.dumps([{"op": "add", "path": "/b", "value": 1}]).encode()
    assert apply_patch({"a": 1}, body, "application/json-patch+json", "Pod") == {"a": 1, "b": 1}


def test_apply_merge_patch_with_charset() -> None:
    body = b'{"a": null, "l": [2]}'
    out = apply_patch({"a": 1, "l": [1]}, body, "application/merge-patch+json; charset=utf-8", "Pod")
    assert out == {"l": [2]}


def test_apply_strategic_merge_patch() -> None:
    body = json.dumps({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}).encode()
    out = apply_patch(pod(), body, "application/strategic-merge-patch+json", "Pod")
    assert conditions(out)["Ready"]["reason"] == "Up"
    assert conditions(out)["Ready"]["status"] == "False"


def test_apply_patch_yaml_merges_given_fields() -> None:
    body = b"metadata:\n  labels:\n    v: '2'\nstatus:\n  conditions:\n  - type: Ready\n    status: 'False'\n"
    out = apply_patch(pod(), body, "application/apply-patch+yaml", "Pod")
    assert out["metadata"]["labels"] == {"app": "web", "v": "2"}
    assert conditions(out)["Ready"] == {"type": "Ready", "status": "False", "reason": "Up", "lastTransitionTime": "t0"}


def test_apply_patch_accepts_decoded_bodies() -> None:
    assert apply_patch({"a": 1}, {"b": 2}, "application/merge-patch+json", "Pod") == {"a": 1, "b": 2}
    assert apply_patch({}, [{"op": "add", "path": "/a", "value": 1}], "application/json-patch+json", "Pod") == {"a": 1}


def test_apply_patch_accepts_str_body() -> None:
    assert apply_patch({}, '{"a": 1}', "application/merge-patch+json", "Pod") == {"a": 1}


def test_unsupported_content_type_is_distinguishable() -> None:
    with pytest.raises(UnsupportedPatchType) as info:
        apply_patch({}, b"{}", "application/json", "Pod")
    assert info.value.code == 415
    assert info.value.content_type == "application/json"
    api = info.value.to_api_error()
    assert api.code == 415
    assert api.reason == "UnsupportedMediaType"


def test_unsupported_content_type_is_still_a_patch_error() -> None:
    with pytest.raises(PatchError):
        apply_patch({}, b"{}", "text/plain", "Pod")


@pytest.mark.parametrize(
    "content_type",
    ["application/merge-patch+json", "application/strategic-merge-patch+json", "application/json-patch+json"],
)
def test_invalid_json_is_bad_request(content_type: str) -> None:
    with pytest.raises(PatchError, match="invalid JSON") as info:
        apply_patch({}, b"{nope", content_type, "Pod")
    assert info.value.code == 400
    assert info.value.to_api_error().code == 400
    assert info.value.to_api_error().reason == "BadRequest"


def test_nan_literal_is_rejected() -> None:
    with pytest.raises(PatchError, match="invalid JSON"):
        apply_patch({}, b'{"a": NaN}', "application/merge-patch+json", "Pod")


def test_non_utf8_body_is_rejected() -> None:
    with pytest.raises(PatchError, match="UTF-8"):
        apply_patch({}, b"\xff\xfe", "application/merge-patch+json", "Pod")


@pytest.mark.parametrize("content_type", sorted(CONTENT_TYPES))
def test_empty_body_is_rejected(content_type: str) -> None:
    with pytest.raises(PatchError, match="empty"):
        apply_patch({}, b"  ", content_type, "Pod")


def test_invalid_yaml_is_rejected() -> None:
    with pytest.raises(PatchError, match="YAML"):
        apply_patch({}, b"a: [", "application/apply-patch+yaml", "Pod")


def test_merge_patch_body_must_be_object() -> None:
    with pytest.raises(PatchError, match="cannot unmarshal array"):
        apply_patch({}, b"[1]", "application/merge-patch+json", "Pod")


def test_json_patch_body_must_be_array() -> None:
    with pytest.raises(PatchError, match=r"jsonpatch\.Patch"):
        apply_patch({}, b'{"op": "add"}', "application/json-patch+json", "Pod")


def test_failed_json_patch_maps_to_real_422() -> None:
    with pytest.raises(PatchError) as info:
        apply_patch({"a": 1}, b'[{"op": "test", "path": "/a", "value": 2}]', "application/json-patch+json", "Pod")
    api = info.value.to_api_error()
    assert api.code == 422
    assert api.reason == "Invalid"
    assert api.message == "the server rejected our request due to an error in our request"
    assert api.status["details"]["causes"] == [
        {"reason": "UnexpectedServerResponse", "message": "testing value /a failed: test failed"}
    ]


def test_apply_patch_does_not_mutate_doc() -> None:
    doc = pod()
    before = copy.deepcopy(doc)
    apply_patch(doc, b'{"metadata": {"labels": null}}', "application/strategic-merge-patch+json", "Pod")
    assert doc == before


def test_json_equal_semantics() -> None:
    assert json_equal({"a": [1, "x", None]}, {"a": [1.0, "x", None]})
    assert not json_equal(True, 1)
    assert not json_equal(0, False)
    assert not json_equal([1], [1, 2])
    assert not json_equal({"a": 1}, {"b": 1})
    assert not json_equal("1", 1)
