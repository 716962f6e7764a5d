"""What a write of a custom object goes through, as kube-apiserver's apiextensions server does it: unknown fields
pruned (or refused, or warned about, by the request's `fieldValidation`), the schema's defaults applied, and the
structural schema with its CEL rules checked, with the real server's texts. A built-in kind's unknown fields (those
its Go type lacks) meet the same `fieldValidation` (decode_builtin).

The schema rules themselves are sim/crd_schema.py's; this module decides what the request gets back. The HTTP
layer says what the request asked for (`fieldValidation`) and collects the warnings through WRITE, a context
variable, so the Store's signatures stay those every in-process caller already uses.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from edgeagent.sim import builtin_fields, crd_schema, errors
from edgeagent.sim.resources import Resource

JSON = dict[str, Any]

FIELD_VALIDATIONS = ("Ignore", "Warn", "Strict")
# kube-apiserver's default for a client that sends no fieldValidation (kubectl sends Strict).
DEFAULT_FIELD_VALIDATION = "Warn"


@dataclass
class WriteRequest:
    """One HTTP write's `fieldValidation` and the warnings it earned (sent back as `Warning: 299` headers)."""

    field_validation: str = DEFAULT_FIELD_VALIDATION
    warnings: list[str] = field(default_factory=list)


WRITE: contextvars.ContextVar[WriteRequest | None] = contextvars.ContextVar("edgeagent_sim_write", default=None)


# What kube-apiserver's ValidateFieldValidation lists (sorted, the empty string included).
_SUPPORTED = ("", "Ignore", "Strict", "Warn")
# The options kind each write verb decodes its query into (named in the 422).
_OPTIONS = {"POST": "CreateOptions", "PUT": "UpdateOptions", "PATCH": "PatchOptions"}


def parse_field_validation(method: str, value: str | None) -> str:
    """The `fieldValidation` query parameter, checked as the real server checks it (422 for another value)."""
    if value in (None, ""):
        return DEFAULT_FIELD_VALIDATION
    if value not in FIELD_VALIDATIONS:
        cause = errors.field_not_supported("fieldValidation", value, _SUPPORTED)
        raise errors.invalid(_OPTIONS.get(method, "CreateOptions"), "", [cause], "meta.k8s.io")
    return str(value)


# What kube-apiserver answers a custom object body without `kind`: its unstructured decoder fails, and the error
# text comes from the CR typer asked about the (now kind-less) object.
MISSING_KIND = "Object 'Kind' is missing in 'object has no kind field '"


def check_decodable(res: Resource, obj: JSON) -> None:
    """A create or update body's `kind` and `apiVersion` as the handler checks them before anything else (the name
    on the URL included): no kind is a 400 from decoding; an apiVersion other than the URL's (none included: unlike
    a built-in kind's, a custom object's body must say it) is the handler's 400."""
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if not kind:
        raise errors.bad_request(MISSING_KIND)
    if api_version != res.api_version:
        shown = api_version if isinstance(api_version, str) else ""
        raise errors.bad_request(f"the API version in the data ({shown}) does not match the expected API version "
                                 f"({res.api_version})")


def check_type_meta(res: Resource, obj: JSON) -> None:
    """check_decodable, then what the strategy's validation says first: a wrong kind under the right apiVersion is
    a 422 with a `kind` cause (kube-apiserver names the error after the kind the body gave)."""
    check_decodable(res, obj)
    kind = obj.get("kind")
    if kind != res.kind:
        name = str((obj.get("metadata") or {}).get("name") or "")
        cause = errors.field_invalid("kind", kind, f"must be {res.kind}")
        raise errors.invalid(str(kind), name, [cause], res.group)


def _schema(res: Resource) -> JSON:
    assert res.custom is not None
    return res.custom.schema


def decode(res: Resource, obj: JSON, *, patched: bool) -> None:
    """Prune unknown fields and apply defaults, in place; under Strict an unknown field is 400 instead.

    A create or update names the kind in its error (`Widget in version "v1" cannot be handled as a Widget: …`),
    a patch does not: the real server reports one while decoding the body, the other after applying the patch."""
    schema = _schema(res)
    unknown = crd_schema.prune(schema, obj)
    crd_schema.apply_defaults(schema, obj)
    _report_unknown(res, unknown, patched=patched)


def decode_builtin(res: Resource, obj: JSON, *, patched: bool) -> None:
    """decode for a built-in kind: the fields its type lacks (sim/builtin_fields.py) are dropped, refused under
    Strict or warned about under Warn, exactly as a custom kind's unknown fields are. Only for HTTP writes (an
    in-process write has no `fieldValidation` and keeps what it wrote)."""
    if WRITE.get() is None:
        return
    _report_unknown(res, builtin_fields.prune(res, obj), patched=patched)


def _report_unknown(res: Resource, unknown: list[str], *, patched: bool) -> None:
    request = WRITE.get()
    if not unknown or request is None or request.field_validation == "Ignore":
        return
    problems = [f'unknown field "{path.lstrip(".")}"' for path in unknown]
    if request.field_validation == "Strict":
        text = "strict decoding error: " + ", ".join(problems)
        if not patched:
            text = f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: {text}'
        raise errors.bad_request(text)
    request.warnings.extend(problems)


def validate(res: Resource, obj: JSON, old: JSON | None, metadata: Iterable[crd_schema.Cause] = ()) -> None:
    """422 with every cause the schema and its CEL rules find (transition rules see `old`), after the object's
    own metadata causes (which, when blocking, keep the CEL rules from running)."""
    causes = crd_schema.validate(_schema(res), obj, old, metadata)
    if causes:
        name = str((obj.get("metadata") or {}).get("name") or "")
        raise errors.invalid(res.kind, name, [c.as_status_cause() for c in causes], res.group)


def generation_moves(res: Resource, old: JSON, new: JSON) -> bool:
    """A custom object's generation moves with any change outside metadata (and outside status when the status
    subresource is on), not only with `spec`."""
    ignored = ("metadata", "status") if res.has_status else ("metadata",)
    keys = (set(old) | set(new)) - set(ignored) - {"apiVersion", "kind"}
    return any(old.get(k) != new.get(k) for k in keys)
