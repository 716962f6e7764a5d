"""`edgeagent sim`: run a simulated cluster in the foreground until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import TextIO

from edgeagent import log
from edgeagent.config import SimConfig
from edgeagent.sim.addresses import exposure_warning
from edgeagent.sim.cluster import SimCluster
from edgeagent.sim.persist import StateError

# Up to this many nodes the banner gives each its own line (link and kubeconfig); beyond, one line for all.
BANNER_NODES = 10


def describe(sim: SimCluster) -> str:
    """Everything a person needs to use the running sim, printed once at start-up."""
    first = sim.node_names[0] if sim.node_names else "NODE"
    lines = [
        f"simulated cluster: API server {sim.url} ({len(sim.node_names)} nodes)",
        f"  admin kubeconfig: {sim.admin_kubeconfig}",
    ]
    curl = "curl"
    if sim.tls is not None:
        lines.append(f"  authorization: rbac (HTTPS, CA {sim.tls.ca_file}; admin is system:masters, "
                     "node kubeconfigs are system:node:<name>)")
        curl = f"curl --cacert {sim.tls.ca_file}"
    if not sim.config.node_links:
        lines.append("  nodes have no link and no kubeconfig of their own (--no-node-links)")
    if sim.config.node_links and len(sim.node_names) <= BANNER_NODES:
        for node in sim.node_names:
            lines.append(f"  node {node}: link {sim.node_url(node)}, kubeconfig {sim.node_kubeconfig(node)}")
    elif sim.config.node_links:
        # A line per node is a 1,000-line banner at fleet scale: name the folder, and where each link is listed.
        lines.append(f"  node kubeconfigs: {sim.dir}/<node>.kubeconfig ({sim.node_names[0]} ... "
                     f"{sim.node_names[-1]}); each node's link: {curl} {sim.url}/sim/v1/nodes")
    lines += ["try:", f"  kubectl --kubeconfig {sim.admin_kubeconfig} get nodes"]
    if sim.config.node_links:
        lines += [
            "cut a node's link (refuse: connections fail fast; blackhole: they hang) and restore it:",
            f"  {curl} -X POST '{sim.url}/sim/v1/nodes/{first}/disconnect?mode=blackhole'",
            f"  {curl} -X POST '{sim.url}/sim/v1/nodes/{first}/connect'",
        ]
    lines.append("press Ctrl-C to stop")
    return "\n".join(lines)


async def serve(config: SimConfig, out: TextIO = sys.stdout) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with SimCluster(config) as sim:
            warning = exposure_warning(config.bind, config.authorization)
            if warning is not None:
                print(f"edgeagent: warning: {warning}", file=sys.stderr, flush=True)
            print(describe(sim), file=out, flush=True)
            await stop.wait()
            log.get("edgeagent.sim").info("simulated_cluster_stopping")
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return 0


def main(config: SimConfig) -> int:
    log.configure(config.log)
    try:
        return asyncio.run(serve(config))
    except (OSError, StateError) as exc:  # e.g. the port is taken, or the state in --dir is unreadable
        print(f"edgeagent: error: {exc}", file=sys.stderr)
        return 1
