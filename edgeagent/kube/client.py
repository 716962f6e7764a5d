"""Raw-JSON access to a Kubernetes API server.

Objects stay plain dicts: generated model objects cost a lot of CPU and memory per pod and would be
converted back to JSON for the cache anyway. Requests go over one aiohttp session per client, set up by
the native loader in `kubeconfig.py` for the common cases (tokens, token files, client certificates, basic
auth, in-cluster). Importing kubernetes_asyncio costs ~35 MiB of RSS (its whole generated client comes
with `kubernetes_asyncio.config`), so it is imported only for kubeconfigs the native loader leaves to it
(`exec` and `auth-provider` users, `proxy-url`), and then its ApiClient is the transport, so that exec
plugins keep refreshing their tokens.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from edgeagent import __version__, extras, log

# The client raises these; they are defined (with the rest of the tree) in errors.py.
from edgeagent.kube.errors import KubeError as KubeError
from edgeagent.kube.errors import KubeUnreachable as KubeUnreachable
from edgeagent.kube.kubeconfig import (
    ClusterAccess,
    FileWatch,
    NeedsFallback,
    TokenSource,
    certificate_files,
    context_namespace,
    load_incluster,
    load_kubeconfig,
    resolve_kubeconfig_path,
    ssl_context,
)

JSON = dict[str, Any]

CONTENT_JSON = "application/json"
CONTENT_MERGE_PATCH = "application/merge-patch+json"
CONTENT_STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
CONTENT_JSON_PATCH = "application/json-patch+json"

# aiohttp's default; the controller's workers and informers share one pool, and waiting for a free
# connection counts against the call's deadline, so it must not be the bottleneck.
POOL_LIMIT = 100

# Far above any real object (etcd refuses values over ~1.5 MiB); a stream without newlines is broken.
_MAX_WATCH_LINE = 64 * 1024 * 1024

# A retired connection pool (credentials rotated) is closed this long after its last use could have begun:
# long enough for a running watch (timeoutSeconds is at most a few minutes) to end by itself.
RETIRED_POOL_SECONDS = 600.0

_log = log.get("edgeagent.kube.client")


def user_agent(component: str, detail: str | None = None) -> str:
    """`edgeagent-agent/0.1.0 (edge-1)`: API server logs and audit tell our components (and nodes) apart."""
    agent = f"edgeagent-{component}/{__version__}"
    return f"{agent} ({detail})" if detail else agent


DEFAULT_USER_AGENT = user_agent("client")


@dataclass(frozen=True)
class Timeouts:
    """Per-call limits: a partition often looks like a connection that hangs, never like an error."""

    connect: float = 3.0
    request: float = 10.0


def _failure(exc: BaseException, timeout: aiohttp.ClientTimeout) -> str:
    """What went wrong, in words: a timeout's own text is empty (`TimeoutError: ` said nothing), so it says
    how long was waited, and for what."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError) and timeout.sock_connect:
        return f"no connection within {timeout.sock_connect:g} s"
    if isinstance(exc, TimeoutError):
        waited = timeout.total or timeout.sock_read
        return f"no answer within {waited:g} s" if waited else f"timed out ({type(exc).__name__})"
    return f"{type(exc).__name__}: {exc}"


class CredentialHealth:
    """Whether the API server currently rejects our credentials: a `401`, and only a `401`.

    A rejected credential looks like a working link (the server answers), so without this the agent would
    report itself ready while its cache is frozen. One log line per episode, not one per call: a rotated
    certificate that is not picked up would otherwise flood the journal.

    A `403` says the credentials were accepted and one action was refused (RBAC, the Node authorizer, an
    admission plugin): from Kubernetes 1.36 a kubelet identity gets one for any pod of another node. Whoever
    made that call decides what it means; it is never an alarm about the credentials.
    """

    def __init__(self) -> None:
        self.rejected = False
        self.last_error = ""
        self.since: float | None = None
        self.rejections = 0  # responses that rejected us, for a counter metric
        self.episodes = 0
        self._listeners: list[Callable[[bool], None]] = []

    def add_listener(self, fn: Callable[[bool], None]) -> None:
        self._listeners.append(fn)

    def observe(self, method: str, path: str, code: int, message: str) -> None:
        if code == 401:
            self.rejections += 1
            self.last_error = f"{code}: {message}"
            if not self.rejected:
                self.rejected, self.since = True, time.time()
                self.episodes += 1
                _log.warning("credentials_rejected", code=code, method=method, path=path,
                             error=message)
                self._notify(True)
        elif 200 <= code <= 299 and self.rejected:
            self.rejected, self.since = False, time.time()
            _log.info("credentials_accepted_again")
            self._notify(False)

    def _notify(self, rejected: bool) -> None:
        for fn in self._listeners:
            try:
                fn(rejected)
            except Exception:
                _log.exception("credential_health_listener_failed")


