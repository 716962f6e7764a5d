"""Native loading of the common kubeconfig and in-cluster cases, without kubernetes_asyncio.

Importing kubernetes_asyncio pulls in its whole generated client (~35 MiB of RSS), which pushed the agent past
its memory goal while we only ever need the address, TLS material and credentials. This module covers what
real edge nodes use (static or file tokens, client certificates, basic auth, in-cluster service accounts);
user entries with `exec` or `auth-provider` (and clusters behind a `proxy-url`) raise `NeedsFallback` so the
caller can hand the file to kubernetes_asyncio instead, and nothing that worked before stops working.

Errors name the kubeconfig and the field, because the agent prints them and exits: the operator must be able to
fix the file from the message alone. Token values never appear in messages or logs.
"""

from __future__ import annotations

import base64
import binascii
import os
import shutil
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

# Bound service-account tokens rotate (kubelet refreshes them well before their ~1 h expiry).
TOKEN_REFRESH_SECONDS = 60.0


# Where deploy/ runs the controller and grants it Leases: the default when not running in a cluster.
DEFAULT_LEASE_NAMESPACE = "edgeagent-system"


def own_namespace(sa_dir: Path = SERVICE_ACCOUNT_DIR, default: str = DEFAULT_LEASE_NAMESPACE) -> str:
    """The namespace this pod runs in (its service account's), else `default`.

    The controller's Role grants Leases only in its own namespace; a fixed `kube-system` default meant a
    controller installed from deploy/ never became leader.
    """
    try:
        value = (sa_dir / "namespace").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return default
    return value or default


class NeedsFallback(Exception):
    """The kubeconfig is valid but uses an auth mechanism only kubernetes_asyncio implements."""


# Where a namespaced command acts when neither -n nor the kubeconfig context names a namespace (as kubectl).
DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True)
class ClusterAccess:
    """Everything needed to talk to one API server; `source` says where it came from, for error messages."""

    server: str
    source: str
    ca_file: str | None = None
    ca_data: str | None = None  # PEM text
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    token: str | None = None
    token_file: str | None = None
    client_cert_file: str | None = None
    client_cert_data: bytes | None = None
    client_key_file: str | None = None
    client_key_data: bytes | None = None
    username: str | None = None
    password: str | None = None
    # The namespace of the context used (kubectl's default for namespaced commands); None when it names none.
    namespace: str | None = None

    @property
    def is_https(self) -> bool:
        return self.server.lower().startswith("https://")

    def __repr__(self) -> str:  # the dataclass default would print the token and password
        return f"ClusterAccess(server={self.server!r}, source={self.source!r})"


