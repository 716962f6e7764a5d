"""The simulated API server's Status bodies must match what real clients parse and branch on."""

from __future__ import annotations

import json

import pytest

from edgeagent.sim import errors
from edgeagent.sim.errors import ApiError


def test_status_body_has_real_key_order_and_failure_status() -> None:
    body = errors.status_body(400, "BadRequest", "nope")
    assert list(body) == ["kind", "apiVersion", "metadata", "status", "message", "reason", "code"]
    assert body["kind"] == "Status"
    assert body["apiVersion"] == "v1"
    assert body["metadata"] == {}
    assert body["status"] == "Failure"


def test_status_body_places_details_before_code() -> None:
    body = errors.status_body(404, "NotFound", "x", details={"name": "a"})
    assert list(body)[-2:] == ["details", "code"]


def test_api_error_carries_code_status_and_message() -> None:
    err = errors.bad_request("broken")
    assert isinstance(err, Exception)
    assert err.code == 400
    assert err.status["code"] == 400
    assert err.reason == "BadRequest"
    assert err.message == "broken"
    assert str(err) == "broken"
    assert "BadRequest" in repr(err)


def test_api_error_is_raisable_and_catchable() -> None:
    with pytest.raises(ApiError) as info:
        raise errors.not_found("pods", "x")
    assert info.value.code == 404


def test_not_found_core_resource() -> None:
    err = errors.not_found("pods", "web-1")
    assert err.code == 404
    assert err.status["reason"] == "NotFound"
    assert err.status["message"] == 'pods "web-1" not found'
    assert err.status["details"] == {"name": "web-1", "kind": "pods"}


def test_not_found_group_resource_is_qualified() -> None:
    err = errors.not_found("daemonsets", "ds", "apps")
    assert err.status["message"] == 'daemonsets.apps "ds" not found'
    assert err.status["details"] == {"name": "ds", "group": "apps", "kind": "daemonsets"}


def test_not_found_path_is_generic() -> None:
    err = errors.not_found_path()
    assert err.code == 404
    assert err.status["message"] == "the server could not find the requested resource"


def test_already_exists() -> None:
    err = errors.already_exists("pods", "x")
    assert err.code == 409
    assert err.status["reason"] == "AlreadyExists"
    assert err.status["message"] == 'pods "x" already exists'
    assert err.status["details"]["kind"] == "pods"


def test_conflict_message_form() -> None:
    err = errors.conflict("pods", "x", "boom")
    assert err.code == 409
    assert err.status["reason"] == "Conflict"
    assert err.status["message"] == 'Operation cannot be fulfilled on pods "x": boom'
    assert err.status["details"] == {"name": "x", "kind": "pods"}


def test_conflict_modified_uses_optimistic_lock_text() -> None:
    err = errors.conflict_modified("daemonsets", "ds", "apps")
    assert err.status["message"] == (
        'Operation cannot be fulfilled on daemonsets.apps "ds": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )


def test_precondition_uid_exact_text_and_kind() -> None:
    err = errors.precondition_failed_uid("Pod", "x", "A", "B")
    assert err.code == 409
    assert err.status["reason"] == "Conflict"
    assert err.status["message"] == (
        'Operation cannot be fulfilled on Pod "x": the UID in the precondition (A) does not match the UID in '
        "record (B). The object might have been deleted and then recreated"
    )
    assert err.status["details"] == {"name": "x", "kind": "Pod"}


def test_precondition_rv_exact_text() -> None:
    err = errors.precondition_failed_rv("Pod", "x", "5", "7")
    assert err.code == 409
    assert err.status["message"] == (
        'Operation cannot be fulfilled on Pod "x": the ResourceVersion in the precondition (5) does not match the '
        "ResourceVersion in record (7). The object might have been modified"
    )
    assert err.status["details"]["kind"] == "Pod"


def test_precondition_with_group_qualifies_kind() -> None:
    err = errors.precondition_failed_uid("DaemonSet", "ds", "A", "B", group="apps")
    assert err.status["message"].startswith('Operation cannot be fulfilled on DaemonSet.apps "ds": ')
    assert err.status["details"]["group"] == "apps"


def test_invalid_single_cause() -> None:
    cause = errors.field_invalid("metadata.uid", "abc", "field is immutable")
    err = errors.invalid("Pod", "x", [cause])
    assert err.code == 422
    assert err.status["reason"] == "Invalid"
    assert err.status["message"] == 'Pod "x" is invalid: metadata.uid: Invalid value: "abc": field is immutable'
    assert err.status["details"] == {
        "name": "x",
        "kind": "Pod",
        "causes": [
            {
                "reason": "FieldValueInvalid",
                "message": 'Invalid value: "abc": field is immutable',
                "field": "metadata.uid",
            }
        ],
    }


def test_invalid_several_causes_are_bracketed() -> None:
    causes = [errors.field_required("metadata.name"), errors.field_required("spec.holderIdentity", "must be set")]
    err = errors.invalid("Lease", "l", causes, group="coordination.k8s.io")
    assert err.status["message"] == (
        'Lease.coordination.k8s.io "l" is invalid: '
        "[metadata.name: Required value, spec.holderIdentity: Required value: must be set]"
    )
    assert err.status["details"]["group"] == "coordination.k8s.io"
    assert len(err.status["details"]["causes"]) == 2


def test_invalid_dedups_identical_messages() -> None:
    cause = errors.field_required("metadata.name")
    err = errors.invalid("Pod", "x", [cause, dict(cause)])
    assert err.status["message"] == 'Pod "x" is invalid: metadata.name: Required value'


def test_invalid_does_not_share_cause_dicts_with_caller() -> None:
    cause = errors.field_required("metadata.name")
    err = errors.invalid("Pod", "x", [cause])
    cause["field"] = "changed"
    assert err.status["details"]["causes"][0]["field"] == "metadata.name"


def test_field_invalid_renders_numbers_bare() -> None:
    assert errors.field_invalid("spec.replicas", -1, "must be >= 0")["message"] == "Invalid value: -1: must be >= 0"


def test_field_not_supported_lists_values() -> None:
    cause = errors.field_not_supported("spec.restartPolicy", "Sometimes", ["Always", "Never"])
    assert cause["reason"] == "FieldValueNotSupported"
    assert cause["message"] == 'Unsupported value: "Sometimes": supported values: "Always", "Never"'


def test_field_forbidden() -> None:
    cause = errors.field_forbidden("spec", "pod updates may not change fields")
    assert cause == {
        "reason": "FieldValueForbidden",
        "message": "Forbidden: pod updates may not change fields",
        "field": "spec",
    }


def test_bad_request() -> None:
    err = errors.bad_request("continue key is not valid")
    assert (err.code, err.status["reason"], err.status["message"]) == (400, "BadRequest", "continue key is not valid")
    assert "details" not in err.status


def test_unauthorized_default_text() -> None:
    err = errors.unauthorized()
    assert (err.code, err.status["reason"], err.status["message"]) == (401, "Unauthorized", "Unauthorized")


def test_forbidden() -> None:
    err = errors.forbidden("pods", "x", "User cannot delete")
    assert err.code == 403
    assert err.status["message"] == 'pods "x" is forbidden: User cannot delete'


def test_forbidden_without_name() -> None:
    assert errors.forbidden("pods", "", "no").status["message"] == "pods is forbidden: no"


def test_method_not_allowed() -> None:
    err = errors.method_not_allowed("create", "nodes")
    assert err.code == 405
    assert err.status["reason"] == "MethodNotAllowed"
    assert err.status["message"] == 'create is not supported on resources of kind "nodes"'
    assert err.status["details"] == {"kind": "nodes"}


def test_not_acceptable() -> None:
    err = errors.not_acceptable(["application/json", "application/yaml"])
    assert err.code == 406
    assert err.status["reason"] == "NotAcceptable"
    assert err.status["message"] == "only the following media types are accepted: application/json, application/yaml"


def test_unsupported_media_type_lists_patch_types() -> None:
    err = errors.unsupported_media_type("text/plain")
    assert err.code == 415
    assert err.status["reason"] == "UnsupportedMediaType"
    assert err.status["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, "
        "application/apply-patch+yaml"
    )


def test_gone_defaults_to_list_too_old() -> None:
    err = errors.gone()
    assert err.code == 410
    assert err.status["reason"] == "Expired"
    assert err.status["message"] == "The resourceVersion for the provided list is too old."
    assert errors.list_too_old().status == err.status


def test_expired_watch_event() -> None:
    event = errors.expired_watch_event(5, 100)
    assert event == {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "too old resource version: 5 (100)",
            "reason": "Expired",
            "code": 410,
        },
    }


