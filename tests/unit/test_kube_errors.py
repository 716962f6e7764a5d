"""The API error tree: every status lands in the class that names its meaning."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgeagent.kube import errors
from edgeagent.kube.client import KubeError, KubeUnreachable


@pytest.mark.parametrize(("code", "cls"), [
    (400, errors.BadRequest), (401, errors.Unauthorized), (403, errors.Forbidden), (404, errors.NotFound),
    (409, errors.Conflict), (410, errors.Gone), (422, errors.Invalid), (429, errors.TooManyRequests),
    (418, errors.ClientError), (500, errors.ServerError), (503, errors.ServerError), (504, errors.ServerError),
])
def test_a_status_builds_the_class_that_names_it(code: int, cls: type[KubeError]) -> None:
    exc = KubeError(code, {"reason": "Why", "message": "what happened"})
    assert type(exc) is cls and isinstance(exc, KubeError) and isinstance(exc, errors.ApiError)
    assert (exc.code, exc.reason, exc.message) == (code, "Why", "what happened")
    assert str(exc) == f"{code} Why: what happened"


def test_unreachable_is_an_api_error_but_not_an_answer() -> None:
    exc = KubeUnreachable("GET /api: connection refused")
    assert isinstance(exc, errors.ApiError) and not isinstance(exc, KubeError)


@given(st.integers(min_value=400, max_value=599))
def test_only_server_errors_and_throttling_are_retryable(code: int) -> None:
    exc = KubeError(code)
    assert exc.retryable == (code >= 500 or code == 429)
    assert isinstance(exc, errors.ClientError) == (code < 500)


def test_a_subclass_built_directly_and_a_pickled_error_keep_their_class() -> None:
    assert type(errors.NotFound(404)) is errors.NotFound
    copy = pickle.loads(pickle.dumps(KubeError(409, {"reason": "Conflict"}, "uid precondition failed")))
    assert type(copy) is errors.Conflict and copy.message == "uid precondition failed"