def resolve_kubeconfig_path(explicit: str | Path | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The explicit path, else the first existing file of `KUBECONFIG` (a `:`-separated list), else None.

    An explicit path or a KUBECONFIG naming only missing files is an error rather than a silent fall through to
    in-cluster config: the operator asked for a file.
    """
    if explicit:
        path = str(explicit)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"kubeconfig not found: {path}")
        return path
    env = (environ if environ is not None else os.environ).get("KUBECONFIG", "")
    candidates = [p for p in env.split(os.pathsep) if p]
    if not candidates:
        return None
    for candidate in candidates:
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(f"kubeconfig not found: none of the files in KUBECONFIG exist ({env})")


def _named(entries: Any, kind: str, name: str, where: str) -> dict[str, Any]:
    if not isinstance(entries, list):
        raise ValueError(f"{where}: '{kind}s' is missing or not a list")
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(kind)
            if not isinstance(body, dict):
                if body is None:
                    return {}
                raise ValueError(f"{where}: {kind} '{name}' has no '{kind}' mapping")
            return body
    raise ValueError(f"{where}: {kind} '{name}' not found in '{kind}s'")


def _decode_data(value: Any, where: str, field: str) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"{where}: '{field}' must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"{where}: '{field}' is not valid base64: {exc}") from exc


def _existing_file(value: Any, base: Path, where: str, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where}: '{field}' must be a file path")
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = base / path
    if not path.is_file():
        raise FileNotFoundError(f"{where}: '{field}' file not found: {path}")
    return str(path)


def _optional_str(body: Mapping[str, Any], field: str, where: str) -> str | None:
    value = body.get(field)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"{where}: '{field}' must be a string")
    return value


def _yaml_position(exc: yaml.YAMLError) -> str:
    """Where and what, on one line: PyYAML's own text spans five lines with a caret drawing."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or ""
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{where}: {problem}" if problem else where


def load_problem(exc: BaseException, source: object) -> str:
    """One line for a kubeconfig that could not be loaded from `source`, naming it once.

    This module's own errors already name the file; anything else (a certificate the ssl module rejects,
    say) gets the source in front. Newlines are folded: errors are one line.
    """
    text = " ".join(str(exc).split()) or type(exc).__name__
    if text.startswith("kubeconfig"):
        return text
    return f"cannot load kubeconfig {source}: {text}"


def load_kubeconfig(path: str | Path, context_name: str | None = None) -> ClusterAccess:
    """Parse one kubeconfig file with its current context, or `context_name` as kubectl's `--context` picks one;
    raise NeedsFallback for exec / auth-provider users and proxied clusters."""
    where = f"kubeconfig {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"kubeconfig not found: {path}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where}: cannot read: {exc}") from exc
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{where}: not valid YAML{_yaml_position(exc)}") from exc
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: not a kubeconfig (expected a mapping at the top level)")
    base = Path(path).resolve().parent

    contexts = doc.get("contexts")
    if not isinstance(contexts, list) or not contexts:
        raise ValueError(f"{where}: no contexts defined ('contexts' is empty)")
    current = context_name or doc.get("current-context")
    if not current:
        if len(contexts) != 1:
            raise ValueError(f"{where}: 'current-context' is not set and there are {len(contexts)} contexts")
        current = contexts[0].get("name") if isinstance(contexts[0], dict) else None
        if not isinstance(current, str):
            raise ValueError(f"{where}: the only context has no 'name'")
    if not isinstance(current, str):
        raise ValueError(f"{where}: 'current-context' must be a string")
    try:
        context = _named(contexts, "context", current, where)
    except ValueError as exc:
        which = "context" if context_name else "current-context"
        raise ValueError(f"{where}: {which} '{current}' not found in 'contexts'") from exc

    cluster_name = context.get("cluster")
    if not isinstance(cluster_name, str) or not cluster_name:
        raise ValueError(f"{where}: context '{current}' has no 'cluster'")
    cluster = _named(doc.get("clusters"), "cluster", cluster_name, where)
    cwhere = f"{where} (cluster '{cluster_name}')"
    server = _optional_str(cluster, "server", cwhere)
    if not server:
        raise ValueError(f"{cwhere}: 'server' is missing")
    if not server.lower().startswith(("http://", "https://")):
        raise ValueError(f"{cwhere}: 'server' must start with http:// or https://, got {server!r}")
    if cluster.get("proxy-url"):
        raise NeedsFallback(f"{cwhere}: 'proxy-url'")

    user: dict[str, Any] = {}
    user_name = context.get("user")
    uwhere = where
    if user_name:
        if not isinstance(user_name, str):
            raise ValueError(f"{where}: context '{current}' 'user' must be a string")
        user = _named(doc.get("users"), "user", user_name, where)
        uwhere = f"{where} (user '{user_name}')"
    for plugin in ("exec", "auth-provider"):
        if user.get(plugin):
            raise NeedsFallback(f"{uwhere}: '{plugin}'")

    ca_data = None
    ca_file = None
    if cluster.get("certificate-authority-data"):
        raw = _decode_data(cluster["certificate-authority-data"], cwhere, "certificate-authority-data")
        try:
            ca_data = raw.decode("ascii")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{cwhere}: 'certificate-authority-data' is not PEM text") from exc
    elif cluster.get("certificate-authority"):
        ca_file = _existing_file(cluster["certificate-authority"], base, cwhere, "certificate-authority")
    insecure = cluster.get("insecure-skip-tls-verify", False)
    if not isinstance(insecure, bool):
        raise ValueError(f"{cwhere}: 'insecure-skip-tls-verify' must be true or false")

    cert_file = cert_data = key_file = key_data = None
    if user.get("client-certificate-data"):
        cert_data = _decode_data(user["client-certificate-data"], uwhere, "client-certificate-data")
    elif user.get("client-certificate"):
        cert_file = _existing_file(user["client-certificate"], base, uwhere, "client-certificate")
    if user.get("client-key-data"):
        key_data = _decode_data(user["client-key-data"], uwhere, "client-key-data")
    elif user.get("client-key"):
        key_file = _existing_file(user["client-key"], base, uwhere, "client-key")
    has_cert = cert_file is not None or cert_data is not None
    has_key = key_file is not None or key_data is not None
    if has_cert != has_key:
        missing = "client-key" if has_cert else "client-certificate"
        raise ValueError(f"{uwhere}: '{missing}' (or '{missing}-data') is missing; both certificate and key are needed")

    token_file = None
    if user.get("tokenFile"):
        token_file = _existing_file(user["tokenFile"], base, uwhere, "tokenFile")
    username = _optional_str(user, "username", uwhere)
    password = _optional_str(user, "password", uwhere)
    if password is not None and username is None:
        raise ValueError(f"{uwhere}: 'password' is set without 'username'")

    return ClusterAccess(
        server=server.rstrip("/"),
        source=where,
        ca_file=ca_file,
        ca_data=ca_data,
        insecure_skip_tls_verify=insecure,
        tls_server_name=_optional_str(cluster, "tls-server-name", cwhere),
        token=_optional_str(user, "token", uwhere),
        token_file=token_file,
        client_cert_file=cert_file,
        client_cert_data=cert_data,
        client_key_file=key_file,
        client_key_data=key_data,
        username=username,
        password=password,
        namespace=_optional_str(context, "namespace", f"{where} (context '{current}')") or None,
    )


