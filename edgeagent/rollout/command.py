"""`edgeagent rollout status|history|promote|pause|resume|abort|retry|undo DS`: the rollout of a DaemonSet, read
from and steered through its RolloutPlan (`edgeagent.io/v1alpha1`).

The command's plumbing only: the client and the namespace (`-n`, else the kubeconfig context's, else
`default`, as kubectl), the `--watch` loop, the output and the exit code. What `status` shows is `status`, the
steering rules and writes are `steer`; every error is one line on stderr.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any, TextIO

from edgeagent import log
from edgeagent.config import RolloutConfig
from edgeagent.kube.client import KubeClient, KubeError, KubeUnreachable, Timeouts, user_agent
from edgeagent.kube.kubeconfig import DEFAULT_NAMESPACE, load_problem
from edgeagent.kube.objects import name_of
from edgeagent.rollout import steer as steering
from edgeagent.rollout.status import (
    EXIT_COMPLETE,
    EXIT_ERROR,
    EXIT_IN_PROGRESS,
    RolloutError,
    Status,
    changes,
    fetch_status,
)

EXIT_USAGE = 2  # a file the operator named is not there
POLL_INTERVAL = 1.0  # seconds between two reads of `--watch`


async def connect(cfg: RolloutConfig) -> tuple[KubeClient, str]:
    """The client, and the namespace: -n, else the kubeconfig context's, else default (as kubectl)."""
    try:
        client = await KubeClient.connect(cfg.kubeconfig, Timeouts(connect=3, request=10), agent=user_agent("cli"),
                                          context=cfg.context)
    except FileNotFoundError as exc:  # a file the operator named is not there: usage, like --token-file
        raise RolloutError(str(exc), EXIT_USAGE) from exc
    except Exception as exc:  # malformed kubeconfig, unknown context
        raise RolloutError(load_problem(exc, cfg.kubeconfig or "KUBECONFIG")) from exc
    return client, cfg.namespace or client.namespace or DEFAULT_NAMESPACE


async def run_status(cfg: RolloutConfig, out: TextIO) -> int:
    client, namespace = await connect(cfg)
    every_node = cfg.all_nodes or cfg.output == "wide"
    try:
        deadline = time.monotonic() + cfg.timeout if cfg.timeout > 0 else None
        shown: Status | None = None
        while True:
            status = await fetch_status(client, namespace, cfg.daemonset)
            if cfg.output == "json":
                text = json.dumps(status.to_json(), indent=2)
                if shown is None or text != json.dumps(shown.to_json(), indent=2):
                    print(text, file=out, flush=True)
            elif shown is None:
                print(status.render(every_node=every_node), file=out, flush=True)
            else:
                lines = changes(shown, status, every_node=every_node)
                if lines:
                    print("\n".join(lines), file=out, flush=True)
            shown = status
            code = status.exit_code
            if code != EXIT_IN_PROGRESS or not cfg.watch:
                if cfg.watch and cfg.output != "json":
                    print(status.verdict(), file=out, flush=True)
                return code
            if deadline is not None and time.monotonic() >= deadline:
                print(f"timed out after {cfg.timeout:g}s waiting for the rollout", file=out, flush=True)
                return EXIT_IN_PROGRESS
            await asyncio.sleep(POLL_INTERVAL)
    finally:
        await client.close()


async def run_history(cfg: RolloutConfig, out: TextIO) -> int:
    client, namespace = await connect(cfg)
    try:
        plan = await steering.find_plan(client, namespace, cfg.daemonset)
    finally:
        await client.close()
    if cfg.output == "json":
        print(json.dumps({"kind": "RolloutHistory", "rolloutPlan": name_of(plan), "namespace": namespace,
                          "items": steering.history_rows(plan)}, indent=2), file=out, flush=True)
    else:
        out.write(steering.history_table(plan))
        out.flush()
    return EXIT_COMPLETE


async def run_steer(cfg: RolloutConfig, out: TextIO) -> int:
    client, namespace = await connect(cfg)
    try:
        line = await steering.steer(client, namespace, cfg.daemonset, cfg.action, to_revision=cfg.to_revision)
    finally:
        await client.close()
    print(line, file=out, flush=True)
    return EXIT_COMPLETE


def run_reporting_errors(command: Callable[[RolloutConfig, TextIO], Coroutine[Any, Any, int]], cfg: RolloutConfig, *,
                         out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run one `rollout` subcommand; any error is one line on stderr and exit 1."""
    err = err or sys.stderr
    # stdout and stderr carry our lines only: the kube client's own log lines (a 403, a retry) stay out, for the
    # command's duration (a caller in the same process, a test, gets its logging back).
    with log.quiet(err):
        try:
            return asyncio.run(command(cfg, out or sys.stdout))
        except KeyboardInterrupt:
            return EXIT_IN_PROGRESS
        except RolloutError as exc:
            print(f"edgeagent: error: {exc}", file=err)
            return exc.exit_code
        except steering.SteerError as exc:
            print(f"edgeagent: error: {exc}", file=err)
        except KubeError as exc:
            print(f"edgeagent: error: the API server refused: {exc}", file=err)
        except KubeUnreachable as exc:
            where = f" at {exc.server}" if exc.server else ""
            print(f"edgeagent: error: cannot reach the API server{where}: {exc}", file=err)
    return EXIT_ERROR


def main(cfg: RolloutConfig, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    command = {"status": run_status, "history": run_history}.get(cfg.action, run_steer)
    return run_reporting_errors(command, cfg, out=out, err=err)

