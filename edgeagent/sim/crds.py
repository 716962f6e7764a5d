"""CustomResourceDefinitions as kube-apiserver's apiextensions server handles them: validation of the CRD itself,
its defaults, the naming controller's `NamesAccepted` verdict, the establishing controller's `Established`, and
the kinds an Established CRD serves.

Pure functions over plain JSON: the Store (sim/store.py) calls them on each CRD write and registers or removes
the served kinds in its Registry (sim/resources.py). What happens to a custom object on a write (pruning,
defaulting, schema and CEL validation, `fieldValidation`) is in sim/custom_writes.py; the schema rules
themselves are in sim/crd_schema.py.
"""

from __future__ import annotations

import re
from typing import Any

from edgeagent.kube.selectors import GENERIC_FIELDS
from edgeagent.sim import errors
from edgeagent.sim.resources import CUSTOM_RESOURCE_DEFINITIONS, CustomInfo, PrinterColumn, Resource

JSON = dict[str, Any]

GROUP = CUSTOM_RESOURCE_DEFINITIONS.group
KIND = CUSTOM_RESOURCE_DEFINITIONS.kind
# The apiextensions server puts this finalizer on every CRD and removes it once the CRD's objects are gone.
CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
NAMES_ACCEPTED = "NamesAccepted"
ESTABLISHED = "Established"
TERMINATING = "Terminating"
SCOPES = ("Cluster", "Namespaced")
# Groups under k8s.io and kubernetes.io belong to the Kubernetes project: a CRD there needs this annotation.
APPROVAL_ANNOTATION = "api-approved.kubernetes.io"
PRINTER_COLUMN_TYPES = ("boolean", "date", "integer", "number", "string")
_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1035_MESSAGE = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation "
    "is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1123_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_VERSION = re.compile(r"v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?")


def _dict(value: object) -> JSON:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def spec_of(crd: JSON) -> JSON:
    return _dict(crd.get("spec"))


def names_of(crd: JSON) -> JSON:
    return _dict(spec_of(crd).get("names"))


def name_of(crd: JSON) -> str:
    return str(_dict(crd.get("metadata")).get("name") or "")


# ---------------------------------------------------------------------------------------------- defaults


def default(crd: JSON) -> None:
    """What the real server fills in on every write: singular and listKind from the kind, the None conversion."""
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return
    names = spec.get("names")
    if isinstance(names, dict) and isinstance(names.get("kind"), str) and names["kind"]:
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", names["kind"] + "List")
    conversion = spec.setdefault("conversion", {"strategy": "None"})
    if isinstance(conversion, dict):
        conversion.setdefault("strategy", "None")


# ---------------------------------------------------------------------------------------------- validation


def _schema_causes(index: int, schema: JSON) -> list[JSON]:
    """The structural-schema verdict (sim/crd_schema.py), with field paths under the version's schema."""
    from edgeagent.sim import crd_schema

    base = f"spec.versions[{index}].schema.openAPIV3Schema"
    return [cause.as_status_cause() for cause in crd_schema.check_structural(schema, base)]


def _names_causes(names: JSON) -> list[JSON]:
    causes: list[JSON] = []
    path = "spec.names"
    for key in ("plural", "singular"):
        value = names.get(key)
        if not value:
            if key == "plural":
                causes.append(errors.field_required(f"{path}.{key}"))
            continue
        if not isinstance(value, str) or len(value) > 63 or not _DNS1035.fullmatch(value):
            causes.append(errors.field_invalid(f"{path}.{key}", value, _DNS1035_MESSAGE))
    for i, short in enumerate(_list(names.get("shortNames"))):
        if not isinstance(short, str) or not _DNS1035.fullmatch(short):
            causes.append(errors.field_invalid(f"{path}.shortNames[{i}]", short, _DNS1035_MESSAGE))
    kind, list_kind = names.get("kind"), names.get("listKind")
    if not kind:
        causes.append(errors.field_required(f"{path}.kind"))
    elif not isinstance(kind, str) or not _DNS1035.fullmatch(kind.lower()):
        causes.append(errors.field_invalid(f"{path}.kind", kind, "may have mixed case, but should otherwise match: "
                                           "[a-z]([-a-z0-9]*[a-z0-9])?"))
    if not list_kind:
        causes.append(errors.field_required(f"{path}.listKind"))
    elif kind and list_kind == kind:
        causes.append(errors.field_invalid(f"{path}.listKind", list_kind, "kind and listKind may not be the same"))
    for i, category in enumerate(_list(names.get("categories"))):
        if not isinstance(category, str) or not _DNS1035.fullmatch(category):
            causes.append(errors.field_invalid(f"{path}.categories[{i}]", category, _DNS1035_MESSAGE))
    return causes


