"""Authentication and authorization in front of the sim's REST surface (`edgeagent sim --authorization`).

`none` keeps the old behaviour: every request may do everything. `rbac` runs the real server's filter chain:
authenticate the bearer token (no token: `system:anonymous`; a bad or expired one: 401), apply impersonation
headers if the caller may impersonate, authorize with the privileged-group check (`system:masters`), then the
Node authorizer, then RBAC (kube-apiserver `--authorization-mode=Node,RBAC`), and for node identities the
NodeRestriction admission checks. Denials are 403 Status bodies with kube-apiserver's message and are kept
(without credentials) in `denials`, so tests can tell which call a missing rule broke.

The endpoints that only make sense with authentication live here too: TokenRequest (`kubectl create
token`), SelfSubjectAccessReview (`kubectl auth can-i`), SelfSubjectRulesReview (`kubectl auth can-i --list`)
and SelfSubjectReview (`kubectl auth whoami`).
They also work in `none` mode, where every access review answers allowed. `/sim/v1/...` (the sim's own
link controls) is not part of the Kubernetes API and stays open.
"""

from __future__ import annotations

import contextvars
import json
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from edgeagent import log
from edgeagent.sim import auth_proto, errors
from edgeagent.sim.admission_policy import REQUEST_USER
from edgeagent.sim.auth import (
    ANONYMOUS,
    AUTHENTICATED,
    MASTERS,
    UNAUTHENTICATED,
    Authenticator,
    UserInfo,
    expiration_seconds,
    node_name_of,
    service_account_user,
    split_service_account,
)
from edgeagent.sim.auth_node import NODE_RULES, NodeAuthorizer, admit
from edgeagent.sim.auth_rbac import Decision, RBACAuthorizer, Rule
from edgeagent.sim.auth_request import Attributes, forbidden_message, request_attributes
from edgeagent.sim.resources import PODS, SERVICE_ACCOUNTS
from edgeagent.sim.store import Store

JSON = dict[str, Any]
MODES = ("none", "rbac")
# The authenticated (and impersonated) caller, for the handlers of the access-review endpoints.
_CALLER: contextvars.ContextVar[UserInfo | None] = contextvars.ContextVar("edgeagent_sim_caller", default=None)
ADMIN = UserInfo("kubernetes-admin", (MASTERS, AUTHENTICATED))
_NODE_WRITES = frozenset({"create", "update", "patch", "delete"})
_AUTHZ = "authorization.k8s.io"
_AUTHN = "authentication.k8s.io"

_log = log.get("edgeagent.sim.auth")


def _json(body: JSON, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(body, separators=(",", ":")).encode(), status=status,
                        content_type="application/json")


def forbidden(attrs: Attributes, reason: str) -> errors.ApiError:
    """The 403 of responsewriters.Forbidden: `<resource> "<name>" is forbidden: User … cannot …[: reason]`."""
    message = forbidden_message(attrs) + (f": {reason}" if reason else "")
    if not attrs.resource_request:
        return errors.ApiError(403, errors.status_body(403, "Forbidden", f"forbidden: {message}", details={}))
    return errors.forbidden(attrs.resource, attrs.name, message, attrs.api_group)


