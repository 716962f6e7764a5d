"""The `openAPIV3Schema` around a custom resource's spec, for the unit tests of the sim's CRD schema validator
(edgeagent/sim/crd_schema.py): one home for the part every such schema repeats, so that each test's fixture shows
only the fields it is about."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]


def resource_schema(required: list[str], properties: JSON, status: JSON) -> JSON:
    """An object that must have a `spec` (an object with these `required` fields and `properties`) and may have the
    given `status`. `apiVersion`, `kind` and `metadata` are declared, as a CRD's schema has them, so pruning keeps
    them and the tests see only the fields of their own schema dropped."""
    return {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "required": required, "properties": properties},
            "status": status,
        },
    }
