"""`edgeagent sim --authorization rbac` over real HTTPS: tokens, RBAC, the Node authorizer, NodeRestriction.

Texts are kube-apiserver's (measured side by side; the Node authorizer and NodeRestriction
wording of Kubernetes 1.24).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from edgeagent import cli
from edgeagent.kube.client import KubeClient
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.integration.rbac.conftest import admin_of, rbac_sim
from tests.support.identities import apply_deploy, identity_kubeconfig, load_deploy, mint_token
from tests.support.waiting import eventually

JSON = dict[str, Any]
UNAUTHORIZED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
NOBODY = "system:serviceaccount:default:nobody"


class Api:
    """Raw HTTPS calls, so status codes and bodies are checked exactly as a client receives them."""

    def __init__(self, sim: SimCluster) -> None:
        assert sim.tls is not None
        self.sim = sim
        self.ssl = ssl.create_default_context(cafile=str(sim.tls.ca_file))

    async def call(self, method: str, path: str, *, token: str | None = None, body: JSON | None = None,
                   headers: dict[str, str] | None = None, url: str | None = None) -> tuple[int, Any]:
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        if body is not None:
            sent["Content-Type"] = "application/json"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http, http.request(
                method, (url or self.sim.url) + path, headers=sent, ssl=self.ssl,
                data=json.dumps(body) if body is not None else None) as resp:
            raw = await resp.read()
            try:
                return resp.status, json.loads(raw)
            except ValueError:
                return resp.status, raw.decode()


async def service_account(admin: KubeClient, name: str, namespace: str = "default") -> None:
    await admin.create(f"/api/v1/namespaces/{namespace}/serviceaccounts",
                       {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})


async def whoami(api: Api, token: str) -> JSON:
    status, body = await api.call("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", token=token,
                                  body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert status == 201, body
    info: JSON = body["status"]["userInfo"]
    return info


async def can_i(api: Api, token: str | None, headers: dict[str, str] | None = None, **attrs: Any) -> bool:
    spec = {"nonResourceAttributes": attrs} if "path" in attrs else {"resourceAttributes": attrs}
    status, body = await api.call("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", token=token,
                                  headers=headers, body={"apiVersion": "authorization.k8s.io/v1",
                                                         "kind": "SelfSubjectAccessReview", "spec": spec})
    assert status == 201, body
    return bool(body["status"]["allowed"])


@pytest.fixture
async def sim(sim_factory: SimFactory) -> SimCluster:
    return await rbac_sim(sim_factory)


@pytest.fixture
async def admin(sim: SimCluster) -> Any:
    async with admin_of(sim) as client:
        yield client


@pytest.fixture
def api(sim: SimCluster) -> Api:
    return Api(sim)


@pytest.fixture
async def nobody(admin: KubeClient) -> str:
    """A token of a ServiceAccount with no grants at all."""
    await service_account(admin, "nobody")
    return await mint_token(admin, "nobody", "default")


# ---------------------------------------------------------------------------------------------- authentication


async def test_unknown_token_is_401_with_the_real_status(api: Api) -> None:
    assert await api.call("GET", "/api/v1/pods", token="not-a-token") == (401, UNAUTHORIZED)
    forged = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZG1pbiIsImdyb3VwcyI6WyJzeXN0ZW06bWFzdGVycyJdfQ.AAAA"
    assert await api.call("GET", "/api/v1/pods", token=forged) == (401, UNAUTHORIZED)


async def test_service_account_token_is_that_account(api: Api, nobody: str) -> None:
    info = await whoami(api, nobody)
    assert info["username"] == NOBODY
    assert info["groups"] == ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"]


async def test_expired_token_is_401(sim: SimCluster, api: Api, admin: KubeClient) -> None:
    await service_account(admin, "short")
    token = await mint_token(admin, "short", "default", seconds=600)
    assert (await api.call("GET", "/version", token=token))[0] == 200
    assert sim.auth is not None
    sim.auth.authenticator.clock = lambda: time.time() + 601
    assert await api.call("GET", "/version", token=token) == (401, UNAUTHORIZED)


async def test_token_of_a_deleted_service_account_is_401(api: Api, admin: KubeClient, nobody: str) -> None:
    await admin.delete("/api/v1/namespaces/default/serviceaccounts/nobody")
    assert await api.call("GET", "/version", token=nobody) == (401, UNAUTHORIZED)


async def test_token_request_validates_expiration_and_account(api: Api, admin: KubeClient) -> None:
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 60}}
    await service_account(admin, "sa1")
    status, answer = await api.call("POST", "/api/v1/namespaces/default/serviceaccounts/sa1/token",
                                    token=kubeconfig_token(api.sim.admin_kubeconfig), body=body)
    assert status == 422 and "may not specify a duration less than 10 minutes" in answer["message"]
    status, answer = await api.call("POST", "/api/v1/namespaces/default/serviceaccounts/missing/token",
                                    token=kubeconfig_token(api.sim.admin_kubeconfig), body={"spec": {}})
    assert (status, answer["message"]) == (404, 'serviceaccounts "missing" not found')


def kubeconfig_token(path: Path) -> str:
    token: str = yaml.safe_load(path.read_text())["users"][0]["user"]["token"]
    return token


async def test_pod_bound_token_carries_the_node_and_dies_with_the_pod(
        sim: SimCluster, api: Api, admin: KubeClient) -> None:
    """Kubernetes >= 1.30 records the bound pod's node in the token (ValidatingAdmissionPolicy reads it)."""
    await service_account(admin, "agent")
    pod = await admin.create("/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent-x"},
        "spec": {"nodeName": "edge-1", "serviceAccountName": "agent",
                 "containers": [{"name": "c", "image": "registry.local/agent:1"}]}})
    token = await mint_token(admin, "agent", "default", bound_pod=pod)
    extra = (await whoami(api, token))["extra"]
    assert extra["authentication.kubernetes.io/node-name"] == ["edge-1"]
    assert extra["authentication.kubernetes.io/pod-name"] == ["agent-x"]
    assert extra["authentication.kubernetes.io/pod-uid"] == [pod["metadata"]["uid"]]
    await admin.delete("/api/v1/namespaces/default/pods/agent-x", {"gracePeriodSeconds": 0})

    async def rejected() -> bool:
        return (await api.call("GET", "/version", token=token))[0] == 401

    await eventually(rejected, what="the bound pod's token rejected once the pod is gone")


