"""OpenAPI schemas of the kinds the sim serves, for `kubectl explain` and kubectl's client-side validation.

kubectl reads schemas from the server: `kubectl explain` from `/openapi/v3`, and the validation of a
`kind: List` file from `/openapi/v2`, which client-go fetches as gnostic protobuf (openapi_v2.Document).
The definitions are built from the models of kubernetes_asyncio (a dependency already): their
`openapi_types`, `attribute_map` and property docstrings are the Kubernetes API's own field names, types
and descriptions. Each served kind's definition carries `x-kubernetes-group-version-kind`.

The documents deliberately describe no PATCH operations with `application/strategic-merge-patch+json`
(v3) and no paths at all (v2): kubectl then keeps computing `apply` patches from its compiled-in types,
exactly as it did before schemas were served, instead of from these (which carry no patch directives).
Built once, on first use: importing every model takes a moment, and only kubectl needs this.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import re
from typing import Any

from edgeagent.sim import openapi_docs
from edgeagent.sim.resources import Registry, Resource, group_versions, resources_in

JSON = dict[str, Any]

# client-go asks with the old name (with "@", which Go's mime parser rejects in a Content-Type); the real
# server answers with the new one.
V2_PROTOBUF_ACCEPTED = ("application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
                        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf")
V2_PROTOBUF = V2_PROTOBUF_ACCEPTED[1]
GVK_EXTENSION = "x-kubernetes-group-version-kind"
V2_REFS = "#/definitions/"
V3_REFS = "#/components/schemas/"
_META_TYPES = frozenset({
    "ObjectMeta", "ListMeta", "LabelSelector", "LabelSelectorRequirement", "OwnerReference", "ManagedFieldsEntry",
    "Condition", "Status", "StatusDetails", "StatusCause", "DeleteOptions", "Preconditions", "MicroTime", "Time",
})
_MODEL_NAME = re.compile(r"^([A-Z][a-z]+)?(V\d+(?:(?:alpha|beta)\d+)?)([A-Z].*)$")
_LIST = re.compile(r"^list\[(.+)\]$")
_DICT = re.compile(r"^dict\(str, (.+)\)$")
_PRIMITIVES: dict[str, JSON] = {
    "str": {"type": "string"},
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "bool": {"type": "boolean"},
    "datetime": {"type": "string", "format": "date-time"},
    "date": {"type": "string", "format": "date"},
    # IntOrString, RawExtension and free-form JSON: any value is valid.
    "object": {},
}


# kubernetes_asyncio's models carry field descriptions but none for a kind itself, nor for fields whose type is
# another object; kubectl explain shows these instead of "<empty>" (our words, not the API's).
KIND_DESCRIPTIONS = {
    "Pod": "A group of containers that run together on one node.",
    "Node": "A machine (here: a simulated edge node) that runs pods.",
    "Namespace": "A scope for names; most objects live in one.",
    "Event": "A report of something that happened to an object.",
    "ServiceAccount": "An identity for processes that run in pods.",
    "ConfigMap": "Configuration data as key-value pairs.",
    "Secret": "Sensitive data (passwords, tokens, keys) as key-value pairs, base64-encoded.",
    "Service": "A stable address and port for a set of pods.",
    "DaemonSet": "Runs one copy of a pod on each (selected) node.",
    "Deployment": "Runs a number of replicas of a pod and replaces them on updates.",
    "ControllerRevision": "An immutable snapshot of a DaemonSet's pod template, one per revision.",
    "Lease": "A lease, for leader election and node heartbeats.",
    "Job": "Runs pods until a number of them completed successfully.",
    "ClusterRole": "A set of permissions valid in the whole cluster.",
    "ClusterRoleBinding": "Grants a ClusterRole's permissions to users, groups or service accounts, cluster-wide.",
    "Role": "A set of permissions within one namespace.",
    "RoleBinding": "Grants a Role's or ClusterRole's permissions within one namespace.",
}
REF_FIELD_DESCRIPTIONS = {
    "metadata": "Standard object metadata: name, namespace, labels, annotations, owner references, ...",
    "spec": "What the object should be: its desired state.",
    "status": "What the object is: its most recently observed state, written by the system.",
}


def _package(group: str, version: str) -> str:
    return f"io.k8s.api.{group.split('.', 1)[0] if group else 'core'}.{version}"


def model_name(res: Resource) -> str:
    """kubernetes_asyncio's class for a served kind: `V1Pod`, `CoreV1Event`, `EventsV1Event`, …"""
    from kubernetes_asyncio.client import models

    prefix = (res.group.split(".", 1)[0] if res.group else "core").capitalize()
    for name in (f"{prefix}{res.version.capitalize()}{res.kind}", f"{res.version.capitalize()}{res.kind}"):
        if hasattr(models, name):
            return name
    raise LookupError(f"no kubernetes_asyncio model for {res.api_version} {res.kind}")


