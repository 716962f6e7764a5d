"""The defaulting kube-apiserver applies to a new batch/v1 Job (the store applies it; the Job controller relies
on the selector and labels it sets)."""

from __future__ import annotations

from typing import Any

from edgeagent.kube.objects import meta, name_of

JSON = dict[str, Any]

LABEL_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
LABEL_JOB_NAME = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID = "controller-uid"
LEGACY_JOB_NAME = "job-name"
DEFAULT_BACKOFF_LIMIT = 6

def default_job(job: JSON) -> None:
    """The defaulting kube-apiserver applies to a new Job (selector and labels from its uid, limits)."""
    spec = job.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    uid = str(meta(job).get("uid") or "")
    name = name_of(job)
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", DEFAULT_BACKOFF_LIMIT)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    template = spec.setdefault("template", {})
    if isinstance(template, dict) and not spec.get("manualSelector"):
        tmeta = template.setdefault("metadata", {})
        labels = tmeta.setdefault("labels", {})
        labels.update({LABEL_CONTROLLER_UID: uid, LABEL_JOB_NAME: name, LEGACY_CONTROLLER_UID: uid,
                       LEGACY_JOB_NAME: name})
        spec.setdefault("selector", {"matchLabels": {LABEL_CONTROLLER_UID: uid}})
