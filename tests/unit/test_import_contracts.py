"""The package layers in .importlinter are enforced: `lint-imports` fails when one is broken.

Each case copies the package to a scratch directory, injects one violating import and runs
`lint-imports` on the copy, so the check is seen to fail for the reason named, not merely to pass.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "edgeagent", tmp_path / "edgeagent",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    return tmp_path


def _lint(root: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    """lint-imports on the copy in `root` (it comes first on the path), optionally only some contracts."""
    args = [str(LINT_IMPORTS), "--no-cache", "--config", str(root / ".importlinter")]
    for contract in contracts:
        args += ["--contract", contract]
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False)


def _inject(root: Path, module: str, line: str) -> None:
    path = root / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\n{line}  # injected by the test\n")


def test_the_real_package_keeps_every_contract(tmp_path: Path) -> None:
    result = _lint(_copy(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(("module", "line", "contract", "culprit"), [
    # A product module that loads the simulator (or the demo) drags it into every node install.
    ("edgeagent.agent.requests.upgrade", "import edgeagent.sim.store", "no-sim-in-product", "edgeagent.sim.store"),
    ("edgeagent.controller.ota", "import edgeagent.demo.cluster", "no-sim-in-product", "edgeagent.demo.cluster"),
    ("edgeagent.kube.objects", "import edgeagent.sim.store", "no-sim-in-product", "edgeagent.sim.store"),
    # The agent and the controller share edgeagent.contract, never each other.
    ("edgeagent.agent.requests.upgrade", "import edgeagent.controller.ota", "independence", "edgeagent.controller.ota"),
    ("edgeagent.controller.rolling", "import edgeagent.agent.policy.held", "independence",
     "edgeagent.agent.policy.held"),
    ("edgeagent.fleet.live", "import edgeagent.agent.policy.site", "independence", "edgeagent.agent.policy.site"),
    ("edgeagent.fleet.live", "import edgeagent.sim.store", "no-sim-in-product", "edgeagent.sim.store"),
    # The rollout's one home (its state model and `rollout status` included) sits below the views that format it.
    ("edgeagent.rollout.status", "import edgeagent.fleet.table", "layers", "edgeagent.fleet.table"),
    ("edgeagent.rollout.model", "import edgeagent.controller.waves", "layers", "edgeagent.controller.waves"),
    # The contract sits below the components, kube below the contract.
    ("edgeagent.contract", "import edgeagent.agent.policy.held", "layers", "edgeagent.agent.policy.held"),
    ("edgeagent.kube.objects", "import edgeagent.contract", "layers", "edgeagent.contract"),
    # A cycle between two sibling modules (the one http.py and hold_api.py had).
    ("edgeagent.agent.api.hold_api", "import edgeagent.agent.api.http", "acyclic", "hold_api"),
])
def test_a_violating_import_breaks_its_contract(tmp_path: Path, module: str, line: str, contract: str,
                                                culprit: str) -> None:
    root = _copy(tmp_path)
    _inject(root, module, line)
    result = _lint(root, contract)
    assert result.returncode != 0, result.stdout
    assert "BROKEN" in result.stdout and culprit in result.stdout, result.stdout + result.stderr


def test_the_agent_and_controller_load_no_simulator_module() -> None:
    """A node install without the `sim` extra can import both apps: neither loads edgeagent.sim or demo."""
    code = ("import sys, edgeagent.agent.app, edgeagent.controller.app; "
            "print(sorted(m for m in sys.modules if m.startswith(('edgeagent.sim', 'edgeagent.demo'))))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            check=True)
    assert result.stdout.strip() == "[]", result.stdout


def test_the_agent_client_commands_load_no_server_or_kubernetes_client() -> None:
    """`edgeagent pods|upgrade|upgrades|imagepull|hold|release` start fast: no aiohttp server, no Kubernetes
    client library, no metrics, no state database."""
    code = ("import sys, edgeagent.cli, edgeagent.agent.client.commands, edgeagent.agent.client.hold; "
            "print(sorted(m for m in sys.modules if m.startswith(('aiohttp.web', 'kubernetes_asyncio', "
            "'edgeagent.sim', 'edgeagent.controller', 'prometheus_client', 'sqlite3', 'edgeagent.agent.state'))))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            check=True)
    assert result.stdout.strip() == "[]", result.stdout