async def test_tokens_are_never_logged(api: Api, admin: KubeClient, nobody: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    await api.call("GET", "/api/v1/nodes", token=nobody)  # 403, logged as a denial
    await api.call("GET", "/api/v1/nodes", token=nobody + "x")  # 401, logged as a denial
    out = capsys.readouterr()
    assert "request_denied" in out.out + out.err
    assert nobody not in out.out + out.err and nobody[-20:] not in out.out + out.err


# ---------------------------------------------------------------------------------------------- RBAC


async def test_forbidden_texts_match_kube_apiserver(api: Api, nobody: str) -> None:
    status, body = await api.call("DELETE", "/api/v1/namespaces/default/pods/x", token=nobody)
    assert (status, body) == (403, {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f'pods "x" is forbidden: User "{NOBODY}" cannot delete resource "pods" in API group "" '
                   'in the namespace "default"',
        "reason": "Forbidden", "details": {"name": "x", "kind": "pods"}, "code": 403})
    status, body = await api.call("GET", "/api/v1/nodes", token=nobody)
    assert (status, body["message"]) == (
        403, f'nodes is forbidden: User "{NOBODY}" cannot list resource "nodes" in API group "" at the cluster scope')
    status, body = await api.call("PATCH", "/api/v1/namespaces/default/pods/x/status", token=nobody,
                                  body={"status": {}})
    assert body["message"] == (f'pods "x" is forbidden: User "{NOBODY}" cannot patch resource "pods/status" in API '
                               'group "" in the namespace "default"')
    status, body = await api.call("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases?watch=1",
                                  token=nobody)
    assert body["message"] == (f'leases.coordination.k8s.io is forbidden: User "{NOBODY}" cannot watch resource '
                               '"leases" in API group "coordination.k8s.io" in the namespace "kube-node-lease"')
    assert body["details"] == {"group": "coordination.k8s.io", "kind": "leases"}
    status, body = await api.call("GET", "/logs", token=nobody)
    assert (status, body["message"]) == (403, f'forbidden: User "{NOBODY}" cannot get path "/logs"')


async def test_discovery_and_health_are_open_as_on_a_real_cluster(api: Api, nobody: str) -> None:
    for path in ("/api", "/api/v1", "/apis", "/apis/apps/v1", "/version", "/healthz", "/openapi/v3"):
        status, _ = await api.call("GET", path, token=nobody)
        assert status == 200, path
    for path in ("/healthz", "/version", "/readyz"):
        assert (await api.call("GET", path))[0] == 200, path  # anonymous: system:public-info-viewer
    status, body = await api.call("GET", "/api")
    assert (status, body["message"]) == (403, 'forbidden: User "system:anonymous" cannot get path "/api"')


async def test_rules_match_verbs_resources_subresources_names_and_namespaces(
        api: Api, admin: KubeClient, nobody: str) -> None:
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    subject = [{"kind": "ServiceAccount", "name": "nobody", "namespace": "default"}]
    await admin.create(f"{rbac}/namespaces/default/roles", {"metadata": {"name": "r"}, "rules": [
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["only-this"]},
        {"apiGroups": ["apps"], "resources": ["*"], "verbs": ["*"]},
    ]})
    await admin.create(f"{rbac}/namespaces/default/rolebindings", {
        "metadata": {"name": "rb"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
        "subjects": subject})
    await admin.create(f"{rbac}/clusterroles", {"metadata": {"name": "node-reader"}, "rules": [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
        {"nonResourceURLs": ["/metrics", "/debug/*"], "verbs": ["get"]}]})
    await admin.create(f"{rbac}/clusterrolebindings", {
        "metadata": {"name": "crb"}, "subjects": subject,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "node-reader"}})

    async def check(expected: bool, **attrs: Any) -> None:
        assert await can_i(api, nobody, **attrs) is expected, attrs

    await eventually(lambda: can_i(api, nobody, verb="patch", resource="pods", subresource="status",
                                   namespace="default"), what="the new bindings in force")
    await check(False, verb="patch", resource="pods", namespace="default")  # the subresource only
    await check(False, verb="update", resource="pods", subresource="status", namespace="default")
    await check(False, verb="patch", resource="pods", subresource="status", namespace="kube-system")  # RoleBinding
    await check(True, verb="get", resource="configmaps", name="only-this", namespace="default")
    await check(False, verb="get", resource="configmaps", name="other", namespace="default")
    await check(False, verb="list", resource="configmaps", namespace="default")  # resourceNames: no collection
    await check(True, verb="deletecollection", group="apps", resource="daemonsets", namespace="default")
    await check(False, verb="get", group="batch", resource="jobs", namespace="default")
    await check(True, verb="list", resource="nodes")
    await check(False, verb="watch", resource="nodes")
    await check(True, verb="get", path="/debug/pprof")
    await check(False, verb="get", path="/debugger")
    # And real requests agree with the reviews: list nodes works, watch does not.
    assert (await api.call("GET", "/api/v1/nodes", token=nobody))[0] == 200
    assert (await api.call("GET", "/api/v1/nodes?watch=true&timeoutSeconds=1", token=nobody))[0] == 403


