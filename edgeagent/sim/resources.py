"""The resource kinds the simulated API server serves, in one table.

Discovery, URL routing, field-selector validation and the store's per-kind rules (status split,
generation, unconditional updates) all read this table, so adding a kind is a one-line change here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from edgeagent.kube.selectors import GENERIC_FIELDS, POD_FIELDS

JSON = dict[str, Any]


@dataclass(frozen=True)
class PrinterColumn:
    """One `additionalPrinterColumns` entry of a CRD version (what `kubectl get` shows beside the name)."""

    name: str
    type: str
    json_path: str
    format: str = ""
    description: str = ""
    priority: int = 0


@dataclass(frozen=True)
class CustomInfo:
    """What a CustomResourceDefinition says about one served version beyond the table's common fields."""

    crd_name: str
    storage_version: str
    schema: JSON = field(compare=False, hash=False)  # the version's openAPIV3Schema
    printer_columns: tuple[PrinterColumn, ...] = ()
    # The scale subresource's paths (specReplicasPath, statusReplicasPath, labelSelectorPath), when on.
    scale: JSON | None = field(default=None, compare=False, hash=False)


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    singular: str
    kind: str
    list_kind: str
    namespaced: bool
    short_names: tuple[str, ...]
    subresources: tuple[str, ...]  # e.g. ("status",)
    # GENERIC_FIELDS (metadata.name, metadata.namespace) are selectable on every kind (the apiserver's default attrs).
    field_selectors: frozenset[str]
    # The apiserver lets PUT omit metadata.resourceVersion for most kinds; Leases must carry it (422).
    unconditional_update: bool = True
    # Kinds whose spec changes bump metadata.generation (and that start at generation 1).
    has_generation: bool = False
    # `kubectl get all` expands the "all" category from discovery.
    categories: tuple[str, ...] = ()
    # Kinds with their own field-label conversion (core Pod, Node, Namespace, Event, Secret; batch Job) reject
    # an unknown field as `field label not supported: X`; every other kind uses the apiserver's default,
    # `"X" is not a known field selector: only "metadata.name", "metadata.namespace"`.
    own_field_labels: bool = False
    # Set for the kinds a CustomResourceDefinition defines (sim/crds.py); None for the built-in kinds.
    custom: CustomInfo | None = field(default=None, compare=False)
    # Where the store keeps this kind's objects: the plural for built-in kinds (as state files always had it),
    # `<plural>.<group>` for custom ones, so a CRD may reuse a built-in plural in its own group.
    key: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", f"{self.plural}.{self.group}" if self.custom else self.plural)

    def unknown_field_message(self, field: str) -> str:
        if self.own_field_labels:
            return f"field label not supported: {field}"
        return f'"{field}" is not a known field selector: only "metadata.name", "metadata.namespace"'

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def stored_api_version(self) -> str:
        """The apiVersion objects of this kind are stored with: a custom kind's are in its CRD's storage version
        whichever version wrote them (the HTTP layer shows them in the version a client reads through)."""
        if self.custom is not None and self.custom.storage_version != self.version:
            return f"{self.group}/{self.custom.storage_version}"
        return self.api_version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def has_status(self) -> bool:
        """With a status subresource, the main endpoint ignores status and `/status` ignores the rest."""
        return "status" in self.subresources


PODS = Resource(
    group="",
    version="v1",
    plural="pods",
    singular="pod",
    kind="Pod",
    list_kind="PodList",
    namespaced=True,
    short_names=("po",),
    subresources=("status",),
    field_selectors=POD_FIELDS,  # with the rendering rules of kube.selectors.pod_field_value
    categories=("all",),
    own_field_labels=True,
)
NODES = Resource(
    group="",
    version="v1",
    plural="nodes",
    singular="node",
    kind="Node",
    list_kind="NodeList",
    namespaced=False,
    short_names=("no",),
    subresources=("status",),
    # Not metadata.namespace: the Node conversion accepts only these two (spec.unschedulable unset = "false").
    field_selectors=frozenset({"metadata.name", "spec.unschedulable"}),
    own_field_labels=True,
)
NAMESPACES = Resource(
    group="",
    version="v1",
    plural="namespaces",
    singular="namespace",
    kind="Namespace",
    list_kind="NamespaceList",
    namespaced=False,
    short_names=("ns",),
    subresources=("status",),
    field_selectors=frozenset({"metadata.name", "status.phase"}),
    own_field_labels=True,
)
EVENTS = Resource(
    group="",
    version="v1",
    plural="events",
    singular="event",
    kind="Event",
    list_kind="EventList",
    namespaced=True,
    short_names=("ev",),
    subresources=(),
    field_selectors=GENERIC_FIELDS
    | {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    },
    own_field_labels=True,
)
DAEMONSETS = Resource(
    group="apps",
    version="v1",
    plural="daemonsets",
    singular="daemonset",
    kind="DaemonSet",
    list_kind="DaemonSetList",
    namespaced=True,
    short_names=("ds",),
    subresources=("status",),
    field_selectors=GENERIC_FIELDS,
    has_generation=True,
    categories=("all",),
)
CONTROLLER_REVISIONS = Resource(
    group="apps",
    version="v1",
    plural="controllerrevisions",
    singular="controllerrevision",
    kind="ControllerRevision",
    list_kind="ControllerRevisionList",
    namespaced=True,
    short_names=(),
    subresources=(),
    field_selectors=GENERIC_FIELDS,
)
LEASES = Resource(
    group="coordination.k8s.io",
    version="v1",
    plural="leases",
    singular="lease",
    kind="Lease",
    list_kind="LeaseList",
    namespaced=True,
    short_names=(),
    subresources=(),
    field_selectors=GENERIC_FIELDS,
    unconditional_update=False,
)
JOBS = Resource(
    group="batch",
    version="v1",
    plural="jobs",
    singular="job",
    kind="Job",
    list_kind="JobList",
    namespaced=True,
    short_names=(),
    subresources=("status",),
    field_selectors=GENERIC_FIELDS | {"status.successful"},
    has_generation=True,
    categories=("all",),
    own_field_labels=True,
)



