"""Server-side printing: the `meta.k8s.io/v1` Table a real kube-apiserver answers to `kubectl get`.

kubectl asks for `Accept: application/json;as=Table;v=v1;g=meta.k8s.io` and prints whatever columns and
cells the server sends; given plain JSON it can only print NAME and AGE. The columns, their order and
`priority` (1 = only with `-o wide`) and the way each cell is computed follow kube-apiserver's printers,
so that a person reading `kubectl get pods -o wide` against the sim sees what a real cluster would show.
Like the real server, every Table carries the wide cells too; kubectl hides priority-1 columns itself.

Cells are computed from the stored JSON at request time (AGE is relative to now), so nothing is cached
here: Tables are for people, and the JSON paths used by every program stay untouched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from edgeagent.kube.timeutil import human_duration, parse_time

JSON = dict[str, Any]
Cell = str | int | bool
CellsFn = Callable[[JSON, float], list[Cell]]

TABLE_KIND = "Table"
META_GROUP = "meta.k8s.io"
TABLE_VERSIONS = ("v1", "v1beta1")
INCLUDE_OBJECT = ("None", "Metadata", "Object")

NONE = "<none>"
UNKNOWN = "<unknown>"


# ---------------------------------------------------------------------------------------------- time


def since(value: object, now: float) -> str:
    """Age of a timestamp field, `<unknown>` when the field is unset."""
    at = parse_time(value)
    return UNKNOWN if at is None else human_duration(now - at)


# ---------------------------------------------------------------------------------------------- columns


@dataclass(frozen=True)
class Column:
    name: str
    type: str = "string"
    priority: int = 0
    format: str = ""
    description: str = ""

    def json(self) -> JSON:
        return {
            "name": self.name,
            "type": self.type,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        }


NAME = Column("Name", format="name", description="Name of the object, unique within its namespace.")
AGE = Column("Age", description="Time since the object was created (its metadata.creationTimestamp).")
CONTAINERS = Column("Containers", priority=1, description="Names of each container in the template.")
IMAGES = Column("Images", priority=1, description="Images referenced by each container in the template.")
SELECTOR = Column("Selector", priority=1, description="Label query over pods that should match the template.")


def _meta(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _dict(value: object) -> JSON:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _name(obj: JSON) -> str:
    return str(_meta(obj).get("name") or "")


def _age(obj: JSON, now: float) -> str:
    return since(_meta(obj).get("creationTimestamp"), now)


def format_labels(labels: object) -> str:
    """`a=1,b=2` in key order, `<none>` for no labels (how node selectors and service selectors print)."""
    pairs = sorted(_dict(labels).items())
    return ",".join(f"{k}={v}" for k, v in pairs) or NONE


def format_label_selector(selector: object, *, empty: str = NONE) -> str:
    """A metav1.LabelSelector as text (`app=agent,tier in (a,b),!gone`), requirements in key order."""
    if not isinstance(selector, dict):
        return empty
    requirements: list[tuple[str, str]] = [(str(k), f"{k}={v}") for k, v in _dict(selector.get("matchLabels")).items()]
    for expr in _list(selector.get("matchExpressions")):
        expr = _dict(expr)
        key, op = str(expr.get("key", "")), expr.get("operator")
        values = ",".join(sorted(str(v) for v in _list(expr.get("values"))))
        if op == "In":
            requirements.append((key, f"{key} in ({values})"))
        elif op == "NotIn":
            requirements.append((key, f"{key} notin ({values})"))
        elif op == "Exists":
            requirements.append((key, key))
        elif op == "DoesNotExist":
            requirements.append((key, f"!{key}"))
        else:
            return "<error>"
    return ",".join(text for _, text in sorted(requirements)) or empty


def _template_containers(obj: JSON) -> tuple[str, str]:
    pod_spec = _dict(_dict(_dict(obj.get("spec")).get("template")).get("spec"))
    containers = [_dict(c) for c in _list(pod_spec.get("containers"))]
    return ",".join(str(c.get("name", "")) for c in containers), ",".join(str(c.get("image", "")) for c in containers)


# ---------------------------------------------------------------------------------------------- pods

POD_COLUMNS = (
    NAME,
    Column("Ready", description="The aggregate readiness state of this pod for accepting traffic."),
    Column("Status", description="The aggregate status of the containers in this pod."),
    Column("Restarts", description="The number of times the containers in this pod have been restarted, "
                                   "and when the last one was."),
    AGE,
    Column("IP", priority=1, description="The pod's first IP address."),
    Column("Node", priority=1, description="The node the pod is bound to."),
    Column("Nominated Node", priority=1, description="The node the scheduler nominated after preemption."),
    Column("Readiness Gates", priority=1, description="How many of the pod's readiness gates are met."),
)

NODE_LOST = "NodeLost"  # the reason the node lifecycle controller gives pods of an unreachable node


def _condition(conditions: object, type_: str) -> JSON | None:
    for cond in _list(conditions):
        if isinstance(cond, dict) and cond.get("type") == type_:
            return cond
    return None


def _is_true(conditions: object, type_: str) -> bool:
    return (_condition(conditions, type_) or {}).get("status") == "True"


def _finished_at(container_status: JSON) -> float | None:
    terminated = _dict(_dict(container_status.get("lastState")).get("terminated"))
    return parse_time(terminated.get("finishedAt")) if terminated else None


def _later(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def _terminated_text(terminated: JSON, prefix: str = "") -> str:
    reason = terminated.get("reason")
    if reason:
        return f"{prefix}{reason}"
    signal = _int(terminated.get("signal"))
    if signal:
        return f"{prefix}Signal:{signal}"
    return f"{prefix}ExitCode:{_int(terminated.get('exitCode'))}"


def pod_cells(pod: JSON, now: float) -> list[Cell]:
    """NAME READY STATUS RESTARTS AGE IP NODE NOMINATED-NODE READINESS-GATES, reasoned as kubectl's printer does.

    STATUS is the phase unless something more telling applies: an init container's progress or failure,
    a container's waiting reason (`ContainerCreating`, `ErrImagePull`, `ImagePullBackOff`,
    `CrashLoopBackOff`) or terminated reason (`Completed`, `Error`), and finally `Terminating` for a pod
    being deleted.
    """
    spec, status = _dict(pod.get("spec")), _dict(pod.get("status"))
    conditions = status.get("conditions")
    phase = str(status.get("phase") or "")
    reason = str(status.get("reason") or phase)
    scheduled = _condition(conditions, "PodScheduled")
    if scheduled is not None and scheduled.get("reason") == "SchedulingGated":
        reason = "SchedulingGated"
    init_specs = {str(c.get("name")): c for c in map(_dict, _list(spec.get("initContainers")))}
    # Sidecars (init containers with restartPolicy Always) count as containers of the pod.
    sidecars = {name for name, c in init_specs.items() if c.get("restartPolicy") == "Always"}
    total = len(_list(spec.get("containers"))) + len(sidecars)
    ready = restarts = sidecar_restarts = 0
    last_restart: float | None = None
    sidecar_last_restart: float | None = None

    initializing = False
    for index, cs in enumerate(map(_dict, _list(status.get("initContainerStatuses")))):
        count = _int(cs.get("restartCount"))
        restarts += count
        last_restart = _later(last_restart, _finished_at(cs))
        is_sidecar = cs.get("name") in sidecars
        if is_sidecar:
            sidecar_restarts += count
            sidecar_last_restart = _later(sidecar_last_restart, _finished_at(cs))
        state = _dict(cs.get("state"))
        terminated, waiting = _dict(state.get("terminated")), _dict(state.get("waiting"))
        if "terminated" in state and _int(terminated.get("exitCode")) == 0:
            continue
        if is_sidecar and cs.get("started") is True:
            ready += 1 if cs.get("ready") else 0
            continue
        if "terminated" in state:
            reason = _terminated_text(terminated, "Init:")
        elif waiting.get("reason") and waiting.get("reason") != "PodInitializing":
            reason = f"Init:{waiting['reason']}"
        else:
            reason = f"Init:{index}/{len(init_specs)}"
        initializing = True
        break

    if not initializing or _is_true(conditions, "Initialized"):
        restarts, last_restart = sidecar_restarts, sidecar_last_restart
        has_running = False
        for cs in reversed([_dict(c) for c in _list(status.get("containerStatuses"))]):
            restarts += _int(cs.get("restartCount"))
            last_restart = _later(last_restart, _finished_at(cs))
            state = _dict(cs.get("state"))
            waiting, terminated = _dict(state.get("waiting")), _dict(state.get("terminated"))
            if waiting.get("reason"):
                reason = str(waiting["reason"])
            elif "terminated" in state:
                reason = _terminated_text(terminated)
            elif cs.get("ready") and "running" in state:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            reason = "Running" if _is_true(conditions, "Ready") else "NotReady"

    if _meta(pod).get("deletionTimestamp"):
        if status.get("reason") == NODE_LOST:
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"

    restarts_text = str(restarts)
    if restarts and last_restart is not None:
        restarts_text = f"{restarts} ({human_duration(now - last_restart)} ago)"

    ips = _list(status.get("podIPs"))
    ip = str(_dict(ips[0]).get("ip") or "") if ips else ""
    gates = _list(spec.get("readinessGates"))
    gates_text = NONE
    if gates:
        met = sum(1 for g in gates if _is_true(conditions, str(_dict(g).get("conditionType"))))
        gates_text = f"{met}/{len(gates)}"
    return [
        _name(pod), f"{ready}/{total}", reason, restarts_text, _age(pod, now),
        ip or NONE, str(spec.get("nodeName") or NONE), str(status.get("nominatedNodeName") or NONE), gates_text,
    ]


def pod_row_conditions(pod: JSON) -> list[JSON]:
    """Finished pods carry a `Completed` row condition (clients may use it to hide them)."""
    phase = _dict(pod.get("status")).get("phase")
    if phase == "Succeeded":
        return [{"type": "Completed", "status": "True", "reason": "Succeeded",
                 "message": "The pod has completed successfully."}]
    if phase == "Failed":
        return [{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]
    return []


# ---------------------------------------------------------------------------------------------- nodes

NODE_COLUMNS = (
    NAME,
    Column("Status", description="The status of the node"),
    Column("Roles", description="The roles of the node"),
    AGE,
    Column("Version", description="Kubelet version reported by the node."),
    Column("Internal-IP", priority=1, description="The node's first InternalIP address."),
    Column("External-IP", priority=1, description="The node's first ExternalIP address."),
    Column("OS-Image", priority=1, description="OS image reported by the node."),
    Column("Kernel-Version", priority=1, description="Kernel version reported by the node."),
    Column("Container-Runtime", priority=1, description="Container runtime version reported by the node."),
)
ROLE_PREFIX = "node-role.kubernetes.io/"
ROLE_LABEL = "kubernetes.io/role"


def node_roles(labels: object) -> list[str]:
    """Roles from `node-role.kubernetes.io/<role>` label keys and the older `kubernetes.io/role=<role>`."""
    roles: set[str] = set()
    for key, value in _dict(labels).items():
        if key.startswith(ROLE_PREFIX) and key[len(ROLE_PREFIX):]:
            roles.add(key[len(ROLE_PREFIX):])
        elif key == ROLE_LABEL and value:
            roles.add(str(value))
    return sorted(roles)


def _address(node: JSON, type_: str) -> str:
    for address in map(_dict, _list(_dict(node.get("status")).get("addresses"))):
        if address.get("type") == type_:
            return str(address.get("address") or "")
    return NONE


def node_cells(node: JSON, now: float) -> list[Cell]:
    """STATUS is `Ready` / `NotReady` (Ready False or Unknown) / `Unknown` (no Ready condition yet),
    plus `,SchedulingDisabled` for a cordoned node."""
    status = _dict(node.get("status"))
    ready = _condition(status.get("conditions"), "Ready")
    states = ["Unknown" if ready is None else ("Ready" if ready.get("status") == "True" else "NotReady")]
    if _dict(node.get("spec")).get("unschedulable"):
        states.append("SchedulingDisabled")
    info = _dict(status.get("nodeInfo"))
    return [
        _name(node), ",".join(states), ",".join(node_roles(_meta(node).get("labels"))) or NONE, _age(node, now),
        str(info.get("kubeletVersion") or ""), _address(node, "InternalIP"), _address(node, "ExternalIP"),
        str(info.get("osImage") or UNKNOWN), str(info.get("kernelVersion") or UNKNOWN),
        str(info.get("containerRuntimeVersion") or UNKNOWN),
    ]


# ---------------------------------------------------------------------------------------------- workloads

DAEMONSET_COLUMNS = (
    NAME,
    Column("Desired", "integer", description="The number of nodes that should be running the daemon pod."),
    Column("Current", "integer", description="The number of nodes running at least one daemon pod that should."),
    Column("Ready", "integer", description="The number of nodes whose daemon pod is ready."),
    Column("Up-to-date", "integer", description="The number of nodes running the updated daemon pod."),
    Column("Available", "integer", description="The number of nodes whose daemon pod has been available."),
    Column("Node Selector", description="The template's nodeSelector."),
    AGE,
    CONTAINERS,
    IMAGES,
    SELECTOR,
)


def daemonset_cells(ds: JSON, now: float) -> list[Cell]:
    status, spec = _dict(ds.get("status")), _dict(ds.get("spec"))
    names, images = _template_containers(ds)
    node_selector = _dict(_dict(spec.get("template")).get("spec")).get("nodeSelector")
    return [
        _name(ds), _int(status.get("desiredNumberScheduled")), _int(status.get("currentNumberScheduled")),
        _int(status.get("numberReady")), _int(status.get("updatedNumberScheduled")),
        _int(status.get("numberAvailable")), format_labels(node_selector), _age(ds, now),
        names, images, format_label_selector(spec.get("selector")),
    ]


DEPLOYMENT_COLUMNS = (
    NAME,
    Column("Ready", description="Number of the pod with ready state"),
    Column("Up-to-date", description="Total number of pods with the desired template."),
    Column("Available", description="Total number of available pods."),
    AGE,
    CONTAINERS,
    IMAGES,
    SELECTOR,
)


def deployment_cells(deploy: JSON, now: float) -> list[Cell]:
    status, spec = _dict(deploy.get("status")), _dict(deploy.get("spec"))
    replicas = spec.get("replicas")
    desired = _int(replicas) if replicas is not None else 1  # the server defaults replicas to 1
    names, images = _template_containers(deploy)
    return [
        _name(deploy), f"{_int(status.get('readyReplicas'))}/{desired}", _int(status.get("updatedReplicas")),
        _int(status.get("availableReplicas")), _age(deploy, now), names, images,
        format_label_selector(spec.get("selector"), empty=""),
    ]


JOB_COLUMNS = (
    NAME,
    Column("Status", description="Status of the job."),
    Column("Completions", description="Succeeded pods out of those the job needs."),
    Column("Duration", description="Time required to complete the job."),
    AGE,
    CONTAINERS,
    IMAGES,
    SELECTOR,
)


def job_status(job: JSON) -> str:
    conditions = _dict(job.get("status")).get("conditions")
    if _is_true(conditions, "Complete"):
        return "Complete"
    if _is_true(conditions, "Failed"):
        return "Failed"
    if _meta(job).get("deletionTimestamp"):
        return "Terminating"
    if _is_true(conditions, "Suspended"):
        return "Suspended"
    if _is_true(conditions, "FailureTarget"):
        return "FailureTarget"
    return "Running"


def job_cells(job: JSON, now: float) -> list[Cell]:
    status, spec = _dict(job.get("status")), _dict(job.get("spec"))
    succeeded = _int(status.get("succeeded"))
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{_int(spec.get('completions'))}"
    elif _int(spec.get("parallelism")) > 1:
        completions = f"{succeeded}/1 of {_int(spec.get('parallelism'))}"
    else:
        completions = f"{succeeded}/1"
    started, finished = parse_time(status.get("startTime")), parse_time(status.get("completionTime"))
    duration = ""
    if started is not None:
        duration = human_duration((finished if finished is not None else now) - started)
    names, images = _template_containers(job)
    return [_name(job), job_status(job), completions, duration, _age(job, now), names, images,
            format_label_selector(spec.get("selector"))]


CONTROLLER_REVISION_COLUMNS = (
    NAME,
    Column("Controller", description="Controller of the object"),
    Column("Revision", description="The revision this object holds."),
    AGE,
)


def controller_revision_cells(rev: JSON, now: float) -> list[Cell]:
    controller = NONE
    for ref in map(_dict, _list(_meta(rev).get("ownerReferences"))):
        if ref.get("controller") is True:
            api_version = str(ref.get("apiVersion") or "")
            group = api_version.split("/", 1)[0] if "/" in api_version else ""
            kind = str(ref.get("kind") or "")
            group_kind = f"{kind}.{group}" if group else kind
            controller = f"{group_kind.lower()}/{ref.get('name', '')}" if group_kind else str(ref.get("name", ""))
            break
    return [_name(rev), controller, _int(rev.get("revision")), _age(rev, now)]


# ---------------------------------------------------------------------------------------------- the rest

EVENT_COLUMNS = (
    Column("Last Seen", description="When the event was last seen."),
    Column("Type", description="Type of the event (Normal, Warning)."),
    Column("Reason", description="Short, machine understandable reason for the event."),
    Column("Object", description="The object the event is about."),
    Column("Subobject", priority=1, description="The part of the object the event is about (fieldPath)."),
    Column("Source", priority=1, description="The component that reported the event."),
    Column("Message", description="A human-readable description of the event."),
    Column("First Seen", priority=1, description="When the event was first seen."),
    Column("Count", priority=1, description="How many times the event has occurred."),
    Column("Name", priority=1, format="name", description="Name of the event."),
)


def event_cells(event: JSON, now: float) -> list[Cell]:
    first = since(event.get("firstTimestamp"), now)
    if parse_time(event.get("firstTimestamp")) is None:
        first = since(event.get("eventTime"), now)
    last = since(event.get("lastTimestamp"), now)
    if parse_time(event.get("lastTimestamp")) is None:
        last = first
    count = _int(event.get("count"))
    series = event.get("series")
    if isinstance(series, dict):
        last = since(series.get("lastObservedTime"), now)
        count = _int(series.get("count"))
    elif count == 0:
        count = 1  # singleton events of the new API carry no count
    involved = _dict(event.get("involvedObject"))
    kind = str(involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = _dict(event.get("source"))
    component = str(source.get("component") or event.get("reportingComponent") or "")
    instance = str(source.get("host") or event.get("reportingInstance") or "")
    return [
        last, str(event.get("type") or ""), str(event.get("reason") or ""), target,
        str(involved.get("fieldPath") or ""), f"{component}, {instance}" if instance else component,
        str(event.get("message") or "").strip(), first, count, _name(event),
    ]


NAMESPACE_COLUMNS = (NAME, Column("Status", description="The status of the namespace"), AGE)


def namespace_cells(ns: JSON, now: float) -> list[Cell]:
    return [_name(ns), str(_dict(ns.get("status")).get("phase") or ""), _age(ns, now)]


CONFIGMAP_COLUMNS = (NAME, Column("Data", description="Number of data and binaryData entries."), AGE)


def configmap_cells(cm: JSON, now: float) -> list[Cell]:
    return [_name(cm), len(_dict(cm.get("data"))) + len(_dict(cm.get("binaryData"))), _age(cm, now)]


SECRET_COLUMNS = (
    NAME,
    Column("Type", description="Used to facilitate programmatic handling of secret data."),
    Column("Data", description="Number of data entries."),
    AGE,
)


def secret_cells(secret: JSON, now: float) -> list[Cell]:
    return [_name(secret), str(secret.get("type") or ""), len(_dict(secret.get("data"))), _age(secret, now)]


SERVICE_ACCOUNT_COLUMNS = (NAME, Column("Secrets", description="Number of secrets listed."), AGE)


def service_account_cells(sa: JSON, now: float) -> list[Cell]:
    return [_name(sa), len(_list(sa.get("secrets"))), _age(sa, now)]


SERVICE_COLUMNS = (
    NAME,
    Column("Type", description="How the service is exposed."),
    Column("Cluster-IP", description="The IP address of the service inside the cluster."),
    Column("External-IP", description="External addresses the service is reachable at."),
    Column("Port(s)", description="The ports the service exposes."),
    AGE,
    Column("Selector", priority=1, description="The labels of the pods the service routes to."),
)


def _service_external_ip(spec: JSON, status: JSON) -> str:
    svc_type = spec.get("type")
    external = [str(ip) for ip in _list(spec.get("externalIPs"))]
    if svc_type in ("ClusterIP", "NodePort"):
        return ",".join(external) or NONE
    if svc_type == "LoadBalancer":
        ingress = sorted({str(i.get("ip") or i.get("hostname") or "")
                          for i in map(_dict, _list(_dict(status.get("loadBalancer")).get("ingress")))} - {""})
        # Like the real printer, the wide form is used: the server always prints wide.
        return ",".join(ingress + external) or "<pending>"
    if svc_type == "ExternalName":
        return str(spec.get("externalName") or "")
    return UNKNOWN


def service_cells(svc: JSON, now: float) -> list[Cell]:
    spec, status = _dict(svc.get("spec")), _dict(svc.get("status"))
    cluster_ips = _list(spec.get("clusterIPs"))
    ports = []
    for port in map(_dict, _list(spec.get("ports"))):
        node_port = _int(port.get("nodePort"))
        prefix = f"{port.get('port')}:{node_port}" if node_port > 0 else f"{port.get('port')}"
        ports.append(f"{prefix}/{port.get('protocol') or 'TCP'}")
    return [
        _name(svc), str(spec.get("type") or ""), str(cluster_ips[0]) if cluster_ips else NONE,
        _service_external_ip(spec, status), ",".join(ports) or NONE, _age(svc, now),
        format_labels(spec.get("selector")),
    ]


LEASE_COLUMNS = (NAME, Column("Holder", description="The holder of the lease."), AGE)


def lease_cells(lease: JSON, now: float) -> list[Cell]:
    return [_name(lease), str(_dict(lease.get("spec")).get("holderIdentity") or ""), _age(lease, now)]


BINDING_COLUMNS = (
    NAME,
    Column("Role", description="The role the binding grants."),
    AGE,
    Column("Users", priority=1, description="Users in the binding"),
    Column("Groups", priority=1, description="Groups in the binding"),
    Column("ServiceAccounts", priority=1, description="ServiceAccounts in the binding"),
)


POLICY_COLUMNS = (
    NAME,
    Column("Validations", type="integer",
           description="Validations indicates the number of validation rules defined in this configuration"),
    Column("ParamKind", description="ParamKind specifies the kind of resources used to parameterize this policy"),
    AGE,
)
POLICY_BINDING_COLUMNS = (
    NAME,
    Column("PolicyName", description="PolicyName indicates the policy definition which the policy binding binded "
           "to"),
    Column("ParamRef", description="ParamRef indicates the param resource which sets the configration param"),
    AGE,
)


def policy_cells(policy: JSON, now: float) -> list[Cell]:
    spec = _dict(policy.get("spec"))
    kind = _dict(spec.get("paramKind"))
    param = f"{kind.get('apiVersion', '')}/{kind.get('kind', '')}" if kind else "<unset>"
    return [_name(policy), len(_list(spec.get("validations"))), param, _age(policy, now)]


def policy_binding_cells(binding: JSON, now: float) -> list[Cell]:
    spec = _dict(binding.get("spec"))
    ref = _dict(spec.get("paramRef"))
    param = "<unset>"
    if ref.get("name"):
        param = f"{ref.get('namespace') or '*'}/{ref['name']}"
    elif ref.get("selector"):
        param = "<selector>"
    return [_name(binding), str(spec.get("policyName") or ""), param, _age(binding, now)]


def binding_cells(binding: JSON, now: float) -> list[Cell]:
    ref = _dict(binding.get("roleRef"))
    users: list[str] = []
    groups: list[str] = []
    accounts: list[str] = []
    for subject in map(_dict, _list(binding.get("subjects"))):
        kind, name = subject.get("kind"), str(subject.get("name") or "")
        if kind == "User":
            users.append(name)
        elif kind == "Group":
            groups.append(name)
        elif kind == "ServiceAccount":
            accounts.append(f"{subject.get('namespace') or ''}/{name}")
    return [_name(binding), f"{ref.get('kind', '')}/{ref.get('name', '')}", _age(binding, now),
            ", ".join(users), ", ".join(groups), ", ".join(accounts)]


# Kinds without a printer of their own get the generic table: NAME and CREATED AT (an RFC 3339 time).
DEFAULT_COLUMNS = (
    NAME,
    Column("Created At", "date", description="When the object was created (its metadata.creationTimestamp)."),
)


def default_cells(obj: JSON, now: float) -> list[Cell]:
    created = parse_time(_meta(obj).get("creationTimestamp"))
    text = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created)) if created is not None else ""
    return [_name(obj), text]


@dataclass(frozen=True)
class KindPrinter:
    """The columns of one kind and how to compute a row's cells."""

    columns: tuple[Column, ...]
    cells: CellsFn
    row_conditions: Callable[[JSON], list[JSON]] | None = None