class AuthLayer:
    def __init__(self, store: Store, mode: str, key: bytes, *, revocations: Path | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown authorization mode {mode!r}: expected none or rbac")
        self.mode = mode
        self.store = store
        self.authenticator = Authenticator(store, key, revocations=revocations)
        self.rbac = RBACAuthorizer(store)
        self.node = NodeAuthorizer(store)
        # The most recent denials (401 and 403), newest last; never holds a credential.
        self.denials: deque[JSON] = deque(maxlen=1000)

    @property
    def enforcing(self) -> bool:
        return self.mode == "rbac"

    def close(self) -> None:
        self.rbac.close()

    def credentials(self, user: UserInfo) -> JSON:
        """The kubeconfig `user:` entry for a fixed identity: a bearer token in rbac mode, nothing otherwise."""
        return {"token": self.authenticator.static_token(user)} if self.enforcing else {}

    # ------------------------------------------------------------------------------ decisions

    def decide(self, attrs: Attributes) -> Decision:
        user = attrs.user
        if MASTERS in user.groups:
            return Decision(True)
        reasons: list[str] = []
        node = node_name_of(user)
        if node is not None:
            verdict = self.node.authorize(node, attrs)
            if verdict.allowed:
                return verdict
            if verdict.reason:
                reasons.append(verdict.reason)
        verdict = self.rbac.authorize(attrs)
        if verdict.allowed:
            return verdict
        if verdict.reason:
            reasons.append(verdict.reason)
        return Decision(False, ", ".join(reasons))

    def _record(self, user: UserInfo, attrs: Attributes | None, exc: errors.ApiError) -> None:
        entry: JSON = {"code": exc.code, "user": user.name, "message": exc.message}
        if attrs is not None:
            entry.update(verb=attrs.verb, group=attrs.api_group, resource=attrs.combined_resource,
                         namespace=attrs.namespace, name=attrs.name, path=attrs.path)
        self.denials.append(entry)
        _log.info("request_denied", code=exc.code, user=user.name, verb=entry.get("verb"),
                  resource=entry.get("resource"), namespace=entry.get("namespace"), name=entry.get("name"))

    # ------------------------------------------------------------------------------ the filter chain

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if not self.enforcing or request.path.startswith("/sim/"):
            return await handler(request)  # type: ignore[no-any-return]
        user = self.authenticator.authenticate(request.headers.get("Authorization"))
        if user is None:
            exc = errors.unauthorized()
            self._record(UserInfo("", ()), None, exc)
            raise exc
        user = self._impersonate(request, user)
        attrs = request_attributes(user, request.method, request.path, request.query)
        decision = self.decide(attrs)
        if not decision.allowed:
            exc = forbidden(attrs, decision.reason)
            self._record(user, attrs, exc)
            raise exc
        node = node_name_of(user)
        if node is not None and attrs.resource_request and attrs.verb in _NODE_WRITES:
            body = None
            if attrs.verb == "create":
                try:
                    body = await _json_body(request)
                except errors.ApiError:
                    body = None  # not JSON (YAML, protobuf): NodeRestriction sees no object; the handler decodes
            try:
                admit(self.store, node, attrs, body)
            except errors.ApiError as exc:
                self._record(user, attrs, exc)
                raise
        token = _CALLER.set(user)
        admission_token = REQUEST_USER.set(user.json())  # who admission policies see (sim/admission_policy.py)
        try:
            return await handler(request)  # type: ignore[no-any-return]
        finally:
            REQUEST_USER.reset(admission_token)
            _CALLER.reset(token)

    def _impersonate(self, request: web.Request, user: UserInfo) -> UserInfo:
        """Impersonate-User/-Group/-Uid/-Extra-*: allowed per header by the `impersonate` verb, as upstream."""
        headers = request.headers
        as_user = headers.get("Impersonate-User")
        as_groups = list(headers.getall("Impersonate-Group", []))
        as_uid = headers.get("Impersonate-Uid")
        extra: dict[str, list[str]] = {}
        for key in headers:
            if key.lower().startswith("impersonate-extra-"):
                extra.setdefault(key[len("impersonate-extra-"):].lower(), []).extend(headers.getall(key))
        if as_user is None and not as_groups and not extra and as_uid is None:
            return user
        if not as_user:
            raise errors.bad_request("requested impersonation of groups, extra or uid without impersonating a user")
        checks: list[Attributes] = []
        sa = split_service_account(as_user)
        if sa is not None:
            checks.append(Attributes(user, "impersonate", True, resource="serviceaccounts", namespace=sa[0],
                                     name=sa[1]))
        else:
            checks.append(Attributes(user, "impersonate", True, resource="users", name=as_user))
        checks += [Attributes(user, "impersonate", True, resource="groups", name=g) for g in as_groups]
        checks += [Attributes(user, "impersonate", True, api_group=_AUTHN, resource="userextras", subresource=k,
                              name=v) for k, values in extra.items() for v in values]
        if as_uid is not None:
            checks.append(Attributes(user, "impersonate", True, api_group=_AUTHN, resource="uids", name=as_uid))
        for check in checks:
            decision = self.decide(check)
            if not decision.allowed:
                exc = forbidden(check, decision.reason)
                self._record(user, check, exc)
                raise exc
        groups = as_groups
        if sa is not None and not as_groups:
            groups = list(service_account_user(*sa).groups)
        default_group = UNAUTHENTICATED if as_user == ANONYMOUS.name else AUTHENTICATED
        if default_group not in groups:
            groups.append(default_group)
        return UserInfo(as_user, tuple(groups), as_uid or "", {k: tuple(v) for k, v in extra.items()})

    # ------------------------------------------------------------------------------ endpoints

    def add_routes(self, app: web.Application) -> None:
        """Registered before the generic REST routes, which would otherwise claim these paths."""
        app.router.add_post("/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", self._token_request)
        app.router.add_post(f"/apis/{_AUTHZ}/v1/selfsubjectaccessreviews", self._self_access_review)
        app.router.add_post(f"/apis/{_AUTHZ}/v1/selfsubjectrulesreviews", self._self_rules_review)
        app.router.add_post(f"/apis/{_AUTHN}/v1/selfsubjectreviews", self._self_subject_review)
        app.router.add_post("/sim/v1/tokens/revoke", self._revoke)

    def _user(self, request: web.Request) -> UserInfo:
        found = _CALLER.get()
        if found is not None:
            return found
        return self.authenticator.authenticate(request.headers.get("Authorization")) or ANONYMOUS

    async def _token_request(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        body = await _body(request, auth_proto.token_request)
        spec = body.get("spec") or {}
        if not isinstance(spec, dict):
            raise errors.bad_request("TokenRequest spec must be a JSON object")
        seconds = expiration_seconds(spec)
        sa = self.store.entry(SERVICE_ACCOUNTS, namespace, name).obj
        pod = None
        ref = spec.get("boundObjectRef")
        if isinstance(ref, dict) and ref:
            if ref.get("kind") != "Pod":
                raise errors.bad_request(f"cannot bind token for serviceaccount {name!r} to object of kind "
                                         f"{ref.get('kind')!r}: the sim binds tokens to Pods only")
            pod = self.store.entry(PODS, namespace, str(ref.get("name") or "")).obj
            if ref.get("uid") and ref["uid"] != pod["metadata"].get("uid"):
                raise errors.conflict("pods", str(ref.get("name")),
                                      f"the UID in the bound object reference ({ref['uid']}) does not match the "
                                      f"UID in record. The object might have been deleted and then recreated")
        token, expires = self.authenticator.service_account_token(namespace, sa, seconds, pod)
        audiences = spec.get("audiences") or ["https://kubernetes.default.svc.cluster.local"]
        out_spec: JSON = {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": ref or None}
        return _json({
            "kind": "TokenRequest", "apiVersion": f"{_AUTHN}/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
            "spec": out_spec,
            "status": {"token": token,
                       "expirationTimestamp": datetime.fromtimestamp(expires, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")},
        }, 201)

    async def _revoke(self, request: web.Request) -> web.Response:
        """`POST /sim/v1/tokens/revoke {"token": ...}`: that one token gets 401 from now on (a rotated credential
        that must stop working). Not a Kubernetes API: a real cluster revokes by deleting the bound object."""
        if not self.enforcing:
            raise errors.bad_request("tokens are not checked with --authorization none: nothing to revoke")
        body = await _json_body(request) or {}
        token = body.get("token")
        if not isinstance(token, str) or not token.strip():
            raise errors.bad_request('expected {"token": "<bearer token>"}')
        username = self.authenticator.revoke(token.strip())
        if username is None:
            raise errors.bad_request("not a token this simulated cluster issued")
        _log.info("token_revoked", user=username)
        return _json({"revoked": True, "username": username})

    async def _self_access_review(self, request: web.Request) -> web.Response:
        body = await _body(request, auth_proto.self_subject_access_review)
        spec = body.get("spec") or {}
        user = self._user(request)
        resource = spec.get("resourceAttributes")
        non_resource = spec.get("nonResourceAttributes")
        if isinstance(resource, dict):
            attrs = Attributes(user, str(resource.get("verb") or ""), True, api_group=str(resource.get("group") or ""),
                               api_version=str(resource.get("version") or ""),
                               resource=str(resource.get("resource") or ""),
                               subresource=str(resource.get("subresource") or ""),
                               namespace=str(resource.get("namespace") or ""), name=str(resource.get("name") or ""))
        elif isinstance(non_resource, dict):
            attrs = Attributes(user, str(non_resource.get("verb") or ""), False,
                               path=str(non_resource.get("path") or ""))
        else:
            detail = "exactly one of nonResourceAttributes or resourceAttributes must be specified"
            cause = errors.field_required("spec.resourceAttributes", detail)
            raise errors.invalid("SelfSubjectAccessReview", "", [cause], _AUTHZ)
        decision = self.decide(attrs) if self.enforcing else Decision(True)
        status: JSON = {"allowed": decision.allowed}
        if decision.reason:
            status["reason"] = decision.reason
        return _json({"kind": "SelfSubjectAccessReview", "apiVersion": f"{_AUTHZ}/v1",
                      "metadata": {"creationTimestamp": None}, "spec": spec, "status": status}, 201)

    async def _self_rules_review(self, request: web.Request) -> web.Response:
        """`kubectl auth can-i --list`: the rules that apply to the caller in spec.namespace."""
        body = await _body(request, auth_proto.self_subject_rules_review)
        spec = body.get("spec") or {}
        namespace = str(spec.get("namespace") or "")
        user = self._user(request)
        errors_seen: list[str] = []
        if not self.enforcing or MASTERS in user.groups:
            rules = [Rule.of({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
                     Rule.of({"verbs": ["*"], "nonResourceURLs": ["*"]})]
        else:
            rules = list(NODE_RULES) if node_name_of(user) is not None else []
            found, errors_seen = self.rbac.rules_for(user, namespace)
            rules += found
        status: JSON = {"resourceRules": [r.json() for r in rules if not r.urls],
                        "nonResourceRules": [r.json() for r in rules if r.urls], "incomplete": bool(errors_seen)}
        if errors_seen:
            status["evaluationError"] = "; ".join(errors_seen)
        return _json({"kind": "SelfSubjectRulesReview", "apiVersion": f"{_AUTHZ}/v1",
                      "metadata": {"creationTimestamp": None}, "spec": {"namespace": namespace}, "status": status},
                     201)

    async def _self_subject_review(self, request: web.Request) -> web.Response:
        user = self._user(request)
        return _json({"kind": "SelfSubjectReview", "apiVersion": f"{_AUTHN}/v1",
                      "metadata": {"creationTimestamp": None}, "status": {"userInfo": user.json()}}, 201)


async def _body(request: web.Request, from_protobuf: Callable[[bytes], JSON]) -> JSON:
    """A JSON body, or the protobuf kubectl's typed clients send."""
    if request.content_type == "application/vnd.kubernetes.protobuf":
        try:
            return from_protobuf(await request.read())
        except (ValueError, UnicodeDecodeError) as exc:
            raise errors.bad_request(f"unable to decode the protobuf body: {exc}") from exc
    return await _json_body(request) or {}


async def _json_body(request: web.Request) -> JSON | None:
    raw = await request.read()
    if not raw.strip():
        return None
    try:
        decoded = json.loads(raw)
    except ValueError as exc:
        raise errors.bad_request(f"couldn't get version/kind; json parse error: {exc}") from exc
    return decoded if isinstance(decoded, dict) else None
