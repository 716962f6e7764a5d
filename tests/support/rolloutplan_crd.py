"""RolloutPlans on the sim for the command-line tests: the CRD from deploy/ installed through the API, plans
created as an operator would, and their `status` written through `/status` with the admin's credentials (the
test plays the controller, which alone writes it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from edgeagent.kube.client import CONTENT_MERGE_PATCH, KubeClient
from edgeagent.kube.errors import NotFound
from edgeagent.rollout import api
from edgeagent.rollout.steer import plan_path, plans_path
from tests.support.waiting import eventually

JSON = dict[str, Any]
CRD_FILE = Path(__file__).resolve().parents[2] / "deploy" / "crd-rolloutplan.yaml"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


async def install_crd(admin: KubeClient) -> None:
    """Create the CRD (or find it there, as `kubectl apply -f deploy/` left it) and wait until it is served."""
    crd = yaml.safe_load(CRD_FILE.read_text())
    try:
        await admin.get(f"{CRDS}/{crd['metadata']['name']}")
    except NotFound:
        await admin.create(CRDS, crd)

    async def served() -> bool:
        try:
            await admin.get(plans_path("default"))
        except NotFound:
            return False
        return True

    await eventually(served, timeout=20, what="rolloutplans served")


async def create_plan(admin: KubeClient, daemonset: str = "web", name: str = "", namespace: str = "default",
                      **spec: Any) -> JSON:
    body = {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name or daemonset},
            "spec": {"daemonSet": daemonset, "steps": [1, "50%", "100%"], **spec}}
    return await admin.create(plans_path(namespace), body)


async def write_status(admin: KubeClient, name: str, status: JSON, namespace: str = "default") -> JSON:
    """The controller's write (merge patch of the status subresource)."""
    return await admin.patch(f"{plan_path(namespace, name)}/status", {"status": status}, CONTENT_MERGE_PATCH)


async def read_plan(admin: KubeClient, name: str, namespace: str = "default") -> JSON:
    return await admin.get(plan_path(namespace, name))


def status(revision: str, phase: str = "Baking", wave: int = 1, waves: int = 3, **extra: Any) -> JSON:
    body: JSON = {"revision": revision, "phase": phase, "wave": wave, "waves": waves,
                  "counts": {"nodes": 6, "upgraded": 1, "waiting": 5, "deferred": 0, "failed": 0},
                  "failures": [], "history": [], "conditions": []}
    body.update(extra)
    return body
