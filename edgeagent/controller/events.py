"""Kubernetes Events on DaemonSets: what an operator sees in `kubectl describe ds`.

An Event that cannot be written is logged and dropped: reporting must never stop or fail a reconcile.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from edgeagent import log
from edgeagent.contract import COMPONENT_CONTROLLER, EVENT_WARNING
from edgeagent.kube.client import KubeClient, KubeError, KubeUnreachable
from edgeagent.kube.objects import meta, name_of, namespace_of, uid_of
from edgeagent.kube.timeutil import format_micro_time, format_time

JSON = dict[str, Any]

# Event messages are limited to 1 KiB by the API server's validation.
_MAX_MESSAGE = 1024


class EventRecorder:
    def __init__(
        self,
        client: KubeClient,
        *,
        instance: str,
        on_write: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._instance = instance
        self._on_write = on_write
        self._clock = clock
        self._log = log.get("edgeagent.controller.events")

    def build(self, obj: JSON, event_type: str, reason: str, message: str) -> JSON:
        now = self._clock()
        if len(message) > _MAX_MESSAGE:
            message = message[: _MAX_MESSAGE - 3] + "..."
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                # The name scheme client-go's recorder uses: object name and a nanosecond timestamp.
                "name": f"{name_of(obj)}.{int(now * 1e9):x}",
                "namespace": namespace_of(obj) or "default",
            },
            "involvedObject": {
                "apiVersion": str(obj.get("apiVersion") or "apps/v1"),
                "kind": str(obj.get("kind") or "DaemonSet"),
                "name": name_of(obj),
                "namespace": namespace_of(obj),
                "uid": uid_of(obj),
                "resourceVersion": str(meta(obj).get("resourceVersion") or ""),
            },
            "type": event_type,
            "reason": reason,
            "message": message,
            "source": {"component": COMPONENT_CONTROLLER},
            "firstTimestamp": format_time(now),
            "lastTimestamp": format_time(now),
            "eventTime": format_micro_time(now),
            "count": 1,
            "action": reason,
            "reportingComponent": COMPONENT_CONTROLLER,
            "reportingInstance": self._instance,
        }

    async def emit(self, obj: JSON, event_type: str, reason: str, message: str) -> None:
        event = self.build(obj, event_type, reason, message)
        namespace = event["metadata"]["namespace"]
        log_method = self._log.warning if event_type == EVENT_WARNING else self._log.info
        # The kind too: a rollout's Events are recorded on its RolloutPlan and on its DaemonSet, which share a name,
        # and two lines naming only `default/web` read as one Event logged twice.
        log_method("event", kind=event["involvedObject"]["kind"], object=f"{namespace}/{name_of(obj)}", reason=reason,
                   message=event["message"])
        try:
            await self._client.create(f"/api/v1/namespaces/{namespace}/events", event, timeout=5.0)
        except (KubeError, KubeUnreachable) as exc:
            self._log.warning("event_not_recorded", reason=reason, error=str(exc))
            return
        if self._on_write is not None:
            self._on_write("event")
