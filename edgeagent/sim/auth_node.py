"""Node identities: the Node authorizer and the NodeRestriction admission plugin, as a kubelet meets them.

A `system:node:<name>` user in `system:nodes` is authorized by the Node authorizer alone (the `system:node`
ClusterRole has had no binding since 1.8): the static node rules of kube-apiserver 1.24 (read pods, nodes and
services; write its Node and status, pod status, events; create/delete pods), its own Lease in
`kube-node-lease`, and tokens only for ServiceAccounts a pod on the node runs as. Secrets, ConfigMaps and
volumes need the authorizer's object graph, which the sim does not keep: they are denied.

A `get` of one pod follows the authorizer of Kubernetes 1.36: its object graph has an edge from a pod to the
node it is bound to, and a node may get only the pods with such an edge to itself. Any other pod (bound to
another node, not bound at all, or absent: the graph cannot tell them apart) is refused with the real text
(`no relationship found between node 'edge-1' and this object`); 1.24 allowed them all. Lists and watches
keep the 1.24 rule. For writes NodeRestriction, running after the authorizer at admission, confines them to
the node's own objects with the texts a kubelet logs
(`node "edge-1" can only delete pods with spec.nodeName set to itself`).
"""

from __future__ import annotations

from typing import Any

from edgeagent.sim import errors
from edgeagent.sim.auth_rbac import Decision, Rule, _rule
from edgeagent.sim.auth_request import Attributes
from edgeagent.sim.resources import PODS
from edgeagent.sim.store import Store

JSON = dict[str, Any]

NODE_LEASE_NAMESPACE = "kube-node-lease"
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"

