"""The AdvancedRollingUpdate's view of a DaemonSet's pods by node (`rolling.node_views`), kept current from the
pods that changed, so that a planning pass does not group, sort and classify every pod again.

A roll plans on every event of any of its pods; at 10,000 nodes, deriving the views from every pod took about
half of each pass (py-spy at 2,000 nodes: the AdvancedRollingUpdate pass was 56-70 % of the controller's CPU
during a roll), and a wave boundary's reconcile waits behind that pass before its first DELETE. The tracker
regroups only the nodes whose pods changed; a view is also rebuilt when its Node object is another one than the
view was built with (the node informer replaces an object on every change and never edits one in place), so
its readiness is never stale. What it answers is, view for view, what `node_views` answers from every pod
(tests/unit/test_controller_roll_views.py).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Mapping
from typing import Any

from edgeagent.controller.pod_index import Digest, Tracker
from edgeagent.controller.pods import node_of
from edgeagent.controller.revisions import template_generation, updated_test
from edgeagent.controller.rolling import NodeView, view_of
from edgeagent.kube.objects import is_terminating, uid_of

JSON = dict[str, Any]


def _never(_labels: JSON) -> bool:
    return False


class RollViews(Tracker[JSON]):
    """Per node the DaemonSet's pods and its `NodeView`; the UIDs of the pods not being deleted (`live`, what the
    roll's expectations are checked against). Context: the revision and the template generation (what decides
    whether a pod is updated)."""

    __slots__ = ("_by_node", "_live", "_live_uid", "_node_at", "_order", "_stale", "_updated", "_views")

    def __init__(self) -> None:
        super().__init__()
        self._by_node: dict[str, dict[str, JSON]] = {}  # node -> pod key -> pod
        self._node_at: dict[str, str] = {}  # pod key -> node
        self._order: list[str] = []  # the nodes of `_by_node`, sorted: the roll's order
        self._views: dict[str, NodeView] = {}  # node -> its view, while its pods are unchanged
        self._stale: set[str] = set()  # nodes whose pods changed since their view was built
        self._live: dict[str, int] = {}  # uid -> how many pods not being deleted carry it
        self._live_uid: dict[str, str] = {}  # pod key -> uid, for those pods
        self._updated: Callable[[JSON], bool] = _never

    @property
    def live(self) -> Mapping[str, int]:
        """The UIDs of the pods not being deleted (as keys): what `plan_step` derives as `live`."""
        return self._live

    def views(self, ds: JSON, pods: Mapping[str, JSON], current_hash: str,
              nodes: Mapping[str, JSON]) -> list[NodeView]:
        """`node_views(ds, pods.values(), nodes, current_hash)`, from the pods marked since the last call."""
        self._updated = updated_test(ds, current_hash)
        self.refresh(pods, (current_hash, template_generation(ds)))
        cached = self._views
        for name in self._stale:
            cached.pop(name, None)
        self._stale.clear()
        found: list[NodeView] = []
        for name in self._order:
            node = nodes.get(name)
            view = cached.get(name)
            if view is None or view.node is not node:
                view = cached[name] = view_of(name, list(self._by_node[name].values()), node, self._updated)
            found.append(view)
        return found

    def _reset(self) -> None:
        self._by_node.clear()
        self._node_at.clear()
        self._order.clear()
        self._views.clear()
        self._stale.clear()
        self._live.clear()
        self._live_uid.clear()

    def _add(self, key: str, pod: JSON) -> None:
        if not is_terminating(pod):
            uid = uid_of(pod)
            self._live_uid[key] = uid
            self._live[uid] = self._live.get(uid, 0) + 1
        node = node_of(pod)
        if not node:
            return
        self._node_at[key] = node
        group = self._by_node.get(node)
        if group is None:
            group = self._by_node[node] = {}
            insort(self._order, node)
        group[key] = pod
        self._stale.add(node)

    def _remove(self, key: str, before: Digest) -> None:
        uid = self._live_uid.pop(key, None)
        if uid is not None:
            left = self._live[uid] - 1
            if left:
                self._live[uid] = left
            else:
                del self._live[uid]
        node = self._node_at.pop(key, None)
        if node is None:
            return
        group = self._by_node[node]
        del group[key]
        if group:
            self._stale.add(node)
            return
        del self._by_node[node]
        del self._order[bisect_left(self._order, node)]
        self._views.pop(node, None)
        self._stale.discard(node)
