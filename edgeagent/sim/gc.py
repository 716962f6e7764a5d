"""The garbage collector's other half: dependents created after their owner was already gone.

The store deletes an owner's dependents when the owner goes (Store._cascade). That misses a dependent
created with an ownerReference to an owner that no longer exists (a controller that read a pod, then created a
Job for it just after the pod was removed). The real garbage collector finds such objects through its graph and
deletes them; this does the same for objects owned by Pods and Jobs (the pre-pull chain: pod → Job → pod).
Other owner kinds are left alone on purpose: tests and benches create DaemonSet pods whose DaemonSet does not
exist, to have pods nothing recreates.
"""

from __future__ import annotations

from typing import Any

from edgeagent import log
from edgeagent.kube.objects import meta, name_of, namespace_of
from edgeagent.sim.errors import ApiError
from edgeagent.sim.resources import RESOURCES, Resource
from edgeagent.sim.store import Store, WatchEvent

JSON = dict[str, Any]

_log = log.get("edgeagent.sim.gc")
_BY_KIND: dict[tuple[str, str], Resource] = {(r.api_version, r.kind): r for r in RESOURCES.values()}
COLLECTED_OWNER_KINDS = frozenset({("v1", "Pod"), ("batch/v1", "Job")})


def owner_exists(store: Store, obj: JSON, ref: JSON) -> bool:
    """Whether the owner named by `ref` (same namespace, or cluster-scoped) exists with the referenced uid.

    An owner of a kind the sim does not serve counts as existing: the sim cannot know, so it keeps the object.
    """
    res = _BY_KIND.get((str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")))
    if res is None:
        return True
    try:
        owner = store.entry(res, namespace_of(obj) if res.namespaced else None, str(ref.get("name") or "")).obj
    except ApiError:
        return False
    return bool(meta(owner).get("uid") == ref.get("uid"))


class OwnerGarbageCollector:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.collected = 0

    async def run(self) -> None:
        subscription = self.store.open_subscription(None, copy=False)
        try:
            for res in list(self.store.registry.stored.values()):  # custom kinds too
                for stored in self.store.list_page(res).items:
                    self._check(res, stored.obj)
            async for event in subscription:
                self.on_event(event)
        finally:
            subscription.close()

    def on_event(self, event: WatchEvent) -> None:
        if event.type == "ADDED":
            self._check(event.resource, event.object)

    def _check(self, res: Resource, obj: JSON) -> None:
        refs = [r for r in meta(obj).get("ownerReferences") or [] if isinstance(r, dict)]
        if not refs or meta(obj).get("deletionTimestamp"):
            return
        if any((r.get("apiVersion"), r.get("kind")) not in COLLECTED_OWNER_KINDS for r in refs):
            return
        if any(owner_exists(self.store, obj, ref) for ref in refs):
            return
        try:
            self.store.delete(res, namespace_of(obj) if res.namespaced else None, name_of(obj),
                              {"propagationPolicy": "Background", "preconditions": {"uid": meta(obj).get("uid")}})
        except ApiError as exc:
            _log.debug("orphan_delete_skipped", kind=res.kind, name=name_of(obj), error=str(exc))
            return
        self.collected += 1
        _log.info("orphan_deleted", kind=res.kind, name=name_of(obj))
