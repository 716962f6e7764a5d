"""Every `/v1/readyz` field path that docs/operations.md names exists in what a running agent returns."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aiohttp

from tests.integration.agent_api.conftest import NODE, AgentFactory, World, wait_connected

OPERATIONS = Path(__file__).resolve().parents[3] / "docs" / "operations.md"
# Top-level keys the JSON has, plus `watch`, which it once had at the top and the guide still named there.
_TOP = "|".join(("status", "message", "problems", "link", "cache", "queue", "state", "watch"))
_PATH = re.compile(rf"`((?:{_TOP})(?:\.[a-z_]+)*)`|jq \.((?:{_TOP})(?:\.[a-z_]+)*)")


def documented_paths() -> set[str]:
    return {a or b for a, b in _PATH.findall(OPERATIONS.read_text())}


def _resolve(body: dict[str, Any], path: str) -> bool:
    node: Any = body
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


async def test_readyz_paths_in_the_operations_guide_exist(world: World, agent_factory: AgentFactory,
                                                          http: aiohttp.ClientSession) -> None:
    paths = documented_paths()
    assert {"link.probe.last_error", "link.watch", "state.problem"} <= paths, paths
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE))
    await wait_connected(agent)
    async with http.get(f"{agent.url}/v1/readyz", headers={"Accept": "application/json"}) as resp:
        body = await resp.json()
    missing = sorted(p for p in paths if not _resolve(body, p))
    assert missing == [], f"docs/operations.md names readyz fields the agent does not return: {missing}"


def _shape(value: Any) -> Any:
    """The keys of a JSON answer, all the way down; values stand for nothing but their place."""
    if isinstance(value, dict):
        return {key: _shape(inner) for key, inner in value.items()}
    return None


def documented_example() -> dict[str, Any]:
    """The JSON under the guide's `curl … /v1/readyz | jq .` example."""
    text = OPERATIONS.read_text()
    found = re.search(r"^\$ curl -s -H 'Accept: application/json' \S+/v1/readyz \| jq \.\n(\{.*?^\})$", text,
                      flags=re.M | re.S)
    assert found, "docs/operations.md lost its readyz example"
    return dict(json.loads(found.group(1)))


async def test_the_readyz_example_in_the_operations_guide_has_every_field_the_agent_returns(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    """Not only that named fields exist: the example shows all of them (it lacked `queue.verifying`)."""
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE))
    await wait_connected(agent)
    async with http.get(f"{agent.url}/v1/readyz", headers={"Accept": "application/json"}) as resp:
        body = await resp.json()
    assert _shape(documented_example()) == _shape(body)