# Distinct `Warning` texts logged per client; past this many a server that varies them (a name in each) would
# grow the set without bound, so further new ones are counted, not logged (one line says so).
MAX_LOGGED_WARNINGS = 100
# One warning-value: code, agent, quoted text (backslash escapes), an optional quoted date; then a comma or the end.
_WARNING_VALUE = re.compile(r'\s*\d{3}\s+\S+\s+"((?:[^"\\]|\\.)*)"(?:\s+"[^"]*")?\s*(?:,|$)')
_ESCAPED = re.compile(r"\\(.)")


def warning_texts(values: list[str]) -> list[str]:
    """The texts of `Warning` response headers (RFC 7234 `299 - "text"`, several per header comma-separated).

    Kubernetes sends deprecations and field-validation warnings this way (`kubectl` prints them). A value that
    is not in that form is kept whole rather than dropped: it is still the server telling us something.
    """
    texts: list[str] = []
    for value in values:
        pos = 0
        while pos < len(value.rstrip()):
            match = _WARNING_VALUE.match(value, pos)
            if match is None:
                texts.append(value[pos:].strip(" ,"))
                break
            texts.append(_ESCAPED.sub(r"\1", match.group(1)))
            pos = match.end()
    return texts


class WarningLog:
    """Logs each distinct `Warning` header text the API server sends, once, with the call it came with.

    A deprecated API or a field the server drops is announced only this way: unlogged, a deprecation would go
    unnoticed until the removal breaks the call.
    """

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.unlogged = 0

    def observe(self, method: str, path: str, values: list[str]) -> None:
        for text in warning_texts(values):
            if text in self.seen:
                continue
            if len(self.seen) >= MAX_LOGGED_WARNINGS:
                if self.unlogged == 0:
                    _log.warning("api_server_warnings_not_logged", limit=MAX_LOGGED_WARNINGS,
                                 hint="further distinct Warning headers of the API server are not logged")
                self.unlogged += 1
                continue
            self.seen.add(text)
            _log.warning("api_server_warning", warning=text, method=method, path=path)


def _status_from_body(raw: bytes) -> JSON | None:
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


Params = list[tuple[str, str]]


class _Transport(Protocol):
    """Sends one request and hands back the unread response; the caller reads and releases it."""

    @property
    def host(self) -> str: ...

    async def send(self, method: str, path: str, params: Params, headers: dict[str, str], body: Any,
                   timeout: aiohttp.ClientTimeout) -> aiohttp.ClientResponse: ...

    async def reload_credentials(self) -> bool:
        """Re-read credential files now (the server rejected us); True when a retry may succeed."""
        ...

    def credential_files(self) -> list[str]:
        """The token, certificate and key files this transport reads its credentials from."""
        ...

    async def close(self) -> None: ...


