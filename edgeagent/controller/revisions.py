"""Which revision of a DaemonSet is current, and whether a pod runs it.

The hash is read from the DaemonSet controller's ControllerRevisions, never computed: the real hash is
FNV-32a over Go's serialisation of the template, which no other implementation reproduces exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from edgeagent.contract import ANNOTATION_TEMPLATE_GENERATION, LABEL_REVISION_HASH, LABEL_TEMPLATE_GENERATION
from edgeagent.kube.objects import annotations_of, controller_owner, labels_of, meta, name_of, uid_of

JSON = dict[str, Any]


def owned_by(obj: JSON, owner: JSON) -> bool:
    """Controller ownerReference to `owner` by UID: a same-named successor never adopts old objects."""
    ref = controller_owner(obj)
    return ref is not None and bool(uid_of(owner)) and ref.get("uid") == uid_of(owner)


def _revision_number(rev: JSON) -> int:
    try:
        return int(rev.get("revision") or 0)
    except (TypeError, ValueError):
        return 0


def newest_revision(ds: JSON, revisions: Iterable[JSON]) -> JSON | None:
    """The DaemonSet's ControllerRevision with the highest `revision` (ties: newest, then name)."""
    owned = [rev for rev in revisions if owned_by(rev, ds)]
    if not owned:
        return None
    return max(
        owned,
        key=lambda rev: (_revision_number(rev), str(meta(rev).get("creationTimestamp") or ""), name_of(rev)),
    )


def revision_hash(ds: JSON, rev: JSON) -> str:
    """The `controller-revision-hash` label, else the name suffix after `<ds>-` (how the name is built)."""
    label = labels_of(rev).get(LABEL_REVISION_HASH)
    if label:
        return label
    prefix = name_of(ds) + "-"
    name = name_of(rev)
    return name[len(prefix):] if name.startswith(prefix) else ""


def _strip_patch_directive(template: object) -> object:
    if isinstance(template, dict):
        return {k: v for k, v in template.items() if k != "$patch"}
    return template


def revision_matches_template(ds: JSON, rev: JSON) -> bool:
    """Whether the revision holds the DaemonSet's present template.

    The revision informer and the DaemonSet informer are separate streams: right after a template change we
    may see the new DaemonSet before its new revision. Acting then would treat the previous hash as
    current (OTA would flip conditions back and forth); this check makes the controller wait instead.
    A revision without readable data is trusted (nothing to compare).
    """
    data = rev.get("data")
    if not isinstance(data, dict):
        return True
    spec = data.get("spec")
    if not isinstance(spec, dict) or "template" not in spec:
        return True
    ds_template = (ds.get("spec") or {}).get("template")
    return _strip_patch_directive(spec["template"]) == _strip_patch_directive(ds_template)


def spec_observed(ds: JSON) -> bool:
    """The DaemonSet controller has processed the latest spec (so its revisions are up to date)."""
    generation = meta(ds).get("generation")
    observed = (ds.get("status") or {}).get("observedGeneration")
    if not isinstance(generation, int) or not isinstance(observed, int):
        return True
    return observed >= generation


def current_hash(ds: JSON, revisions: Iterable[JSON]) -> str | None:
    """The hash pods must carry to be up to date, or None while it cannot be known yet."""
    if not spec_observed(ds):
        return None
    rev = newest_revision(ds, revisions)
    if rev is None or not revision_matches_template(ds, rev):
        return None
    return revision_hash(ds, rev) or None


def template_generation(ds: JSON) -> str | None:
    value = annotations_of(ds).get(ANNOTATION_TEMPLATE_GENERATION)
    return str(value) if value else None


def updated_test(ds: JSON, hash_: str) -> Callable[[JSON], bool]:
    """A test of a pod's labels: is it on the current revision? As OpenYurt decides it: the hash label equals
    the current hash, or the template generation label matches. The DaemonSet's part is read once, since the
    planners run the test for every pod on every pass."""
    generation = template_generation(ds)

    def updated(labels: JSON) -> bool:
        return bool((hash_ and labels.get(LABEL_REVISION_HASH) == hash_)
                    or (generation is not None and labels.get(LABEL_TEMPLATE_GENERATION) == generation))

    return updated


def is_pod_updated(ds: JSON, pod: JSON, hash_: str) -> bool:
    return updated_test(ds, hash_)(labels_of(pod))
