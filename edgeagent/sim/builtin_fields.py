"""The fields a built-in kind's object may carry, as kube-apiserver's decoder knows them from the Go types: a write
that names another field has it dropped (and, by the request's `fieldValidation`, refused or warned about: see
sim/custom_writes.py).

The shapes come from kubernetes_asyncio's generated models (the ones the sim's OpenAPI documents are built from,
sim/openapi.py): each model's `openapi_types` and `attribute_map` say which JSON fields exist and what each holds.
A field typed `object` (IntOrString, RawExtension, free-form JSON) takes anything, as its Go type does; a map takes
any key. The paths are the strict decoder's: dotted fields and `[i]` for list items (`spec.containers[0].foo`).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from edgeagent.sim.openapi import model_name
from edgeagent.sim.resources import Resource

JSON = dict[str, Any]

_LIST = re.compile(r"^list\[(.+)\]$")
_DICT = re.compile(r"^dict\(str, (.+)\)$")
_SCALARS = frozenset({"str", "int", "float", "bool", "datetime", "date", "object"})


@functools.cache
def _fields(model: str) -> dict[str, str]:
    """JSON field name -> its type string (`str`, `list[V1Container]`, `dict(str, str)`, `V1PodSpec`, ...)."""
    from kubernetes_asyncio.client import models

    cls = getattr(models, model)
    return {cls.attribute_map[attribute]: type_ for attribute, type_ in cls.openapi_types.items()}


def prune(res: Resource, obj: JSON) -> list[str]:
    """Drop the fields of `obj` that `res`'s type does not have, in place; their paths, in document order.

    Nothing is dropped for a kind without a model (none is known to lack one)."""
    try:
        model = model_name(res)
    except LookupError:
        return []
    unknown: list[str] = []
    _prune_object(obj, model, "", unknown)
    return unknown


def _prune_object(value: JSON, model: str, path: str, unknown: list[str]) -> None:
    fields = _fields(model)
    for key in list(value):
        where = f"{path}.{key}" if path else key
        type_ = fields.get(key)
        if type_ is None:
            unknown.append(where)
            del value[key]
            continue
        _prune_value(value[key], type_, where, unknown)


def _prune_value(value: Any, type_: str, path: str, unknown: list[str]) -> None:
    if value is None or type_ in _SCALARS:
        return
    if match := _LIST.match(type_):
        if isinstance(value, list):
            for i, item in enumerate(value):
                _prune_value(item, match.group(1), f"{path}[{i}]", unknown)
        return
    if match := _DICT.match(type_):
        if isinstance(value, dict):
            for key, item in value.items():
                _prune_value(item, match.group(1), f"{path}.{key}", unknown)
        return
    if isinstance(value, dict):
        _prune_object(value, type_, path, unknown)
