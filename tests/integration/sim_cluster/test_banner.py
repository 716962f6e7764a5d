"""`edgeagent sim`'s start-up banner stays a screenful at fleet scale (issue 36): it names the folder of the
node kubeconfigs, not each file."""

from __future__ import annotations

from edgeagent.sim.app import BANNER_NODES, describe
from tests.conftest import SimFactory


async def test_a_thousand_node_banner_names_the_kubeconfigs_folder_not_each_file(sim_factory: SimFactory) -> None:
    sim = await sim_factory(nodes=1000, heartbeat_interval=5.0, node_grace=60.0)
    text = describe(sim)
    assert len(text.splitlines()) < 15
    assert f"  node kubeconfigs: {sim.dir}/<node>.kubeconfig (edge-1 ... edge-1000); each node's link: curl " \
           f"{sim.url}/sim/v1/nodes" in text
    assert "edge-500" not in text
    assert sim.node_kubeconfig("edge-500") == sim.dir / "edge-500.kubeconfig"


async def test_a_small_sim_still_lists_each_nodes_link_and_kubeconfig(sim_factory: SimFactory) -> None:
    sim = await sim_factory(nodes=BANNER_NODES)
    lines = describe(sim).splitlines()
    assert [line.split(":")[0] for line in lines if line.startswith("  node edge-")] == \
        [f"  node edge-{i}" for i in range(1, BANNER_NODES + 1)]
    assert f"  node edge-1: link {sim.node_url('edge-1')}, kubeconfig {sim.node_kubeconfig('edge-1')}" in lines
