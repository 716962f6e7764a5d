"""The RBAC authorizer: Roles, ClusterRoles and their bindings from the store, evaluated as kube-apiserver does.

Rules only add (there is no deny); a ClusterRoleBinding applies everywhere, a RoleBinding only to resource
requests in its own namespace (never to non-resource URLs). A binding whose role is missing grants nothing and
is reported in the denial's reason, as `RBAC: clusterrole.rbac.authorization.k8s.io "x" not found`.
`aggregationRule` is not evaluated.

The bootstrap policy a fresh cluster reconciles is built in (not stored): `cluster-admin` for
`system:masters`, and the discovery, basic-user and public-info-viewer roles that let every authenticated user
read discovery, `/version`, `/healthz`, `/openapi/*` and ask `kubectl auth can-i`, and anonymous users read
`/healthz` and `/version`.

Requests are hot: bindings are indexed by subject once and the index is rebuilt only after an RBAC object
changed (a one-slot store subscription says so), so a decision costs a few dictionary lookups and rule scans.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from edgeagent.sim.auth import AUTHENTICATED, MASTERS, SA_PREFIX, UNAUTHENTICATED, UserInfo
from edgeagent.sim.auth_request import Attributes
from edgeagent.sim.resources import CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES, ROLE_BINDINGS, ROLES
from edgeagent.sim.store import Store, Subscription

JSON = dict[str, Any]
_RBAC_GROUP = "rbac.authorization.k8s.io"


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


def _rule(verbs: list[str], groups: list[str] | None = None, resources: list[str] | None = None,
          urls: list[str] | None = None) -> JSON:
    rule: JSON = {"verbs": verbs}
    if urls is not None:
        rule["nonResourceURLs"] = urls
    else:
        rule["apiGroups"] = groups or [""]
        rule["resources"] = resources or []
    return rule


# The parts of kube-apiserver's bootstrap policy (plugin/pkg/auth/authorizer/rbac/bootstrappolicy) a client of
# this project meets: name -> (rules, bound groups).
BOOTSTRAP: dict[str, tuple[list[JSON], tuple[str, ...]]] = {
    "cluster-admin": ([_rule(["*"], ["*"], ["*"]), _rule(["*"], urls=["*"])], (MASTERS,)),
    "system:discovery": (
        [_rule(["get"], urls=["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi",
                              "/openapi/*", "/readyz", "/version", "/version/"])],
        (AUTHENTICATED,),
    ),
    "system:basic-user": (
        [_rule(["create"], ["authorization.k8s.io"], ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
         _rule(["create"], ["authentication.k8s.io"], ["selfsubjectreviews"])],
        (AUTHENTICATED,),
    ),
    "system:public-info-viewer": (
        [_rule(["get"], urls=["/healthz", "/livez", "/readyz", "/version", "/version/"])],
        (AUTHENTICATED, UNAUTHENTICATED),
    ),
}


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


@dataclass(frozen=True)
class Rule:
    verbs: tuple[str, ...]
    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    resource_names: tuple[str, ...]
    urls: tuple[str, ...]

    @classmethod
    def of(cls, rule: JSON) -> Rule:
        return cls(_strings(rule.get("verbs")), _strings(rule.get("apiGroups")), _strings(rule.get("resources")),
                   _strings(rule.get("resourceNames")), _strings(rule.get("nonResourceURLs")))

    def json(self) -> JSON:
        """As a SelfSubjectRulesReview lists it."""
        if self.urls:
            return {"verbs": list(self.verbs), "nonResourceURLs": list(self.urls)}
        body: JSON = {"verbs": list(self.verbs), "apiGroups": list(self.api_groups), "resources": list(self.resources)}
        if self.resource_names:
            body["resourceNames"] = list(self.resource_names)
        return body

    def allows(self, attrs: Attributes) -> bool:
        if "*" not in self.verbs and attrs.verb not in self.verbs:
            return False
        if not attrs.resource_request:
            return any(u == "*" or u == attrs.path or (u.endswith("*") and attrs.path.startswith(u[:-1]))
                       for u in self.urls)
        if "*" not in self.api_groups and attrs.api_group not in self.api_groups:
            return False
        if not self._resource_matches(attrs.combined_resource, attrs.subresource):
            return False
        return not self.resource_names or attrs.name in self.resource_names

    def _resource_matches(self, combined: str, subresource: str) -> bool:
        for resource in self.resources:
            if resource == "*" or resource == combined:
                return True
            if subresource and resource == f"*/{subresource}":
                return True
        return False


@dataclass(frozen=True)
class _Grant:
    """One binding's subject, with the rules of the role it refers to (or the error resolving it)."""

    namespace: str | None  # None: a ClusterRoleBinding (applies everywhere)
    source: str  # `ClusterRoleBinding "b" of ClusterRole "r" to Group "g"`, for SubjectAccessReview reasons
    rules: tuple[Rule, ...]
    error: str = ""


def _describe_subject(subject: JSON, binding_namespace: str) -> str:
    kind, name = str(subject.get("kind", "")), str(subject.get("name", ""))
    if kind == "ServiceAccount":
        return f'{kind} "{name}/{subject.get("namespace") or binding_namespace}"'
    return f'{kind} "{name}"'


def _subject_key(subject: JSON, binding_namespace: str) -> tuple[str, str] | None:
    """("user", name) or ("group", name): a ServiceAccount subject is the user `system:serviceaccount:ns:name`."""
    kind, name = subject.get("kind"), subject.get("name")
    if not isinstance(name, str) or not name:
        return None
    if kind == "User":
        return ("user", name)
    if kind == "Group":
        return ("group", name)
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return ("user", f"{SA_PREFIX}{namespace}:{name}") if namespace else None
    return None


