"""make's set-up (issue 22 items 4 and 11): the Python version is checked before anything is created, a venv
made by another Python is rebuilt instead of reused, and `make demo` installs no test toolchain.

tools/venv.sh is what `make demo` / `make test` run first; these tests run it (and make) with a stand-in
"python" that reports an old version, and stop before any download (`--check-only`) where they can.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "venv.sh"


def fake_python(path: Path, version: str) -> Path:
    """A "python" that answers the two questions tools/venv.sh asks: its version, and whether it is 3.11+."""
    major, minor = (int(part) for part in version.split("."))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"""#!/bin/sh
case "$2" in
  *print*) echo {version} ;;
  *exit*) exit {1 if (major, minor) < (3, 11) else 0} ;;
esac
""")
    path.chmod(0o755)
    return path


def run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False, cwd=ROOT,
                          env={**os.environ, **env})


def test_an_old_python_is_refused_in_one_line_before_a_venv_is_made(tmp_path: Path) -> None:
    old = fake_python(tmp_path / "python3.10", "3.10")
    venv = tmp_path / "venv"
    result = run(["bash", str(SCRIPT), "sim"], PYTHON=str(old), VENV=str(venv))
    assert result.returncode == 1
    assert result.stderr == (f"make: edgeagent needs Python 3.11 or newer; '{old}' is Python 3.10 "
                             "(try: make PYTHON=python3.11 ...)\n")
    assert not venv.exists()


def test_make_demo_with_an_old_python_stops_at_that_line(tmp_path: Path) -> None:
    old = fake_python(tmp_path / "python3.10", "3.10")
    venv = tmp_path / "venv"
    result = run(["make", "-s", "demo", f"PYTHON={old}", f"VENV={venv}"])
    assert result.returncode != 0
    assert f"make: edgeagent needs Python 3.11 or newer; '{old}' is Python 3.10" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not venv.exists()


def test_a_venv_left_by_another_python_is_rebuilt_not_reused(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    fake_python(venv / "bin" / "python", "3.10")  # what a first `make` with Python 3.10 left behind
    (venv / ".installed-sim").write_text("stale\n")
    want = f"{sys.version_info.major}.{sys.version_info.minor}"
    result = run(["bash", str(SCRIPT), "--check-only"], PYTHON=sys.executable, VENV=str(venv))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"make: {venv} has Python 3.10, not {sys.executable}'s {want}: rebuilding it\n"
    assert not venv.exists()


def test_a_venv_of_the_right_python_is_kept(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    want = f"{sys.version_info.major}.{sys.version_info.minor}"
    fake_python(venv / "bin" / "python", want)
    result = run(["bash", str(SCRIPT), "--check-only"], PYTHON=sys.executable, VENV=str(venv))
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert (venv / "bin" / "python").exists()


def test_make_demo_installs_the_sim_extra_only_and_make_test_the_toolchain() -> None:
    def setup_line(target: str) -> str:
        dry = run(["make", "-n", target])
        assert dry.returncode == 0, dry.stderr
        return next(line for line in dry.stdout.splitlines() if "tools/venv.sh" in line)

    assert setup_line("demo").endswith("bash tools/venv.sh sim")
    assert setup_line("test").endswith("bash tools/venv.sh sim,exec,test,dev")
