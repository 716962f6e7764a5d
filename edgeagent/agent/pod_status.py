"""Writes one condition the agent owns onto the status of a pod bound to its node: the body and the PATCH.

Two publishers use it: `policy/held.py` (UpgradeHeld) and `requests/failure_status.py` (UpgradeFailed). Both
compare what they want with the pod in the agent's watch cache and write only the difference, so a patch
answered here comes back through the watch and the next pass finds nothing to do.

Only the pod's own node may write a pod's status (NodeRestriction for a kubelet identity, deploy/k8s-1.30's
admission policy for the agent's ServiceAccount token): that is what makes these conditions trustworthy,
and why `on_this_node` is asked before every write instead of relying on the cache's field selector alone.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any, Protocol

from edgeagent.kube.client import CONTENT_STRATEGIC_MERGE_PATCH, KubeClient, KubeError, KubeUnreachable
from edgeagent.kube.errors import Conflict, Invalid, NotFound
from edgeagent.kube.objects import get_condition, key_of, meta, pod_path, uid_of

JSON = dict[str, Any]

# (status, reason, message) of one condition.
Want = tuple[str, str, str]


class _Link(Protocol):
    def report_failure(self, reason: str) -> None: ...


class PodGone(Exception):
    """The pod is gone or was replaced by a same-named one (404, or 409 on the UID precondition)."""


class WriteFailed(Exception):
    """Not written this time (refused, unreachable, timed out): the publisher tries again later."""


def on_this_node(pod: JSON, node: str) -> bool:
    """The agent writes only onto pods bound to its own node; the API server refuses any other (403)."""
    return bool(node) and (pod.get("spec") or {}).get("nodeName") == node


def current(pod: JSON, cond_type: str) -> Want | None:
    cond = get_condition(pod, cond_type)
    if cond is None:
        return None
    return str(cond.get("status") or ""), str(cond.get("reason") or ""), str(cond.get("message") or "")


def condition_patch(pod: JSON, cond_type: str, want: Want, now: datetime, *, published: str | None = None) -> JSON:
    """One condition, merged by `type`; the UID makes a same-named successor refuse it (409).

    `lastTransitionTime` is sent only when the status flips; a patch without it keeps the one the pod has.
    `published` is the status this agent last wrote to the pod: the cached copy may not show that write yet
    (the watch brings it a moment later), and judging the flip from the older copy would move the time on a
    change of message alone.
    """
    status, reason, message = want
    cond: JSON = {"type": cond_type, "status": status, "reason": reason, "message": message}
    old = get_condition(pod, cond_type)
    before = published if published is not None else (old.get("status") if old is not None else None)
    if before != status:
        cond["lastTransitionTime"] = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": {"uid": uid_of(pod)}, "status": {"conditions": [cond]}}


async def patch_status(client: KubeClient, link: _Link, pod: JSON, body: JSON, timeout: float, *,
                       what: str) -> str:
    """PATCH `pods/NAME/status` (strategic merge); the resourceVersion the server answered with.

    Raises `PodGone` (nothing left to write on) or `WriteFailed` (try again later); an unreachable cloud is
    also reported to the link monitor, naming `what` was being written.
    """
    namespace, name = str(meta(pod).get("namespace") or ""), str(meta(pod).get("name") or "")
    try:
        async with asyncio.timeout(timeout + 1.0):
            answer = await client.patch(f"{pod_path(namespace, name)}/status", body, CONTENT_STRATEGIC_MERGE_PATCH,
                                        timeout=timeout)
    except (NotFound, Conflict, Invalid) as exc:
        raise PodGone(f"{key_of(pod)}: {exc.code}") from exc
    except KubeError as exc:
        raise WriteFailed(f"{what} patch of {key_of(pod)} refused ({exc.code}): {exc.message}") from exc
    except (KubeUnreachable, TimeoutError) as exc:
        reason = f"{what} patch of {key_of(pod)}: {exc or type(exc).__name__}"
        link.report_failure(reason)
        raise WriteFailed(reason) from exc
    return str(meta(answer).get("resourceVersion") or "")
