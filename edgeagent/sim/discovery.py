"""Legacy (plain JSON) discovery documents built from the resource table.

kubectl and client-go ask for aggregated discovery first; answering with plain `application/json`
makes them fall back to these per-group documents, which is all they need to map `kubectl get ds`
to `/apis/apps/v1/namespaces/<ns>/daemonsets`. OpenAPI documents are in sim/openapi.py.
"""

from __future__ import annotations

import re
from typing import Any

from edgeagent.sim.resources import Registry, Resource

JSON = dict[str, Any]

# kubectl warns when the server is more than one minor version away from it; the CI kubectl is 1.32.
SERVER_MAJOR = "1"
SERVER_MINOR = "32"
OBJECT_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SUBRESOURCE_VERBS = ["get", "patch", "update"]


def version_info() -> JSON:
    return {
        "major": SERVER_MAJOR,
        "minor": SERVER_MINOR,
        "gitVersion": f"v{SERVER_MAJOR}.{SERVER_MINOR}.0-edgeagent-sim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> JSON:
    """`/api`: the core group's versions."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group_entry(registry: Registry, group: str) -> JSON:
    versions = [{"groupVersion": f"{group}/{v}", "version": v} for g, v in registry.group_versions() if g == group]
    versions.sort(key=lambda v: _version_priority(v["version"]))
    return {"name": group, "versions": versions, "preferredVersion": versions[0]}


def _version_priority(version: str) -> tuple[int, int, int]:
    """kube-aggregator's version order (GA before beta before alpha, higher first): the first is preferred."""
    match = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if match is None:
        return (3, 0, 0)
    stage = {None: 0, "beta": 1, "alpha": 2}[match.group(2)]
    return (stage, -int(match.group(1)), -int(match.group(3) or 0))


def api_group_names(registry: Registry) -> list[str]:
    names: list[str] = []
    for group, _ in registry.group_versions():
        if group and group not in names:
            names.append(group)
    return names


def api_group_list(registry: Registry) -> JSON:
    """`/apis`: every named group, custom ones (from Established CRDs) included."""
    groups = [_group_entry(registry, g) for g in api_group_names(registry)]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, group: str) -> JSON | None:
    """`/apis/<group>`, or None for a group the server does not serve."""
    if group not in registry.groups:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(registry, group)}


def _resource_entries(res: Resource) -> list[JSON]:
    main: JSON = {
        "name": res.plural,
        "singularName": res.singular,
        "namespaced": res.namespaced,
        "kind": res.kind,
        "verbs": OBJECT_VERBS,
    }
    if res.short_names:
        main["shortNames"] = list(res.short_names)
    if res.categories:
        main["categories"] = list(res.categories)
    entries = [main]
    for sub in res.subresources:
        entry: JSON = {"name": f"{res.plural}/{sub}", "singularName": "", "namespaced": res.namespaced}
        if sub == "scale":  # another group's kind, named as such
            entry.update(group="autoscaling", version="v1", kind="Scale")
        else:
            entry["kind"] = res.kind
        entry["verbs"] = SUBRESOURCE_VERBS
        entries.append(entry)
    return entries


def api_resource_list(registry: Registry, group: str, version: str) -> JSON | None:
    """`/api/v1` or `/apis/<group>/<version>`, or None when that group/version is not served."""
    served = registry.resources_in(group, version)
    if not served:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": [entry for res in served for entry in _resource_entries(res)],
    }
