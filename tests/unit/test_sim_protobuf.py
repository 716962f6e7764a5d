"""Decoding the protobuf bodies kubectl's typed clients send (`kubectl create …`).

The byte strings are what kubectl v1.32.4 sent to the sim (captured with `-v=9`), so these tests pin the
decoder to the real wire format, not to an encoder of our own.
"""

from __future__ import annotations

import pytest

from edgeagent.sim import protobuf
from edgeagent.sim.protobuf import ProtobufError

NAMESPACE = bytes.fromhex(
    "6b3873000a0f0a02763112094e616d657370616365121b0a130a03666f6f12001a0022002a00320038004200120"
    "01a020a001a002200")
CONFIGMAP = bytes.fromhex(
    "6b3873000a0f0a0276311209436f6e6669674d617012270a130a03636d3112001a0022002a0032003800420012060a"
    "01611201311208 0a016212037477 6f1a002200".replace(" ", ""))
SECRET = bytes.fromhex(
    "6b3873000a0c0a02763112065365637265741225 0a120a02733112001a0022002a003200380042001 20d0a027077"
    "1207 68756e746572321a001a002200".replace(" ", ""))
JOB = bytes.fromhex(
    "6b3873000a0f0a0862617463682f763112034a6f621289010a120a026a3112001a0022002a003200380042001269"
    "32670a100a0012001a0022002a003200380042001253 12300a026a31120c62757379626f783a312e33361a046563"
    "686f1a0268692a0042006a00720080010088010090010 0a201001a054e65766572320042004a00520058006000680082"
    "01008a01009a0100c20100 1a0820002800300 03a001a002200".replace(" ", ""))
SERVICE = bytes.fromhex(
    "6b3873000a0d0a0276311207536572766963651 26c0a210a0473766331 12001a0022002a0032003800420 05a0b0a036170"
    "70120473766331 12430a1b0a0738302d383038301203544350185022070800109 03f1a0028 00120b0a03617070120473"
    "766331 1a002209436c757374657249503a00420052005a00600068001a020a001a002200".replace(" ", ""))
CLUSTERROLE = bytes.fromhex(
    "6b3873000a2b0a1c726261632e617574686f72697a6174696f6e2e6b38732e696f2f7631120b436c7573746572526f"
    "6c65122a0a130a0363723112001a0022002a0032003800420012130a036765740a046c69737412001a04706f64731a"
    "002200")


def test_namespace() -> None:
    assert protobuf.decode_object(NAMESPACE) == {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": "foo"}}


def test_configmap_data_map() -> None:
    assert protobuf.decode_object(CONFIGMAP) == {"apiVersion": "v1", "kind": "ConfigMap",
                                                 "metadata": {"name": "cm1"}, "data": {"a": "1", "b": "two"}}


def test_secret_data_is_base64_as_in_json() -> None:
    assert protobuf.decode_object(SECRET) == {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"},
                                              "data": {"pw": "aHVudGVyMg=="}}


def test_job_with_pod_template_and_command() -> None:
    job = protobuf.decode_object(JOB)
    assert (job["apiVersion"], job["kind"], job["metadata"]) == ("batch/v1", "Job", {"name": "j1"})
    assert job["spec"] == {"template": {"spec": {
        "containers": [{"name": "j1", "image": "busybox:1.36", "command": ["echo", "hi"]}],
        "restartPolicy": "Never"}}}
    assert "status" not in job


def test_service_ports_with_int_or_string_target() -> None:
    svc = protobuf.decode_object(SERVICE)
    assert svc["metadata"] == {"name": "svc1", "labels": {"app": "svc1"}}
    assert svc["spec"] == {"ports": [{"name": "80-8080", "protocol": "TCP", "port": 80, "targetPort": 8080}],
                           "selector": {"app": "svc1"}, "type": "ClusterIP"}


def test_repeated_strings_keep_empty_elements() -> None:
    role = protobuf.decode_object(CLUSTERROLE)
    assert role["rules"] == [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]


def _message(*parts: bytes) -> bytes:
    return b"".join(parts)


def _ld(number: int, payload: bytes) -> bytes:
    return bytes([number << 3 | 2, len(payload)]) + payload


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = _ld(1, api_version.encode()) + _ld(2, kind.encode())
    return protobuf.MAGIC + _ld(1, type_meta) + bytes([0x12]) + bytes([len(raw)]) + raw


def test_pointer_fields_keep_their_zero_and_negative_ints_decode() -> None:
    # DeploymentSpec.replicas = 0 (pointer: meaningful), minReadySeconds = -1 (10-byte varint)
    spec = bytes([0x08, 0x00, 0x28]) + b"\xff" * 9 + b"\x01"
    deploy = protobuf.decode_object(_envelope("apps/v1", "Deployment", _ld(2, spec)))
    assert deploy["spec"] == {"replicas": 0, "minReadySeconds": -1}


def test_unknown_field_with_a_value_is_rejected_but_a_zero_one_is_ignored() -> None:
    zero = protobuf.decode_object(_envelope("v1", "ConfigMap", bytes([0xF8, 0x01, 0x00])))  # field 31 = 0
    assert zero == {"apiVersion": "v1", "kind": "ConfigMap"}
    with pytest.raises(ProtobufError, match="field 31 of ConfigMap"):
        protobuf.decode_object(_envelope("v1", "ConfigMap", bytes([0xF8, 0x01, 0x05])))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"kind": "Namespace"}', "magic"),
        (_envelope("v1", "Pod", b""), "cannot decode Pod"),
        (protobuf.MAGIC + b"\x0a\x05\x0a", "truncated"),
    ],
)
def test_bad_bodies(body: bytes, message: str) -> None:
    with pytest.raises(ProtobufError, match=message):
        protobuf.decode_object(body)
