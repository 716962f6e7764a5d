"""The protobuf bodies kubectl sends to the auth endpoints, decoded into their JSON form.

kubectl's typed clients post TokenRequest (`kubectl create token`), SelfSubjectAccessReview (`kubectl auth
can-i`) and SelfSubjectRulesReview (`kubectl auth can-i --list`) as `application/vnd.kubernetes.protobuf`:
the `k8s\\0` magic, then a runtime.Unknown whose field 2 holds the object. Only the fields these endpoints read
are mapped (numbers as in k8s.io/api's generated.proto, checked against what kubectl 1.32 sends); responses go
back as JSON, which kubectl accepts.
"""

from __future__ import annotations

from typing import Any

from edgeagent.sim import protobuf
from edgeagent.sim.protobuf import MAGIC

JSON = dict[str, Any]
Fields = dict[int, list[int | bytes]]


def fields(data: bytes) -> Fields:
    """Field number -> values (ints for varints, bytes for length-delimited); fixed-width values are skipped.

    The wire format is read by `sim/protobuf.py`, which `kubectl create` bodies use too; grouped by number here
    because these messages are read by field, not in order.
    """
    out: Fields = {}
    for number, wire, value in protobuf.fields(data):
        if wire in (0, 2):
            out.setdefault(number, []).append(value)
    return out


def _str(f: Fields, number: int) -> str:
    values = f.get(number) or []
    value = values[-1] if values else b""
    return value.decode("utf-8") if isinstance(value, bytes) else ""


def _msg(f: Fields, number: int) -> Fields | None:
    values = f.get(number) or []
    value = values[-1] if values else None
    return fields(value) if isinstance(value, bytes) else None


def _unwrap(body: bytes) -> Fields:
    if not body.startswith(MAGIC):
        raise ValueError("not a Kubernetes protobuf body (no k8s magic)")
    unknown = fields(body[len(MAGIC):])
    raw = _msg(unknown, 2)
    if raw is None:
        raise ValueError("the protobuf envelope holds no object")
    return raw


def token_request(body: bytes) -> JSON:
    spec = _msg(_unwrap(body), 2) or {}
    out: JSON = {"audiences": [v.decode("utf-8") for v in spec.get(1, []) if isinstance(v, bytes)]}
    seconds = [v for v in spec.get(4, []) if isinstance(v, int)]
    if seconds:
        out["expirationSeconds"] = seconds[-1]
    ref = _msg(spec, 3)
    if ref is not None:
        out["boundObjectRef"] = {"kind": _str(ref, 1), "apiVersion": _str(ref, 2), "name": _str(ref, 3),
                                 "uid": _str(ref, 4)}
    return {"spec": out}


def self_subject_access_review(body: bytes) -> JSON:
    spec = _msg(_unwrap(body), 2) or {}
    out: JSON = {}
    resource = _msg(spec, 1)
    if resource is not None:
        out["resourceAttributes"] = {key: _str(resource, n) for n, key in enumerate(
            ("namespace", "verb", "group", "version", "resource", "subresource", "name"), start=1)}
    non_resource = _msg(spec, 2)
    if non_resource is not None:
        out["nonResourceAttributes"] = {"path": _str(non_resource, 1), "verb": _str(non_resource, 2)}
    return {"spec": out}


def self_subject_rules_review(body: bytes) -> JSON:
    spec = _msg(_unwrap(body), 2) or {}
    return {"spec": {"namespace": _str(spec, 1)}}
