"""What a request asks to do, in the authorizer's terms: kube-apiserver's RequestInfo rules.

Authorization happens before routing on a real server (an unknown resource is 403 for an unprivileged user,
404 only for one allowed to ask), so the verb, group, resource, subresource, namespace and name come from the
URL alone, as `k8s.io/apiserver/pkg/endpoints/request.RequestInfoFactory` derives them: GET without a name is
list (or watch with `?watch=`), DELETE without a name is deletecollection, a `metadata.name=` field selector
names the object, `/api/v1/namespaces/x` is the namespace x, and paths outside `/api` and `/apis` (or too
short to name a resource, like `/apis/apps/v1`) are non-resource requests whose verb is the HTTP method.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from edgeagent.sim.auth import UserInfo

_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})  # Go's strconv.ParseBool
_SPECIAL_VERBS = frozenset({"proxy", "watch"})
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_METHOD_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class Attributes:
    user: UserInfo
    verb: str
    resource_request: bool
    path: str = ""
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def combined_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def _name_from_field_selector(text: str) -> str:
    """`metadata.name=x` (or `==`) among AND-ed terms names the object, as RequiresExactMatch does."""
    for term in text.split(","):
        key, op, value = term.partition("==") if "==" in term else term.partition("=")
        if op and not key.endswith("!") and key.strip() == "metadata.name" and value and "/" not in value:
            return value.strip()
    return ""


def request_attributes(user: UserInfo, method: str, path: str, query: Mapping[str, str]) -> Attributes:
    parts = [p for p in path.strip("/").split("/") if p]
    non_resource = Attributes(user, method.lower(), False, path=path)
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return non_resource
    prefix, rest = parts[0], parts[1:]
    group = ""
    if prefix == "apis":
        if len(rest) < 3:
            return non_resource
        group, rest = rest[0], rest[1:]
    version, rest = rest[0], rest[1:]
    if rest[0] in _SPECIAL_VERBS:
        if len(rest) < 2:
            return non_resource
        verb, rest = rest[0], rest[1:]
        by_method = False
    else:
        verb, by_method = _METHOD_VERBS.get(method.upper(), ""), True
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) >= 2 else ""
    subresource = rest[2] if len(rest) >= 3 else ""
    if by_method and not name and verb == "get":
        verb = "watch" if query.get("watch", "") in _TRUE else "list"
        name = _name_from_field_selector(query.get("fieldSelector", ""))
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(user, verb, True, path=path, api_group=group, api_version=version, resource=resource,
                      subresource=subresource, namespace=namespace, name=name)


def forbidden_message(attrs: Attributes) -> str:
    """The authorizer half of a 403 message (responsewriters.forbiddenMessage)."""
    who = attrs.user.name
    if not attrs.resource_request:
        return f'User "{who}" cannot {attrs.verb} path "{attrs.path}"'
    where = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    return (f'User "{who}" cannot {attrs.verb} resource "{attrs.combined_resource}" '
            f'in API group "{attrs.api_group}" {where}')
