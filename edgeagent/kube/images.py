"""Image references as a node reports them, shared by the controller (judging a pre-pull) and the sim.

A pod spec says `nginx:1.19.4`; a node's `status.images` says `docker.io/library/nginx:1.19.4`. Success of a
pre-pull is judged by the node's list, so both sides must compare normalized references.
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]


def normalize_image(image: str) -> str:
    """The fully qualified reference a container runtime reports: `nginx` -> `docker.io/library/nginx:latest`."""
    ref = image.strip()
    if not ref:
        return ref
    first, _, rest = ref.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        ref = f"docker.io/{ref}" if rest else f"docker.io/library/{ref}"
    elif first == "docker.io" and "/" not in rest:
        ref = f"docker.io/library/{rest}"
    last = ref.rsplit("/", 1)[-1]
    if "@" not in last and ":" not in last:
        ref += ":latest"
    return ref


def node_has_images(node: JSON, images: list[str]) -> bool:
    """Whether a node's `status.images` lists every one of `images` (by normalized name)."""
    names = {normalize_image(n) for entry in (node.get("status") or {}).get("images") or []
             for n in entry.get("names") or []}
    return all(normalize_image(image) in names for image in images)
