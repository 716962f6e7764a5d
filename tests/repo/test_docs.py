"""The docs a newcomer reads stay small, connected and true (issue 21 item 6, issue 22 item 9).

README is what a newcomer needs first (under 15 KB; the reference lives in docs/); every relative link in
README and docs/ resolves, anchors included; the request states docs/api.md lists are the API's.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
README_LIMIT = 15 * 1024
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        found = re.match(r"^#{1,6}\s+(.*)$", line)
        if not found:
            continue
        base = slug(found.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    return [a or b for a, b in LINK.findall(text)]


def test_readme_is_what_a_newcomer_needs_first_under_15_kb() -> None:
    size = len(README.read_bytes())
    assert size < README_LIMIT, f"README.md is {size} bytes; move reference material to docs/"


def test_every_relative_link_in_readme_and_docs_resolves() -> None:
    broken = []
    for page in [README, *DOCS]:
        for target in links(page):
            if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            where = f"{page.relative_to(ROOT)} -> {target}"
            if not dest.exists():
                broken.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{where}: no such heading")
    assert broken == [], "\n".join(broken)


def test_the_links_checker_sees_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Top\n\n[ok](#top) [gone](missing.md) [bad](#nowhere)\n```\n[in code](x.md)\n```\n")
    assert links(page) == ["#top", "missing.md", "#nowhere"]
    assert anchors(page) == {"top"}
    assert slug("Running as a sidecar: `hostNetwork: true`") == "running-as-a-sidecar-hostnetwork-true"


def test_the_request_states_docs_api_lists_are_the_apis() -> None:
    spec = yaml.safe_load((ROOT / "docs" / "openapi.yaml").read_text())
    states = spec["components"]["schemas"]["UpgradeRequest"]["properties"]["state"]["enum"]
    text = (ROOT / "docs" / "api.md").read_text()
    section = text.split("## Request states", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `([a-z]+)` \|", section, flags=re.M)
    assert documented == states
