"""Files the sim hands out -- kubeconfigs, tokens, its signing key -- written so that nobody reads half of one.

Tests, scripts and agents poll for these files and re-read them when they change (a rotated token), and they
hold credentials: each is written 0600 under a temporary name and renamed into place."""

from __future__ import annotations

import os
from pathlib import Path


def write_private(path: Path, data: str | bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)
