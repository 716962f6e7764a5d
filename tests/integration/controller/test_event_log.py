"""Each Event the controller records is logged with the kind of the object it is about: a rollout's Events are
recorded on its RolloutPlan and on its DaemonSet, which share a name, and two lines naming only `default/web`
read as one Event logged twice."""

from __future__ import annotations

import structlog

from edgeagent.controller.events import EventRecorder
from edgeagent.kube.client import KubeClient


async def test_an_event_log_line_names_the_kind_of_its_object(kube: KubeClient) -> None:
    recorder = EventRecorder(kube, instance="test")
    plan = {"apiVersion": "edgeagent.io/v1alpha1", "kind": "RolloutPlan",
            "metadata": {"name": "web", "namespace": "default", "uid": "uid-plan"}}
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet",
          "metadata": {"name": "web", "namespace": "default", "uid": "uid-ds"}}
    with structlog.testing.capture_logs() as logs:
        for obj in (plan, ds):
            await recorder.emit(obj, "Normal", "WaveStarted", "wave 1/3 started")
    lines = [(entry.get("kind"), entry.get("object")) for entry in logs if entry.get("event") == "event"]
    assert lines == [("RolloutPlan", "default/web"), ("DaemonSet", "default/web")]
    events = (await kube.get("/api/v1/namespaces/default/events"))["items"]
    assert sorted(e["involvedObject"]["kind"] for e in events if e["reason"] == "WaveStarted") == [
        "DaemonSet", "RolloutPlan"]
