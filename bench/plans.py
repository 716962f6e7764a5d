"""RolloutPlans for the benchmarks: the CRD from deploy/ installed on a bench sim, and a plan created as an object
(the controller reads plans through its informer; nothing of the plan is on the DaemonSet)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from bench.common import NAMESPACE, Sim

JSON = dict[str, Any]
CRD_FILE = Path(__file__).resolve().parents[1] / "deploy" / "crd-rolloutplan.yaml"
PLANS_PATH = f"/apis/edgeagent.io/v1alpha1/namespaces/{NAMESPACE}/rolloutplans"


async def _request(sim: Sim, method: str, path: str, body: JSON | None = None) -> JSON:
    """A request with a long timeout: a sim that has just made 100,000 pods answers nothing else for minutes."""
    data = None if body is None else json.dumps(body)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1800)) as session, session.request(
            method, sim.url + path, data=data, headers={"Content-Type": "application/json"}) as resp:
        if resp.status not in (200, 201):
            raise RuntimeError(f"{method} {path}: {resp.status} {(await resp.text())[:300]}")
        return dict(await resp.json())


async def install_crd(sim: Sim) -> None:
    """The CRD applied, and waited for until the sim serves RolloutPlans (Established)."""
    await _request(sim, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                   yaml.safe_load(CRD_FILE.read_text()))
    deadline = time.monotonic() + 600
    while True:
        try:
            await _request(sim, "GET", PLANS_PATH)
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def create_plan(sim: Sim, daemonset: str, steps: list[Any], bake: str = "0s", **spec: Any) -> JSON:
    body = {"apiVersion": "edgeagent.io/v1alpha1", "kind": "RolloutPlan",
            "metadata": {"name": daemonset, "namespace": NAMESPACE},
            "spec": {"daemonSet": daemonset, "steps": steps, "bake": bake, **spec}}
    return await _request(sim, "POST", PLANS_PATH, body)


def steps_of(text: str) -> list[Any]:
    """`1%,10%,50%,100%` as the plan's steps (percentages as strings, counts as ints)."""
    return [s if s.endswith("%") else int(s) for s in (part.strip() for part in text.split(","))]
