"""What kubectl explain shows beyond field names and types: descriptions of kinds and of object-typed fields,
which fields are required, and the values of enum fields, for the sim's OpenAPI documents (sim/openapi.py).

kubernetes_asyncio's generated models (the schemas' source) keep each scalar field's description, and their
setters refuse None for exactly the fields the API marks required; but they drop the description of a kind and
of every field whose type is another object, and all enum values. The descriptions come from lightkube-models
(the Kubernetes 1.32 API's descriptions in its class docstrings), read as text without importing lightkube
(the models need lightkube's client to import). Enum values are listed here: they are the API's own constants
for the fields of the kinds the sim serves.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import re
from pathlib import Path

# (definition, field) -> the values the API accepts, as 1.32's schemas list them under `enum`.
ENUMS: dict[tuple[str, str], list[str]] = {
    ("PodSpec", "restartPolicy"): ["Always", "Never", "OnFailure"],
    ("PodSpec", "dnsPolicy"): ["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"],
    ("PodSpec", "preemptionPolicy"): ["Never", "PreemptLowerPriority"],
    ("Container", "imagePullPolicy"): ["Always", "IfNotPresent", "Never"],
    ("Container", "terminationMessagePolicy"): ["FallbackToLogsOnError", "File"],
    ("EphemeralContainer", "imagePullPolicy"): ["Always", "IfNotPresent", "Never"],
    ("EphemeralContainer", "terminationMessagePolicy"): ["FallbackToLogsOnError", "File"],
    ("ContainerPort", "protocol"): ["SCTP", "TCP", "UDP"],
    ("ServicePort", "protocol"): ["SCTP", "TCP", "UDP"],
    ("Toleration", "effect"): ["NoExecute", "NoSchedule", "PreferNoSchedule"],
    ("Toleration", "operator"): ["Equal", "Exists"],
    ("Taint", "effect"): ["NoExecute", "NoSchedule", "PreferNoSchedule"],
    ("NodeSelectorRequirement", "operator"): ["DoesNotExist", "Exists", "Gt", "In", "Lt", "NotIn"],
    ("PodStatus", "phase"): ["Failed", "Pending", "Running", "Succeeded", "Unknown"],
    ("PodStatus", "qosClass"): ["BestEffort", "Burstable", "Guaranteed"],
    ("NodeStatus", "phase"): ["Pending", "Running", "Terminated"],
    ("NamespaceStatus", "phase"): ["Active", "Terminating"],
    ("VolumeMount", "mountPropagation"): ["Bidirectional", "HostToContainer", "None"],
    ("HTTPGetAction", "scheme"): ["HTTP", "HTTPS"],
    ("SeccompProfile", "type"): ["Localhost", "RuntimeDefault", "Unconfined"],
    ("AppArmorProfile", "type"): ["Localhost", "RuntimeDefault", "Unconfined"],
    ("PodSecurityContext", "fsGroupChangePolicy"): ["Always", "OnRootMismatch"],
    ("DaemonSetUpdateStrategy", "type"): ["OnDelete", "RollingUpdate"],
    ("DeploymentStrategy", "type"): ["Recreate", "RollingUpdate"],
    ("ServiceSpec", "type"): ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"],
    ("ServiceSpec", "sessionAffinity"): ["ClientIP", "None"],
    ("ServiceSpec", "externalTrafficPolicy"): ["Cluster", "Local"],
    ("ServiceSpec", "internalTrafficPolicy"): ["Cluster", "Local"],
    ("ServiceSpec", "ipFamilyPolicy"): ["PreferDualStack", "RequireDualStack", "SingleStack"],
    ("JobSpec", "completionMode"): ["Indexed", "NonIndexed"],
    ("JobSpec", "podReplacementPolicy"): ["Failed", "TerminatingOrFailed"],
    ("ValidatingAdmissionPolicySpec", "failurePolicy"): ["Fail", "Ignore"],
    ("MatchResources", "matchPolicy"): ["Equivalent", "Exact"],
    ("ParamRef", "parameterNotFoundAction"): ["Allow", "Deny"],
}

_FIELD = re.compile(r"^\* \*\*(?P<name>[A-Za-z0-9_$]+)\*\* ``[^`]*`` - (?P<text>.*)$")


def required_fields(model: type) -> set[str]:
    """The attributes whose generated setter refuses None: the API's `required` list."""
    found: set[str] = set()
    for attribute in getattr(model, "openapi_types", {}):
        prop = getattr(model, attribute, None)
        setter = getattr(prop, "fset", None)
        if setter is None:
            continue
        try:
            source = inspect.getsource(setter)
        except (OSError, TypeError):
            continue
        if "must not be `None`" in source:
            found.add(attribute)
    return found


def _unwrap(lines: list[str]) -> str:
    """lightkube's docstrings wrap the API's text at 80 columns: join the wrapped lines back."""
    return " ".join(line.strip() for line in lines if line.strip()).strip()


@functools.cache
def _module_docs(module: str) -> dict[str, tuple[str, dict[str, str]]]:
    """class -> (its description, field -> description) from lightkube/models/<module>.py, or {} without it."""
    spec = importlib.util.find_spec("lightkube")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    path = next((Path(p) / "models" / f"{module}.py" for p in locations
                 if (Path(p) / "models" / f"{module}.py").is_file()), None)
    if path is None:
        return {}
    out: dict[str, tuple[str, dict[str, str]]] = {}
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, ast.ClassDef):
            continue
        doc = ast.get_docstring(node) or ""
        head, _, params = doc.partition("**parameters**")
        fields: dict[str, str] = {}
        current: str | None = None
        lines: list[str] = []
        for line in params.splitlines():
            match = _FIELD.match(line.strip())
            if match:
                if current is not None:
                    fields[current] = _unwrap(lines)
                current, lines = match.group("name"), [match.group("text")]
            elif current is not None:
                lines.append(line)
        if current is not None:
            fields[current] = _unwrap(lines)
        out[node.name] = (_unwrap(head.splitlines()), fields)
    return out


def described(definition: str) -> tuple[str, dict[str, str]]:
    """(description, field descriptions) for a definition name such as `io.k8s.api.core.v1.PodSpec`."""
    parts = definition.split(".")
    short, version = parts[-1], parts[-2]
    group = "meta" if definition.startswith("io.k8s.apimachinery.pkg.apis.meta.") else parts[-3]
    return _module_docs(f"{group}_{version}").get(short, ("", {}))
