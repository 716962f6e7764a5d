"""`edgeagent demo`: the scenario (scenario.py), the processes it runs (processes.py), its narration
(narration.py) and what it checks in the cluster (cluster.py)."""

from edgeagent.demo.scenario import main, run_demo

__all__ = ["main", "run_demo"]
