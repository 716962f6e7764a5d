"""Request bodies in Kubernetes protobuf (`application/vnd.kubernetes.protobuf`), decoded to JSON.

`kubectl create namespace|configmap|secret|job|deployment|service|serviceaccount|clusterrole|…` and
`kubectl create token` go through client-go's typed clients, which send protobuf, not JSON. A real
server decodes them with the generated Go types; the sim keeps everything as JSON, so it decodes the
messages those commands send with the field numbers of k8s.io/api's generated.proto and stores the JSON
the real server would have stored.

Go's protobuf marshaller writes every non-pointer field, zero or not; JSON leaves zero values out
(`omitempty`), so zeros are dropped except for pointer fields, whose presence means something. A field
this table does not know is ignored when it holds a zero value and rejected (400) otherwise, so nothing
a client meant is ever silently lost.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]

MAGIC = b"k8s\x00"
MEDIA_TYPE = "application/vnd.kubernetes.protobuf"


class ProtobufError(ValueError):
    """The body is not a protobuf message this server can decode."""


# ---------------------------------------------------------------------------------------------- wire format


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtobufError("varint too long")


def fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) in order; length-delimited values are bytes, varints ints."""
    out: list[tuple[int, int, Any]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ProtobufError("truncated length-delimited field")
            value, pos = data[pos:pos + size], pos + size
        elif wire == 1:
            value, pos = int.from_bytes(data[pos:pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(data[pos:pos + 4], "little"), pos + 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
        if pos > len(data):
            raise ProtobufError("truncated fixed-size field")
        out.append((number, wire, value))
    return out


def _signed(value: int) -> int:
    """int32/int64 fields carry negatives as 64-bit two's complement varints."""
    return value - (1 << 64) if value >= 1 << 63 else value


# ---------------------------------------------------------------------------------------------- schema


@dataclass(frozen=True)
class Field:
    name: str  # the JSON name
    type: str  # string | bytes | int | bool | time | quantity | intorstring | map:<value type> | <message>
    repeated: bool = False
    pointer: bool = False  # a Go pointer: present-with-zero is meaningful and kept


def F(name: str, type_: str = "string", *, repeated: bool = False, pointer: bool = False) -> Field:
    return Field(name, type_, repeated, pointer)


def R(name: str, type_: str = "string") -> Field:
    return Field(name, type_, repeated=True)


def P(name: str, type_: str) -> Field:
    return Field(name, type_, pointer=True)


Message = dict[int, Field]

MESSAGES: dict[str, Message] = {
    # k8s.io/apimachinery meta/v1 and runtime
    "Unknown": {1: F("typeMeta", "TypeMeta"), 2: F("raw", "bytes"), 3: F("contentEncoding"), 4: F("contentType")},
    "TypeMeta": {1: F("apiVersion"), 2: F("kind")},
    "ObjectMeta": {
        1: F("name"), 2: F("generateName"), 3: F("namespace"), 4: F("selfLink"), 5: F("uid"),
        6: F("resourceVersion"), 7: F("generation", "int"), 8: F("creationTimestamp", "time"),
        9: F("deletionTimestamp", "time"), 10: P("deletionGracePeriodSeconds", "int"),
        11: F("labels", "map:string"), 12: F("annotations", "map:string"),
        13: R("ownerReferences", "OwnerReference"), 14: R("finalizers"),
    },
    "OwnerReference": {1: F("kind"), 3: F("name"), 4: F("uid"), 5: F("apiVersion"), 6: P("controller", "bool"),
                       7: P("blockOwnerDeletion", "bool")},
    "LabelSelector": {1: F("matchLabels", "map:string"), 2: R("matchExpressions", "LabelSelectorRequirement")},
    "LabelSelectorRequirement": {1: F("key"), 2: F("operator"), 3: R("values")},
    # core/v1
    "Namespace": {1: F("metadata", "ObjectMeta"), 2: F("spec", "NamespaceSpec"), 3: F("status", "Empty")},
    "NamespaceSpec": {1: R("finalizers")},
    "ConfigMap": {1: F("metadata", "ObjectMeta"), 2: F("data", "map:string"), 3: F("binaryData", "map:bytes"),
                  4: P("immutable", "bool")},
    "Secret": {1: F("metadata", "ObjectMeta"), 2: F("data", "map:bytes"), 3: F("type"),
               4: F("stringData", "map:string"), 5: P("immutable", "bool")},
    "ServiceAccount": {1: F("metadata", "ObjectMeta"), 2: R("secrets", "ObjectReference"),
                       3: R("imagePullSecrets", "LocalObjectReference"), 4: P("automountServiceAccountToken", "bool")},
    "ObjectReference": {1: F("kind"), 2: F("namespace"), 3: F("name"), 4: F("uid"), 5: F("apiVersion"),
                        6: F("resourceVersion"), 7: F("fieldPath")},
    "LocalObjectReference": {1: F("name")},
    "Service": {1: F("metadata", "ObjectMeta"), 2: F("spec", "ServiceSpec"), 3: F("status", "Empty")},
    "ServiceSpec": {
        1: R("ports", "ServicePort"), 2: F("selector", "map:string"), 3: F("clusterIP"), 4: F("type"),
        5: R("externalIPs"), 7: F("sessionAffinity"), 8: F("loadBalancerIP"), 9: R("loadBalancerSourceRanges"),
        10: F("externalName"), 11: F("externalTrafficPolicy"), 12: F("healthCheckNodePort", "int"),
        13: F("publishNotReadyAddresses", "bool"), 17: P("ipFamilyPolicy", "string"), 18: R("clusterIPs"),
        19: R("ipFamilies"), 20: P("allocateLoadBalancerNodePorts", "bool"), 21: P("loadBalancerClass", "string"),
        22: P("internalTrafficPolicy", "string"),
    },
    "ServicePort": {1: F("name"), 2: F("protocol"), 3: F("port", "int"), 4: F("targetPort", "intorstring"),
                    5: F("nodePort", "int"), 6: P("appProtocol", "string")},
    "PodTemplateSpec": {1: F("metadata", "ObjectMeta"), 2: F("spec", "PodSpec")},
    "PodSpec": {
        2: R("containers", "Container"), 3: F("restartPolicy"), 4: P("terminationGracePeriodSeconds", "int"),
        5: P("activeDeadlineSeconds", "int"), 6: F("dnsPolicy"), 7: F("nodeSelector", "map:string"),
        8: F("serviceAccountName"), 9: F("serviceAccount"), 10: F("nodeName"), 11: F("hostNetwork", "bool"),
        12: F("hostPID", "bool"), 13: F("hostIPC", "bool"), 15: R("imagePullSecrets", "LocalObjectReference"),
        16: F("hostname"), 17: F("subdomain"), 19: F("schedulerName"), 20: R("initContainers", "Container"),
        21: P("automountServiceAccountToken", "bool"), 22: R("tolerations", "Toleration"),
        24: F("priorityClassName"), 25: P("priority", "int"),
    },
    "Container": {
        1: F("name"), 2: F("image"), 3: R("command"), 4: R("args"), 5: F("workingDir"),
        6: R("ports", "ContainerPort"), 7: R("env", "EnvVar"), 8: F("resources", "ResourceRequirements"),
        13: F("terminationMessagePath"), 14: F("imagePullPolicy"), 16: F("stdin", "bool"),
        17: F("stdinOnce", "bool"), 18: F("tty", "bool"), 20: F("terminationMessagePolicy"),
        24: P("restartPolicy", "string"),
    },
    "ContainerPort": {1: F("name"), 2: F("hostPort", "int"), 3: F("containerPort", "int"), 4: F("protocol"),
                      5: F("hostIP")},
    "EnvVar": {1: F("name"), 2: F("value")},
    "ResourceRequirements": {1: F("limits", "map:quantity"), 2: F("requests", "map:quantity")},
    "Toleration": {1: F("key"), 2: F("operator"), 3: F("value"), 4: F("effect"), 5: P("tolerationSeconds", "int")},
    # apps/v1
    "Deployment": {1: F("metadata", "ObjectMeta"), 2: F("spec", "DeploymentSpec"), 3: F("status", "Empty")},
    "DeploymentSpec": {
        1: P("replicas", "int"), 2: F("selector", "LabelSelector"), 3: F("template", "PodTemplateSpec"),
        4: F("strategy", "DeploymentStrategy"), 5: F("minReadySeconds", "int"), 6: P("revisionHistoryLimit", "int"),
        7: F("paused", "bool"), 9: P("progressDeadlineSeconds", "int"),
    },
    "DeploymentStrategy": {1: F("type")},
    # batch/v1
    "Job": {1: F("metadata", "ObjectMeta"), 2: F("spec", "JobSpec"), 3: F("status", "Empty")},
    "JobSpec": {
        1: P("parallelism", "int"), 2: P("completions", "int"), 3: P("activeDeadlineSeconds", "int"),
        4: F("selector", "LabelSelector"), 5: P("manualSelector", "bool"), 6: F("template", "PodTemplateSpec"),
        7: P("backoffLimit", "int"), 8: P("ttlSecondsAfterFinished", "int"), 9: P("completionMode", "string"),
        10: P("suspend", "bool"),
    },
    # rbac.authorization.k8s.io/v1
    "ClusterRole": {1: F("metadata", "ObjectMeta"), 2: R("rules", "PolicyRule")},
    "Role": {1: F("metadata", "ObjectMeta"), 2: R("rules", "PolicyRule")},
    "PolicyRule": {1: R("verbs"), 2: R("apiGroups"), 3: R("resources"), 4: R("resourceNames"),
                   5: R("nonResourceURLs")},
    "RoleBinding": {1: F("metadata", "ObjectMeta"), 2: R("subjects", "Subject"), 3: F("roleRef", "RoleRef")},
    "ClusterRoleBinding": {1: F("metadata", "ObjectMeta"), 2: R("subjects", "Subject"), 3: F("roleRef", "RoleRef")},
    "Subject": {1: F("kind"), 2: F("apiGroup"), 3: F("name"), 4: F("namespace")},
    "RoleRef": {1: F("apiGroup"), 2: F("kind"), 3: F("name")},
    # authentication.k8s.io/v1
    "TokenRequest": {1: F("metadata", "ObjectMeta"), 2: F("spec", "TokenRequestSpec"), 3: F("status", "Empty")},
    "TokenRequestSpec": {1: R("audiences"), 3: F("boundObjectRef", "BoundObjectReference"),
                         4: P("expirationSeconds", "int")},
    "BoundObjectReference": {1: F("kind"), 2: F("apiVersion"), 3: F("name"), 4: F("uid")},
    # Status stanzas of create requests: whatever a client put there, the server ignores it.
    "Empty": {},
}

# Which message a (apiVersion, kind) body holds; the kinds `kubectl create` and friends send.
KINDS: dict[tuple[str, str], str] = {
    ("v1", "Namespace"): "Namespace",
    ("v1", "ConfigMap"): "ConfigMap",
    ("v1", "Secret"): "Secret",
    ("v1", "ServiceAccount"): "ServiceAccount",
    ("v1", "Service"): "Service",
    ("apps/v1", "Deployment"): "Deployment",
    ("batch/v1", "Job"): "Job",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "ClusterRole",
    ("rbac.authorization.k8s.io/v1", "Role"): "Role",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "RoleBinding",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "ClusterRoleBinding",
    ("authentication.k8s.io/v1", "TokenRequest"): "TokenRequest",
}
# Messages whose contents a create ignores, so unknown fields in them need no decoding.
_IGNORED = frozenset({"Empty"})


def _zero(value: Any) -> bool:
    return value in ("", 0, False, b"") or value == {} or value == []


def _scalar(field: Field, message: str, wire: int, raw: Any) -> Any:
    kind = field.type
    if kind in ("string", "bytes", "quantity", "time", "intorstring") or kind in MESSAGES:
        if wire != 2:
            raise ProtobufError(f"{message}.{field.name}: expected a length-delimited value")
    elif wire != 0:
        raise ProtobufError(f"{message}.{field.name}: expected a varint")
    if kind == "string":
        return raw.decode()
    if kind == "bytes":
        return base64.b64encode(raw).decode()
    if kind == "int":
        return _signed(raw)
    if kind == "bool":
        return bool(raw)
    if kind == "quantity":  # resource.Quantity: {string = 1}
        return next((v.decode() for n, w, v in fields(raw) if n == 1 and w == 2), "")
    if kind == "time":  # metav1.Time: {seconds = 1, nanos = 2}; the zero time is "unset"
        seconds = next((_signed(v) for n, w, v in fields(raw) if n == 1 and w == 0), 0)
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds)) if seconds else ""
    if kind == "intorstring":  # intstr.IntOrString: {type = 1 (0 int, 1 string), intVal = 2, strVal = 3}
        parts = {n: v for n, _, v in fields(raw)}
        return parts.get(3, b"").decode() if parts.get(1, 0) == 1 else _signed(parts.get(2, 0))
    return decode_message(kind, raw)


def _map_entry(field: Field, message: str, raw: bytes) -> tuple[str, Any]:
    key, value = "", None
    value_field = Field(field.name, field.type.split(":", 1)[1])
    for number, wire, item in fields(raw):
        if number == 1 and wire == 2:
            key = item.decode()
        elif number == 2:
            value = _scalar(value_field, message, wire, item)
    if value is None:
        value = "" if value_field.type != "int" else 0
    return key, value


def decode_message(message: str, data: bytes) -> JSON:
    schema = MESSAGES[message]
    out: JSON = {}
    for number, wire, raw in fields(data):
        field = schema.get(number)
        if field is None:
            if message in _IGNORED or _zero(raw):
                continue
            raise ProtobufError(
                f"field {number} of {message} is not supported by the simulated cluster's protobuf decoder; "
                "send the object as JSON instead"
            )
        if field.type.startswith("map:"):
            key, value = _map_entry(field, message, raw)
            out.setdefault(field.name, {})[key] = value
            continue
        value = _scalar(field, message, wire, raw)
        if field.repeated:
            out.setdefault(field.name, []).append(value)
        elif field.pointer or not _zero(value):
            out[field.name] = value
        else:
            out.pop(field.name, None)  # a later zero overrides an earlier value, as in protobuf
    return out


def decode_object(body: bytes) -> JSON:
    """A `k8s\\0`-prefixed runtime.Unknown envelope → the JSON object it carries (with apiVersion and kind)."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the body does not start with the Kubernetes protobuf magic number")
    envelope = decode_message("Unknown", body[len(MAGIC):])
    type_meta = envelope.get("typeMeta") or {}
    api_version, kind = str(type_meta.get("apiVersion", "")), str(type_meta.get("kind", ""))
    message = KINDS.get((api_version, kind))
    if message is None:
        raise ProtobufError(f"the simulated cluster cannot decode {kind or 'objects'} ({api_version}) sent as "
                            "protobuf; send the object as JSON instead")
    raw = base64.b64decode(envelope.get("raw", ""))
    obj = decode_message(message, raw)
    return {"apiVersion": api_version, "kind": kind, **obj}