async def test_binding_to_a_missing_role_names_it_in_the_denial(api: Api, admin: KubeClient, nobody: str) -> None:
    await admin.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "metadata": {"name": "dangling"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gone"},
        "subjects": [{"kind": "ServiceAccount", "name": "nobody", "namespace": "default"}]})
    status, body = await api.call("GET", "/api/v1/nodes", token=nobody)
    assert (status, body["message"]) == (403, f'nodes is forbidden: User "{NOBODY}" cannot list resource "nodes" in '
                                              'API group "" at the cluster scope: RBAC: '
                                              'clusterrole.rbac.authorization.k8s.io "gone" not found')


async def test_masters_may_impersonate_and_others_may_not(sim: SimCluster, api: Api, admin: KubeClient,
                                                          nobody: str) -> None:
    await apply_deploy(admin, load_deploy())
    token = kubeconfig_token(sim.admin_kubeconfig)
    agent = {"Impersonate-User": "system:serviceaccount:edgeagent-system:edgeagent-agent"}
    assert await can_i(api, token, agent, verb="delete", resource="pods", namespace="default") is True
    assert await can_i(api, token, agent, verb="create", resource="pods", namespace="default") is False
    assert await can_i(api, token, agent, verb="get", group="coordination.k8s.io", resource="leases",
                       namespace="kube-node-lease") is True
    status, body = await api.call("POST", "/api/v1/namespaces/default/pods", token=token, headers=agent,
                                  body={"metadata": {"name": "p"}})
    assert (status, body["message"]) == (403, 'pods is forbidden: User "system:serviceaccount:edgeagent-system:'
                                              'edgeagent-agent" cannot create resource "pods" in API group "" in the '
                                              'namespace "default"')
    status, body = await api.call("GET", "/api/v1/pods", token=nobody, headers={"Impersonate-User": "alice"})
    assert (status, body["message"]) == (403, f'users "alice" is forbidden: User "{NOBODY}" cannot impersonate '
                                              'resource "users" in API group "" at the cluster scope')


