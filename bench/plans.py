"""RolloutPlans for the benchmarks: the CRD from deploy/ installed on a bench sim, and a plan created as an object
(the controller reads plans through its informer; nothing of the plan is on the DaemonSet)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import yaml

from bench.common import NAMESPACE, Sim

JSON = dict[str, Any]
CRD_FILE = Path(__file__).resolve().parents[1] / "deploy" / "crd-rolloutplan.yaml"
PLANS_PATH = f"/apis/edgeagent.io/v1alpha1/namespaces/{NAMESPACE}/rolloutplans"


async def install_crd(sim: Sim) -> None:
    """The CRD applied, and waited for until the sim serves RolloutPlans (Established)."""
    await sim.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                      yaml.safe_load(CRD_FILE.read_text()))
    deadline = time.monotonic() + 60
    while True:
        try:
            await sim.request("GET", PLANS_PATH)
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def create_plan(sim: Sim, daemonset: str, steps: list[Any], bake: str = "0s", **spec: Any) -> JSON:
    body = {"apiVersion": "edgeagent.io/v1alpha1", "kind": "RolloutPlan",
            "metadata": {"name": daemonset, "namespace": NAMESPACE},
            "spec": {"daemonSet": daemonset, "steps": steps, "bake": bake, **spec}}
    return await sim.request("POST", PLANS_PATH, body)


def steps_of(text: str) -> list[Any]:
    """`1%,10%,50%,100%` as the plan's steps (percentages as strings, counts as ints)."""
    return [s if s.endswith("%") else int(s) for s in (part.strip() for part in text.split(","))]
