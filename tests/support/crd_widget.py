"""A CustomResourceDefinition that is not ours, for the sim's CRD tests: a namespaced "Widget" (example.com) with a
schema carrying a default, an enum, a pattern, bounds and a CEL rule, the status subresource, a short name, the
`all` category and printer columns, plus a cluster-scoped "Gadget" without printer columns."""

from __future__ import annotations

import copy
from typing import Any

JSON = dict[str, Any]

GROUP = "example.com"
WIDGETS = f"/apis/{GROUP}/v1/namespaces/default/widgets"
GADGETS = f"/apis/{GROUP}/v1/gadgets"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
CEL_MESSAGE = "replicas must be at least minReplicas"

_WIDGET_CRD: JSON = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList",
                  "shortNames": ["wd"], "categories": ["all"]},
        "versions": [{
            "name": "v1",
            "served": True,
            "storage": True,
            "subresources": {"status": {}},
            "additionalPrinterColumns": [
                {"name": "Size", "type": "string", "jsonPath": ".spec.size"},
                {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ],
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "description": "A widget: a thing of some size, made in a number of copies.",
                "properties": {
                    "spec": {
                        "type": "object",
                        "description": "What the widget should be.",
                        "required": ["size"],
                        "x-kubernetes-validations": [
                            {"rule": "self.minReplicas <= self.replicas", "message": CEL_MESSAGE},
                        ],
                        "properties": {
                            "size": {"type": "string", "enum": ["small", "medium", "large"],
                                     "description": "How big the widget is."},
                            "replicas": {"type": "integer", "minimum": 0, "maximum": 10, "default": 1,
                                         "description": "How many copies to make."},
                            "minReplicas": {"type": "integer", "default": 0,
                                            "description": "The fewest copies allowed."},
                            "color": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 10,
                                      "description": "A lowercase color name."},
                        },
                    },
                    "status": {
                        "type": "object",
                        "description": "What the widget is.",
                        "properties": {
                            "observed": {"type": "integer"},
                            "conditions": {"type": "array", "items": {
                                "type": "object",
                                "properties": {"type": {"type": "string"}, "status": {"type": "string"}},
                            }},
                        },
                    },
                },
            }},
        }],
    },
}

_GADGET_CRD: JSON = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"gadgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Cluster",
        "names": {"plural": "gadgets", "kind": "Gadget"},
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
            "type": "object",
            "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        }}}],
    },
}


def widget_crd() -> JSON:
    return copy.deepcopy(_WIDGET_CRD)


def gadget_crd() -> JSON:
    return copy.deepcopy(_GADGET_CRD)


def widget(name: str, size: str = "small", **spec: Any) -> JSON:
    return {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": name},
            "spec": {"size": size, **spec}}


def condition(crd: JSON, type_: str) -> JSON:
    """One of a CRD's status conditions ({} when absent)."""
    for cond in (crd.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}