def _stored(group: str, plural: str, kind: str, *, namespaced: bool = True, short_names: tuple[str, ...] = (),
            status: bool = False, has_generation: bool = False, categories: tuple[str, ...] = ()) -> Resource:
    """A kind the sim only stores (no controller acts on it): enough for `kubectl apply -f deploy/`."""
    return Resource(
        group=group,
        version="v1",
        plural=plural,
        singular=kind.lower(),
        kind=kind,
        list_kind=f"{kind}List",
        namespaced=namespaced,
        short_names=short_names,
        subresources=("status",) if status else (),
        field_selectors=GENERIC_FIELDS,
        has_generation=has_generation,
        categories=categories,
    )


# The kinds of our own deploy/ manifests (agent DaemonSet, controller Deployment, least-privilege RBAC).
SERVICE_ACCOUNTS = _stored("", "serviceaccounts", "ServiceAccount", short_names=("sa",))
# What `kubectl create configmap|secret|service` makes; stored with the real server's defaults (sim/stored_kinds).
CONFIG_MAPS = _stored("", "configmaps", "ConfigMap", short_names=("cm",))
# Secrets have their own field-label conversion: `type` is selectable too.
SECRETS = replace(_stored("", "secrets", "Secret"), field_selectors=GENERIC_FIELDS | {"type"}, own_field_labels=True)
SERVICES = _stored("", "services", "Service", short_names=("svc",), status=True, categories=("all",))
DEPLOYMENTS = _stored("apps", "deployments", "Deployment", short_names=("deploy",), status=True,
                      has_generation=True, categories=("all",))
_RBAC = "rbac.authorization.k8s.io"
CLUSTER_ROLES = _stored(_RBAC, "clusterroles", "ClusterRole", namespaced=False)
CLUSTER_ROLE_BINDINGS = _stored(_RBAC, "clusterrolebindings", "ClusterRoleBinding", namespaced=False)
ROLES = _stored(_RBAC, "roles", "Role")
ROLE_BINDINGS = _stored(_RBAC, "rolebindings", "RoleBinding")

# admissionregistration.k8s.io/v1 (served from 1.30): enforced with CEL by sim/admission_policy.py.
_ADMISSION = "admissionregistration.k8s.io"
VALIDATING_ADMISSION_POLICIES = _stored(_ADMISSION, "validatingadmissionpolicies", "ValidatingAdmissionPolicy",
                                        namespaced=False, status=True, has_generation=True,
                                        categories=("api-extensions",))
VALIDATING_ADMISSION_POLICY_BINDINGS = _stored(_ADMISSION, "validatingadmissionpolicybindings",
                                               "ValidatingAdmissionPolicyBinding", namespaced=False,
                                               has_generation=True, categories=("api-extensions",))
# apiextensions.k8s.io/v1: each Established CRD adds its kind to a store's Registry (sim/crds.py).
CUSTOM_RESOURCE_DEFINITIONS = _stored("apiextensions.k8s.io", "customresourcedefinitions", "CustomResourceDefinition",
                                      namespaced=False, short_names=("crd", "crds"), status=True,
                                      has_generation=True, categories=("api-extensions",))