def test_expired_watch_event_serialises_compactly_like_the_real_server() -> None:
    line = json.dumps(errors.expired_watch_event(1, 2), separators=(",", ":"))
    assert line.startswith('{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},')


def test_timeout_prefix() -> None:
    err = errors.timeout("request did not complete within 60s")
    assert err.code == 504
    assert err.status["reason"] == "Timeout"
    assert err.status["message"] == "Timeout: request did not complete within 60s"


def test_timeout_retry_after_in_details() -> None:
    assert errors.timeout("x", 3).status["details"] == {"retryAfterSeconds": 3}


def test_too_large_rv_without_numbers() -> None:
    err = errors.too_large_rv()
    assert err.code == 504
    assert err.status["reason"] == "Timeout"
    assert err.status["message"] == "Timeout: Too large resource version"
    assert err.status["details"]["causes"] == [
        {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
    ]


def test_too_large_rv_with_numbers() -> None:
    err = errors.too_large_rv(50, 7)
    assert err.status["message"] == "Timeout: Too large resource version: 50, current: 7"
    assert err.status["details"]["retryAfterSeconds"] == 1
    assert list(err.status)[-1] == "code"


def test_too_many_requests() -> None:
    err = errors.too_many_requests("slow down", 2)
    assert (err.code, err.reason) == (429, "TooManyRequests")
    assert err.status["details"] == {"retryAfterSeconds": 2}


def test_internal_error() -> None:
    err = errors.internal_error("disk on fire")
    assert (err.code, err.reason) == (500, "InternalError")
    assert err.message == "Internal error occurred: disk on fire"
    assert err.status["details"] == {"causes": [{"message": "disk on fire"}]}


def test_server_timeout() -> None:
    err = errors.server_timeout("pods", "delete", 2)
    assert (err.code, err.reason) == (500, "ServerTimeout")
    assert err.message == "The delete operation against pods could not be completed at this time, please try again."
    assert err.status["details"] == {"kind": "pods", "retryAfterSeconds": 2}


def test_service_unavailable() -> None:
    err = errors.service_unavailable("shutting down")
    assert (err.code, err.reason, err.message) == (503, "ServiceUnavailable", "shutting down")


def test_success_status_for_delete() -> None:
    body = errors.success_status("daemonsets", "ds", "u-1", "apps")
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": "ds", "group": "apps", "kind": "daemonsets", "uid": "u-1"},
    }


def test_status_bodies_are_json_serialisable() -> None:
    for err in (
        errors.not_found("pods", "x"),
        errors.too_large_rv(1, 0),
        errors.invalid("Pod", "x", [errors.field_invalid("a", {"b": [1]}, "bad")]),
    ):
        assert json.loads(json.dumps(err.status)) == err.status