def _version_causes(versions: list[Any]) -> list[JSON]:
    causes: list[JSON] = []
    if not versions:
        return [errors.field_invalid("spec.versions", [], "must have exactly one version marked as storage version")]
    seen: set[str] = set()
    storage = 0
    served = 0
    for i, version in enumerate(versions):
        path = f"spec.versions[{i}]"
        if not isinstance(version, dict):
            causes.append(errors.field_invalid(path, version, "must be an object"))
            continue
        name = version.get("name")
        if not name:
            causes.append(errors.field_required(f"{path}.name"))
        elif not isinstance(name, str) or not _DNS1035.fullmatch(name):
            causes.append(errors.field_invalid(f"{path}.name", name, _DNS1035_MESSAGE))
        elif name in seen:
            causes.append(errors.field_invalid("spec.versions", name, "must contain unique version names"))
        else:
            seen.add(name)
        storage += version.get("storage") is True
        served += version.get("served") is True
        schema = _dict(version.get("schema")).get("openAPIV3Schema")
        if not isinstance(schema, dict):
            causes.append(errors.field_required(f"{path}.schema.openAPIV3Schema", "schemas are required"))
        else:
            causes.extend(_schema_causes(i, schema))
        for j, column in enumerate(_list(version.get("additionalPrinterColumns"))):
            cpath = f"{path}.additionalPrinterColumns[{j}]"
            column = _dict(column)
            if not column.get("name"):
                causes.append(errors.field_required(f"{cpath}.name"))
            if not column.get("type"):
                causes.append(errors.field_required(f"{cpath}.type",
                                                    "must be one of " + ",".join(PRINTER_COLUMN_TYPES)))
            elif column.get("type") not in PRINTER_COLUMN_TYPES:
                causes.append(errors.field_not_supported(f"{cpath}.type", column.get("type"), PRINTER_COLUMN_TYPES))
            # The real server names this field after its internal Go name.
            json_path = column.get("jsonPath")
            if not json_path:
                causes.append(errors.field_required(f"{cpath}.JSONPath"))
            elif not str(json_path).startswith("."):
                causes.append(errors.field_invalid(f"{cpath}.JSONPath", json_path,
                                                   "must be a simple json path starting with ."))
        scale = _dict(_dict(version.get("subresources")).get("scale"))
        if _dict(version.get("subresources")).get("scale") is not None:
            for key in ("specReplicasPath", "statusReplicasPath"):
                if not scale.get(key):
                    causes.append(errors.field_required(f"{path}.subresources.scale.{key}"))
    if storage != 1:
        causes.append(errors.field_invalid("spec.versions", [v.get("name") for v in versions if isinstance(v, dict)],
                                           "must have exactly one version marked as storage version"))
    if versions and served == 0:
        causes.append(errors.field_invalid("spec.versions", [v.get("name") for v in versions if isinstance(v, dict)],
                                           "must have at least one version marked as served"))
    return causes


def stored_versions_after_update(crd: JSON, old: JSON) -> list[str]:
    """status.storedVersions once a spec update is stored: the old list, plus the storage version when it is new
    (what the real CRD strategy's PrepareForUpdate does); only the status subresource may take versions off."""
    stored = [str(v) for v in _list(_dict(old.get("status")).get("storedVersions"))]
    storage = storage_version(crd)
    if storage and storage not in stored:
        stored.append(storage)
    return stored


def _stored_versions_causes(stored: list[str], versions: Any) -> list[JSON]:
    """ValidateCustomResourceDefinitionStoredVersions: a version objects may still be stored in must stay listed."""
    if not stored:
        return [errors.field_invalid("status.storedVersions", [], "must have at least one stored version")]
    names = {str(v.get("name")) for v in _list(versions) if isinstance(v, dict)}
    return [errors.field_invalid(f"status.storedVersions[{i}]", version, "must appear in spec.versions")
            for i, version in enumerate(stored) if version not in names]