def _description(model: type, attribute: str) -> str:
    """The field's description, from the property docstring of the generated model."""
    doc = inspect.getdoc(getattr(model, attribute, None)) or ""
    lines = [line.replace("# noqa: E501", "").rstrip() for line in doc.splitlines()]
    body: list[str] = []
    for line in lines[1:]:  # the first line is "Gets the x of this Y."
        if line.startswith(":return:") or line.startswith(":rtype:"):
            break
        body.append(line)
    return "\n".join(body).strip()


class _Builder:
    def __init__(self) -> None:
        from kubernetes_asyncio.client import models

        self.models = models
        self.names: dict[str, str] = {}  # model class name → definition name
        self.definitions: dict[str, JSON] = {}

    def definition_name(self, model: str, group: str) -> str:
        name = self.names.get(model)
        if name is None:
            match = _MODEL_NAME.match(model)
            version, short = (match.group(2).lower(), match.group(3)) if match else ("v1", model)
            package = f"io.k8s.apimachinery.pkg.apis.meta.{version}" if short in _META_TYPES else _package(
                group, version)
            name = self.names[model] = f"{package}.{short}"
        return name

    def type_schema(self, type_: str, group: str, ref_prefix: str) -> JSON:
        if type_ in _PRIMITIVES:
            return dict(_PRIMITIVES[type_])
        if match := _LIST.match(type_):
            return {"type": "array", "items": self.type_schema(match.group(1), group, ref_prefix)}
        if match := _DICT.match(type_):
            return {"type": "object", "additionalProperties": self.type_schema(match.group(1), group, ref_prefix)}
        self.add(type_, group, ref_prefix)
        return {"$ref": ref_prefix + self.definition_name(type_, group)}

    def add(self, model: str, group: str, ref_prefix: str, gvk: JSON | None = None) -> str:
        name = self.definition_name(model, group)
        if name in self.definitions:
            if gvk is not None:
                self.definitions[name].setdefault(GVK_EXTENSION, []).append(gvk)
            return name
        cls = getattr(self.models, model)
        schema: JSON = {"type": "object", "properties": {}}
        self.definitions[name] = schema
        own_description, field_descriptions = openapi_docs.described(name)
        short = name.rsplit(".", 1)[-1]
        required = openapi_docs.required_fields(cls)
        for attribute, type_ in cls.openapi_types.items():
            prop = self.type_schema(type_, group, ref_prefix)
            name_in_json = cls.attribute_map[attribute]
            description = _description(cls, attribute) or field_descriptions.get(name_in_json, "")
            if not description and "$ref" in prop:
                description = REF_FIELD_DESCRIPTIONS.get(name_in_json, "")
            enum = openapi_docs.ENUMS.get((short, name_in_json))
            if enum is not None:
                prop["enum"] = list(enum)
            if description:
                if "$ref" in prop and ref_prefix == V3_REFS:  # as the real v3 documents describe a reference
                    prop = {"allOf": [prop]}
                prop["description"] = description
            schema["properties"][name_in_json] = prop
        wanted = [cls.attribute_map[a] for a in cls.openapi_types if a in required]
        if wanted:
            schema["required"] = wanted
        if own_description:
            schema["description"] = own_description
        if gvk is not None:
            schema[GVK_EXTENSION] = [gvk]
            if not own_description and gvk["kind"] in KIND_DESCRIPTIONS:
                schema["description"] = KIND_DESCRIPTIONS[gvk["kind"]]
        return name


@functools.cache
def _definitions(ref_prefix: str) -> dict[str, JSON]:
    """Every served kind's definition and all they reference."""
    builder = _Builder()
    for group, version in group_versions():
        for res in resources_in(group, version):
            gvk = {"group": res.group, "version": res.version, "kind": res.kind}
            builder.add(model_name(res), res.group, ref_prefix, gvk)
    return builder.definitions


