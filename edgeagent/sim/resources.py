"""The resource kinds the simulated API server serves, in one table.

Discovery, URL routing, field-selector validation and the store's per-kind rules (status split,
generation, unconditional updates) all read this table, so adding a kind is a one-line change here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from edgeagent.kube.selectors import GENERIC_FIELDS, POD_FIELDS


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

    def unknown_field_message(self, field: str) -> str:
        if self.own_field_labels:
            return f"field label not supported: {field}"
        return f'"{field}" is not a known field selector: only "metadata.name", "metadata.namespace"'

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

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

RESOURCES: dict[str, Resource] = {
    r.plural: r
    for r in (
        PODS, NODES, NAMESPACES, EVENTS, SERVICE_ACCOUNTS, CONFIG_MAPS, SECRETS, SERVICES, DAEMONSETS, DEPLOYMENTS,
        CONTROLLER_REVISIONS, LEASES, JOBS, CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS, ROLES, ROLE_BINDINGS,
        VALIDATING_ADMISSION_POLICIES, VALIDATING_ADMISSION_POLICY_BINDINGS,
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

# Group -> version -> plural -> Resource: the URL router's view of the table.
_BY_GROUP_VERSION: dict[tuple[str, str], dict[str, Resource]] = {}
for _r in (*RESOURCES.values(), EVENTS_V1):
    _BY_GROUP_VERSION.setdefault((_r.group, _r.version), {})[_r.plural] = _r


def resource_for(group: str, version: str, plural: str) -> Resource | None:
    return _BY_GROUP_VERSION.get((group, version), {}).get(plural)


def resources_in(group: str, version: str) -> list[Resource]:
    """The kinds served under one group/version, in table order (discovery lists them)."""
    return list(_BY_GROUP_VERSION.get((group, version), {}).values())


def group_versions() -> list[tuple[str, str]]:
    """Every (group, version) served, core first."""
    return list(_BY_GROUP_VERSION)
