"""The repository stands alone: nothing in it points a user at design briefs they do not have.

The project grew from briefs kept outside the repository; citing them ("see the brief, section 2") leaves a
user of the repository with a dangling reference, so every fact must be stated in the project's own docs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Spelled in pieces so this file does not cite them itself.
FORBIDDEN = ("../" + "shared", "shared/" + "docs", "interfaces" + ".md", "kube-api-" + "semantics")


def tracked_text_files() -> list[Path]:
    """Every file git tracks (so a local .venv or .cache never counts), skipping binaries."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    files = []
    for name in out.decode().split("\0"):
        path = ROOT / name
        if name and path.is_file():
            files.append(path)
    return files


def test_no_file_cites_the_external_briefs() -> None:
    hits = []
    for path in tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for lineno, line in enumerate(text.splitlines(), start=1):
            for word in FORBIDDEN:
                if word in line:
                    hits.append(f"{path.relative_to(ROOT)}:{lineno}: {word}")
    assert not hits, "files cite documents outside the repository:\n" + "\n".join(hits)