# bootstrappolicy.NodeRules() of Kubernetes 1.24, the parts that are not subdivided per node.
NODE_RULES: tuple[Rule, ...] = tuple(Rule.of(r) for r in (
    _rule(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
    _rule(["create"], ["authorization.k8s.io"], ["subjectaccessreviews", "localsubjectaccessreviews"]),
    _rule(["get", "list", "watch"], [""], ["services"]),
    _rule(["create", "get", "list", "watch"], [""], ["nodes"]),
    _rule(["update", "patch"], [""], ["nodes/status"]),
    _rule(["update", "patch"], [""], ["nodes"]),
    _rule(["create", "update", "patch"], [""], ["events"]),
    _rule(["get", "list", "watch"], [""], ["pods"]),
    _rule(["create", "delete"], [""], ["pods"]),
    _rule(["update", "patch"], [""], ["pods/status"]),
    _rule(["create"], [""], ["pods/eviction"]),
    _rule(["get", "list", "watch"], [""], ["endpoints"]),
    _rule(["create", "get", "list", "watch"], ["certificates.k8s.io"], ["certificatesigningrequests"]),
))
_GRAPH_READS = frozenset({"secrets", "configmaps", "persistentvolumeclaims", "persistentvolumes"})


class NodeAuthorizer:
    def __init__(self, store: Store) -> None:
        self._store = store

    def authorize(self, node: str, attrs: Attributes) -> Decision:
        if attrs.resource_request:
            if attrs.api_group == "" and attrs.resource in _GRAPH_READS:
                return self._graph_read(node, attrs)
            if attrs.api_group == "" and attrs.resource == "serviceaccounts" and attrs.subresource == "token":
                return self._create_token(node, attrs)
            if attrs.api_group == "coordination.k8s.io" and attrs.resource == "leases":
                return _lease(node, attrs)
            if _pod_get(attrs):
                return self._get_pod(node, attrs)
        if any(rule.allows(attrs) for rule in NODE_RULES):
            return Decision(True)
        return Decision(False)

    @staticmethod
    def _graph_read(node: str, attrs: Attributes) -> Decision:
        if attrs.verb not in ("get", "list", "watch"):
            return Decision(False, "can only read resources of this type")
        if attrs.subresource:
            return Decision(False, "cannot read subresource")
        if not attrs.namespace and attrs.resource != "persistentvolumes":
            return Decision(False, "can only read namespaced object of this type")
        if not attrs.name:
            return Decision(False, "No Object name found")
        return Decision(False, f"no relationship found between node '{node}' and this object")

    def _get_pod(self, node: str, attrs: Attributes) -> Decision:
        """1.36: a pod with an edge to this node in the graph, i.e. bound to it; any other is no relationship."""
        try:
            pod = self._store.entry(PODS, attrs.namespace, attrs.name).obj
        except errors.ApiError:
            pod = {}
        if (pod.get("spec") or {}).get("nodeName") == node:
            return Decision(True)
        return Decision(False, f"no relationship found between node '{node}' and this object")

    def _create_token(self, node: str, attrs: Attributes) -> Decision:
        if attrs.verb != "create" or not attrs.name:
            return Decision(False, "can only create tokens for individual service accounts")
        for item in self._store.list_page(PODS, attrs.namespace).items:
            spec = item.obj.get("spec") or {}
            if spec.get("nodeName") == node and (spec.get("serviceAccountName") or "default") == attrs.name:
                return Decision(True)
        return Decision(False, f"no relationship found between node '{node}' and this object")


def _pod_get(attrs: Attributes) -> bool:
    """A `get` of one pod, by name, in a namespace (its subresources stay with the static rules)."""
    return (attrs.api_group == "" and attrs.resource == "pods" and not attrs.subresource and attrs.verb == "get"
            and bool(attrs.name) and bool(attrs.namespace))


def _lease(node: str, attrs: Attributes) -> Decision:
    if attrs.verb not in ("get", "create", "update", "patch", "delete"):
        return Decision(False, "can only get, create, update, patch, or delete a node lease")
    if attrs.namespace != NODE_LEASE_NAMESPACE:
        return Decision(False, f'can only access leases in the "{NODE_LEASE_NAMESPACE}" system namespace')
    if attrs.verb != "create" and attrs.name != node:
        return Decision(False, "can only access node lease with the same name as the requesting node")
    return Decision(True)


def _forbidden(attrs: Attributes, name: str, message: str) -> errors.ApiError:
    return errors.forbidden(attrs.resource, name, message, attrs.api_group)


def admit(store: Store, node: str, attrs: Attributes, body: JSON | None) -> None:
    """NodeRestriction: raise the 403 the plugin would for a write outside the node's own objects.

    `body` is the decoded request body of a create (the name and bound node are in it), else None. A write
    to an object that does not exist is left to the handler, which answers 404 as the real server does.
    """
    if not attrs.resource_request or attrs.api_group not in ("", "coordination.k8s.io"):
        return
    verb, resource, sub = attrs.verb, attrs.resource, attrs.subresource
    if resource == "pods" and attrs.api_group == "":
        if sub == "" and verb == "create":
            meta = (body or {}).get("metadata") or {}
            name = str(meta.get("name") or "")
            if MIRROR_POD_ANNOTATION not in (meta.get("annotations") or {}):
                raise _forbidden(attrs, name, f'pod does not have "{MIRROR_POD_ANNOTATION}" annotation, '
                                              f'node "{node}" can only create mirror pods')
            if ((body or {}).get("spec") or {}).get("nodeName") != node:
                raise _forbidden(attrs, name, f'node "{node}" can only create pods with spec.nodeName set to itself')
        elif sub == "" and verb == "delete":
            if _bound_node(store, attrs) not in (None, node):
                raise _forbidden(attrs, attrs.name,
                                 f'node "{node}" can only delete pods with spec.nodeName set to itself')
        elif sub == "status" and verb in ("update", "patch") and _bound_node(store, attrs) not in (None, node):
            raise _forbidden(attrs, attrs.name,
                             f'node "{node}" can only update pod status for pods with spec.nodeName set to itself')
    elif resource == "nodes" and attrs.api_group == "" and verb in ("create", "update", "patch", "delete"):
        requested = attrs.name or str(((body or {}).get("metadata") or {}).get("name") or "")
        if requested != node:
            raise _forbidden(attrs, requested, f'node "{node}" is not allowed to modify node "{requested}"')
    elif resource == "leases" and attrs.api_group == "coordination.k8s.io" and verb == "create":
        requested = str(((body or {}).get("metadata") or {}).get("name") or "")
        if attrs.namespace != NODE_LEASE_NAMESPACE:
            raise _forbidden(attrs, requested,
                             f'can only access leases in the "{NODE_LEASE_NAMESPACE}" system namespace')
        if requested != node:
            raise _forbidden(attrs, requested, "can only access node lease with the same name as the requesting node")


def _bound_node(store: Store, attrs: Attributes) -> str | None:
    """The pod's spec.nodeName ("" when unbound), or None when there is no such pod."""
    try:
        pod = store.entry(PODS, attrs.namespace, attrs.name).obj
    except errors.ApiError:
        return None
    return str((pod.get("spec") or {}).get("nodeName") or "")

