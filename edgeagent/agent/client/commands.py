"""`edgeagent pods | upgrade NS/NAME | upgrades [--cancel ID]`: talk to the local agent over HTTP.

Tables for people, `--json` for scripts (the agent's own JSON, unchanged). Exit 0 when the agent did
what was asked (an upgrade queued for later counts), 1 otherwise, with one line on stderr.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import aiohttp

from edgeagent.agent.api.token_file import read_token_file
from edgeagent.config import ClientConfig
from edgeagent.contract import CONDITION_POD_NEED_UPGRADE, LABEL_REVISION_HASH
from edgeagent.kube.objects import get_condition, is_pod_ready, labels_of, meta

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

UPGRADES_PATH = "/openyurt.io/v1/upgrades"

JSON = dict[str, Any]


class ClientError(Exception):
    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def _headers(cfg: ClientConfig) -> dict[str, str]:
    headers = {"Accept": "application/json"}
    if cfg.token_file is not None:
        try:
            headers["Authorization"] = f"Bearer {read_token_file(cfg.token_file)}"
        except (OSError, ValueError) as exc:
            raise ClientError(f"--token-file: {exc}", EXIT_USAGE) from exc
    return headers


async def _request(cfg: ClientConfig, method: str, path: str, payload: JSON | None = None) -> tuple[int, Any]:
    url = cfg.agent.rstrip("/") + path
    headers = _headers(cfg)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=cfg.timeout)) as session, \
                session.request(method, url, headers=headers, json=payload) as resp:
            raw = await resp.read()
            status = resp.status
    except (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError, ValueError) as exc:
        raise ClientError(f"--agent {cfg.agent!r} is not a valid URL", EXIT_USAGE) from exc
    except aiohttp.ClientSSLError as exc:  # before ClientConnectionError: its errno would say "not permitted"
        raise ClientError(_tls_problem(cfg.agent, exc)) from exc
    except (aiohttp.ClientConnectionError, OSError) as exc:
        raise ClientError(f"cannot reach the agent at {cfg.agent} ({_reason(exc)}); is `edgeagent run` "
                          "running there?") from exc
    except TimeoutError as exc:
        raise ClientError(f"the agent at {cfg.agent} did not answer within {cfg.timeout:g}s") from exc
    try:
        body: Any = json.loads(raw) if raw else None
    except ValueError:
        body = raw.decode(errors="replace").strip()
    return status, body


def _tls_problem(agent: str, exc: aiohttp.ClientSSLError) -> str:
    """An https:// address whose server answered in plain HTTP (the agent's default) says so."""
    cause = getattr(exc, "os_error", None) or exc
    reason = str(getattr(cause, "reason", "") or cause)
    if "WRONG_VERSION_NUMBER" in reason.upper() or "record layer failure" in reason.lower():
        plain = "http://" + agent.split("://", 1)[-1]
        return (f"TLS handshake with the agent at {agent} failed: it answers in plain HTTP (the agent serves "
                f"http); use --agent {plain}")
    return f"TLS handshake with the agent at {agent} failed: {reason}"


def _reason(exc: BaseException) -> str:
    cause = getattr(exc, "os_error", None) or exc
    errno = getattr(cause, "errno", None)
    if isinstance(errno, int) and errno > 0:
        return os.strerror(errno).lower()
    return str(cause).strip() or type(exc).__name__


def _message(body: Any, status: int) -> str:
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    if isinstance(body, str) and body:
        return body
    return f"HTTP {status}"


def _run(coro: Any) -> int:
    try:
        return int(asyncio.run(coro))
    except ClientError as exc:
        print(f"edgeagent: error: {exc}", file=sys.stderr)
        return exc.code


def table(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    """Left-aligned columns, two spaces apart, like kubectl."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        out.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() + "\n")


def _print_json(body: Any) -> None:
    print(json.dumps(body, indent=2, sort_keys=False))


async def _list(cfg: ClientConfig, path: str, header: list[str], row: Callable[[JSON], list[str]],
                empty: str) -> int:
    """GET one of the agent's lists: its JSON with --json, else a table (or `empty` when there is nothing)."""
    status, body = await _request(cfg, "GET", path)
    if status != 200 or not isinstance(body, dict):
        raise ClientError(f"GET {path}: {status}: {_message(body, status)}")
    if cfg.json:
        _print_json(body)
        return EXIT_OK
    items = [item for item in body.get("items") or [] if isinstance(item, dict)]
    if not items:
        print(empty)
        return EXIT_OK
    table([header, *(row(item) for item in items)], sys.stdout)
    return EXIT_OK


async def _act(cfg: ClientConfig, method: str, path: str, ok: tuple[int, ...], what: str) -> int:
    """Ask the agent to do something: print its answer, or exit 1 with one error line naming `what`."""
    status, body = await _request(cfg, method, path)
    if cfg.json:
        _print_json(body if isinstance(body, dict) else {"status": status, "message": _message(body, status)})
    if status not in ok:
        print(f"edgeagent: error: {what}: {status}: {_message(body, status)}", file=sys.stderr)
        return EXIT_FAILED
    if not cfg.json:
        print(_message(body, status))
    return EXIT_OK


# ---------------------------------------------------------------------- pods


def pods(cfg: ClientConfig) -> int:
    return _run(_list(cfg, "/pods", ["NAMESPACE", "NAME", "READY", "PHASE", "REVISION", "NEEDS-UPGRADE"],
                      _pod_row, "No pods on this node."))


def _pod_row(pod: JSON) -> list[str]:
    need = get_condition(pod, CONDITION_POD_NEED_UPGRADE)
    return [
        str(meta(pod).get("namespace", "")),
        str(meta(pod).get("name", "")),
        "true" if is_pod_ready(pod) else "false",
        str((pod.get("status") or {}).get("phase") or "-"),
        labels_of(pod).get(LABEL_REVISION_HASH, "-"),
        str(need.get("status")) if need else "-",
    ]


# ---------------------------------------------------------------------- upgrade


def upgrade(cfg: ClientConfig, namespace: str, name: str) -> int:
    return _run(_act(cfg, "POST", f"/openyurt.io/v1/namespaces/{namespace}/pods/{name}/upgrade", (200, 202),
                     f"upgrade {namespace}/{name}"))


def imagepull(cfg: ClientConfig, namespace: str, name: str) -> int:
    return _run(_act(cfg, "POST", f"/openyurt.io/v1/namespaces/{namespace}/pods/{name}/imagepull", (200,),
                     f"imagepull {namespace}/{name}"))


# ---------------------------------------------------------------------- upgrades


def upgrades(cfg: ClientConfig, cancel_id: str | None) -> int:
    if cancel_id:
        return _run(_act(cfg, "DELETE", f"{UPGRADES_PATH}/{cancel_id}", (200,), f"cancel {cancel_id}"))
    return _run(_list(cfg, UPGRADES_PATH, ["ID", "POD", "STATE", "ATTEMPTS", "UPDATED", "MESSAGE"],
                      _request_row, "No upgrade requests."))


def _request_row(r: JSON) -> list[str]:
    return [str(r.get("id", "")), f"{r.get('namespace', '')}/{r.get('name', '')}", str(r.get("state", "")),
            str(r.get("attempts", 0)), str(r.get("updated", "")), str(r.get("message", ""))]