PRINTERS: dict[str, KindPrinter] = {
    "Pod": KindPrinter(POD_COLUMNS, pod_cells, pod_row_conditions),
    "Node": KindPrinter(NODE_COLUMNS, node_cells),
    "DaemonSet": KindPrinter(DAEMONSET_COLUMNS, daemonset_cells),
    "Deployment": KindPrinter(DEPLOYMENT_COLUMNS, deployment_cells),
    "Job": KindPrinter(JOB_COLUMNS, job_cells),
    "ControllerRevision": KindPrinter(CONTROLLER_REVISION_COLUMNS, controller_revision_cells),
    "Event": KindPrinter(EVENT_COLUMNS, event_cells),
    "Namespace": KindPrinter(NAMESPACE_COLUMNS, namespace_cells),
    "ConfigMap": KindPrinter(CONFIGMAP_COLUMNS, configmap_cells),
    "Secret": KindPrinter(SECRET_COLUMNS, secret_cells),
    "ServiceAccount": KindPrinter(SERVICE_ACCOUNT_COLUMNS, service_account_cells),
    "Service": KindPrinter(SERVICE_COLUMNS, service_cells),
    "Lease": KindPrinter(LEASE_COLUMNS, lease_cells),
    "RoleBinding": KindPrinter(BINDING_COLUMNS, binding_cells),
    "ClusterRoleBinding": KindPrinter(BINDING_COLUMNS, binding_cells),
    "ValidatingAdmissionPolicy": KindPrinter(POLICY_COLUMNS, policy_cells),
    "ValidatingAdmissionPolicyBinding": KindPrinter(POLICY_BINDING_COLUMNS, policy_binding_cells),
}
DEFAULT_PRINTER = KindPrinter(DEFAULT_COLUMNS, default_cells)