def validate(crd: JSON, old: JSON | None) -> None:
    """422 with the real server's causes for a CRD it would refuse (create, or update when `old` is given)."""
    name = name_of(crd)
    spec = spec_of(crd)
    names = names_of(crd)
    group = spec.get("group")
    causes: list[JSON] = []
    plural = names.get("plural")
    if plural and group and name != f"{plural}.{group}":
        causes.append(errors.field_invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
    if not group:
        causes.append(errors.field_required("spec.group"))
    elif not isinstance(group, str) or not _DNS1123_SUBDOMAIN.fullmatch(group) or len(group) > 253:
        causes.append(errors.field_invalid("spec.group", group, _DNS1123_SUBDOMAIN_MESSAGE))
    elif "." not in group:
        causes.append(errors.field_invalid("spec.group", group, "should be a domain with at least one dot"))
    elif (group.endswith(".k8s.io") or group.endswith(".kubernetes.io") or group in ("k8s.io", "kubernetes.io")) \
            and not _dict(_dict(crd.get("metadata")).get("annotations")).get(APPROVAL_ANNOTATION):
        causes.append(errors.field_required(
            f"metadata.annotations[{APPROVAL_ANNOTATION}]",
            f'protected groups must have approval annotation "{APPROVAL_ANNOTATION}", see '
            "https://github.com/kubernetes/enhancements/pull/1111"))
    scope = spec.get("scope")
    if not scope:
        causes.append(errors.field_required("spec.scope"))
    elif scope not in SCOPES:
        causes.append(errors.field_not_supported("spec.scope", scope, SCOPES))
    causes.extend(_names_causes(names))
    causes.extend(_version_causes(_list(spec.get("versions"))))
    if old is not None:
        causes.extend(_stored_versions_causes(stored_versions_after_update(crd, old), spec.get("versions")))
        old_spec = spec_of(old)
        if group != old_spec.get("group"):
            causes.append(errors.field_invalid("spec.group", group, "field is immutable"))
        if scope != old_spec.get("scope"):
            causes.append(errors.field_invalid("spec.scope", scope, "field is immutable"))
    if causes:
        raise errors.invalid(KIND, name, causes, GROUP)


# ---------------------------------------------------------------------------------------------- conditions


def _condition(type_: str, status: str, reason: str, message: str, now: str) -> JSON:
    return {"type": type_, "status": status, "lastTransitionTime": now, "reason": reason, "message": message}


def _accepted_names_of(crd: JSON) -> JSON:
    return _dict(_dict(crd.get("status")).get("acceptedNames"))


def _used_names(others: list[JSON], group: str) -> tuple[set[str], set[str]]:
    """The names other CRDs of the same group hold (their accepted names): resources and kinds."""
    resources: set[str] = set()
    kinds: set[str] = set()
    for other in others:
        if spec_of(other).get("group") != group:
            continue
        accepted = _accepted_names_of(other)
        resources.update(str(accepted[k]) for k in ("plural", "singular") if accepted.get(k))
        resources.update(str(s) for s in _list(accepted.get("shortNames")))
        kinds.update(str(accepted[k]) for k in ("kind", "listKind") if accepted.get(k))
    return resources, kinds


def _fresh(requested: Any, accepted: Any, used: set[str]) -> str | None:
    """The naming controller's equalToAcceptedOrFresh: None when the name may be taken, else its message."""
    if requested == accepted or requested not in used:
        return None
    return f'"{requested}" is already in use'


def status_for(crd: JSON, others: list[JSON], now: str) -> JSON:
    """The CRD's status as the naming and establishing controllers leave it, given the other CRDs."""
    names = names_of(crd)
    status = _dict(crd.get("status"))
    accepted = dict(_accepted_names_of(crd))
    group = str(spec_of(crd).get("group") or "")
    used_resources, used_kinds = _used_names(others, group)
    reason, message = "NoConflicts", "no conflicts found"
    new_names = dict(accepted)
    for key, used, conflict in (("plural", used_resources, "PluralConflict"),
                                ("singular", used_resources, "SingularConflict")):
        problem = _fresh(names.get(key), accepted.get(key), used)
        if problem is None:
            if names.get(key) is not None:
                new_names[key] = names.get(key)
        else:
            reason, message = conflict, problem
    requested_short = _list(names.get("shortNames"))
    if requested_short != _list(accepted.get("shortNames")):
        mine = set(_list(accepted.get("shortNames")))
        problems = [p for s in requested_short if s not in mine and (p := _fresh(s, "", used_resources))]
        if problems:
            reason = "ShortNamesConflict"
            message = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
        elif requested_short:
            new_names["shortNames"] = list(requested_short)
        else:
            new_names.pop("shortNames", None)
    for key, conflict in (("kind", "KindConflict"), ("listKind", "ListKindConflict")):
        problem = _fresh(names.get(key), accepted.get(key), used_kinds)
        if problem is None:
            if names.get(key) is not None:
                new_names[key] = names.get(key)
        else:
            reason, message = conflict, problem
    if names.get("categories"):
        new_names["categories"] = list(names["categories"])
    else:
        new_names.pop("categories", None)
    accepted_ok = reason == "NoConflicts"
    old_conditions = {c.get("type"): c for c in _list(status.get("conditions")) if isinstance(c, dict)}
    conditions: list[JSON] = []

    def keep(type_: str, state: str, why: str, text: str) -> JSON:
        """A condition, keeping its lastTransitionTime while its status does not change."""
        previous = old_conditions.get(type_)
        cond = _condition(type_, state, why, text, now)
        if previous is not None and previous.get("status") == state:
            cond["lastTransitionTime"] = previous.get("lastTransitionTime", now)
        return cond

    conditions.append(keep(NAMES_ACCEPTED, "True" if accepted_ok else "False", reason, message))
    established = old_conditions.get(ESTABLISHED)
    if established is not None and established.get("status") == "True":
        conditions.append(established)
    elif accepted_ok:
        conditions.append(keep(ESTABLISHED, "True", "InitialNamesAccepted", "the initial names have been accepted"))
    else:
        conditions.append(keep(ESTABLISHED, "False", "NotAccepted", "not all names are accepted"))
    if TERMINATING in old_conditions:
        conditions.append(old_conditions[TERMINATING])
    stored_versions = list(_list(status.get("storedVersions")))
    storage = storage_version(crd)
    if storage and storage not in stored_versions:
        stored_versions.append(storage)
    return {"conditions": conditions, "acceptedNames": new_names, "storedVersions": stored_versions}


def terminating_condition(now: str) -> JSON:
    return _condition(TERMINATING, "True", "InstanceDeletionInProgress", "CustomResource deletion is in progress", now)


def is_established(crd: JSON) -> bool:
    return any(isinstance(c, dict) and c.get("type") == ESTABLISHED and c.get("status") == "True"
               for c in _list(_dict(crd.get("status")).get("conditions")))


def storage_version(crd: JSON) -> str:
    for version in _list(spec_of(crd).get("versions")):
        if isinstance(version, dict) and version.get("storage") is True:
            return str(version.get("name") or "")
    return ""


# ---------------------------------------------------------------------------------------------- served kinds


def _printer_columns(version: JSON) -> tuple[PrinterColumn, ...]:
    return tuple(
        PrinterColumn(
            name=str(c.get("name") or ""),
            type=str(c.get("type") or "string"),
            json_path=str(c.get("jsonPath") or ""),
            format=str(c.get("format") or ""),
            description=str(c.get("description") or ""),
            priority=int(c.get("priority") or 0),
        )
        for c in _list(version.get("additionalPrinterColumns"))
        if isinstance(c, dict)
    )


def served_resources(crd: JSON) -> list[Resource]:
    """The kinds an Established CRD serves, one per served version, the storage version first (none otherwise).

    Served under the accepted names, as the real server does: a rename that clashes keeps the old names."""
    if not is_established(crd):
        return []  # a Terminating CRD's kind stays served until its last object is gone
    spec = spec_of(crd)
    accepted = _accepted_names_of(crd)
    storage = storage_version(crd)
    out: list[Resource] = []
    for version in _list(spec.get("versions")):
        if not isinstance(version, dict) or version.get("served") is not True:
            continue
        subresources = _dict(version.get("subresources"))
        subs = tuple(s for s in ("status", "scale") if subresources.get(s) is not None)
        kind = str(accepted.get("kind") or "")
        res = Resource(
            group=str(spec.get("group")),
            version=str(version.get("name")),
            plural=str(accepted.get("plural") or ""),
            singular=str(accepted.get("singular") or kind.lower()),
            kind=kind,
            list_kind=str(accepted.get("listKind") or kind + "List"),
            namespaced=spec.get("scope") == "Namespaced",
            short_names=tuple(str(s) for s in _list(accepted.get("shortNames"))),
            subresources=subs,
            field_selectors=GENERIC_FIELDS,
            has_generation=True,
            categories=tuple(str(c) for c in _list(accepted.get("categories"))),
            custom=CustomInfo(
                crd_name=name_of(crd),
                storage_version=storage,
                schema=_dict(_dict(version.get("schema")).get("openAPIV3Schema")),
                printer_columns=_printer_columns(version),
                scale=_dict(subresources.get("scale")) if "scale" in subs else None,
            ),
        )
        if res.version == storage:
            out.insert(0, res)
        else:
            out.append(res)
    return out


def terminating_create_error(res: Resource) -> errors.ApiError:
    """What a create of a custom object gets while its CRD is being deleted."""
    status = errors.status_body(405, "MethodNotAllowed",
                                "create not allowed while custom resource definition is terminating",
                                details={"group": res.group, "kind": res.plural})
    return errors.ApiError(405, status)
