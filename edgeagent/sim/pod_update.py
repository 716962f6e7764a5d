"""kube-apiserver's rules for an update of a pod's spec (PUT or PATCH of the pod, not of `pods/status`).

A pod's spec is frozen at creation except for a few fields: container and init-container images,
`activeDeadlineSeconds` (set, or lowered), tolerations (only added) and `terminationGracePeriodSeconds` (only
from a negative value to 1). An in-place upgrade is exactly an image change, so the sim must refuse every
other change the way the real server does: a client that would patch an env var or a readiness gate learns it
here, not in production.

The checks follow the real server's order (container count, empty images, activeDeadlineSeconds, tolerations,
then the spec with the mutable fields put back compared to the old one). The last error's text is the v1.32
one: the five fields joined with "," and, after a newline, a diff of the two specs. The real diff is go-cmp's
rendering of Go structs, whose spacing go-cmp varies on purpose so that nobody parses it; the sim prints its
own short diff (one `-`/`+` pair per changed field path) in that place.
"""

from __future__ import annotations

import json
from typing import Any

from edgeagent.sim import errors

JSON = dict[str, Any]

UPDATABLE_POD_SPEC_FIELDS = (
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
)
POD_UPDATE_FORBIDDEN = "pod updates may not change fields other than " + ",".join(UPDATABLE_POD_SPEC_FIELDS)
_MAX_INT32 = 2**31 - 1


def validate_pod_update(old: JSON, new: JSON) -> None:
    """Raise the 422 kube-apiserver answers when `new`'s spec is not a legal update of `old`'s."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    if old_spec == new_spec:
        return
    name = str((old.get("metadata") or {}).get("name") or "")
    causes = _container_causes(new_spec, old_spec, "containers")
    if causes is None:
        raise errors.invalid("Pod", name, [errors.field_forbidden(
            "spec.containers", "pod updates may not add or remove containers")])
    init_causes = _container_causes(new_spec, old_spec, "initContainers")
    if init_causes is None:
        raise errors.invalid("Pod", name, [*causes, errors.field_forbidden(
            "spec.initContainers", "pod updates may not add or remove containers")])
    causes += init_causes
    deadline, stop = _deadline_cause(new_spec.get("activeDeadlineSeconds"), old_spec.get("activeDeadlineSeconds"))
    if deadline is not None:
        causes.append(deadline)
        if stop:  # the real server stops at a bad value, not at an unset one
            raise errors.invalid("Pod", name, causes)
    causes += _toleration_causes(new_spec.get("tolerations") or [], old_spec.get("tolerations") or [])
    munged = _munged(new_spec, old_spec)
    if munged != old_spec:
        diff = "\n".join(_diff(old_spec, munged, ""))
        causes.append(errors.field_forbidden("spec", f"{POD_UPDATE_FORBIDDEN}\n{diff}"))
    if causes:
        raise errors.invalid("Pod", name, causes)


def _container_causes(new_spec: JSON, old_spec: JSON, key: str) -> list[JSON] | None:
    """None: containers were added or removed (the real server stops there)."""
    new, old = new_spec.get(key) or [], old_spec.get(key) or []
    if len(new) != len(old):
        return None
    causes: list[JSON] = []
    for index, container in enumerate(new):
        image = str((container or {}).get("image") or "") if isinstance(container, dict) else ""
        path = f"spec.{key}[{index}].image"
        if not image:
            causes.append(errors.field_required(path, ""))
        elif image.strip() != image:
            causes.append(errors.field_invalid(path, image, "must not have leading or trailing whitespace"))
    return causes


def _deadline_cause(new: Any, old: Any) -> tuple[JSON | None, bool]:
    """activeDeadlineSeconds may be set, or lowered; never raised, never unset. (cause, stop checking)"""
    path = "spec.activeDeadlineSeconds"
    if new is not None:
        if isinstance(new, bool) or not isinstance(new, int) or new < 0 or new > _MAX_INT32:
            return errors.field_invalid(path, new, f"must be between 0 and {_MAX_INT32}, inclusive"), True
        if isinstance(old, int) and old < new:
            return errors.field_invalid(path, new, "must be less than or equal to previous value"), True
        return None, False
    if old is not None:
        return errors.field_invalid(path, "null", "must not update from a positive integer to nil value"), False
    return None, False


def _toleration_causes(new: list[Any], old: list[Any]) -> list[JSON]:
    """Each old toleration must stay, at most with a changed tolerationSeconds (validateOnlyAddedTolerations)."""
    causes: list[JSON] = []
    for index, toleration in enumerate(old):
        if not isinstance(toleration, dict):
            continue
        if any(_same_toleration(toleration, candidate) for candidate in new if isinstance(candidate, dict)):
            continue
        causes.append(errors.field_forbidden(
            f"spec.tolerations[{index}]", "existing toleration can not be modified except its tolerationSeconds"))
    return causes


def _same_toleration(old: JSON, new: JSON) -> bool:
    keys = ("key", "operator", "value", "effect")
    if any((old.get(k) or "") != (new.get(k) or "") for k in keys):
        return False
    # A tolerationSeconds may change only on a NoExecute toleration that had one.
    return old.get("tolerationSeconds") == new.get("tolerationSeconds") or (
        old.get("effect") == "NoExecute" and old.get("tolerationSeconds") is not None)


def _munged(new_spec: JSON, old_spec: JSON) -> JSON:
    """`new_spec` with every field an update may change set back to its old value."""
    munged = dict(new_spec)
    for key in ("containers", "initContainers"):
        old_list = old_spec.get(key) or []
        if isinstance(munged.get(key), list):
            munged[key] = [
                {**c, "image": old_list[i].get("image")} if isinstance(c, dict) and isinstance(old_list[i], dict)
                and "image" in old_list[i] else c
                for i, c in enumerate(munged[key])
            ]
    for key in ("activeDeadlineSeconds", "tolerations", "schedulingGates"):
        if key in old_spec:
            munged[key] = old_spec[key]
        else:
            munged.pop(key, None)
    grace_old, grace_new = old_spec.get("terminationGracePeriodSeconds"), munged.get("terminationGracePeriodSeconds")
    if isinstance(grace_old, int) and grace_old < 0 and grace_new == 1:
        munged["terminationGracePeriodSeconds"] = grace_old
    if not old_spec.get("nodeName"):
        # Binding an unbound pod (what the scheduler's Binding does; the sim's controllers set it directly).
        if "nodeName" in old_spec:
            munged["nodeName"] = old_spec["nodeName"]
        else:
            munged.pop("nodeName", None)
    return munged


def _diff(old: Any, new: Any, path: str) -> list[str]:
    """`- path: old` / `+ path: new` for each leaf that differs (the place of the real server's go-cmp diff)."""
    if isinstance(old, dict) and isinstance(new, dict):
        lines: list[str] = []
        for key in sorted(set(old) | set(new)):
            lines += _diff(old.get(key), new.get(key), f"{path}.{key}" if path else str(key))
        return lines
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [line for i, (a, b) in enumerate(zip(old, new, strict=True)) for line in _diff(a, b, f"{path}[{i}]")]
    if old == new:
        return []
    return [f"- \tspec.{path}: {_show(old)}", f"+ \tspec.{path}: {_show(new)}"]


def _show(value: Any) -> str:
    return "<unset>" if value is None else json.dumps(value, sort_keys=True)
