"""KubeClient over real HTTP: against the sim (plain kubeconfig, no kubernetes_asyncio), against a small
recording server (credentials and TLS as the native loader sets them up), and through the kubernetes_asyncio
fallback for an `exec` user."""

from __future__ import annotations

import asyncio
import socket
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from aiohttp import web

from edgeagent.kube.client import KubeClient, KubeError, KubeUnreachable, Timeouts
from tests.support.waiting import eventually
from tests.unit.test_kubeconfig import b64, make_tls_material, needs_openssl

if TYPE_CHECKING:
    from edgeagent.sim.cluster import SimCluster

PODS = "/api/v1/namespaces/default/pods"
TIMEOUTS = Timeouts(connect=2, request=5)


def pod(name: str, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"nodeName": "edge-1", "containers": [{"name": "app", "image": "registry.local/app:1"}]},
    }


def kubeconfig(path: Path, server: str, user: dict[str, Any], **cluster: Any) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }))
    return path


def server_url(sim: SimCluster) -> str:
    doc = yaml.safe_load(Path(sim.admin_kubeconfig).read_text())
    return str(doc["clusters"][0]["cluster"]["server"])


# --- against the sim -------------------------------------------------------------------------------------------


async def test_get_list_create_patch_delete(sim: SimCluster) -> None:
    async with await KubeClient.connect(sim.admin_kubeconfig, TIMEOUTS) as client:
        assert not client.uses_kubernetes_asyncio
        assert client.host == server_url(sim).rstrip("/")
        created = await client.create(PODS, pod("a"))
        assert created["metadata"]["name"] == "a"
        listed = await client.get(PODS, query={"limit": 10})
        assert [p["metadata"]["name"] for p in listed["items"]] == ["a"]
        patched = await client.patch(f"{PODS}/a", {"metadata": {"labels": {"x": "1"}}})
        assert patched["metadata"]["labels"] == {"x": "1"}
        got = await client.get(f"{PODS}/a")
        assert got["metadata"]["labels"] == {"x": "1"}
        await client.delete(f"{PODS}/a", {"gracePeriodSeconds": 0})

        async def gone() -> bool:
            try:
                await client.get(f"{PODS}/a")
            except KubeError as exc:
                return exc.code == 404
            return False

        deleted: bool = await eventually(gone, timeout=10, what="pod a deleted")
        assert deleted


async def test_non_2xx_raises_kube_error_with_status(sim: SimCluster) -> None:
    async with await KubeClient.connect(sim.admin_kubeconfig, TIMEOUTS) as client:
        with pytest.raises(KubeError) as info:
            await client.get(f"{PODS}/missing")
        assert info.value.code == 404
        assert info.value.reason == "NotFound"
        assert info.value.status["kind"] == "Status"


async def test_watch_yields_events_including_one_larger_than_aiohttp_readline_limit(sim: SimCluster) -> None:
    big = "x" * 1_100_000  # one event line beyond what aiohttp's readline() accepts (512 KiB in aiohttp 3.14)
    async with await KubeClient.connect(sim.admin_kubeconfig, TIMEOUTS) as client:
        rv = (await client.get(PODS))["metadata"]["resourceVersion"]
        await client.create(PODS, pod("small"))
        await client.create(PODS, pod("big", payload=big))
        await client.create(PODS, pod("after"))
        seen: list[tuple[str, str]] = []
        async for event in client.watch(PODS, query={"resourceVersion": rv}, idle_timeout=5):
            seen.append((event["type"], event["object"]["metadata"]["name"]))
            if event["object"]["metadata"]["name"] == "big":
                assert event["object"]["metadata"]["annotations"]["payload"] == big
            if len(seen) == 3:
                break
        assert seen == [("ADDED", "small"), ("ADDED", "big"), ("ADDED", "after")]


async def test_silent_watch_raises_unreachable_after_idle_timeout(sim: SimCluster) -> None:
    async with await KubeClient.connect(sim.admin_kubeconfig, TIMEOUTS) as client:
        rv = (await client.get("/api/v1/namespaces/quiet/pods"))["metadata"]["resourceVersion"]
        with pytest.raises(KubeUnreachable, match="watch"):
            async for _ in client.watch("/api/v1/namespaces/quiet/pods", query={"resourceVersion": rv},
                                        idle_timeout=0.3):
                pass


