"""Whether a pod can move to a DaemonSet revision in place, and the one PATCH that does it (issue 37, §9).

An in-place upgrade patches a pod's container images instead of deleting the pod: the kubelet restarts only
those containers, in the same pod, so a cut link never leaves the node without its daemon. It is only
possible when the revision changes nothing but images: the API server refuses any other change to a pod's
spec, and a changed label or annotation would leave the pod unlike its template. So, as OpenKruise does, the
decision compares the template the pod was made from with the target one (not the pod with the target: the
pod carries what the API server and the DaemonSet controller added, such as its node, tolerations, service
account token), and checks that the pod still runs the images of its own revision.

Pure functions, no I/O: the controller's executor and the agent's request path both call them, and the tests
cover the input space with hypothesis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeagent.contract import (
    ANNOTATION_UPDATE_TYPE,
    LABEL_REVISION_HASH,
    UPDATE_TYPE_IN_PLACE_IF_POSSIBLE,
    UPDATE_TYPE_RECREATE,
)
from edgeagent.kube.objects import annotations_of, meta, uid_of

JSON = dict[str, Any]

UPDATE_TYPES = (UPDATE_TYPE_IN_PLACE_IF_POSSIBLE, UPDATE_TYPE_RECREATE)
_CONTAINER_LISTS = (("containers", "container"), ("initContainers", "init container"))


def update_type(ds: JSON) -> str:
    """The DaemonSet's `edgeagent.io/update-type` (default Recreate); ValueError names a value we do not know."""
    value = annotations_of(ds).get(ANNOTATION_UPDATE_TYPE)
    if value is None or value == "":
        return UPDATE_TYPE_RECREATE
    if value not in UPDATE_TYPES:
        raise ValueError(f"{ANNOTATION_UPDATE_TYPE}: {value!r} is not one of {', '.join(UPDATE_TYPES)}")
    return str(value)


@dataclass(frozen=True)
class InPlacePatch:
    """The images to set (container name → image, per list) and the revision label, guarded by UID and RV."""

    containers: tuple[tuple[str, str], ...]
    init_containers: tuple[tuple[str, str], ...]
    revision_hash: str
    uid: str
    resource_version: str

    def body(self) -> JSON:
        """A strategic merge patch: containers merge by name, so only the named ones change; the UID and
        resourceVersion in metadata make the API server refuse it (409) for another pod or a changed one."""
        spec: JSON = {}
        if self.containers:
            spec["containers"] = [{"name": name, "image": image} for name, image in self.containers]
        if self.init_containers:
            spec["initContainers"] = [{"name": name, "image": image} for name, image in self.init_containers]
        body: JSON = {"metadata": {"uid": self.uid, "resourceVersion": self.resource_version,
                                   "labels": {LABEL_REVISION_HASH: self.revision_hash}}}
        if spec:
            body["spec"] = spec
        return body

    def images(self) -> dict[str, str]:
        """Every image the patch sets, by container name (for Events and the outcome check)."""
        return dict(self.init_containers) | dict(self.containers)


@dataclass(frozen=True)
class Fallback:
    """The pod must be recreated; `reasons` say why, in words for an Event."""

    reasons: tuple[str, ...]

    @property
    def message(self) -> str:
        return "; ".join(self.reasons)


def decide(pod: JSON, current: JSON, target: JSON, revision_hash: str) -> InPlacePatch | Fallback:
    """Move `pod` (made from the template `current`) to the template `target` (revision `revision_hash`)."""
    reasons = template_differences(current, target)
    reasons += _pod_differences(pod, current)
    if reasons:
        return Fallback(tuple(reasons))
    lists = [_image_changes(pod, target, key) for key, _ in _CONTAINER_LISTS]
    return InPlacePatch(lists[0], lists[1], revision_hash, uid_of(pod), str(meta(pod).get("resourceVersion") or ""))


def template_differences(current: JSON, target: JSON) -> list[str]:
    """Everything but container images that differs between two pod templates (empty: images only)."""
    reasons: list[str] = []
    old_meta, new_meta = current.get("metadata") or {}, target.get("metadata") or {}
    for key in sorted(set(old_meta) | set(new_meta)):
        if old_meta.get(key) != new_meta.get(key):
            reasons.append(f"template {key} changed")
    old_spec, new_spec = current.get("spec") or {}, target.get("spec") or {}
    for key in sorted(set(old_spec) | set(new_spec)):
        if key in dict(_CONTAINER_LISTS) or old_spec.get(key) == new_spec.get(key):
            continue
        reasons.append(f"spec.{key} changed")
    for key, noun in _CONTAINER_LISTS:
        reasons += _container_differences(old_spec.get(key) or [], new_spec.get(key) or [], noun)
    return reasons


def _container_differences(old: list[Any], new: list[Any], noun: str) -> list[str]:
    old_names = [str(c.get("name")) for c in old if isinstance(c, dict)]
    new_names = [str(c.get("name")) for c in new if isinstance(c, dict)]
    reasons = [f"{noun} {n} added" for n in new_names if n not in old_names]
    reasons += [f"{noun} {n} removed" for n in old_names if n not in new_names]
    if reasons:
        return reasons
    if old_names != new_names:
        return [f"{noun}s reordered"]
    for before, after in zip(old, new, strict=True):
        for key in sorted(set(before) | set(after)):
            if key != "image" and before.get(key) != after.get(key):
                reasons.append(f"{key} of {noun} {before.get('name')} changed")
    return reasons


def _pod_differences(pod: JSON, current: JSON) -> list[str]:
    """The pod must still hold every container of its template, with its template's image (else it is not
    the pod the template describes: someone changed it, and a patch from here would not make it the target)."""
    reasons: list[str] = []
    for key, noun in _CONTAINER_LISTS:
        running = {str(c.get("name")): c.get("image") for c in (pod.get("spec") or {}).get(key) or []}
        for container in (current.get("spec") or {}).get(key) or []:
            name = str(container.get("name"))
            if name not in running:
                reasons.append(f"the pod has no {noun} {name}")
            elif running[name] != container.get("image"):
                reasons.append(f"{noun} {name} of the pod runs {running[name]}, not its revision's "
                               f"{container.get('image')}")
    return reasons


def _image_changes(pod: JSON, target: JSON, key: str) -> tuple[tuple[str, str], ...]:
    running = {str(c.get("name")): c.get("image") for c in (pod.get("spec") or {}).get(key) or []}
    wanted = [(str(c.get("name")), str(c.get("image"))) for c in (target.get("spec") or {}).get(key) or []]
    return tuple((name, image) for name, image in wanted if running.get(name) != image)
