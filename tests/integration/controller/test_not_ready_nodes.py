"""The controller's set of NotReady nodes (`Controller._not_ready_nodes`, read by the rollout plan's observation
instead of each node's conditions) follows its node cache: a node that turns NotReady is in it, one that turns
Ready again or is deleted is not. A set that lagged the cache would defer a node that is back (or wait for one
that is gone) and finish a wave at the wrong time. Likewise the controller's hash order of every node
(`Controller.node_order`), which a ranking by name filters: a node missing from it would be ranked by a sort again,
a deleted one kept would cost memory for good."""

from __future__ import annotations

from edgeagent.controller.app import ControllerApp
from edgeagent.controller.waves import node_ready
from edgeagent.rollout.plan import stable_hash
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


async def test_the_node_order_follows_the_node_cache(sim_factory: SimFactory, controllers: Controllers) -> None:
    sim = await sim_factory(nodes=3)
    app = await controllers.start(sim)
    controller = app.controller
    assert controller is not None

    def agrees() -> bool:
        return bool(controller.nodes.items) and controller.node_order.names() == sorted(
            controller.nodes.items, key=stable_hash)

    # Put in order once the caches synced, before the first reconcile (not by the first ranking after a restart).
    await eventually(lambda: controller.synced and controller.node_order.pending == 0, what="the listed nodes settled")
    await eventually(agrees, what="every listed node in hash order")
    async with admin_client(sim) as admin:
        await admin.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "late"}})
        await admin.delete(f"/api/v1/nodes/{sorted(sim.node_names)[0]}")
    await eventually(lambda: "late" in controller.nodes.items and len(controller.nodes.items) == 3 and agrees(),
                     what="a node added and one deleted")