async def test_connection_refused_raises_unreachable(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path = kubeconfig(tmp_path / "config", f"http://127.0.0.1:{port}", {})
    async with await KubeClient.connect(path, TIMEOUTS) as client:
        with pytest.raises(KubeUnreachable):
            await client.get(PODS)


async def test_plain_kubeconfig_never_imports_kubernetes_asyncio(sim: SimCluster) -> None:
    script = f"""
import asyncio, sys
from edgeagent.kube.client import KubeClient, Timeouts

async def main():
    async with await KubeClient.connect({str(sim.admin_kubeconfig)!r}, Timeouts(2, 5)) as client:
        listed = await client.get("/api/v1/nodes")
        async for _ in client.watch("/api/v1/nodes", query={{"resourceVersion": listed["metadata"]["resourceVersion"],
                                                              "timeoutSeconds": 1}}, idle_timeout=5):
            break
        print(len(listed["items"]), "kubernetes_asyncio" in sys.modules)

asyncio.run(main())
"""
    # A child process: this one has imported kubernetes_asyncio already (other tests, the sim's own tests).
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await asyncio.wait_for(child.communicate(), timeout=60)
    assert child.returncode == 0, stderr.decode()
    assert stdout.decode().split() == ["3", "False"]


async def test_exec_user_goes_through_kubernetes_asyncio(sim: SimCluster, tmp_path: Path) -> None:
    marker = tmp_path / "plugin-ran"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, pathlib\n"
        f"pathlib.Path({str(marker)!r}).write_text('yes')\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1', 'kind': 'ExecCredential',"
        " 'status': {'token': 'exec-token'}}))\n"
    )
    path = kubeconfig(tmp_path / "config", server_url(sim), {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable, "args": [str(plugin)],
        "interactiveMode": "Never",
    }})
    async with await KubeClient.connect(path, TIMEOUTS) as client:
        assert client.uses_kubernetes_asyncio
        nodes = await client.get("/api/v1/nodes")
        assert len(nodes["items"]) == 3
        with pytest.raises(KubeError) as info:
            await client.get(f"{PODS}/missing")
        assert info.value.code == 404
    assert marker.read_text() == "yes"


# --- credentials and TLS, against a recording server -----------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.headers.append(dict(request.headers))
        return web.json_response({"kind": "Status", "path": request.path, "query": dict(request.query)})


async def start_recorder(tls: ssl.SSLContext | None = None) -> tuple[Recorder, web.AppRunner]:
    recorder = Recorder()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", recorder.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    port = runner.addresses[0][1]
    recorder.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    return recorder, runner


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    rec, runner = await start_recorder()
    try:
        yield rec
    finally:
        await runner.cleanup()


async def test_bearer_token_and_query_are_sent(recorder: Recorder, tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", recorder.url, {"token": "static-token"})
    async with await KubeClient.connect(path, TIMEOUTS) as client:
        body = await client.get("/api/v1/pods", query={"watch": False, "limit": 5})
    assert body["query"] == {"watch": "false", "limit": "5"}
    assert recorder.headers[0]["Authorization"] == "Bearer static-token"


async def test_token_file_is_read(recorder: Recorder, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("file-token\n")
    path = kubeconfig(tmp_path / "config", recorder.url, {"tokenFile": "token"})
    async with await KubeClient.connect(path, TIMEOUTS) as client:
        await client.get("/api")
    assert recorder.headers[0]["Authorization"] == "Bearer file-token"


async def test_basic_auth_is_sent(recorder: Recorder, tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", recorder.url, {"username": "admin", "password": "pw"})
    async with await KubeClient.connect(path, TIMEOUTS) as client:
        await client.get("/api")
    assert recorder.headers[0]["Authorization"] == "Basic YWRtaW46cHc="


async def test_anonymous_user_sends_no_authorization(recorder: Recorder, tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", recorder.url, {})
    async with await KubeClient.connect(path, TIMEOUTS) as client:
        await client.create("/api/v1/namespaces/default/pods", {"a": 1})
    assert "Authorization" not in recorder.headers[0]
    assert recorder.headers[0]["Content-Type"] == "application/json"


@needs_openssl
async def test_mutual_tls_with_ca_data_client_cert_data_and_tls_server_name(tmp_path: Path) -> None:
    material = make_tls_material(tmp_path / "tls", server_name="kube-test")
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(material["ca.crt"]))
    server_tls.load_cert_chain(material["server.crt"], material["server.key"])
    server_tls.verify_mode = ssl.CERT_REQUIRED  # the client must present its certificate
    rec, runner = await start_recorder(server_tls)
    try:
        user = {"client-certificate-data": b64(material["client.crt"]),
                "client-key-data": b64(material["client.key"])}
        path = kubeconfig(tmp_path / "config", rec.url, user,
                          **{"certificate-authority-data": b64(material["ca.crt"]), "tls-server-name": "kube-test"})
        async with await KubeClient.connect(path, TIMEOUTS) as client:
            assert (await client.get("/version"))["path"] == "/version"
        # Without tls-server-name the certificate (for kube-test) does not match 127.0.0.1.
        path = kubeconfig(tmp_path / "config2", rec.url, user,
                          **{"certificate-authority-data": b64(material["ca.crt"])})
        async with await KubeClient.connect(path, TIMEOUTS) as client:
            with pytest.raises(KubeUnreachable, match="certificate"):
                await client.get("/version")
    finally:
        await runner.cleanup()


async def test_unusable_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "client.crt").write_text("x")
    path = kubeconfig(tmp_path / "config", "https://127.0.0.1:1", {"client-certificate": "client.crt"})
    with pytest.raises(ValueError, match=r"kubeconfig .*config \(user 'u'\): 'client-key'"):
        await KubeClient.connect(path, TIMEOUTS)
    with pytest.raises(FileNotFoundError, match="kubeconfig not found"):
        await KubeClient.connect(tmp_path / "absent", TIMEOUTS)