# What the real server writes for the apiVersion and kind of every custom kind's schema.
_API_VERSION_DESCRIPTION = (
    "APIVersion defines the versioned schema of this representation of an object. Servers should convert "
    "recognized schemas to the latest internal value, and may reject unrecognized values. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"
)
_KIND_DESCRIPTION = (
    "Kind is a string value representing the REST resource this object represents. Servers may infer this from "
    "the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"
)
_METADATA_DESCRIPTION = (
    "Standard object's metadata. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def custom_definition_name(res: Resource) -> str:
    """The real server's name for a custom kind's schema: the group reversed, the version, the kind."""
    return ".".join([*reversed(res.group.split(".")), res.version, res.kind])


def _custom_schema(res: Resource, ref_prefix: str) -> JSON:
    """A CRD version's schema as the published document carries it: apiVersion, kind and metadata added."""
    assert res.custom is not None
    schema: JSON = json.loads(json.dumps(res.custom.schema))
    schema["type"] = "object"
    props = schema.setdefault("properties", {})
    props["apiVersion"] = {"type": "string", "description": _API_VERSION_DESCRIPTION}
    props["kind"] = {"type": "string", "description": _KIND_DESCRIPTION}
    meta: JSON = {"$ref": ref_prefix + OBJECT_META}
    if ref_prefix == V3_REFS:
        meta = {"allOf": [meta]}
    props["metadata"] = {**meta, "description": _METADATA_DESCRIPTION}
    schema[GVK_EXTENSION] = [{"group": res.group, "version": res.version, "kind": res.kind}]
    return schema


def definitions(registry: Registry, ref_prefix: str) -> dict[str, JSON]:
    """The built-in kinds' definitions (built once per process) and the served custom kinds' (per registry)."""
    custom = registry.custom_resources()
    if not custom:
        return _definitions(ref_prefix)
    key = "definitions" + ref_prefix
    found: dict[str, JSON] | None = registry.cache.get(key)
    if found is None:
        found = dict(_definitions(ref_prefix))
        for res in custom:
            found[custom_definition_name(res)] = _custom_schema(res, ref_prefix)
        registry.cache[key] = found
    return found


def definitions_v2(registry: Registry | None = None) -> dict[str, JSON]:
    return _definitions(V2_REFS) if registry is None else definitions(registry, V2_REFS)


def v2_document(registry: Registry | None = None) -> JSON:
    """`/openapi/v2` (Swagger 2.0): definitions only (see the module docstring for why no paths)."""
    from edgeagent.sim.discovery import SERVER_MAJOR, SERVER_MINOR

    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": f"v{SERVER_MAJOR}.{SERVER_MINOR}.0"},
        "paths": {},
        "definitions": definitions_v2(registry),
    }


def _cached(registry: Registry, name: str, build: Any) -> Any:
    """Per-registry cache for documents that include custom kinds (dropped when the registry changes)."""
    if name not in registry.cache:
        registry.cache[name] = build()
    return registry.cache[name]


def v2_json(registry: Registry | None = None) -> bytes:
    if registry is None or not registry.custom_resources():
        return _v2_json_builtin()
    return bytes(_cached(registry, "v2_json", lambda: json.dumps(v2_document(registry), separators=(",", ":"))
                         .encode()))


@functools.cache
def _v2_json_builtin() -> bytes:
    return json.dumps(v2_document(), separators=(",", ":")).encode()


def schemas_v3(group: str, version: str, registry: Registry | None = None) -> dict[str, JSON]:
    """The components.schemas of one group/version document: its kinds and everything they reference."""
    defs = _definitions(V3_REFS) if registry is None else definitions(registry, V3_REFS)
    roots = [name for name, schema in defs.items()
             if any(g["group"] == group and g["version"] == version for g in schema.get(GVK_EXTENSION, []))]
    wanted: dict[str, JSON] = {}
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name in wanted:
            continue
        wanted[name] = defs[name]
        pending.extend(_refs(defs[name]))
    return dict(sorted(wanted.items()))


def _refs(schema: Any) -> list[str]:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        found = [ref.rsplit("/", 1)[1]] if isinstance(ref, str) else []
        return found + [r for value in schema.values() for r in _refs(value)]
    if isinstance(schema, list):
        return [r for value in schema for r in _refs(value)]
    return []


