"""HTTP request -> authorizer attributes, as kube-apiserver's RequestInfoFactory derives them."""

from __future__ import annotations

import pytest

from edgeagent.sim.auth import ANONYMOUS
from edgeagent.sim.auth_request import request_attributes

CASES = [
    # method, path, query -> verb, group, resource, subresource, namespace, name
    ("GET", "/api/v1/namespaces/ns/pods/p", {}, ("get", "", "pods", "", "ns", "p")),
    ("GET", "/api/v1/namespaces/ns/pods", {}, ("list", "", "pods", "", "ns", "")),
    ("GET", "/api/v1/pods", {"watch": "true"}, ("watch", "", "pods", "", "", "")),
    ("GET", "/api/v1/pods", {"watch": "1", "fieldSelector": "metadata.name=p,spec.nodeName=n"},
     ("watch", "", "pods", "", "", "p")),
    ("GET", "/api/v1/watch/namespaces/ns/pods/p", {}, ("watch", "", "pods", "", "ns", "p")),
    ("POST", "/api/v1/namespaces/ns/pods", {}, ("create", "", "pods", "", "ns", "")),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", {},
     ("update", "coordination.k8s.io", "leases", "", "ns", "l")),
    ("PATCH", "/api/v1/namespaces/ns/pods/p/status", {}, ("patch", "", "pods", "status", "ns", "p")),
    ("DELETE", "/api/v1/namespaces/ns/pods/p", {}, ("delete", "", "pods", "", "ns", "p")),
    ("DELETE", "/apis/apps/v1/namespaces/ns/daemonsets", {}, ("deletecollection", "apps", "daemonsets", "", "ns", "")),
    ("GET", "/api/v1/namespaces/ns", {}, ("get", "", "namespaces", "", "ns", "ns")),
    ("PUT", "/api/v1/namespaces/ns/finalize", {}, ("update", "", "namespaces", "finalize", "ns", "ns")),
    ("POST", "/api/v1/namespaces/ns/serviceaccounts/sa/token", {},
     ("create", "", "serviceaccounts", "token", "ns", "sa")),
    ("GET", "/api/v1/nodes", {}, ("list", "", "nodes", "", "", "")),
]


@pytest.mark.parametrize(("method", "path", "query", "expected"), CASES)
def test_resource_requests(method: str, path: str, query: dict[str, str],
                           expected: tuple[str, str, str, str, str, str]) -> None:
    attrs = request_attributes(ANONYMOUS, method, path, query)
    assert attrs.resource_request
    assert (attrs.verb, attrs.api_group, attrs.resource, attrs.subresource, attrs.namespace, attrs.name) == expected


@pytest.mark.parametrize("path", ["/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1", "/version", "/healthz",
                                  "/openapi/v3/apis/apps/v1", "/sim/v1/nodes"])
def test_non_resource_requests_use_the_method_as_verb(path: str) -> None:
    attrs = request_attributes(ANONYMOUS, "GET", path, {})
    assert (attrs.resource_request, attrs.verb, attrs.path) == (False, "get", path)
    assert request_attributes(ANONYMOUS, "POST", path, {}).verb == "post"
