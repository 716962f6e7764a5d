"""ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1), enforced with CEL as kube-apiserver does from 1.30.

The sim claims to be 1.32, and deploy/k8s-1.30/ confines the agent's ServiceAccount to the pods of the node its
token was issued for with such a policy; a sim that stored the policy but did not apply it would let tests show
a confinement that does not exist. So every write an HTTP client makes (CREATE, UPDATE, DELETE) passes the
bound policies: the binding's and policy's match rules, `matchConditions`, then each validation; a false
validation under a `Deny` binding refuses the request with the validation's `reason` (403 Forbidden, 422
Invalid, ...), an expression that fails follows `failurePolicy`.

Writes of the sim's own controllers and kubelets are not admitted (on a real cluster they would be, but no
policy we ship concerns them). Not supported: `paramKind`/`paramRef` (treated as an expression error, i.e.
`failurePolicy`), `authorizer`, the `Warn` and `Audit` actions (only logged), and `messageExpression` (the
static message is used). CEL comes from cel-python, imported on first use: the sim's optional dependency.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from edgeagent import log
from edgeagent.kube.selectors import SelectorError, label_selector_from_dict
from edgeagent.sim import errors
from edgeagent.sim.resources import Resource

JSON = dict[str, Any]

GROUP = "admissionregistration.k8s.io"
# The user of the HTTP request being served (set by the server and the auth layer); None for the sim's own
# controllers, whose writes are not admitted.
REQUEST_USER: contextvars.ContextVar[JSON | None] = contextvars.ContextVar("edgeagent_sim_request_user",
                                                                            default=None)
# kube-apiserver with anonymous requests allowed: who a request without credentials is.
ANONYMOUS_USER: JSON = {"username": "system:anonymous", "groups": ["system:unauthenticated"]}
_REASON_CODES = {"Unauthorized": 401, "Forbidden": 403, "Invalid": 422, "RequestEntityTooLarge": 413}

_log = log.get("edgeagent.sim.admission_policy")


@dataclass(frozen=True)
class Request:
    """One write, as admission sees it (the `request`, `object` and `oldObject` of the CEL environment)."""

    operation: str  # CREATE | UPDATE | DELETE
    res: Resource
    subresource: str | None
    namespace: str
    name: str
    obj: JSON | None
    old: JSON | None
    dry_run: bool = False


class _ExpressionError(Exception):
    pass


@functools.cache
def _program(expression: str) -> Any:
    try:
        import celpy
    except ImportError as exc:  # pragma: no cover - the [sim] extra is installed wherever the sim runs
        raise _ExpressionError("cel-python is not installed (pip install 'edgeagent[sim]'); "
                               "the sim cannot evaluate admission policies") from exc
    env = celpy.Environment()
    try:
        return env.program(env.compile(expression))
    except Exception as exc:  # celpy's parse and compile errors share no base class worth naming
        raise _ExpressionError(f"compilation failed: {exc}") from exc


def _evaluate(expression: str, activation: JSON) -> Any:
    program = _program(expression)
    try:
        return program.evaluate(activation)
    except Exception as exc:
        raise _ExpressionError(str(exc.args[0]) if exc.args else repr(exc)) from exc


def _cel(value: Any) -> Any:
    from celpy.adapter import json_to_cel

    return json_to_cel(value)


def _cel_map(values: JSON) -> Any:
    """Evaluated variables (already CEL values) as the CEL map `variables`."""
    from celpy import celtypes

    return celtypes.MapType({celtypes.StringType(k): v for k, v in values.items()})


def _rule_matches(rule: JSON, req: Request) -> bool:
    def listed(field: str, value: str) -> bool:
        values = rule.get(field) or []
        return "*" in values or value in values

    if not (listed("apiGroups", req.res.group) and listed("apiVersions", req.res.version)
            and listed("operations", req.operation)):
        return False
    scope = rule.get("scope") or "*"
    if scope != "*" and scope != ("Namespaced" if req.res.namespaced else "Cluster"):
        return False
    names = rule.get("resourceNames") or []
    if names and req.name not in names:
        return False
    wanted = f"{req.res.plural}/{req.subresource}" if req.subresource else req.res.plural
    for pattern in rule.get("resources") or []:
        if pattern in ("*/*", wanted):
            return True
        main, _, sub = str(pattern).partition("/")
        if not req.subresource and main == "*" and not sub:
            return True
        if req.subresource and sub in ("*", req.subresource) and main in ("*", req.res.plural):
            return True
    return False


def _selector_matches(selector: Any, labels: dict[str, str]) -> bool:
    if not selector:
        return True
    try:
        return label_selector_from_dict(selector).matches(labels)
    except SelectorError:
        return False


def _labels(obj: JSON | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


def _resources_match(constraints: JSON | None, req: Request, namespace_labels: dict[str, str] | None) -> bool:
    """matchConstraints / matchResources: resource rules, minus the excluded ones, and the selectors."""
    if constraints is None:
        return True
    rules = constraints.get("resourceRules")
    if rules is not None and not any(_rule_matches(r, req) for r in rules):
        return False
    if any(_rule_matches(r, req) for r in constraints.get("excludeResourceRules") or []):
        return False
    if req.res.namespaced and namespace_labels is not None and \
            not _selector_matches(constraints.get("namespaceSelector"), namespace_labels):
        return False
    selector = constraints.get("objectSelector")
    return _selector_matches(selector, _labels(req.obj)) or _selector_matches(selector, _labels(req.old))


def _request_json(req: Request, user: JSON) -> JSON:
    gvr = {"group": req.res.group, "version": req.res.version, "resource": req.res.plural}
    gvk = {"group": req.res.group, "version": req.res.version, "kind": req.res.kind}
    body: JSON = {"kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
                  "name": req.name, "namespace": req.namespace, "operation": req.operation,
                  "userInfo": user, "dryRun": req.dry_run}
    if req.subresource:
        body["subResource"] = body["requestSubResource"] = req.subresource
    return body


class PolicyAdmission:
    """Evaluates every binding's policy against a request; `policies()` yields (binding, policy) pairs."""

    def __init__(self, policies: Callable[[], Iterable[tuple[JSON, JSON]]],
                 namespace: Callable[[str], JSON | None]) -> None:
        self._policies = policies
        self._namespace = namespace

    def admit(self, req: Request) -> None:
        user = REQUEST_USER.get()
        if user is None:
            return
        namespace_obj = self._namespace(req.namespace) if req.res.namespaced and req.namespace else None
        namespace_labels = _labels(namespace_obj) if namespace_obj is not None else ({} if req.namespace else None)
        activation: JSON | None = None
        for binding, policy in self._policies():
            spec = policy.get("spec") or {}
            bspec = binding.get("spec") or {}
            if not _resources_match(spec.get("matchConstraints") or {"resourceRules": []}, req, namespace_labels):
                continue
            if not _resources_match(bspec.get("matchResources"), req, namespace_labels):
                continue
            if activation is None:
                activation = {"request": _cel(_request_json(req, user)), "object": _cel(req.obj),
                              "oldObject": _cel(req.old), "params": _cel(None),
                              "namespaceObject": _cel(namespace_obj)}
            self._apply(binding, policy, req, activation)

    def _apply(self, binding: JSON, policy: JSON, req: Request, base: JSON) -> None:
        spec = policy.get("spec") or {}
        actions = (binding.get("spec") or {}).get("validationActions") or []
        names = (str((policy.get("metadata") or {}).get("name")), str((binding.get("metadata") or {}).get("name")))
        prefix = f"ValidatingAdmissionPolicy '{names[0]}' with binding '{names[1]}' denied request"
        try:
            if spec.get("paramKind"):
                raise _ExpressionError("policies with paramKind are not supported by the sim")
            activation = dict(base)
            values: JSON = {}
            for variable in spec.get("variables") or []:  # each may use the ones before it
                activation["variables"] = _cel_map(values)
                values[str(variable.get("name"))] = _evaluate(str(variable.get("expression")), activation)
            activation["variables"] = _cel_map(values)
            for condition in spec.get("matchConditions") or []:
                if not bool(_evaluate(str(condition.get("expression")), activation)):
                    return  # the policy does not apply to this request
            for validation in spec.get("validations") or []:
                expression = str(validation.get("expression"))
                if bool(_evaluate(expression, activation)):
                    continue
                message = str(validation.get("message") or f"failed expression: {expression.strip()}")
                self._deny(actions, req, str(validation.get("reason") or "Invalid"), f"{prefix}: {message}")
        except _ExpressionError as exc:
            if (spec.get("failurePolicy") or "Fail") == "Ignore":
                _log.info("admission_policy_error_ignored", policy=names[0], error=str(exc))
                return
            self._deny(["Deny"], req, "Invalid", f"{prefix}: expression error: {exc}")

    @staticmethod
    def _deny(actions: list[str], req: Request, reason: str, message: str) -> None:
        if "Deny" not in actions:
            _log.info("admission_policy_would_deny", actions=actions, message=message, why="not a Deny binding")
            return
        code = _REASON_CODES.get(reason, 400)
        if reason == "Forbidden":
            raise errors.forbidden(req.res.plural, req.name, message, req.res.group)
        if reason == "Invalid":
            raise errors.invalid_by_resource(req.res.plural, req.name, message, req.res.group)
        raise errors.ApiError(code, errors.status_body(code, reason, message, details={
            "name": req.name, "group": req.res.group, "kind": req.res.plural}))