def context_namespace(path: str | Path, context_name: str | None = None) -> str | None:
    """The namespace a kubeconfig's context names (its current one, or `context_name`), for kubeconfigs read by
    the kubernetes_asyncio fallback (which does not say); None when it names none or cannot be read."""
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        name = context_name or doc.get("current-context")
        for entry in doc.get("contexts") or []:
            if isinstance(entry, dict) and entry.get("name") == name:
                namespace = (entry.get("context") or {}).get("namespace")
                return namespace if isinstance(namespace, str) and namespace else None
    except (OSError, ValueError, AttributeError, yaml.YAMLError):
        return None
    return None


def load_incluster(environ: Mapping[str, str] | None = None, sa_dir: Path = SERVICE_ACCOUNT_DIR) -> ClusterAccess:
    """The pod's service account, as client-go's rest.InClusterConfig does it."""
    env = environ if environ is not None else os.environ
    host = env.get("KUBERNETES_SERVICE_HOST", "")
    port = env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise FileNotFoundError(
            "no kubeconfig given (--kubeconfig or KUBECONFIG) and not running in a cluster: "
            "KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT are not set"
        )
    token_file = sa_dir / "token"
    ca_file = sa_dir / "ca.crt"
    for needed in (token_file, ca_file):
        if not needed.is_file():
            raise FileNotFoundError(f"in-cluster config: service account file not found: {needed}")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6 service address
    return ClusterAccess(
        server=f"https://{host}:{port}",
        source="in-cluster service account",
        ca_file=str(ca_file),
        token_file=str(token_file),
    )


FileSignature = tuple[int, int, int, int] | None