class _NativeTransport:
    """aiohttp straight to the API server, with credentials from the native loader.

    Credential files are watched: a rotated token is simply sent from the next call on; a rotated client
    certificate needs new TLS connections, so a new pool is opened for new calls while the old one keeps
    serving what already runs on it (a watch is not dropped just because the certificate file changed) and is
    closed later. On a 401 the caller asks for a reload before failing, once.
    """

    def __init__(self, access: ClusterAccess, tls: Any, tokens: TokenSource | None, agent: str,
                 *, check_interval: float = 1.0) -> None:
        self._access = access
        self._host = access.server
        self._tokens = tokens
        self._agent = agent
        self._basic: str | None = None
        if access.username is not None and tokens is None:
            pair = f"{access.username}:{access.password or ''}".encode()
            self._basic = "Basic " + base64.b64encode(pair).decode("ascii")
        self._extra: dict[str, Any] = {}
        if access.tls_server_name:
            self._extra["server_hostname"] = access.tls_server_name
        self._certs = FileWatch(certificate_files(access), interval=check_interval)
        self._session = self._new_session(tls)
        self._retired: list[tuple[float, aiohttp.ClientSession]] = []
        self.certificate_reloads = 0

    def _new_session(self, tls: Any) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=POOL_LIMIT, ssl=tls if tls is not None else True),
            cookie_jar=aiohttp.DummyCookieJar(),
            headers={"User-Agent": self._agent},
        )

    @property
    def host(self) -> str:
        return self._host

    async def _rotate_certificate(self) -> bool:
        """A new pool with the certificate now on disk; a half-written file keeps the old one (tried again)."""
        try:
            tls = await asyncio.to_thread(ssl_context, self._access)
        except (ValueError, OSError) as exc:
            _log.warning("client_certificate_not_loadable_yet",
                         error=str(exc))
            return False
        self._retired.append((time.monotonic(), self._session))
        self._session = self._new_session(tls)
        self.certificate_reloads += 1
        _log.info("client_certificate_reloaded", source=self._access.source)
        return True

    async def _close_retired(self) -> None:
        now = time.monotonic()
        while self._retired and now - self._retired[0][0] >= RETIRED_POOL_SECONDS:
            _, session = self._retired.pop(0)
            await session.close()

    def credential_files(self) -> list[str]:
        token_file = self._access.token_file if self._tokens is not None else None
        return [*([token_file] if token_file else []), *certificate_files(self._access)]

    async def reload_credentials(self) -> bool:
        token_changed = self._tokens.reload() if self._tokens is not None else False
        cert_changed = self._certs.changed(force=True) and await self._rotate_certificate()
        # Retry even when nothing changed on disk: the server may have accepted a rotated credential late.
        return token_changed or cert_changed or self._tokens is not None or bool(certificate_files(self._access))

    async def send(self, method: str, path: str, params: Params, headers: dict[str, str], body: Any,
                   timeout: aiohttp.ClientTimeout) -> aiohttp.ClientResponse:
        if self._certs.changed():
            await self._rotate_certificate()
        if self._retired:
            await self._close_retired()
        if self._tokens is not None:
            token = self._tokens.get()
            if token:
                headers["Authorization"] = f"Bearer {token}"
        elif self._basic is not None:
            headers["Authorization"] = self._basic
        if body is None or isinstance(body, bytes):
            data = body
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = json.dumps(body).encode()
        return await self._session.request(
            method, self._host + path, params=params, headers=headers, data=data, timeout=timeout,
            **self._extra,
        )

    async def close(self) -> None:
        for _, session in self._retired:
            await session.close()
        self._retired.clear()
        await self._session.close()


class _ApiClientTransport:
    """kubernetes_asyncio's ApiClient, for kubeconfigs only it understands (exec plugins refresh tokens)."""

    def __init__(self, api_client: Any) -> None:
        self._api = api_client

    @property
    def host(self) -> str:
        return str(self._api.configuration.host)

    async def reload_credentials(self) -> bool:
        return False  # exec plugins and auth-providers refresh their own tokens inside kubernetes_asyncio

    def credential_files(self) -> list[str]:
        return []

    async def send(self, method: str, path: str, params: Params, headers: dict[str, str], body: Any,
                   timeout: aiohttp.ClientTimeout) -> aiohttp.ClientResponse:
        response: aiohttp.ClientResponse = await self._api.call_api(
            path,
            method,
            query_params=params,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout,
        )
        return response

    async def close(self) -> None:
        await self._api.close()


class _NotConnected:
    """For a KubeClient built without a connection (unit tests of code that never reaches the server)."""

    host = ""

    async def send(self, method: str, path: str, params: Params, headers: dict[str, str], body: Any,
                   timeout: aiohttp.ClientTimeout) -> aiohttp.ClientResponse:
        raise KubeUnreachable(f"{method} {path}: KubeClient was built without a connection (use connect())")

    async def reload_credentials(self) -> bool:
        return False

    def credential_files(self) -> list[str]:
        return []

    async def close(self) -> None:
        return None


def _native_parts(path: str | None, context: str | None = None) -> tuple[ClusterAccess, Any, TokenSource | None]:
    """File reads and TLS setup, off the event loop."""
    if context and not path:
        raise ValueError(f"--context {context}: no kubeconfig to pick it from (give --kubeconfig or KUBECONFIG)")
    access = load_kubeconfig(path, context) if path else load_incluster()
    tls = ssl_context(access)
    tokens = TokenSource(access) if access.token or access.token_file else None
    return access, tls, tokens


