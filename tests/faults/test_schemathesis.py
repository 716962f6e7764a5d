"""Schemathesis fuzzes the agent's HTTP API from docs/openapi.yaml: no 5xx, no answer outside the document.

The agent is a real process, once offline (a node booted without its cloud, serving a snapshot) and
once connected to the simulated cluster. For every operation, Hypothesis generates valid requests
(positive) and requests that break the document's own rules (negative: bad names, wrong types), with a
fixed derandomized seed, so a run is repeatable. Each answer must be a documented status with a
documented content type whose body fits its schema, and never a server error: connected, no 5xx at
all; offline, the one 5xx allowed is the documented `503` of `imagepull`, which needs the cloud by
design (a pre-pull is not queued). At least 1,000 requests per mode are sent; the parameterless
operations (health, metrics) add only a few, the path-parameter operations carry the volume.

The calls are blocking (`requests`), so they run on a worker thread while the event loop keeps serving
the in-process sim the connected agent talks to.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import hypothesis
import pytest
import requests
import schemathesis
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.result import Err

from edgeagent.kube.client import KubeClient
from tests.faults.conftest import NODE, AgentProc, AgentSpawner, mark_need_upgrade, orphan_pod, wait_link
from tests.integration.agent_api.conftest import closed_port, ds_pod, seed_snapshot, write_kubeconfig

if TYPE_CHECKING:
    from edgeagent.sim.cluster import SimCluster

SPEC = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
EXAMPLES = 200  # per operation and generation mode
MIN_REQUESTS = 1000
CHECKS: list[Any] = [status_code_conformance, content_type_conformance, response_schema_conformance,
                     response_headers_conformance]
IMAGEPULL = "/openyurt.io/v1/namespaces/{namespace}/pods/{name}/imagepull"
OFFLINE_5XX = {("POST", IMAGEPULL, 503)}
# Pods of the offline agent's snapshot (queueable, not flagged, not a DaemonSet's) and of nobody.
KNOWN_NAMES = ["a", "b", "c", "ghost", "edge-app.v2"]

pytestmark = [pytest.mark.slow(seconds=40), pytest.mark.timeout(300)]


def _with_name(pair: tuple[Case[Any], str]) -> Case[Any]:
    case, name = pair
    case.path_parameters = {**case.path_parameters, "namespace": "default", "name": name}
    return case


def _strategy(operation: APIOperation[Any, Any, Any, Any], mode: GenerationMode) -> st.SearchStrategy[Case[Any]]:
    """The document's strategy; for pod operations, half the valid cases name a pod the agent may know.

    The document constrains `name` only by length (DNS-1123 is checked by the agent, answering 400),
    so purely generated names almost never reach the cache, the queue or the cloud.
    """
    base = operation.as_strategy(generation_mode=mode)
    if mode is not GenerationMode.POSITIVE or "{name}" not in operation.path:
        return base
    return st.one_of(base, st.tuples(base, st.sampled_from(KNOWN_NAMES)).map(_with_name))


def fuzz(base_url: str, allowed_5xx: set[tuple[str, str, int]]) -> tuple[int, list[str]]:
    """Send the generated requests; return how many, and one line per failed check or 5xx answer."""
    schema = schemathesis.openapi.from_path(str(SPEC))
    sent = 0
    seen: Counter[tuple[str, str, int]] = Counter()
    failures: list[str] = []
    session = requests.Session()
    settings = hypothesis.settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                                   suppress_health_check=list(hypothesis.HealthCheck),
                                   phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate])
    for result in schema.get_all_operations():
        assert not isinstance(result, Err), f"{SPEC}: {result.err()}"
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings
            @hypothesis.given(_strategy(operation, mode))
            def one(case: Any) -> None:
                nonlocal sent
                response = case.call(base_url=base_url, session=session, timeout=10)
                sent += 1
                seen[(case.method, case.operation.path, response.status_code)] += 1
                problems = []
                if response.status_code >= 500 and (case.method, case.operation.path, response.status_code) \
                        not in allowed_5xx:
                    problems.append("server error")
                try:
                    case.validate_response(response, checks=CHECKS)
                except BaseException as exc:  # schemathesis raises a BaseExceptionGroup of failed checks
                    if not isinstance(exc, (Exception, BaseExceptionGroup)):
                        raise
                    problems.append(str(exc)[:300])
                if problems:  # collected, the run goes on
                    failures.append(f"{case.method} {response.request.path_url} → {response.status_code} "
                                    f"{response.text[:200]!r}: {'; '.join(problems)}")

            with contextlib.suppress(Unsatisfiable):  # a parameterless operation has nothing to break
                one()
    session.close()
    print("\n".join(f"{n:5d} {m} {path} {code}" for (m, path, code), n in sorted(seen.items())))  # -s / on failure
    return sent, failures


async def wait_link_up(agent: AgentProc) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        await wait_link(http, agent, True)


async def test_fuzz_offline_agent(spawn_agent: AgentSpawner, tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    await seed_snapshot(state_dir, [ds_pod("a"), ds_pod("b", need_upgrade="False"), ds_pod("c", owner="Job")])
    kubeconfig = write_kubeconfig(tmp_path / "offline.kubeconfig", f"http://127.0.0.1:{closed_port()}")
    agent = await spawn_agent(kubeconfig, state_dir)
    sent, failures = await asyncio.to_thread(fuzz, agent.url, OFFLINE_5XX)
    assert failures == [], f"{len(failures)} of {sent} requests failed a check:\n" + "\n".join(failures[:20])
    assert sent >= MIN_REQUESTS
    assert agent.alive


async def test_fuzz_connected_agent(sim: SimCluster, admin: KubeClient, spawn_agent: AgentSpawner,
                                    tmp_path: Path) -> None:
    flagged = await admin.create("/api/v1/namespaces/default/pods", orphan_pod("a"))
    await mark_need_upgrade(admin, flagged)
    await admin.create("/api/v1/namespaces/default/pods", orphan_pod("b"))  # PodNeedUpgrade absent: 403
    # The link must stay up for the whole run (a 503 "cloud link is down" is right only offline): the fast flags'
    # one 0.3 s probe that may fail would take it down whenever the machine is busy for a moment.
    agent = await spawn_agent(sim.node_kubeconfig(NODE), tmp_path / "state",
                              "--probe-timeout", "5", "--failures-to-disconnect", "5")
    await wait_link_up(agent)
    sent, failures = await asyncio.to_thread(fuzz, agent.url, set())
    assert failures == [], f"{len(failures)} of {sent} requests failed a check:\n" + "\n".join(failures[:20])
    assert sent >= MIN_REQUESTS
    assert agent.alive