def file_signature(path: str) -> FileSignature:
    """What changes when a credential file is rotated: the kubelet swaps a symlink (`os.stat` follows it to a
    new inode), a projected volume swaps a directory, `cp` rewrites in place (mtime and size move)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


class FileWatch:
    """Tells whether any of some files changed since the last look, looking at most every `interval` seconds.

    A `stat` per API call would be cheap, but the controller makes thousands of calls a second at scale; a
    rotation noticed within a second is plenty (the old credential stays valid for a while after rotation).
    """

    def __init__(self, paths: list[str], *, interval: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._paths = paths
        self._interval = interval
        self._clock = clock
        self._checked_at = clock()
        self._seen = self._signatures()

    def _signatures(self) -> list[FileSignature]:
        return [file_signature(p) for p in self._paths]

    def changed(self, *, force: bool = False) -> bool:
        if not self._paths:
            return False
        now = self._clock()
        if not force and now - self._checked_at < self._interval:
            return False
        self._checked_at = now
        current = self._signatures()
        if current == self._seen:
            return False
        self._seen = current
        return True


class TokenSource:
    """The bearer token to send, re-read from `token_file` when the file changes (and at least every `refresh`
    seconds), since bound service-account tokens rotate hourly and are replaced by an atomic swap.

    A failed re-read keeps the last good token (the kubelet replaces the file atomically, but a transient error
    must not take the link down); the first read must succeed.
    """

    def __init__(
        self,
        access: ClusterAccess,
        *,
        refresh: float = TOKEN_REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        check_interval: float = 1.0,
    ) -> None:
        self._file = access.token_file
        self._static = access.token
        self._source = access.source
        self._refresh = refresh
        self._clock = clock
        self._value: str | None = None
        self._read_at = 0.0
        self._watch = FileWatch([self._file] if self._file else [], interval=check_interval, clock=clock)
        if self._file is not None:
            self._value = self._read(first=True)
            self._read_at = clock()

    def _read(self, *, first: bool) -> str | None:
        assert self._file is not None
        try:
            value = Path(self._file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            if first:
                raise ValueError(f"{self._source}: cannot read token file {self._file}: {exc}") from exc
            return self._value
        if not value:
            if first:
                raise ValueError(f"{self._source}: token file {self._file} is empty")
            return self._value
        return value

    def reload(self) -> bool:
        """Re-read the file now (the server rejected the token); True when the token changed."""
        if self._file is None:
            return False
        before = self._value
        self._value = self._read(first=False)
        self._read_at = self._clock()
        self._watch.changed(force=True)
        return self._value != before

    def get(self) -> str | None:
        if self._file is not None and (self._watch.changed() or self._clock() - self._read_at >= self._refresh):
            self._value = self._read(first=False)
            self._read_at = self._clock()
        # A kubeconfig's tokenFile, once read, wins over its static token (client-go's AuthInfo doc).
        return self._value or self._static

    def __repr__(self) -> str:
        return f"TokenSource(file={self._file!r})"


def certificate_files(access: ClusterAccess) -> list[str]:
    """The client certificate and key files to watch for rotation (inline `*-data` never changes)."""
    return [p for p in (access.client_cert_file, access.client_key_file) if p is not None]


def _load_client_cert(ctx: ssl.SSLContext, access: ClusterAccess) -> None:
    """load_cert_chain only takes paths: *-data goes to 0600 files in a private dir, removed right after loading.

    The context keeps the key in memory once loaded, so the files live for milliseconds rather than for the
    client's lifetime.
    """
    tmpdir = None
    try:
        cert_path, key_path = access.client_cert_file, access.client_key_file
        if access.client_cert_data is not None or access.client_key_data is not None:
            tmpdir = tempfile.mkdtemp(prefix="edgeagent-kube-")  # mode 0700
            if access.client_cert_data is not None:
                cert_path = _write_private(tmpdir, "client.crt", access.client_cert_data)
            if access.client_key_data is not None:
                key_path = _write_private(tmpdir, "client.key", access.client_key_data)
        assert cert_path is not None and key_path is not None
        try:
            ctx.load_cert_chain(cert_path, key_path)
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(
                f"{access.source}: cannot load 'client-certificate' / 'client-key': {exc}"
            ) from exc
    finally:
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)


def _write_private(directory: str, name: str, data: bytes) -> str:
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return path


def ssl_context(access: ClusterAccess) -> ssl.SSLContext | None:
    """The TLS context for an https server (None for plain http), with clear errors for unusable material."""
    if not access.is_https:
        return None
    if access.ca_file is not None or access.ca_data is not None:
        # Only the kubeconfig's CA is trusted then, not the system store (as client-go does).
        field = "certificate-authority-data" if access.ca_data is not None else "certificate-authority"
        try:
            ctx = ssl.create_default_context(cafile=access.ca_file, cadata=access.ca_data)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise ValueError(f"{access.source}: cannot load '{field}': {exc}") from exc
    else:
        ctx = ssl.create_default_context()
    if access.insecure_skip_tls_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if access.client_cert_file is not None or access.client_cert_data is not None:
        _load_client_cert(ctx, access)
    return ctx
