"""Raw-JSON access to a Kubernetes API server.

kubernetes_asyncio does the parts that are easy to get wrong (kubeconfig and in-cluster loading,
bearer tokens, client certificates, TLS); we ask it for the raw aiohttp response so that objects stay
plain dicts. Generated model objects cost a lot of CPU and memory per pod and would be converted back
to JSON for the cache anyway.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

JSON = dict[str, Any]

CONTENT_JSON = "application/json"
CONTENT_MERGE_PATCH = "application/merge-patch+json"
CONTENT_STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
CONTENT_JSON_PATCH = "application/json-patch+json"


class KubeError(Exception):
    """A failed API call, carrying the server's `Status` object when it sent one."""

    def __init__(self, code: int, status: JSON | None = None, message: str | None = None) -> None:
        self.code = code
        self.status = status or {}
        self.reason: str = str(self.status.get("reason") or "")
        self.message: str = message or str(self.status.get("message") or f"HTTP {code}")
        super().__init__(f"{code} {self.reason}: {self.message}" if self.reason else f"{code}: {self.message}")


class KubeUnreachable(Exception):
    """The API server could not be reached or did not answer in time (as opposed to answering with an error)."""


@dataclass(frozen=True)
class Timeouts:
    """Per-call limits: a partition often looks like a connection that hangs, never like an error."""

    connect: float = 3.0
    request: float = 10.0


def _status_from_body(raw: bytes) -> JSON | None:
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


class KubeClient:
    """One connection pool to one API server; every call has a deadline."""

    def __init__(self, api_client: Any, timeouts: Timeouts | None = None) -> None:
        self._api = api_client
        self.timeouts = timeouts or Timeouts()

    @property
    def host(self) -> str:
        return str(self._api.configuration.host)

    @classmethod
    async def connect(cls, kubeconfig: str | Path | None = None, timeouts: Timeouts | None = None) -> KubeClient:
        """Kubeconfig file if given (or `KUBECONFIG`), else the in-cluster service account."""
        path = str(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG")
        configuration = k8s_client.Configuration()
        if path:
            if not await asyncio.to_thread(os.path.isfile, path):
                raise FileNotFoundError(f"kubeconfig not found: {path}")
            await k8s_config.load_kube_config(
                config_file=path, client_configuration=configuration, persist_config=False
            )
        else:
            try:
                k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            except k8s_config.ConfigException as exc:
                raise FileNotFoundError(
                    "no kubeconfig given (--kubeconfig or KUBECONFIG) and not running in a cluster: "
                    f"{exc}"
                ) from exc
        return cls(k8s_client.ApiClient(configuration), timeouts)

    async def close(self) -> None:
        await self._api.close()

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
        except (aiohttp.ClientConnectionError, TimeoutError, OSError) as exc:
            raise KubeUnreachable(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        return response

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
        response = await self._send(
            method, path, query=query, body=body, content_type=content_type, timeout=client_timeout
        )
        try:
            raw = await response.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise KubeUnreachable(f"{method} {path}: reading response: {exc}") from exc
        finally:
            response.release()
        if not 200 <= response.status <= 299:
            raise KubeError(response.status, _status_from_body(raw))
        try:
            decoded = json.loads(raw) if raw else {}
        except ValueError as exc:
            raise KubeError(response.status, message=f"invalid JSON from API server: {exc}") from exc
        return decoded if isinstance(decoded, dict) else {"value": decoded}

    async def get(self, path: str, *, query: Mapping[str, str | int | bool] | None = None,
                  timeout: float | None = None) -> JSON:
        return await self.request("GET", path, query=query, timeout=timeout)

    async def delete(self, path: str, options: JSON | None = None, *, timeout: float | None = None) -> JSON:
        return await self.request("DELETE", path, body=options, content_type=CONTENT_JSON, timeout=timeout)

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
    ) -> AsyncIterator[JSON]:
        """Yield watch events (`{"type", "object"}`) until the server ends the stream.

        `idle_timeout` bounds the silence between two lines, so that a partitioned link is noticed;
        ask for bookmarks and a `timeoutSeconds` below it. An HTTP error on connect raises KubeError;
        an in-stream ERROR event is yielded as is, for the caller to decide (410 means relist).
        """
        params: dict[str, str | int | bool] = dict(query or {})
        params["watch"] = "true"
        client_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.timeouts.connect, sock_read=idle_timeout
        )
        response = await self._send("GET", path, query=params, body=None, content_type=None,
                                    timeout=client_timeout)
        try:
            if not 200 <= response.status <= 299:
                raw = await response.read()
                raise KubeError(response.status, _status_from_body(raw))
            buffer = b""
            while True:
                try:
                    chunk = await response.content.readline()
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    raise KubeUnreachable(f"watch {path}: {type(exc).__name__}: {exc}") from exc
                if not chunk:
                    return
                buffer += chunk
                if not buffer.endswith(b"\n"):
                    continue
                line, buffer = buffer.strip(), b""
                if not line:
                    continue
                try:
                    event = json.loads(line)
                except ValueError as exc:
                    raise KubeUnreachable(f"watch {path}: undecodable event: {exc}") from exc
                if isinstance(event, dict):
                    yield event
        finally:
            response.release()
