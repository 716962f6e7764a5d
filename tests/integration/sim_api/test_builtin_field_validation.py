"""`fieldValidation` for the built-in kinds, over HTTP: a field the kind's type lacks is refused under Strict
(with the real strict decoding text), dropped with a `Warning: 299` header under Warn (the default for a client
that sends none) and dropped silently under Ignore (sim/builtin_fields.py, custom_writes.decode_builtin)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.sim_api import Api, daemonset, pod

JSON = dict[str, Any]
PODS = "/api/v1/namespaces/default/pods"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"
DAEMONSETS = "/apis/apps/v1/namespaces/default/daemonsets"
MERGE = "application/merge-patch+json"


def _pod_with_extras() -> JSON:
    body = pod("p1")
    body["apiVersion"], body["kind"] = "v1", "Pod"
    body["spec"]["foo"] = 1
    body["spec"]["containers"][0]["bar"] = "x"
    return body


async def test_strict_refuses_each_unknown_field_with_its_path(api: Api) -> None:
    reply = await api.call("POST", PODS, query={"fieldValidation": "Strict"}, body=_pod_with_extras())
    assert reply.status == 400, reply.raw
    assert reply.body["reason"] == "BadRequest"
    assert reply.body["message"] == ('Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
                                     'unknown field "spec.containers[0].bar", unknown field "spec.foo"')
    assert (await api.call("GET", f"{PODS}/p1")).status == 404


@pytest.mark.parametrize("query", [{}, {"fieldValidation": "Warn"}])
async def test_warn_drops_the_field_and_says_so(api: Api, query: JSON) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "colour": "red"},
            "data": {"a": "b"}, "spec": {"foo": 1}}
    reply = await api.call("POST", CONFIGMAPS, query=query, body=body)
    assert reply.status == 201, reply.raw
    assert reply.headers.getall("Warning") == ['299 - "unknown field \\"metadata.colour\\""',
                                                '299 - "unknown field \\"spec\\""']
    assert "spec" not in reply.body and "colour" not in reply.body["metadata"]
    assert reply.body["data"] == {"a": "b"}


async def test_ignore_drops_the_field_silently(api: Api) -> None:
    body = {"metadata": {"name": "c"}, "data": {"a": "b"}, "extra": True}
    reply = await api.call("POST", CONFIGMAPS, query={"fieldValidation": "Ignore"}, body=body)
    assert reply.status == 201, reply.raw
    assert "Warning" not in reply.headers
    assert "extra" not in reply.body


async def test_maps_and_free_form_fields_take_any_key(api: Api) -> None:
    ds = daemonset("agent")
    ds["metadata"]["labels"] = {"any.key/x": "y"}
    ds["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "50%"}}
    reply = await api.call("POST", DAEMONSETS, query={"fieldValidation": "Strict"}, body=ds)
    assert reply.status == 201, reply.raw
    assert "Warning" not in reply.headers


async def test_updates_and_patches_are_checked_too(api: Api) -> None:
    await api.ok("POST", CONFIGMAPS, body={"metadata": {"name": "c"}, "data": {"a": "b"}})
    current = await api.ok("GET", f"{CONFIGMAPS}/c")
    reply = await api.call("PUT", f"{CONFIGMAPS}/c", query={"fieldValidation": "Strict"},
                           body={**current, "extra": 1})
    assert reply.status == 400, reply.raw
    assert reply.body["message"] == ('ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding '
                                     'error: unknown field "extra"')
    reply = await api.call("PATCH", f"{CONFIGMAPS}/c", query={"fieldValidation": "Strict"},
                           body={"extra": 1}, content_type=MERGE)
    assert reply.status == 400, reply.raw
    assert reply.body["message"] == 'strict decoding error: unknown field "extra"'
    reply = await api.call("PATCH", f"{CONFIGMAPS}/c", body={"extra": 1, "data": {"a": "c"}}, content_type=MERGE)
    assert reply.status == 200, reply.raw
    assert reply.headers.getall("Warning") == ['299 - "unknown field \\"extra\\""']
    assert reply.body["data"] == {"a": "c"} and "extra" not in reply.body


async def test_an_unsupported_directive_is_refused_for_built_in_kinds_too(api: Api) -> None:
    reply = await api.call("POST", CONFIGMAPS, query={"fieldValidation": "Loud"},
                           body={"metadata": {"name": "c"}})
    assert reply.status == 422, reply.raw
    assert reply.body["details"]["causes"][0]["field"] == "fieldValidation"
