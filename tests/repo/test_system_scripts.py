"""The shell scripts run under `set -o pipefail`, where `producer | grep -q` (and `| head`) can fail although
the line was there (issue 22 item 3): grep exits at its first match, the producer's next write dies of
SIGPIPE (exit 141), and pipefail reports the pipe as failed. `make test-system` once failed that way.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted([*(ROOT / "tests" / "system").glob("*.sh"), *(ROOT / "tools").glob("*.sh"),
                  ROOT / "tests" / "system-deps.sh", ROOT / ".ci" / "run"])
# A pipe into a reader that may stop reading early: grep -q / grep -…q…, head.
EARLY_EXIT_READER = re.compile(r"\|\s*(grep\s+-[A-Za-z]*q|head\b)")


def test_no_script_pipes_into_a_reader_that_stops_early() -> None:
    hits = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
            for path in SCRIPTS if path.exists()
            for number, line in enumerate(path.read_text().splitlines(), start=1)
            if EARLY_EXIT_READER.search(line) and not line.lstrip().startswith("#")]
    assert hits == [], "use output_has (tests/system/lib.sh) or sed -n instead:\n" + "\n".join(hits)


def bash(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", f"set -euo pipefail\nsource {ROOT / 'tests/system/lib.sh'}\n{script}"],
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_problem_is_real_grep_q_after_a_long_output_fails_under_pipefail() -> None:
    result = bash("seq 1 200000 | grep -q '^1$' && echo found || echo \"pipe failed: ${PIPESTATUS[*]}\"")
    assert result.stdout.strip() == "pipe failed: 141 0"


def test_output_has_finds_a_line_early_in_a_long_output() -> None:
    assert bash("output_has '^1$' seq 1 200000 && echo found").stdout == "found\n"


def test_output_has_is_false_when_the_line_is_missing_or_the_command_fails() -> None:
    assert bash("output_has '^x$' seq 1 10 || echo absent").stdout == "absent\n"
    assert bash("output_has . false || echo failed").stdout == "failed\n"


def test_the_system_test_prunes_the_images_earlier_builds_left() -> None:
    """vfs keeps every build in full: without a prune after the build, .cache/ grew ~700 MB per run (issue 22.11)."""
    script = (ROOT / "tests" / "system" / "run.sh").read_text()
    build = script.index('"${PODMAN[@]}" build')
    assert '"${PODMAN[@]}" image prune -f' in script[build:]
