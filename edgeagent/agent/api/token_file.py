"""Reading the agent's bearer token from a file, for the server and for the CLI commands that call it.

Standard library only, so that `edgeagent pods` and friends do not load the aiohttp server to read it.
"""

from __future__ import annotations

from pathlib import Path


def read_token_file(path: Path) -> str:
    """The token in `path`, surrounding whitespace stripped; ValueError when empty, OSError when unreadable."""
    token = path.read_text(encoding="utf-8").strip()
    if not token:
        raise ValueError(f"token file {path} is empty")
    return token