def printer_for(kind: str) -> KindPrinter:
    return PRINTERS.get(kind, DEFAULT_PRINTER)



# ---------------------------------------------------------------------------------------------- requests


def table_version(accept: str | None) -> str | None:
    """The Table version an Accept header asks for (`v1` or `v1beta1`), or None for plain JSON.

    The header lists alternatives in preference order; the first one this server can produce wins,
    so `as=Table;v=v1;g=meta.k8s.io, application/json` (kubectl's) gets a v1 Table and a client that
    put plain JSON first gets JSON.
    """
    if not accept or "as=Table" not in accept:  # the plain-JSON fast path: one substring test
        return None
    for media_range in accept.split(","):
        media, *raw_params = (part.strip() for part in media_range.split(";"))
        if media not in ("application/json", "application/*", "*/*"):
            continue
        params = dict(p.split("=", 1) for p in raw_params if "=" in p)
        if "as" not in params:
            return None  # plain JSON is acceptable and preferred
        if (params.get("as") == TABLE_KIND and params.get("g") == META_GROUP
                and params.get("v") in TABLE_VERSIONS):
            return params["v"]
    return None


def partial_metadata(obj: JSON, version: str = "v1") -> JSON:
    return {"kind": "PartialObjectMetadata", "apiVersion": f"{META_GROUP}/{version}", "metadata": _meta(obj)}


def table_row(printer: KindPrinter, obj: JSON, now: float, include: str, version: str = "v1") -> JSON:
    row: JSON = {"cells": printer.cells(obj, now)}
    if printer.row_conditions is not None and (conditions := printer.row_conditions(obj)):
        row["conditions"] = conditions
    if include == "Object":
        row["object"] = obj
    elif include == "Metadata":
        row["object"] = partial_metadata(obj, version)
    return row


def table(
    kind: str,
    objects: Iterable[JSON],
    *,
    version: str = "v1",
    include: str = "Metadata",
    list_meta: JSON | None = None,
    columns: bool = True,
    now: float | None = None,
    printer: KindPrinter | None = None,
) -> JSON:
    """A Table of `objects` (all of one kind). `columns=False` leaves out the column definitions, as the
    real server does on every watch event after the first."""
    printer = printer or printer_for(kind)
    at = time.time() if now is None else now
    body: JSON = {"kind": TABLE_KIND, "apiVersion": f"{META_GROUP}/{version}", "metadata": list_meta or {}}
    body["columnDefinitions"] = [c.json() for c in printer.columns] if columns else None
    body["rows"] = [table_row(printer, obj, at, include, version) for obj in objects]
    return body
