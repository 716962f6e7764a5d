"""`kubectl create …` against the sim: kubectl's typed clients send protobuf, the sim must store what a real
server stores (`kubectl create namespace|configmap|secret|job` work; ConfigMaps, Secrets
and Services are stored)."""

from __future__ import annotations

import base64
import ipaddress
import json
from pathlib import Path

import pytest

from edgeagent.sim.cluster import SimCluster
from tests.support.kubectl import KUBECTL, Kubectl, table

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (needed for the kubectl e2e tests)"),
]


@pytest.fixture
def kubectl(sim: SimCluster, tmp_path: Path) -> Kubectl:
    return Kubectl(sim.admin_kubeconfig, tmp_path / "kube-cache")


async def get_json(kubectl: Kubectl, *args: str) -> dict[str, object]:
    obj: dict[str, object] = json.loads(await kubectl("get", *args, "-o", "json"))
    return obj


async def test_create_namespace_configmap_secret_job(kubectl: Kubectl) -> None:
    assert await kubectl("create", "namespace", "site-a") == "namespace/site-a created\n"
    assert await kubectl("create", "configmap", "cfg", "-n", "site-a", "--from-literal=a=1",
                         "--from-literal=b=two") == "configmap/cfg created\n"
    assert await kubectl("create", "secret", "generic", "pw", "-n", "site-a",
                         "--from-literal=password=hunter2") == "secret/pw created\n"
    assert await kubectl("create", "job", "once", "-n", "site-a", "--image=busybox:1.36", "--", "echo",
                         "hi") == "job.batch/once created\n"

    ns = await get_json(kubectl, "namespace", "site-a")
    assert ns["status"] == {"phase": "Active"}
    cm = await get_json(kubectl, "configmap", "cfg", "-n", "site-a")
    assert cm["data"] == {"a": "1", "b": "two"}
    secret = await get_json(kubectl, "secret", "pw", "-n", "site-a")
    assert secret["type"] == "Opaque"
    assert secret["data"] == {"password": base64.b64encode(b"hunter2").decode()}
    job = await get_json(kubectl, "job", "once", "-n", "site-a")
    container = job["spec"]["template"]["spec"]["containers"][0]  # type: ignore[index]
    assert (container["image"], container["command"]) == ("busybox:1.36", ["echo", "hi"])

    header, rows = table(await kubectl("get", "configmaps,secrets", "-n", "site-a"))
    assert header == ["NAME", "DATA", "AGE"]
    assert rows[0][:2] == ["configmap/cfg", "2"]
    assert ["NAME", "TYPE", "DATA", "AGE"] in [header, *rows]  # the second table's header
    assert next(r[:3] for r in rows if r[0] == "secret/pw") == ["secret/pw", "Opaque", "1"]


async def test_create_service_allocates_a_cluster_ip_and_node_port(kubectl: Kubectl) -> None:
    await kubectl("create", "service", "clusterip", "web", "--tcp=80:8080")
    await kubectl("create", "service", "nodeport", "edge", "--tcp=443:8443")
    web = await get_json(kubectl, "service", "web")
    spec = web["spec"]
    assert isinstance(spec, dict)
    assert ipaddress.ip_address(spec["clusterIP"]) in ipaddress.ip_network("10.96.0.0/12")
    assert spec["clusterIPs"] == [spec["clusterIP"]]
    assert spec["ports"] == [{"name": "80-8080", "port": 80, "protocol": "TCP", "targetPort": 8080}]
    assert (spec["type"], spec["sessionAffinity"], spec["selector"]) == ("ClusterIP", "None", {"app": "web"})
    header, rows = table(await kubectl("get", "services", "-o", "wide"))
    assert header == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE", "SELECTOR"]
    by_name = {r[0]: r for r in rows}
    assert by_name["web"][1:5] == ["ClusterIP", spec["clusterIP"], "<none>", "80/TCP"]
    node_port = (await get_json(kubectl, "service", "edge"))["spec"]["ports"][0]["nodePort"]  # type: ignore[index]
    assert 30000 <= node_port <= 32767
    assert by_name["edge"][4] == f"443:{node_port}/TCP"


