"""docs/openapi.yaml as a test oracle: is this (method, route, status, content type, body) documented?"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SPEC_PATH = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
_BASE = "urn:edgeagent:openapi"


@cache
def spec() -> dict[str, Any]:
    loaded = yaml.safe_load(SPEC_PATH.read_text())
    assert isinstance(loaded, dict)
    return loaded


def _absolute_refs(node: Any) -> Any:
    """Local `#/...` refs → refs into the registered spec, so a sub-schema validates on its own."""
    if isinstance(node, dict):
        return {k: (_BASE + v if k == "$ref" and isinstance(v, str) and v.startswith("#") else _absolute_refs(v))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_absolute_refs(v) for v in node]
    return node


@cache
def _registry() -> Registry:
    # with_resources, not with_resource: same call (the latter just wraps it) but the one referencing annotates.
    resource = Resource.from_contents(spec(), default_specification=DRAFT202012)
    return Registry().with_resources([(_BASE, resource)])


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        target: Any = spec()
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part]
        node = target
    return node


def documented_operations() -> set[tuple[str, str]]:
    methods = {"get", "put", "post", "delete", "patch", "head", "options"}
    return {(m.upper(), path) for path, item in spec()["paths"].items() for m in item if m in methods}


def documented_statuses(method: str, route: str) -> set[int]:
    return {int(code) for code in spec()["paths"][route][method.lower()]["responses"]}


def validate(schema: dict[str, Any], instance: Any) -> None:
    validator = Draft202012Validator(_absolute_refs(copy.deepcopy(schema)), registry=_registry())
    validator.validate(instance)


def check_response(method: str, route: str, status: int, content_type: str, body: bytes) -> None:
    """Fail unless the operation documents this status and content type, and the body fits its schema."""
    operation = spec()["paths"][route][method.lower()]
    responses = operation["responses"]
    assert str(status) in responses, f"{method} {route}: status {status} not documented ({sorted(responses)})"
    response = _resolve(responses[str(status)])
    content = response.get("content") or {}
    assert content_type in content, f"{method} {route} {status}: {content_type} not documented ({sorted(content)})"
    instance: Any = json.loads(body) if content_type == "application/json" else body.decode()
    validate(content[content_type]["schema"], instance)


def check_error_body(content_type: str, body: bytes) -> None:
    """404/405 for undocumented paths and methods: the shared error media types."""
    media = spec()["components"]["x-media"]["error"]
    assert content_type in media
    instance: Any = json.loads(body) if content_type == "application/json" else body.decode()
    validate(media[content_type]["schema"], instance)