class _Index:
    def __init__(self) -> None:
        self.by_user: dict[str, list[_Grant]] = {}
        self.by_group: dict[str, list[_Grant]] = {}

    def add(self, key: tuple[str, str], grant: _Grant) -> None:
        table = self.by_user if key[0] == "user" else self.by_group
        table.setdefault(key[1], []).append(grant)


class RBACAuthorizer:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._changes: Subscription | None = None
        self._index: _Index | None = None

    def _current(self) -> _Index:
        changes = self._changes
        if self._index is None or changes is None or changes.closed or changes.drain():
            if changes is not None:
                changes.close()
            # Subscribe before reading, so a change in between is noticed next time.
            self._changes = self._store.open_subscription(
                [ROLES, CLUSTER_ROLES, ROLE_BINDINGS, CLUSTER_ROLE_BINDINGS], max_queue=1)
            self._index = self._build()
        return self._index

    def close(self) -> None:
        if self._changes is not None:
            self._changes.close()
            self._changes = None

    def _build(self) -> _Index:
        store = self._store
        cluster_roles: dict[str, tuple[Rule, ...]] = {
            name: tuple(Rule.of(r) for r in rules) for name, (rules, _) in BOOTSTRAP.items()
        }
        for item in store.list_page(CLUSTER_ROLES, None).items:
            cluster_roles[item.obj["metadata"]["name"]] = self._rules(item.obj)
        roles: dict[tuple[str, str], tuple[Rule, ...]] = {}
        for item in store.list_page(ROLES, None).items:
            meta = item.obj["metadata"]
            roles[(meta.get("namespace", ""), meta["name"])] = self._rules(item.obj)
        index = _Index()
        for name, (_, groups) in BOOTSTRAP.items():
            for group in groups:
                source = f'ClusterRoleBinding "{name}" of ClusterRole "{name}" to Group "{group}"'
                index.add(("group", group), _Grant(None, source, cluster_roles[name]))
        bindings: Iterable[Any] = store.list_page(CLUSTER_ROLE_BINDINGS, None).items
        for item in bindings:
            self._add_binding(index, item.obj, None, cluster_roles, roles)
        for item in store.list_page(ROLE_BINDINGS, None).items:
            self._add_binding(index, item.obj, str(item.obj["metadata"].get("namespace", "")), cluster_roles, roles)
        return index

    @staticmethod
    def _rules(role: JSON) -> tuple[Rule, ...]:
        return tuple(Rule.of(r) for r in role.get("rules") or [] if isinstance(r, dict))

    @staticmethod
    def _add_binding(index: _Index, binding: JSON, namespace: str | None,
                     cluster_roles: dict[str, tuple[Rule, ...]],
                     roles: dict[tuple[str, str], tuple[Rule, ...]]) -> None:
        ref = binding.get("roleRef") or {}
        kind, role_name = str(ref.get("kind", "")), str(ref.get("name", ""))
        error = ""
        rules: tuple[Rule, ...] = ()
        if kind == "ClusterRole":
            found = cluster_roles.get(role_name)
            if found is None:
                error = f'clusterrole.{_RBAC_GROUP} "{role_name}" not found'
            rules = found or ()
        elif kind == "Role" and namespace is not None:
            found = roles.get((namespace, role_name))
            if found is None:
                error = f'role.{_RBAC_GROUP} "{role_name}" not found'
            rules = found or ()
        else:
            error = f"unsupported role reference kind: {kind!r}"
        binding_name = binding["metadata"]["name"]
        binding_kind = "ClusterRoleBinding" if namespace is None else "RoleBinding"
        shown = binding_name if namespace is None else f"{binding_name}/{namespace}"
        for subject in binding.get("subjects") or []:
            if not isinstance(subject, dict):
                continue
            key = _subject_key(subject, namespace or "")
            if key is None:
                continue
            source = (f'{binding_kind} "{shown}" of {kind} "{role_name}" to '
                      f"{_describe_subject(subject, namespace or '')}")
            index.add(key, _Grant(namespace, source, rules, error))

    def rules_for(self, user: UserInfo, namespace: str) -> tuple[list[Rule], list[str]]:
        """Every rule that applies to `user` in `namespace` ("" for cluster-wide only), and resolution errors."""
        index = self._current()
        grants = list(index.by_user.get(user.name, ()))
        for group in user.groups:
            grants.extend(index.by_group.get(group, ()))
        rules: list[Rule] = []
        errors: list[str] = []
        for grant in grants:
            if grant.namespace is not None and grant.namespace != namespace:
                continue
            if grant.error:
                errors.append(grant.error)
            rules.extend(grant.rules)
        return rules, errors

    def authorize(self, attrs: Attributes) -> Decision:
        index = self._current()
        user = attrs.user
        grants = list(index.by_user.get(user.name, ()))
        for group in user.groups:
            grants.extend(index.by_group.get(group, ()))
        errors: list[str] = []
        for grant in grants:
            if grant.namespace is not None and (not attrs.resource_request or grant.namespace != attrs.namespace):
                continue
            if grant.error:
                errors.append(grant.error)
                continue
            for rule in grant.rules:
                if rule.allows(attrs):
                    return Decision(True, f"RBAC: allowed by {grant.source}")
        if not errors:
            return Decision(False)
        detail = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        return Decision(False, f"RBAC: {detail}")
