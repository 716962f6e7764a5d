"""The controller's set of NotReady nodes (`Controller._not_ready_nodes`, read by the rollout plan's observation
instead of each node's conditions) follows its node cache: a node that turns NotReady is in it, one that turns
Ready again or is deleted is not. A set that lagged the cache would defer a node that is back (or wait for one
that is gone) and finish a wave at the wrong time."""

from __future__ import annotations

from edgeagent.controller.app import ControllerApp
from edgeagent.controller.waves import node_ready
from tests.conftest import SimFactory
from tests.integration.controller.conftest import Controllers, admin_client
from tests.support.waiting import eventually


def cache_says(app: ControllerApp) -> set[str]:
    assert app.controller is not None
    return {key for key, node in app.controller.nodes.items.items() if not node_ready(node)}


async def test_not_ready_nodes_follow_the_node_cache(sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=3)
    first, second, third = sorted(sim.node_names)
    sim.set_node_ready(first, False)
    app = await controllers.start(sim)
    controller = app.controller
    assert controller is not None

    async def agrees(expected: set[str]) -> bool:
        return len(controller.nodes.items) > 0 and cache_says(app) == expected == controller._not_ready_nodes

    await eventually(lambda: agrees({first}), what=f"{first} NotReady, as listed at start")
    sim.set_node_ready(second, False)
    await eventually(lambda: agrees({first, second}), what=f"{second} turned NotReady")
    sim.set_node_ready(first, True)
    await eventually(lambda: agrees({second}), what=f"{first} Ready again")
    async with admin_client(sim) as admin:
        await admin.delete(f"/api/v1/nodes/{second}")
    await eventually(lambda: second not in controller.nodes.items and agrees(set()), what=f"{second} deleted")
    assert third not in controller._not_ready_nodes
