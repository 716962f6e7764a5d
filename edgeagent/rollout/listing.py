"""One paginated list of each kind a DaemonSet's rollout is judged from: what `edgeagent fleet`, `fleet nodes`
and `rollout status` read, so the three views are computed from the same objects by the same rules (`model`).

Only lists, never a `get`: list (and watch) rights on DaemonSets, pods, nodes, Events, ControllerRevisions and
RolloutPlans are all a read-only viewer needs, and a 403 names the one that is missing (`ListError`). Each list
is read page by page (`limit`/`continue`): a 10,000-node fleet is never one response, and never cut short.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from edgeagent.kube.client import KubeClient, KubeError
from edgeagent.kube.errors import Forbidden, NotFound
from edgeagent.kube.objects import name_of
from edgeagent.rollout import model, plan_source

JSON = dict[str, Any]


class ListError(Exception):
    """A list the view needs cannot be read (a missing permission, a DaemonSet that is not there or not
    managed): one line for the operator."""


@dataclass(frozen=True)
class Query:
    """What to list: a namespace (or every one), one DaemonSet, a label selector, and the node view's extras."""

    namespace: str = "default"
    all_namespaces: bool = False
    daemonset: str = ""  # only this DaemonSet of `namespace` (refused when missing or not managed)
    selector: str = ""  # on DaemonSets; with `nodes`, on nodes
    nodes: bool = False  # the node view: the nodes' Leases too (LAST SEEN), and which nodes `selector` picks


@dataclass(frozen=True)
class Listed:
    daemonsets: list[JSON]
    pods: list[JSON]
    nodes: list[JSON]
    events: list[JSON]
    revisions: list[JSON]
    leases: list[JSON] = field(default_factory=list)
    # `fleet nodes -l SEL`: the names of the nodes the selector picks (the states need every node).
    selected: set[str] | None = None
    notes: tuple[str, ...] = ()
    plans: list[JSON] = field(default_factory=list)  # the RolloutPlans (plan_source reads them)


PAGE_SIZE = 500
NODE_LEASE_NAMESPACE = "kube-node-lease"


@dataclass(frozen=True)
class Resource:
    """What a list reads, to name the permission a 403 says is missing."""

    path: str
    resource: str  # as RBAC names it: `daemonsets.apps`, `pods`
    namespace: str | None  # None: every namespace (or cluster-scoped)

    def permission(self) -> str:
        where = f'in namespace "{self.namespace}"' if self.namespace else "at cluster scope (all namespaces)"
        return f"list {self.resource} {where}"


def forbidden(resource: Resource, exc: KubeError) -> ListError:
    """A 403 is a missing permission, not a rejected credential: say which one (the server's words follow)."""
    return ListError(f"not allowed to {resource.permission()}: the API server accepted your credentials but "
                      f"refused this (403): {exc.message}; a read-only viewer needs list and watch on "
                      f"{resource.resource}")


async def _items(client: KubeClient, resource: Resource, query: dict[str, str | int | bool] | None = None) \
        -> list[JSON]:
    """Every item of a list, page by page through `limit`/`continue` (a 10,000-node fleet must not be one
    response, and a list cut after its first page would leave nodes out unnoticed)."""
    items: list[JSON] = []
    token = ""
    while True:
        params: dict[str, str | int | bool] = {**(query or {}), "limit": PAGE_SIZE}
        if token:
            params["continue"] = token
        try:
            page = await client.get(resource.path, query=params)
        except Forbidden as exc:
            raise forbidden(resource, exc) from exc
        items.extend(i for i in page.get("items") or [] if isinstance(i, dict))
        token = str((page.get("metadata") or {}).get("continue") or "")
        if not token:
            return items


async def fetch(client: KubeClient, query: Query) -> Listed:
    """One list of each kind the state rules read; only lists (never a `get`), so list+watch rights do."""
    ns = None if query.all_namespaces else query.namespace
    scope = "" if ns is None else f"/namespaces/{ns}"

    def res(path: str, resource: str, namespace: str | None = ns) -> Resource:
        return Resource(path, resource, namespace)

    if query.daemonset:
        one = res(f"/apis/apps/v1/namespaces/{query.namespace}/daemonsets", "daemonsets.apps", query.namespace)
        daemonsets = await _items(client, one, {"fieldSelector": f"metadata.name={query.daemonset}"})
        if not daemonsets:
            raise ListError(f'daemonset "{query.daemonset}" not found in namespace "{query.namespace}"')
        if not model.is_managed(daemonsets[0]):
            raise ListError(f'daemonset "{query.daemonset}" in namespace "{query.namespace}" is not managed by '
                             "edgeagent (it has no apps.openyurt.io/update-strategy annotation)")
    else:
        by_label = query.selector and not query.nodes
        ds_query: dict[str, str | int | bool] = {"labelSelector": query.selector} if by_label else {}
        daemonsets = await _items(client, res(f"/apis/apps/v1{scope}/daemonsets", "daemonsets.apps"), ds_query)
    nodes_res = res("/api/v1/nodes", "nodes", None)
    pods, nodes, events, revisions = await asyncio.gather(
        _items(client, res(f"/api/v1{scope}/pods", "pods")),
        _items(client, nodes_res),
        _items(client, res(f"/api/v1{scope}/events", "events"), {"fieldSelector": f"source={model.AGENT_COMPONENT}"}),
        _items(client, res(f"/apis/apps/v1{scope}/controllerrevisions", "controllerrevisions.apps")),
    )
    plans = await _plans(client, res(f"{plan_source.GROUP_PATH}{scope}/{plan_source.PLURAL}", plan_source.RESOURCE))
    selected = None
    if query.selector and query.nodes:
        picked = await _items(client, nodes_res, {"labelSelector": query.selector})
        selected = {name_of(n) for n in picked}
    notes: tuple[str, ...] = ()
    leases: list[JSON] = []
    try:
        if query.nodes:
            leases = await _items(client, res(f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases",
                                              "leases.coordination.k8s.io", NODE_LEASE_NAMESPACE))
    except ListError as exc:
        # LAST SEEN only: the states do not need it, so a viewer without it still sees the fleet.
        notes = (f"edgeagent: warning: LAST SEEN unknown: {exc}",)
    return Listed(daemonsets, pods, nodes, events, revisions, leases, selected, notes, plans)


async def _plans(client: KubeClient, resource: Resource) -> list[JSON]:
    """The RolloutPlans; none when the cluster does not serve the kind (its CRD is not installed)."""
    try:
        return await _items(client, resource)
    except NotFound:
        return []