# ---------------------------------------------------------------------------------------------- node identity


async def _pod_on(admin: KubeClient, name: str, node: str) -> JSON:
    return await admin.create("/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": "registry.local/app:1"}]}})


async def test_node_identity_is_confined_to_its_own_node(sim: SimCluster, admin: KubeClient) -> None:
    await _pod_on(admin, "mine", "edge-1")
    await _pod_on(admin, "theirs", "edge-2")
    async with await KubeClient.connect(sim.node_kubeconfig("edge-1")) as node:
        listed = await node.get("/api/v1/pods")  # reads every pod, as the Node authorizer allows
        assert {"mine", "theirs"} <= {p["metadata"]["name"] for p in listed["items"]}
        await node.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-1")
        await node.patch("/api/v1/namespaces/default/pods/mine/status",
                         {"status": {"conditions": [{"type": "X", "status": "True"}]}})
        await node.delete("/api/v1/namespaces/default/pods/mine")
        await node.create("/api/v1/namespaces/default/events", {
            "metadata": {"name": "e1"}, "involvedObject": {"kind": "Node", "name": "edge-1"}, "reason": "R"})
    api = Api(sim)
    token = kubeconfig_token(sim.node_kubeconfig("edge-1"))
    url = sim.node_url("edge-1")
    who = 'User "system:node:edge-1"'
    cases: list[tuple[str, str, JSON | None, str]] = [
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-2", None,
         f'leases.coordination.k8s.io "edge-2" is forbidden: {who} cannot get resource "leases" in API group '
         '"coordination.k8s.io" in the namespace "kube-node-lease": can only access node lease with the same name '
         'as the requesting node'),
        ("DELETE", "/api/v1/namespaces/default/pods/theirs", None,
         'pods "theirs" is forbidden: node "edge-1" can only delete pods with spec.nodeName set to itself'),
        ("PATCH", "/api/v1/namespaces/default/pods/theirs/status", {"status": {}},
         'pods "theirs" is forbidden: node "edge-1" can only update pod status for pods with spec.nodeName set to '
         'itself'),
        ("PATCH", "/api/v1/nodes/edge-2/status", {"status": {}},
         'nodes "edge-2" is forbidden: node "edge-1" is not allowed to modify node "edge-2"'),
        ("POST", "/api/v1/namespaces/default/pods", {"metadata": {"name": "new"}, "spec": {"nodeName": "edge-1"}},
         'pods "new" is forbidden: pod does not have "kubernetes.io/config.mirror" annotation, node "edge-1" can '
         'only create mirror pods'),
        ("DELETE", "/api/v1/nodes/edge-1", None,
         f'nodes "edge-1" is forbidden: {who} cannot delete resource "nodes" in API group "" at the cluster scope'),
        ("GET", "/api/v1/namespaces/default/secrets/s", None,
         f'secrets "s" is forbidden: {who} cannot get resource "secrets" in API group "" in the namespace "default": '
         "no relationship found between node 'edge-1' and this object"),
    ]
    # Kubernetes 1.36 (issue 38 item 3): a pod of another node, or none at all, is no relationship of this node's.
    for pod in ("theirs", "no-such-pod"):
        cases.append(("GET", f"/api/v1/namespaces/default/pods/{pod}", None,
                      f'pods "{pod}" is forbidden: {who} cannot get resource "pods" in API group "" in the namespace '
                      "\"default\": no relationship found between node 'edge-1' and this object"))
    for method, path, body, message in cases:
        status, answer = await api.call(method, path, token=token, body=body, url=url)
        assert (status, answer["message"]) == (403, message), path
    await _pod_on(admin, "mine-again", "edge-1")
    assert (await api.call("GET", "/api/v1/namespaces/default/pods/mine-again", token=token, url=url))[0] == 200


