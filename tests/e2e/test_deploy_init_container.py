"""The DaemonSet's init container must succeed on every pod start, under exactly the capabilities it asks for.

It runs as root with only the capabilities in its securityContext (CAP_CHOWN) and no_new_privs, as a
container runtime would start it; the second run sees the directory it handed to uid 10267 on the first
(node reboot, agent rollout) and must not fail there.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "agent-daemonset.yaml"
STATE_PATH = "/var/lib/edgeagent"
AGENT_UID = 10267

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv(1) to drop to the init container's capabilities",
)


def _init_container() -> dict[str, Any]:
    doc = yaml.safe_load(MANIFEST.read_text())
    (container,) = [c for c in doc["spec"]["template"]["spec"]["initContainers"] if c["name"] == "state-dir-owner"]
    return dict(container)


def _run_as_the_runtime_would(container: dict[str, Any], state_dir: Path) -> subprocess.CompletedProcess[str]:
    """uid 0, no_new_privs, bounding/effective set = the container's `capabilities.add` and nothing else."""
    ctx = container["securityContext"]
    assert ctx["capabilities"]["drop"] == ["ALL"] and ctx["allowPrivilegeEscalation"] is False
    caps = ",".join("+" + c.lower() for c in ctx["capabilities"]["add"])
    command = [sys.executable if part == "python" else part.replace(STATE_PATH, str(state_dir))
               for part in container["command"]]
    return subprocess.run(
        ["setpriv", "--reuid=0", "--regid=0", "--clear-groups", "--no-new-privs", "--inh-caps=-all",
         "--ambient-caps=-all", f"--bounding-set=-all,{caps}", "--", *command],
        capture_output=True, text=True, timeout=60, check=False,
    )


def test_the_only_added_capability_is_chown() -> None:
    ctx = _init_container()["securityContext"]
    assert ctx["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert ctx["runAsUser"] == 0 and ctx["readOnlyRootFilesystem"] is True


def test_setpriv_really_drops_to_those_capabilities(tmp_path: Path) -> None:
    """Guards the test itself: under these capabilities root must not be able to chmod another uid's file."""
    probe = tmp_path / "probe"
    probe.mkdir()
    os.chown(probe, AGENT_UID, AGENT_UID)
    container = {**_init_container(), "command": ["python", "-c", f"import os; os.chmod({str(probe)!r}, 0o700)"]}
    result = _run_as_the_runtime_would(container, tmp_path)
    assert result.returncode != 0 and "PermissionError" in result.stderr


@pytest.mark.parametrize("initial_mode", [0o755, 0o700])
def test_init_container_succeeds_on_every_pod_start(tmp_path: Path, initial_mode: int) -> None:
    state = tmp_path / "edgeagent"
    state.mkdir()
    os.chmod(state, initial_mode)  # hostPath DirectoryOrCreate: root-owned, 0755
    container = _init_container()
    for start in ("first", "second", "third"):
        result = _run_as_the_runtime_would(container, state)
        assert result.returncode == 0, f"{start} pod start failed: {result.stderr.strip()}"
        st = state.stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (AGENT_UID, AGENT_UID, 0o700), start


def test_init_container_repairs_a_wrong_mode_on_a_directory_the_agent_already_owns(tmp_path: Path) -> None:
    state = tmp_path / "edgeagent"
    state.mkdir()
    os.chown(state, AGENT_UID, AGENT_UID)
    os.chmod(state, 0o755)
    result = _run_as_the_runtime_would(_init_container(), state)
    assert result.returncode == 0, result.stderr
    st = state.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (AGENT_UID, AGENT_UID, 0o700)