async def test_create_serviceaccount_deployment_and_rbac(kubectl: Kubectl) -> None:
    for args in (("serviceaccount", "robot"), ("deployment", "web", "--image=nginx:1", "--replicas=2"),
                 ("clusterrole", "reader", "--verb=get,list", "--resource=pods"),
                 ("rolebinding", "robot-reads", "--clusterrole=reader", "--serviceaccount=default:robot")):
        await kubectl("create", *args)
    deploy = await get_json(kubectl, "deployment", "web")
    assert deploy["spec"]["replicas"] == 2  # type: ignore[index]
    assert deploy["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1"  # type: ignore[index]
    role = await get_json(kubectl, "clusterrole", "reader")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
    binding = await get_json(kubectl, "rolebinding", "robot-reads")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "robot", "namespace": "default"}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader"}


LIST = """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Namespace
  metadata:
    name: site-b
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: settings
    namespace: site-b
  data:
    mode: edge
"""


async def test_apply_a_list_file_is_validated_against_openapi_v2(kubectl: Kubectl, tmp_path: Path) -> None:
    manifest = tmp_path / "list.yaml"
    manifest.write_text(LIST)
    assert await kubectl("apply", "-f", str(manifest)) == "namespace/site-b created\nconfigmap/settings created\n"
    manifest.write_text(LIST.replace("  data:", "  dta:").replace("name: settings", "name: other"))
    result = await kubectl.run("apply", "-f", str(manifest))
    assert result.code == 1
    assert 'unknown field "dta" in io.k8s.api.core.v1.ConfigMap' in result.err


async def test_explain_reads_the_served_schemas(kubectl: Kubectl) -> None:
    out = await kubectl("explain", "pods.spec.containers.image")
    assert out.startswith("KIND:       Pod\nVERSION:    v1\n")
    assert "FIELD: image <string>" in out and "Container image name." in out
    out = await kubectl("explain", "pods")
    assert "DESCRIPTION:\n    Pod is a collection of containers that can run on a host." in out
    assert "metadata\t<ObjectMeta>\n    Standard object's metadata." in out
    out = await kubectl("explain", "daemonsets.spec.updateStrategy")
    assert "GROUP:      apps" in out and "FIELD: updateStrategy <DaemonSetUpdateStrategy>" in out
    assert "type\t<string>" in out
    raw = json.loads(await kubectl("get", "--raw", "/openapi/v2"))
    assert raw["definitions"]["io.k8s.api.apps.v1.DaemonSet"]["x-kubernetes-group-version-kind"] == [
        {"group": "apps", "version": "v1", "kind": "DaemonSet"}]


async def test_events_k8s_io_event_is_listed_by_kubectl_get_events(kubectl: Kubectl) -> None:
    event = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "upgrade.1"},
             "eventTime": "2026-11-22T17:00:00.000000Z", "reportingController": "edgeagent.io/agent",
             "reportingInstance": "edge-1", "action": "Upgrade", "reason": "Upgraded", "type": "Normal",
             "note": "pod upgraded", "regarding": {"kind": "Pod", "name": "agent-x", "namespace": "default"}}
    assert await kubectl("create", "-f", "-", stdin=json.dumps(event)) == "event.events.k8s.io/upgrade.1 created\n"
    header, rows = table(await kubectl("get", "events"))
    assert header == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    # The node controller's RegisteredNode Events are listed too, as on a real cluster.
    assert [r[1:] for r in rows if r[2] == "Upgraded"] == [["Normal", "Upgraded", "pod/agent-x", "pod upgraded"]]
    as_v1 = await get_json(kubectl, "events.v1.events.k8s.io", "upgrade.1")
    assert (as_v1["apiVersion"], as_v1["note"]) == ("events.k8s.io/v1", "pod upgraded")
