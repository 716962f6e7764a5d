"""Who is calling: the sim's bearer tokens and the identities they stand for.

A real kube-apiserver authenticates ServiceAccount tokens as signed JWTs and checks, on every request, that
the ServiceAccount (and the pod a token is bound to) still exists. The sim does the same with HS256 tokens
signed by a key kept in `--dir`, so tokens stay valid across a sim restart with the same directory and no
token table has to be stored. Tokens are secrets: nothing here logs them, and `UserInfo` never holds one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeagent.sim import errors
from edgeagent.sim.files import write_private
from edgeagent.sim.resources import PODS, SERVICE_ACCOUNTS
from edgeagent.sim.store import Store

JSON = dict[str, Any]

MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
NODES = "system:nodes"
NODE_PREFIX = "system:node:"
SA_PREFIX = "system:serviceaccount:"
SA_GROUP = "system:serviceaccounts"
# Kubernetes >= 1.30 records the node of the pod a token is bound to (ServiceAccountTokenPodNodeInfo).
EXTRA_NODE_NAME = "authentication.kubernetes.io/node-name"
EXTRA_NODE_UID = "authentication.kubernetes.io/node-uid"
EXTRA_POD_NAME = "authentication.kubernetes.io/pod-name"
EXTRA_POD_UID = "authentication.kubernetes.io/pod-uid"
EXTRA_CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"

ISSUER = "https://kubernetes.default.svc.cluster.local"
# The real server's bounds for TokenRequest.spec.expirationSeconds (10 minutes .. 2^32 s); default 1 h.
MIN_EXPIRATION = 600
MAX_EXPIRATION = 1 << 32
DEFAULT_EXPIRATION = 3600
KEY_FILE = "sim-token-signing.key"
# Digests of revoked tokens, one per line, next to the key: a revoked token stays revoked across a restart.
REVOKED_FILE = "sim-revoked-tokens"


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...]
    uid: str = ""
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def json(self) -> JSON:
        body: JSON = {"username": self.name, "groups": list(self.groups)}
        if self.uid:
            body["uid"] = self.uid
        if self.extra:
            body["extra"] = {k: list(v) for k, v in self.extra.items()}
        return body


ANONYMOUS = UserInfo("system:anonymous", (UNAUTHENTICATED,))


def node_user(node: str) -> UserInfo:
    return UserInfo(NODE_PREFIX + node, (NODES, AUTHENTICATED))


def service_account_user(namespace: str, name: str, uid: str = "",
                         extra: Mapping[str, tuple[str, ...]] | None = None) -> UserInfo:
    return UserInfo(f"{SA_PREFIX}{namespace}:{name}", (SA_GROUP, f"{SA_GROUP}:{namespace}", AUTHENTICATED),
                    uid, dict(extra or {}))


def split_service_account(username: str) -> tuple[str, str] | None:
    """`system:serviceaccount:NS:NAME` -> (NS, NAME)."""
    if not username.startswith(SA_PREFIX):
        return None
    namespace, sep, name = username[len(SA_PREFIX):].partition(":")
    return (namespace, name) if sep and namespace and name and ":" not in name else None


def node_name_of(user: UserInfo) -> str | None:
    """The node of a Node-authorizer identity (`system:node:<name>` in `system:nodes`), else None."""
    if NODES in user.groups and user.name.startswith(NODE_PREFIX) and len(user.name) > len(NODE_PREFIX):
        return user.name[len(NODE_PREFIX):]
    return None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def load_signing_key(directory: Path | None) -> bytes:
    """The key from `directory` (created 0600 on first use), or a fresh one for a throw-away sim."""
    if directory is None:
        return secrets.token_bytes(32)
    path = directory / KEY_FILE
    try:
        key = path.read_bytes()
        if len(key) >= 32:
            return key
    except FileNotFoundError:
        pass
    key = secrets.token_bytes(32)
    write_private(path, key)
    return key


_HEADER = _b64(b'{"alg":"HS256","typ":"JWT"}')


class Authenticator:
    """Issues and verifies bearer tokens; `authenticate` maps an Authorization header to a user or None (401)."""

    def __init__(self, store: Store, key: bytes, *, clock: Callable[[], float] = time.time,
                 revocations: Path | None = None) -> None:
        self._store = store
        self._key = key
        self.clock = clock
        # token -> verified claims; a token's signature is checked once, its expiry and objects every time.
        self._verified: dict[str, JSON] = {}
        self._revocations = revocations
        self._revoked: set[str] = set()
        if revocations is not None and revocations.exists():
            self._revoked = {line.strip() for line in revocations.read_text().splitlines() if line.strip()}

    # ------------------------------------------------------------------------------ issuing

    def _sign(self, claims: JSON) -> str:
        payload = _b64(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
        signing_input = f"{_HEADER}.{payload}".encode("ascii")
        signature = hmac.new(self._key, signing_input, hashlib.sha256).digest()
        return f"{_HEADER}.{payload}.{_b64(signature)}"

    def static_token(self, user: UserInfo) -> str:
        """A non-expiring token for a fixed identity (the admin and node kubeconfigs)."""
        return self._sign({"iss": ISSUER, "sub": user.name, "groups": list(user.groups)})

    def service_account_token(self, namespace: str, sa: JSON, expiration_seconds: int,
                              bound_pod: JSON | None = None) -> tuple[str, float]:
        """A TokenRequest's token and its expiry (epoch seconds)."""
        now = int(self.clock())
        exp = now + expiration_seconds
        name = sa["metadata"]["name"]
        k8s: JSON = {"namespace": namespace,
                     "serviceaccount": {"name": name, "uid": sa["metadata"].get("uid", "")}}
        if bound_pod is not None:
            meta = bound_pod["metadata"]
            k8s["pod"] = {"name": meta["name"], "uid": meta.get("uid", "")}
            node = (bound_pod.get("spec") or {}).get("nodeName")
            if node:
                k8s["node"] = {"name": node, "uid": self._node_uid(node)}
        claims = {"iss": ISSUER, "sub": f"{SA_PREFIX}{namespace}:{name}", "aud": [ISSUER], "iat": now,
                  "nbf": now, "exp": exp, "jti": secrets.token_hex(16), "kubernetes.io": k8s}
        return self._sign(claims), float(exp)

    def _node_uid(self, node: str) -> str:
        from edgeagent.sim.resources import NODES as NODE_RESOURCE

        try:
            return str(self._store.entry(NODE_RESOURCE, None, node).obj["metadata"].get("uid", ""))
        except errors.ApiError:
            return ""

    # ------------------------------------------------------------------------------ revoking

    def revoke(self, token: str) -> str | None:
        """Reject `token` from now on, as a real cluster does once the object a token is bound to is deleted,
        but for one credential (the node's other tokens keep working). The sim keeps no token table, so it
        remembers the token's digest (never the token), in `--dir` when it has one. Returns the identity the
        token stood for; None when it is not a token this sim signed (nothing to revoke)."""
        claims = self._claims(token)
        if claims is None:
            return None
        digest = _digest(token)
        if digest not in self._revoked:
            self._revoked.add(digest)
            if self._revocations is not None:
                with self._revocations.open("a", encoding="ascii") as handle:
                    handle.write(digest + "\n")
                    handle.flush()
                    os.fsync(handle.fileno())
        return str(claims.get("sub") or "")

    # ------------------------------------------------------------------------------ verifying

    def authenticate(self, header: str | None) -> UserInfo | None:
        """ANONYMOUS without credentials (as with --anonymous-auth=true); None for a bad or expired token."""
        if header is None or not header.strip():
            return ANONYMOUS
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        claims = self._claims(token.strip())
        if claims is None or (self._revoked and _digest(token.strip()) in self._revoked):
            return None
        exp = claims.get("exp")
        if isinstance(exp, (int, float)) and self.clock() >= exp:
            return None
        k8s = claims.get("kubernetes.io")
        if isinstance(k8s, dict):
            return self._service_account(claims, k8s)
        groups = claims.get("groups")
        sub = claims.get("sub")
        if not isinstance(sub, str) or not isinstance(groups, list):
            return None
        return UserInfo(sub, tuple(str(g) for g in groups))

    def _claims(self, token: str) -> JSON | None:
        cached = self._verified.get(token)
        if cached is not None:
            return cached
        parts = token.split(".")
        if len(parts) != 3:
            return None
        try:
            signature = _unb64(parts[2])
            expected = hmac.new(self._key, f"{parts[0]}.{parts[1]}".encode("ascii"), hashlib.sha256).digest()
            if not hmac.compare_digest(signature, expected):
                return None
            claims = json.loads(_unb64(parts[1]))
        except (ValueError, UnicodeError, binascii.Error):
            return None
        if not isinstance(claims, dict):
            return None
        if len(self._verified) > 10_000:  # bounded: a flood of distinct valid tokens only costs re-verification
            self._verified.clear()
        self._verified[token] = claims
        return claims

    def _service_account(self, claims: JSON, k8s: JSON) -> UserInfo | None:
        """Valid only while the ServiceAccount (and the bound pod) still exist with the recorded UIDs."""
        namespace = k8s.get("namespace")
        sa = k8s.get("serviceaccount") or {}
        if not isinstance(namespace, str) or not isinstance(sa, dict):
            return None
        try:
            stored = self._store.entry(SERVICE_ACCOUNTS, namespace, str(sa.get("name", ""))).obj
        except errors.ApiError:
            return None
        if sa.get("uid") and stored["metadata"].get("uid") != sa["uid"]:
            return None
        extra: dict[str, tuple[str, ...]] = {}
        pod = k8s.get("pod")
        if isinstance(pod, dict):
            try:
                live = self._store.entry(PODS, namespace, str(pod.get("name", ""))).obj
            except errors.ApiError:
                return None
            if pod.get("uid") and live["metadata"].get("uid") != pod["uid"]:
                return None
            extra[EXTRA_POD_NAME] = (str(pod.get("name", "")),)
            extra[EXTRA_POD_UID] = (str(pod.get("uid", "")),)
        node = k8s.get("node")
        if isinstance(node, dict) and node.get("name"):
            extra[EXTRA_NODE_NAME] = (str(node["name"]),)
            if node.get("uid"):
                extra[EXTRA_NODE_UID] = (str(node["uid"]),)
        if claims.get("jti"):
            extra[EXTRA_CREDENTIAL_ID] = (f"JTI={claims['jti']}",)
        return service_account_user(namespace, str(sa.get("name", "")), str(sa.get("uid", "")), extra)


def expiration_seconds(spec: JSON) -> int:
    """TokenRequest.spec.expirationSeconds with the real validation (422 below 10 minutes)."""
    value = spec.get("expirationSeconds", DEFAULT_EXPIRATION)
    if value is None:
        value = DEFAULT_EXPIRATION
    if not isinstance(value, int) or isinstance(value, bool):
        raise errors.bad_request("spec.expirationSeconds must be an integer")
    if value < MIN_EXPIRATION:
        cause = errors.field_invalid("spec.expirationSeconds", value, "may not specify a duration less than 10 minutes")
        raise errors.invalid("TokenRequest", "", [cause], "authentication.k8s.io")
    if value > MAX_EXPIRATION:
        cause = errors.field_invalid("spec.expirationSeconds", value,
                                     "may not specify a duration larger than 2^32 seconds")
        raise errors.invalid("TokenRequest", "", [cause], "authentication.k8s.io")
    return value