async def _fallback_api_client(path: str, agent: str, context: str | None = None) -> Any:
    """Imported here, not at module level, so that a plain kubeconfig never pays for kubernetes_asyncio."""
    from kubernetes_asyncio import client as k8s_client
    from kubernetes_asyncio import config as k8s_config

    configuration = k8s_client.Configuration()
    await k8s_config.load_kube_config(config_file=path, context=context, client_configuration=configuration,
                                      persist_config=False)
    api = k8s_client.ApiClient(configuration)
    api.user_agent = agent
    return api


class KubeClient:
    """One connection pool to one API server; every call has a deadline."""

    def __init__(self, api_client: Any = None, timeouts: Timeouts | None = None, *,
                 transport: _Transport | None = None) -> None:
        if transport is None:
            transport = _ApiClientTransport(api_client) if api_client is not None else _NotConnected()
        self._transport: _Transport = transport
        self.timeouts = timeouts or Timeouts()
        self.credentials = CredentialHealth()
        self.warnings = WarningLog()
        # The kubeconfig context's namespace (None: it names none, or in-cluster): where a command acts when
        # the user names no namespace, as kubectl does.
        self.namespace: str | None = None

    @property
    def host(self) -> str:
        return self._transport.host

    def credential_files(self) -> list[str]:
        """Files the credentials come from (a tokenFile, a client certificate and key): for a caller that wants
        to notice a rotation while no call is being made."""
        return self._transport.credential_files()

    @property
    def uses_kubernetes_asyncio(self) -> bool:
        """True when the kubeconfig needed the kubernetes_asyncio fallback (exec / auth-provider)."""
        return isinstance(self._transport, _ApiClientTransport)

    @classmethod
    async def connect(cls, kubeconfig: str | Path | None = None, timeouts: Timeouts | None = None, *,
                      agent: str = DEFAULT_USER_AGENT, credential_check_interval: float = 1.0,
                      context: str | None = None) -> KubeClient:
        """Kubeconfig file if given (or the first existing file in `KUBECONFIG`), else the in-cluster account.
        `context` picks a context of the kubeconfig instead of its current one (kubectl's `--context`).

        `agent` is the User-Agent (see `user_agent()`). Raises FileNotFoundError / ValueError naming the
        kubeconfig and the field when it cannot be used.
        """
        path = await asyncio.to_thread(resolve_kubeconfig_path, kubeconfig)
        try:
            access, tls, tokens = await asyncio.to_thread(_native_parts, path, context)
        except NeedsFallback as why:
            assert path is not None
            extras.require("exec", str(why))  # the lean install leaves kubernetes_asyncio out: say which extra
            _log.info("kubeconfig_handled_by_kubernetes_asyncio", reason=str(why))
            client = cls(await _fallback_api_client(path, agent, context), timeouts)
            client.namespace = await asyncio.to_thread(context_namespace, path, context)
            return client
        transport = _NativeTransport(access, tls, tokens, agent, check_interval=credential_check_interval)
        client = cls(timeouts=timeouts, transport=transport)
        client.namespace = access.namespace
        return client

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None,
        body: Any,
        content_type: str | None,
        timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": CONTENT_JSON}
        if content_type:
            headers["Content-Type"] = content_type
        params = [(k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (query or {}).items()]
        try:
            return await self._transport.send(method, path, params, headers, body, timeout)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise KubeUnreachable(f"{method} {path}: {_failure(exc, timeout)}") from exc

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | None = None,
    ) -> JSON:
        """One call; returns the decoded JSON body, raises KubeError (answered) or KubeUnreachable."""
        total = timeout if timeout is not None else self.timeouts.request
        client_timeout = aiohttp.ClientTimeout(total=total, sock_connect=min(total, self.timeouts.connect))
        for attempt in (1, 2):
            response = await self._send(
                method, path, query=query, body=body, content_type=content_type, timeout=client_timeout
            )
            try:
                raw = await response.read()
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                raise KubeUnreachable(f"{method} {path}: reading response: {_failure(exc, client_timeout)}") from exc
            finally:
                response.release()
            self.warnings.observe(method, path, response.headers.getall("Warning", []))
            if response.status == 401 and attempt == 1 and await self._transport.reload_credentials():
                continue  # rotated credentials on disk: once, before failing
            break
        if not 200 <= response.status <= 299:
            error = KubeError(response.status, _status_from_body(raw))
            self.credentials.observe(method, path, response.status, error.message)
            raise error
        self.credentials.observe(method, path, response.status, "")
        try:
            decoded = json.loads(raw) if raw else {}
        except ValueError as exc:
            raise KubeError(response.status, message=f"invalid JSON from API server: {exc}") from exc
        return decoded if isinstance(decoded, dict) else {"value": decoded}

    async def get(self, path: str, *, query: Mapping[str, str | int | bool] | None = None,
                  timeout: float | None = None) -> JSON:
        return await self.request("GET", path, query=query, timeout=timeout)

    async def delete(self, path: str, options: JSON | None = None, *, timeout: float | None = None) -> JSON:
        """The body is always a typed `DeleteOptions`: audit logs show `requestObject: null` for an untyped one,
        and then nobody can check afterwards which UID precondition a delete carried."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", **(options or {})}
        return await self.request("DELETE", path, body=body, content_type=CONTENT_JSON, timeout=timeout)

    async def patch(self, path: str, patch: Any, content_type: str = CONTENT_STRATEGIC_MERGE_PATCH, *,
                    timeout: float | None = None) -> JSON:
        return await self.request("PATCH", path, body=patch, content_type=content_type, timeout=timeout)

    async def create(self, path: str, obj: JSON, *, timeout: float | None = None) -> JSON:
        return await self.request("POST", path, body=obj, content_type=CONTENT_JSON, timeout=timeout)

    async def replace(self, path: str, obj: JSON, *, timeout: float | None = None) -> JSON:
        return await self.request("PUT", path, body=obj, content_type=CONTENT_JSON, timeout=timeout)

    async def watch(
        self,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        idle_timeout: float = 90.0,
        on_open: Callable[[], None] | None = None,
    ) -> AsyncIterator[JSON]:
        """Yield watch events (`{"type", "object"}`) until the server ends the stream.

        `idle_timeout` bounds the silence between two lines, so that a partitioned link is noticed;
        ask for bookmarks and a `timeoutSeconds` below it. An HTTP error on connect raises KubeError;
        an in-stream ERROR event is yielded as is, for the caller to decide (410 means relist).
        `on_open` is called once the server accepted the watch: with bookmarks a minute apart, that is
        the first sign that a resumed stream works.
        """
        params: dict[str, str | int | bool] = dict(query or {})
        params["watch"] = "true"
        client_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.timeouts.connect, sock_read=idle_timeout
        )
        response = await self._send("GET", path, query=params, body=None, content_type=None,
                                    timeout=client_timeout)
        if response.status == 401 and await self._transport.reload_credentials():
            response.release()  # rotated credentials on disk: once, before failing
            response = await self._send("GET", path, query=params, body=None, content_type=None,
                                        timeout=client_timeout)
        self.warnings.observe("GET", path, response.headers.getall("Warning", []))
        try:
            if not 200 <= response.status <= 299:
                raw = await response.read()
                error = KubeError(response.status, _status_from_body(raw))
                self.credentials.observe("GET", path, response.status, error.message)
                raise error
            self.credentials.observe("GET", path, response.status, "")
            if on_open is not None:
                on_open()
            # Chunks split on b"\n" by hand: aiohttp's readline() raises LineTooLong past its buffer limit, and a
            # large object must not break the stream.
            buffer = bytearray()
            scanned = 0
            while True:
                try:
                    chunk = await response.content.readany()
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    raise KubeUnreachable(f"watch {path}: {type(exc).__name__}: {exc}") from exc
                if not chunk:
                    return
                buffer += chunk
                start = 0
                while (end := buffer.find(b"\n", max(start, scanned))) >= 0:
                    line = bytes(buffer[start:end]).strip()
                    start = end + 1
                    if not line:
                        continue
                    try:
                        event = json.loads(line)
                    except ValueError as exc:
                        raise KubeUnreachable(f"watch {path}: undecodable event: {exc}") from exc
                    if isinstance(event, dict):
                        yield event
                del buffer[:start]
                scanned = len(buffer)
                if scanned > _MAX_WATCH_LINE:
                    raise KubeUnreachable(f"watch {path}: event longer than {_MAX_WATCH_LINE} bytes")
        finally:
            response.release()