# ---------------------------------------------------------------------------------------------- modes and CLI


async def test_none_mode_keeps_plain_http_and_lets_everyone_do_everything(sim_factory: SimFactory) -> None:
    sim = await sim_factory(nodes=1)
    assert sim.url.startswith("http://") and sim.tls is None
    assert "token" not in sim.admin_kubeconfig.read_text()
    async with aiohttp.ClientSession() as http:
        async with http.get(sim.url + "/api/v1/nodes", headers={"Authorization": "Bearer anything"}) as resp:
            assert resp.status == 200
        review = {"spec": {"resourceAttributes": {"verb": "delete", "resource": "nodes"}}}
        async with http.post(sim.url + "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json=review) as resp:
            assert resp.status == 201 and (await resp.json())["status"]["allowed"] is True


def test_authorization_flag_reads_its_environment_variable(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.parse_args(["sim"]).authorization == "none"
    monkeypatch.setenv("EDGEAGENT_AUTHORIZATION", "rbac")
    assert cli.parse_args(["sim"]).authorization == "rbac"
    monkeypatch.setenv("EDGEAGENT_AUTHORIZATION", "abac")
    assert cli.main(["sim"]) == 2
    assert "EDGEAGENT_AUTHORIZATION='abac'" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- kubectl

KUBECTL = shutil.which("kubectl")


async def _kubectl(kubeconfig: Path, cache: Path, *args: str) -> tuple[int, str, str]:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache), "--request-timeout", "20s", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.mark.kubectl
async def test_kubectl_create_token_and_auth_can_i(sim: SimCluster, admin: KubeClient, tmp_path: Path) -> None:
    await apply_deploy(admin, load_deploy())
    kubeconfig, cache = sim.admin_kubeconfig, tmp_path / "cache"
    agent = "--as=system:serviceaccount:edgeagent-system:edgeagent-agent"
    assert await _kubectl(kubeconfig, cache, "auth", "can-i", "delete", "pods", agent) == (0, "yes\n", "")
    code, out, _ = await _kubectl(kubeconfig, cache, "auth", "can-i", "create", "pods", agent)
    assert (code, out) == (1, "no\n")
    code, out, _ = await _kubectl(kubeconfig, cache, "auth", "can-i", "patch", "pods", "--subresource=status", agent)
    assert (code, out) == (0, "yes\n")
    code, token, err = await _kubectl(kubeconfig, cache, "create", "token", "edgeagent-agent", "-n",
                                      "edgeagent-system", "--duration=15m")
    assert code == 0, err
    assert sim.tls is not None
    sa_config = identity_kubeconfig(tmp_path / "sa.kubeconfig", sim.url, token.strip(), sim.tls.ca_file)
    code, out, err = await _kubectl(sa_config, cache, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
    assert (code, out) == (0, "system:serviceaccount:edgeagent-system:edgeagent-agent"), err
    code, _, err = await _kubectl(sa_config, cache, "get", "nodes")
    assert code == 1
    assert ('Error from server (Forbidden): nodes is forbidden: User "system:serviceaccount:edgeagent-system:'
            'edgeagent-agent" cannot list resource "nodes" in API group "" at the cluster scope') in err


async def test_start_up_text_names_the_ca_for_curl(sim: SimCluster) -> None:
    from edgeagent.sim.app import describe

    assert sim.tls is not None
    text = describe(sim)
    assert "authorization: rbac" in text
    assert f"curl --cacert {sim.tls.ca_file} -X POST '{sim.url}/sim/v1/nodes/edge-1/connect'" in text


async def test_tokens_and_ca_survive_a_sim_restart_on_the_same_dir(sim_factory: SimFactory, tmp_path: Path) -> None:
    """The signing key and the CA live in --dir: running clients' kubeconfigs and minted tokens stay valid."""
    directory = tmp_path / "kept"
    first = await sim_factory(nodes=1, authorization="rbac", dir=directory)
    async with admin_of(first) as admin:
        await service_account(admin, "kept")
        token = await mint_token(admin, "kept", "default")
    assert first.tls is not None
    ca = first.tls.ca_file.read_bytes()
    await first.stop()
    second = await sim_factory(nodes=1, authorization="rbac", dir=directory)
    assert second.tls is not None and second.tls.ca_file.read_bytes() == ca
    assert (await whoami(Api(second), token))["username"] == "system:serviceaccount:default:kept"
    async with admin_of(second) as admin:
        assert (await admin.get("/api/v1/namespaces/default/serviceaccounts/kept"))["metadata"]["name"] == "kept"


async def test_node_create_with_a_yaml_body_is_judged_not_rejected_as_undecodable(sim: SimCluster) -> None:
    token = kubeconfig_token(sim.node_kubeconfig("edge-1"))
    assert sim.tls is not None
    async with aiohttp.ClientSession() as http, http.post(
            sim.node_url("edge-1") + "/api/v1/namespaces/default/pods", data=b"metadata: {name: y}\n",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"},
            ssl=ssl.create_default_context(cafile=str(sim.tls.ca_file))) as resp:
        body = await resp.json()
    assert (resp.status, body["reason"]) == (403, "Forbidden")
    assert 'node "edge-1" can only create mirror pods' in body["message"]


@pytest.mark.kubectl
async def test_kubectl_auth_can_i_list(sim: SimCluster, admin: KubeClient, tmp_path: Path) -> None:
    """SelfSubjectRulesReview: the rules of the (impersonated) caller in a namespace, as kubectl tabulates them."""
    await apply_deploy(admin, load_deploy())
    agent = "--as=system:serviceaccount:edgeagent-system:edgeagent-agent"
    code, out, err = await _kubectl(sim.admin_kubeconfig, tmp_path, "auth", "can-i", "--list", "-n",
                                    "kube-node-lease", agent)
    assert code == 0, err
    rows = {(line.split()[0], line[line.rindex("["):].strip()) for line in out.splitlines()[1:] if line[:1] != " "}
    assert {("pods", "[get list watch delete]"), ("pods/status", "[patch]"),
            ("leases.coordination.k8s.io", "[get]")} <= rows, out
    code, out, err = await _kubectl(sim.admin_kubeconfig, tmp_path, "auth", "can-i", "--list", "-n", "default", agent)
    assert "leases.coordination.k8s.io" not in out  # the Role is bound in kube-node-lease only
    code, out, err = await _kubectl(sim.node_kubeconfig("edge-1"), tmp_path, "auth", "can-i", "--list")
    assert code == 0 and "pods/status" in out and "[update patch]" in out, out


async def test_a_revoked_token_is_401_at_once_and_after_a_restart_while_a_new_one_works(
        sim_factory: SimFactory, tmp_path: Path) -> None:
    """`POST /sim/v1/tokens/revoke`: the soak's credential rotation revokes the agent's old token, whose next
    request must get 401 (also from a sim restarted on the same --dir), while the new token keeps working."""
    directory = tmp_path / "kept"
    first = await sim_factory(nodes=1, authorization="rbac", dir=directory)
    async with admin_of(first) as admin:
        await service_account(admin, "rotated")
        old = await mint_token(admin, "rotated", "default")
        new = await mint_token(admin, "rotated", "default")
    api = Api(first)
    assert (await api.call("GET", "/version", token=old))[0] == 200
    status, body = await api.call("POST", "/sim/v1/tokens/revoke", body={"token": old})
    assert (status, body) == (200, {"revoked": True, "username": "system:serviceaccount:default:rotated"})
    assert await api.call("GET", "/version", token=old) == (401, UNAUTHORIZED)
    assert (await whoami(api, new))["username"] == "system:serviceaccount:default:rotated"
    assert (await api.call("POST", "/sim/v1/tokens/revoke", body={"token": "not-a-token"}))[0] == 400
    assert old not in (directory / "sim-revoked-tokens").read_text()  # a digest, never the token
    await first.stop()
    second = await sim_factory(nodes=1, authorization="rbac", dir=directory)
    assert await Api(second).call("GET", "/version", token=old) == (401, UNAUTHORIZED)
    assert (await whoami(Api(second), new))["username"] == "system:serviceaccount:default:rotated"
