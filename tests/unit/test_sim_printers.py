"""Server-side printing: each cell is what kube-apiserver's printers put there (pkg/printers/internalversion).

The reasoning behind pod STATUS and node STATUS is what a person reads in `kubectl get`; these tests pin
the cases the sim produces (and those a real cluster shows that the sim's kubelet may grow into).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgeagent.kube import timeutil
from edgeagent.sim import printers

JSON = dict[str, Any]
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
CREATED = "2027-01-15T07:55:00Z"  # five minutes before NOW


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-3, "<invalid>"), (-1.5, "0s"), (0, "0s"), (59.9, "59s"), (119, "119s"), (120, "2m"), (125, "2m5s"),
        (599, "9m59s"), (600, "10m"), (179 * 60 + 59, "179m"), (3 * 3600, "3h"), (3 * 3600 + 60, "3h1m"),
        (8 * 3600, "8h"), (47 * 3600, "47h"), (48 * 3600, "2d"), (50 * 3600, "2d2h"), (8 * 86400, "8d"),
        (729 * 86400, "729d"), (730 * 86400, "2y"), (745 * 86400, "2y15d"), (3000 * 86400, "8y"),
    ],
)
def test_human_duration_matches_kubectl_ages(seconds: float, text: str) -> None:
    assert timeutil.human_duration(seconds) == text


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "y": 365 * 86400}


def _parse_age(text: str) -> tuple[int, int]:
    """Back to seconds, with the precision (the smallest unit shown)."""
    parts = re.findall(r"(\d+)([smhdy])", text)
    assert "".join(n + u for n, u in parts) == text, text
    return sum(int(n) * _UNITS[u] for n, u in parts), _UNITS[parts[-1][1]]


@given(st.integers(min_value=0, max_value=30 * 365 * 86400))
def test_human_duration_never_overstates_and_loses_less_than_its_last_unit(seconds: int) -> None:
    shown, unit = _parse_age(timeutil.human_duration(seconds))
    assert shown <= seconds < shown + unit * (1 if unit < _UNITS["y"] else 1 + seconds // _UNITS["y"])


def _pod(status: JSON, *, spec: JSON | None = None, deleting: bool = False) -> JSON:
    meta: JSON = {"name": "agent-x", "namespace": "default", "creationTimestamp": CREATED}
    if deleting:
        meta["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    return {
        "metadata": meta,
        "spec": spec or {"nodeName": "edge-1", "containers": [{"name": "agent", "image": "a:1"}]},
        "status": status,
    }


def _container(state: JSON, *, ready: bool = False, restarts: int = 0, last: JSON | None = None) -> JSON:
    return {"name": "agent", "state": state, "ready": ready, "restartCount": restarts, "lastState": last or {}}


RUNNING = {"phase": "Running", "podIPs": [{"ip": "10.244.1.2"}],
           "conditions": [{"type": "Ready", "status": "True"}],
           "containerStatuses": [_container({"running": {"startedAt": CREATED}}, ready=True)]}


def test_running_pod_row_has_every_wide_cell() -> None:
    assert printers.pod_cells(_pod(RUNNING), NOW) == [
        "agent-x", "1/1", "Running", "0", "5m", "10.244.1.2", "edge-1", "<none>", "<none>"]


@pytest.mark.parametrize(
    ("state", "status"),
    [
        ({"waiting": {"reason": "ContainerCreating"}}, "ContainerCreating"),
        ({"waiting": {"reason": "ErrImagePull", "message": "pull failed"}}, "ErrImagePull"),
        ({"waiting": {"reason": "ImagePullBackOff"}}, "ImagePullBackOff"),
        ({"waiting": {"reason": "CrashLoopBackOff"}}, "CrashLoopBackOff"),
        ({"terminated": {"reason": "Completed", "exitCode": 0}}, "Completed"),
        ({"terminated": {"reason": "Error", "exitCode": 1}}, "Error"),
        ({"terminated": {"exitCode": 137}}, "ExitCode:137"),
        ({"terminated": {"exitCode": 0, "signal": 9}}, "Signal:9"),
    ],
)
def test_pod_status_shows_the_container_reason(state: JSON, status: str) -> None:
    pod = _pod({"phase": "Pending", "containerStatuses": [_container(state)]})
    cells = printers.pod_cells(pod, NOW)
    assert cells[1:3] == ["0/1", status]
    assert cells[5] == "<none>"  # no IP yet


def test_pending_pod_without_statuses_shows_its_phase() -> None:
    assert printers.pod_cells(_pod({"phase": "Pending"}), NOW)[1:3] == ["0/1", "Pending"]


def test_deleted_pod_is_terminating_unless_finished_or_node_lost() -> None:
    assert printers.pod_cells(_pod(RUNNING, deleting=True), NOW)[2] == "Terminating"
    lost = {**RUNNING, "reason": "NodeLost"}
    assert printers.pod_cells(_pod(lost, deleting=True), NOW)[2] == "Unknown"
    done = {"phase": "Succeeded", "containerStatuses": [_container({"terminated": {"reason": "Completed"}})]}
    assert printers.pod_cells(_pod(done, deleting=True), NOW)[2] == "Completed"


def test_restarts_say_when_the_last_one_was() -> None:
    last = {"terminated": {"exitCode": 1, "finishedAt": "2027-01-15T07:59:00Z"}}
    status = {**RUNNING, "containerStatuses": [_container({"running": {}}, ready=True, restarts=3, last=last)]}
    assert printers.pod_cells(_pod(status), NOW)[3] == "3 (60s ago)"


def test_completed_container_next_to_a_running_one_reads_running_or_notready() -> None:
    spec = {"containers": [{"name": "a"}, {"name": "b"}]}
    statuses = [_container({"running": {}}, ready=True),
                {**_container({"terminated": {"reason": "Completed", "exitCode": 0}}), "name": "b"}]
    ready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "containerStatuses": statuses}
    assert printers.pod_cells(_pod(ready, spec=spec), NOW)[1:3] == ["1/2", "Running"]
    unready = {**ready, "conditions": [{"type": "Ready", "status": "False"}]}
    assert printers.pod_cells(_pod(unready, spec=spec), NOW)[2] == "NotReady"


def test_init_containers_show_progress_and_failure() -> None:
    spec = {"initContainers": [{"name": "i1"}, {"name": "i2"}], "containers": [{"name": "agent"}]}
    done = {"name": "i1", "state": {"terminated": {"exitCode": 0}}}
    running = {"name": "i2", "state": {"running": {}}}
    status = {"phase": "Pending", "initContainerStatuses": [done, running]}
    assert printers.pod_cells(_pod(status, spec=spec), NOW)[1:3] == ["0/1", "Init:1/2"]
    crashed = {"name": "i2", "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "restartCount": 2}
    cells = printers.pod_cells(_pod({"phase": "Pending", "initContainerStatuses": [done, crashed]}, spec=spec), NOW)
    assert cells[2:4] == ["Init:CrashLoopBackOff", "2"]


def test_sidecar_init_container_counts_as_a_container() -> None:
    spec = {"initContainers": [{"name": "side", "restartPolicy": "Always"}], "containers": [{"name": "agent"}]}
    side = {"name": "side", "state": {"running": {}}, "started": True, "ready": True}
    status = {**RUNNING, "initContainerStatuses": [side], "conditions": [{"type": "Initialized", "status": "True"}]}
    assert printers.pod_cells(_pod(status, spec=spec), NOW)[1:3] == ["2/2", "Running"]


def test_readiness_gates_count_true_conditions() -> None:
    spec = {"containers": [{"name": "agent"}], "readinessGates": [{"conditionType": "A"}, {"conditionType": "B"}]}
    status = {**RUNNING, "conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "False"}]}
    assert printers.pod_cells(_pod(status, spec=spec), NOW)[8] == "1/2"


def test_finished_pods_carry_a_completed_row_condition() -> None:
    assert printers.pod_row_conditions(_pod({"phase": "Succeeded"}))[0]["reason"] == "Succeeded"
    assert printers.pod_row_conditions(_pod(RUNNING)) == []


def _node(ready: str | None, *, labels: JSON | None = None, unschedulable: bool = False) -> JSON:
    conditions = [] if ready is None else [{"type": "MemoryPressure", "status": "False"},
                                           {"type": "Ready", "status": ready}]
    return {
        "metadata": {"name": "edge-1", "creationTimestamp": CREATED, "labels": labels or {}},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "conditions": conditions,
            "addresses": [{"type": "Hostname", "address": "edge-1"}, {"type": "InternalIP", "address": "10.0.0.3"}],
            "nodeInfo": {"kubeletVersion": "v1.30.0", "osImage": "Debian", "kernelVersion": "6.1",
                         "containerRuntimeVersion": "containerd://1.7"},
        },
    }


@pytest.mark.parametrize(
    ("ready", "unschedulable", "status"),
    [("True", False, "Ready"), ("False", False, "NotReady"), ("Unknown", False, "NotReady"),
     (None, False, "Unknown"), ("True", True, "Ready,SchedulingDisabled"),
     ("Unknown", True, "NotReady,SchedulingDisabled")],
)
def test_node_status(ready: str | None, unschedulable: bool, status: str) -> None:
    assert printers.node_cells(_node(ready, unschedulable=unschedulable), NOW)[1] == status


def test_node_roles_and_wide_cells() -> None:
    labels = {"node-role.kubernetes.io/edge": "", "node-role.kubernetes.io/control-plane": "",
              "node-role.kubernetes.io/": "", "kubernetes.io/role": "gateway", "other": "x"}
    assert printers.node_cells(_node("True", labels=labels), NOW) == [
        "edge-1", "Ready", "control-plane,edge,gateway", "5m", "v1.30.0", "10.0.0.3", "<none>", "Debian", "6.1",
        "containerd://1.7"]
    bare = _node("True")
    bare["status"]["nodeInfo"] = {}
    assert printers.node_cells(bare, NOW)[2:] == ["<none>", "5m", "", "10.0.0.3", "<none>", "<unknown>",
                                                  "<unknown>", "<unknown>"]


def test_daemonset_cells() -> None:
    ds = {
        "metadata": {"name": "agent", "creationTimestamp": CREATED},
        "spec": {"selector": {"matchLabels": {"app": "agent"},
                              "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]},
                                                   {"key": "gone", "operator": "DoesNotExist"}]},
                 "template": {"spec": {"nodeSelector": {"zone": "x", "arch": "arm"},
                                       "containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:2"}]}}},
        "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 2,
                   "updatedNumberScheduled": 1, "numberAvailable": 2},
    }
    assert printers.daemonset_cells(ds, NOW) == [
        "agent", 3, 3, 2, 1, 2, "arch=arm,zone=x", "5m", "a,b", "a:1,b:2", "app=agent,!gone,tier in (a,b)"]


def test_deployment_ready_is_ready_over_desired() -> None:
    deploy = {"metadata": {"name": "ctl", "creationTimestamp": CREATED},
              "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "ctl"}},
                       "template": {"spec": {"containers": [{"name": "c", "image": "c:1"}]}}},
              "status": {"readyReplicas": 1, "updatedReplicas": 2, "availableReplicas": 1}}
    assert printers.deployment_cells(deploy, NOW) == ["ctl", "1/2", 2, 1, "5m", "c", "c:1", "app=ctl"]


@pytest.mark.parametrize(
    ("conditions", "deleting", "status"),
    [([], False, "Running"), ([{"type": "Complete", "status": "True"}], False, "Complete"),
     ([{"type": "Failed", "status": "True"}], False, "Failed"), ([], True, "Terminating"),
     ([{"type": "Suspended", "status": "True"}], False, "Suspended")],
)
def test_job_status(conditions: list[JSON], deleting: bool, status: str) -> None:
    meta: JSON = {"name": "pull", "creationTimestamp": CREATED}
    if deleting:
        meta["deletionTimestamp"] = CREATED
    assert printers.job_status({"metadata": meta, "status": {"conditions": conditions}}) == status


def test_job_completions_and_duration() -> None:
    job: JSON = {"metadata": {"name": "pull", "creationTimestamp": CREATED},
           "spec": {"completions": 3, "template": {"spec": {"containers": [{"name": "p", "image": "p:1"}]}}},
           "status": {"succeeded": 1, "startTime": "2027-01-15T07:58:30Z"}}
    assert printers.job_cells(job, NOW)[:5] == ["pull", "Running", "1/3", "90s", "5m"]
    job["status"]["completionTime"] = "2027-01-15T07:59:00Z"
    assert printers.job_cells(job, NOW)[3] == "30s"
    job["spec"] = {"parallelism": 4}
    assert printers.job_cells(job, NOW)[2] == "1/1 of 4"


def test_controller_revision_names_its_controller_with_group() -> None:
    rev = {"metadata": {"name": "agent-5d8f", "creationTimestamp": CREATED, "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "controller": True}]}, "revision": 2}
    assert printers.controller_revision_cells(rev, NOW) == ["agent-5d8f", "daemonset.apps/agent", 2, "5m"]


def test_event_cells_fall_back_like_the_real_printer() -> None:
    event = {"metadata": {"name": "agent.1"}, "involvedObject": {"kind": "Pod", "name": "agent-x"},
             "type": "Normal", "reason": "Upgraded", "message": " done \n", "eventTime": "2027-01-15T07:59:00.000001Z",
             "reportingComponent": "edgeagent", "reportingInstance": "edge-1"}
    assert printers.event_cells(event, NOW) == [
        "59s", "Normal", "Upgraded", "pod/agent-x", "", "edgeagent, edge-1", "done", "59s", 1, "agent.1"]


def test_service_cells() -> None:
    svc = {"metadata": {"name": "web", "creationTimestamp": CREATED},
           "spec": {"type": "NodePort", "clusterIPs": ["10.96.0.10"], "selector": {"app": "web"},
                    "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]}}
    assert printers.service_cells(svc, NOW) == ["web", "NodePort", "10.96.0.10", "<none>", "80:30080/TCP,53/UDP",
                                                "5m", "app=web"]
    svc["spec"] = {"type": "LoadBalancer", "clusterIPs": ["10.96.0.11"]}
    assert printers.service_cells(svc, NOW)[3:5] == ["<pending>", "<none>"]


def test_small_kinds() -> None:
    meta = {"name": "x", "creationTimestamp": CREATED}
    assert printers.configmap_cells({"metadata": meta, "data": {"a": "1"}, "binaryData": {"b": ""}}, NOW) == [
        "x", 2, "5m"]
    assert printers.secret_cells({"metadata": meta, "type": "Opaque", "data": {"a": "MQ=="}}, NOW) == [
        "x", "Opaque", 1, "5m"]
    assert printers.service_account_cells({"metadata": meta}, NOW) == ["x", 0, "5m"]
    assert printers.namespace_cells({"metadata": meta, "status": {"phase": "Active"}}, NOW) == ["x", "Active", "5m"]
    assert printers.lease_cells({"metadata": meta, "spec": {"holderIdentity": "edge-1"}}, NOW) == [
        "x", "edge-1", "5m"]
    binding = {"metadata": meta, "roleRef": {"kind": "ClusterRole", "name": "view"},
               "subjects": [{"kind": "User", "name": "u"}, {"kind": "ServiceAccount", "namespace": "ns", "name": "s"},
                            {"kind": "Group", "name": "g"}]}
    assert printers.binding_cells(binding, NOW) == ["x", "ClusterRole/view", "5m", "u", "g", "ns/s"]
    assert printers.default_cells({"metadata": meta}, NOW) == ["x", "2027-01-15T07:55:00Z"]


def test_missing_creation_timestamp_is_unknown_age() -> None:
    assert printers.namespace_cells({"metadata": {"name": "x"}}, NOW)[2] == "<unknown>"


@pytest.mark.parametrize(
    ("accept", "version"),
    [
        (None, None),
        ("application/json", None),
        ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,"
         "application/json", "v1"),
        ("application/json;as=Table;v=v1beta1;g=meta.k8s.io, application/json", "v1beta1"),
        ("application/json, application/json;as=Table;v=v1;g=meta.k8s.io", None),
        ("application/json;as=Table;v=v2;g=meta.k8s.io,application/json", None),
        ("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1;"
         "g=meta.k8s.io", "v1"),
    ],
)
def test_table_version_from_accept(accept: str | None, version: str | None) -> None:
    assert printers.table_version(accept) == version


def test_table_body_carries_columns_rows_and_partial_metadata() -> None:
    pod = _pod(RUNNING)
    body = printers.table("Pod", [pod], list_meta={"resourceVersion": "7"}, now=NOW)
    assert body["kind"] == "Table" and body["apiVersion"] == "meta.k8s.io/v1"
    assert body["metadata"] == {"resourceVersion": "7"}
    assert [(c["name"], c["priority"]) for c in body["columnDefinitions"]] == [
        ("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0), ("IP", 1), ("Node", 1),
        ("Nominated Node", 1), ("Readiness Gates", 1)]
    row = body["rows"][0]
    assert row["object"] == {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": pod["metadata"]}
    assert printers.table("Pod", [pod], include="Object", now=NOW)["rows"][0]["object"] is pod
    assert "object" not in printers.table("Pod", [pod], include="None", now=NOW)["rows"][0]
    assert printers.table("Pod", [pod], columns=False, now=NOW)["columnDefinitions"] is None


def test_kinds_without_a_printer_get_name_and_created_at() -> None:
    columns = printers.table("ClusterRole", [])["columnDefinitions"]
    assert [(c["name"], c["type"]) for c in columns] == [("Name", "string"), ("Created At", "date")]
