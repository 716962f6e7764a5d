"""`edgeagent demo` without kubectl (issue 22 item 11): one line naming what is missing, before anything
starts, and no work directory left behind with an empty log for the user to look into."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_demo_without_kubectl_says_so_in_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("curl", "cat"):
        found = shutil.which(tool)
        assert found, f"{tool} is needed on this machine to set up the test"
        (bin_dir / tool).symlink_to(found)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "PATH": str(bin_dir), "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "edgeagent.cli", "demo"], capture_output=True, text=True,
                            env=env, timeout=60, check=False)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == ("edgeagent demo needs kubectl on PATH (it runs every command it shows for real): "
                             "install it and run it again\n")
    assert list(tmp.iterdir()) == []