# ---------------------------------------------------------------------------------------------- protobuf


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _ld(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _str(number: int, text: str) -> bytes:
    return _ld(number, text.encode()) if text else b""


def _schema_pb(schema: JSON) -> bytes:
    """openapi_v2.Schema (gnostic): the fields kube-openapi reads to build kubectl's validation models."""
    out = bytearray()
    if isinstance(schema.get("$ref"), str):
        out += _str(1, schema["$ref"])
    out += _str(2, str(schema.get("format", "")))
    out += _str(4, str(schema.get("description", "")))
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        out += _ld(21, _ld(1, _schema_pb(extra)))
    if isinstance(schema.get("type"), str):
        out += _ld(22, _str(1, schema["type"]))
    if isinstance(schema.get("items"), dict):
        out += _ld(23, _ld(1, _schema_pb(schema["items"])))
    for part in schema.get("allOf", []):
        if isinstance(part, dict):
            out += _ld(24, _schema_pb(part))
    props = schema.get("properties")
    if isinstance(props, dict) and props:
        out += _ld(25, b"".join(_ld(1, _str(1, k) + _ld(2, _schema_pb(v))) for k, v in props.items()))
    if GVK_EXTENSION in schema:
        yaml_text = json.dumps(schema[GVK_EXTENSION])  # JSON is YAML; kube-openapi parses the yaml field
        out += _ld(31, _str(1, GVK_EXTENSION) + _ld(2, _str(2, yaml_text)))
    return bytes(out)


def v2_protobuf(registry: Registry | None = None) -> bytes:
    """The v2 document as the gnostic openapi_v2.Document protobuf client-go asks for."""
    if registry is None or not registry.custom_resources():
        return _v2_protobuf_builtin()
    return bytes(_cached(registry, "v2_protobuf", lambda: _v2_protobuf(v2_document(registry))))


@functools.cache
def _v2_protobuf_builtin() -> bytes:
    return _v2_protobuf(v2_document())


def _v2_protobuf(doc: JSON) -> bytes:
    info = _str(1, doc["info"]["title"]) + _str(2, doc["info"]["version"])
    definitions = b"".join(_ld(1, _str(1, name) + _ld(2, _schema_pb(schema)))
                           for name, schema in doc["definitions"].items())
    return _str(1, doc["swagger"]) + _ld(2, info) + _ld(8, b"") + _ld(9, definitions)


# ---------------------------------------------------------------------------------------------- v3

# kubectl's validator asks whether each kind's PATCH accepts the `fieldValidation` parameter; when it does,
# kubectl leaves validation to the server. Only merge-patch is listed as the request body (see the module
# docstring).
_PATCH_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation", "force")


def v3_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def v3_document(group: str, version: str, registry: Registry | None = None) -> JSON:
    from edgeagent.sim.discovery import SERVER_MAJOR, SERVER_MINOR

    path = v3_path(group, version)
    paths: JSON = {}
    served = resources_in(group, version) if registry is None else registry.resources_in(group, version)
    for res in served:
        scope = "/namespaces/{namespace}" if res.namespaced else ""
        paths[f"/{path}{scope}/{res.plural}/{{name}}"] = {
            "patch": {
                "operationId": f"patch{res.kind}",
                "x-kubernetes-action": "patch",
                GVK_EXTENSION: {"group": group, "version": version, "kind": res.kind},
                "parameters": [
                    {"name": name, "in": "query", "schema": {"type": "string"}} for name in _PATCH_PARAMETERS
                ],
                "requestBody": {"content": {"application/merge-patch+json": {"schema": {"type": "object"}}}},
                "responses": {"200": {"description": "OK"}},
            }
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": f"v{SERVER_MAJOR}.{SERVER_MINOR}.0"},
        "paths": paths,
        "components": {"schemas": schemas_v3(group, version, registry)},
    }


def _v3_entry(group: str, version: str, registry: Registry | None) -> tuple[bytes, str]:
    body = json.dumps(v3_document(group, version, registry), separators=(",", ":")).encode()
    return body, hashlib.sha256(body).hexdigest()[:32].upper()


@functools.cache
def _v3_builtin() -> dict[str, tuple[bytes, str]]:
    return {v3_path(group, version): _v3_entry(group, version, None) for group, version in group_versions()}


def v3_documents(registry: Registry | None = None) -> dict[str, tuple[bytes, str]]:
    """Every group/version's document, serialised, with the content hash kubectl caches it under: the built-in
    ones once per process, those with custom kinds whenever the registry changed (a CRD Established or gone)."""
    builtin = _v3_builtin()
    if registry is None or not registry.custom_resources():
        return builtin

    def build() -> dict[str, tuple[bytes, str]]:
        custom_gvs = {(res.group, res.version) for res in registry.custom_resources()}
        out = dict(builtin)
        for group, version in registry.group_versions():
            if (group, version) in custom_gvs:
                out[v3_path(group, version)] = _v3_entry(group, version, registry)
        return out

    found: dict[str, tuple[bytes, str]] = _cached(registry, "v3_documents", build)
    return found


def v3_index(registry: Registry | None = None) -> JSON:
    return {"paths": {path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
                      for path, (_, digest) in v3_documents(registry).items()}}
