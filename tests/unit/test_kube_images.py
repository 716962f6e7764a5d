"""Image references compared as a node reports them: containerd's fully qualified names, or a runtime that
reports the short form a pod spec used (issue 22 item 13: our code works with both)."""

from __future__ import annotations

import pytest

from edgeagent.kube.images import node_has_images, normalize_image


@pytest.mark.parametrize(("written", "reported"), [
    ("nginx", "docker.io/library/nginx:latest"),
    ("nginx:1.19.4", "docker.io/library/nginx:1.19.4"),
    ("library/nginx:1.19.4", "docker.io/library/nginx:1.19.4"),
    ("docker.io/nginx:1.19.4", "docker.io/library/nginx:1.19.4"),
    ("example/app:1", "docker.io/example/app:1"),
    ("registry.local/app:1", "registry.local/app:1"),
    ("localhost/app", "localhost/app:latest"),
    ("registry.local:5000/team/app:2", "registry.local:5000/team/app:2"),
    ("nginx@sha256:" + "a" * 64, "docker.io/library/nginx@sha256:" + "a" * 64),
])
def test_normalize_gives_the_runtime_reference(written: str, reported: str) -> None:
    assert normalize_image(written) == reported
    assert normalize_image(reported) == reported


def _node(*names: str) -> dict[str, object]:
    return {"status": {"images": [{"names": list(names), "sizeBytes": 1}]}}


def test_a_node_reporting_either_form_has_the_image_in_either_form() -> None:
    containerd = _node("docker.io/library/nginx@sha256:" + "b" * 64, "docker.io/library/nginx:1.19.4")
    short = _node("nginx:1.19.4")
    for node in (containerd, short):
        assert node_has_images(node, ["nginx:1.19.4"])
        assert node_has_images(node, ["docker.io/library/nginx:1.19.4"])
        assert not node_has_images(node, ["nginx:1.19.5"])