RESOURCES: dict[str, Resource] = {
    r.plural: r
    for r in (
        PODS, NODES, NAMESPACES, EVENTS, SERVICE_ACCOUNTS, CONFIG_MAPS, SECRETS, SERVICES, DAEMONSETS, DEPLOYMENTS,
        CONTROLLER_REVISIONS, LEASES, JOBS, CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS, ROLES, ROLE_BINDINGS,
        VALIDATING_ADMISSION_POLICIES, VALIDATING_ADMISSION_POLICY_BINDINGS, CUSTOM_RESOURCE_DEFINITIONS,
    )
}

# events.k8s.io/v1 Events are the core Events seen through another group (sim/events_v1.py converts): routed
# and discovered, but not stored separately.
EVENTS_V1 = Resource(
    group="events.k8s.io",
    version="v1",
    plural="events",
    singular="event",
    kind="Event",
    list_kind="EventList",
    namespaced=True,
    short_names=("ev",),
    subresources=(),
    field_selectors=EVENTS.field_selectors,
)

# Group -> version -> plural -> Resource: the URL router's view of the built-in table.
_BY_GROUP_VERSION: dict[tuple[str, str], dict[str, Resource]] = {}
for _r in (*RESOURCES.values(), EVENTS_V1):
    _BY_GROUP_VERSION.setdefault((_r.group, _r.version), {})[_r.plural] = _r


def resource_for(group: str, version: str, plural: str) -> Resource | None:
    """A built-in kind (a store's Registry also knows the custom ones)."""
    return _BY_GROUP_VERSION.get((group, version), {}).get(plural)


def resources_in(group: str, version: str) -> list[Resource]:
    """The built-in kinds served under one group/version, in table order."""
    return list(_BY_GROUP_VERSION.get((group, version), {}).values())


def group_versions() -> list[tuple[str, str]]:
    """Every built-in (group, version), core first."""
    return list(_BY_GROUP_VERSION)


def _signature(served: tuple[Resource, ...]) -> list[tuple[Resource, CustomInfo | None, JSON | None, JSON | None]]:
    """Everything about served kinds that matters, the fields left out of Resource's equality included."""
    return [(res, res.custom, res.custom.schema if res.custom else None, res.custom.scale if res.custom else None)
            for res in served]


class Registry:
    """The kinds one simulated API server serves: the built-in table plus the kinds of its Established CRDs.

    Each Store holds one (several sims may run in one process). Routing, discovery, OpenAPI, field selectors,
    printing, persistence and RBAC all read it, so a CRD's kind is served everywhere the moment it is
    registered and nowhere once it is removed. `generation` moves with every change (OpenAPI caches by it).
    """

    def __init__(self) -> None:
        self._custom: dict[str, tuple[Resource, ...]] = {}  # CRD name -> its served versions (storage first)
        self.generation = 0
        self._rebuild()

    def _rebuild(self) -> None:
        by_gv = {gv: dict(kinds) for gv, kinds in _BY_GROUP_VERSION.items()}
        stored: dict[str, Resource] = dict(RESOURCES)
        for served in self._custom.values():
            for res in served:
                if res.plural not in _BY_GROUP_VERSION.get((res.group, res.version), {}):  # built-ins win
                    by_gv.setdefault((res.group, res.version), {})[res.plural] = res
            stored[served[0].key] = served[0]
        self._by_gv = by_gv
        self.stored = stored  # store key -> the Resource its objects are kept as (a CRD's storage version)
        self.groups = frozenset(group for group, _ in by_gv if group)
        self.generation += 1
        # What others derive from the served kinds (OpenAPI documents), valid until the next change.
        self.cache: dict[str, Any] = {}

    def set_custom(self, crd_name: str, served: Iterable[Resource]) -> None:
        """Serve (or re-serve, after a CRD update) a CRD's versions; the first is the storage version."""
        served = tuple(served)
        if not served:
            self.remove_custom(crd_name)
            return
        if _signature(self._custom.get(crd_name, ())) == _signature(served):
            return  # unchanged (most CRD writes are status writes): the OpenAPI documents stay cached
        self._custom[crd_name] = served
        self._rebuild()

    def remove_custom(self, crd_name: str) -> None:
        if self._custom.pop(crd_name, None) is not None:
            self._rebuild()

    def custom(self, crd_name: str) -> tuple[Resource, ...]:
        return self._custom.get(crd_name, ())

    def resource_for(self, group: str, version: str, plural: str) -> Resource | None:
        return self._by_gv.get((group, version), {}).get(plural)

    def resources_in(self, group: str, version: str) -> list[Resource]:
        return list(self._by_gv.get((group, version), {}).values())

    def group_versions(self) -> list[tuple[str, str]]:
        return list(self._by_gv)

    def custom_resources(self) -> list[Resource]:
        """Every served custom kind and version."""
        return [res for served in self._custom.values() for res in served]
