"""What `edgeagent sim --authorization rbac` adds to each request: authentication, RBAC and Node authorization.

Two figures, both with deploy/'s Roles, ClusterRoles and bindings loaded (plus 200 unrelated RoleBindings, so
the binding index is not trivially small):

- `rbac_eval_*`: the filter chain's own work per request, in-process (token verification, the request's
  attributes from its URL, the privileged-group/Node/RBAC decision), over the calls the agent and the
  controller make, each with its own ServiceAccount token;
- `rbac_http_get_*`: the p50 of one pod GET over HTTPS against the same server with and without the auth
  middleware (same TLS), and their difference. Noisier: a shared machine moves it by tens of microseconds.

Prints `name value unit` lines.

    .venv/bin/python bench/rbac_overhead.py [--rounds 20000] [--requests 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web
from multidict import MultiDict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import note, percentile, report
from edgeagent.sim.auth import load_signing_key
from edgeagent.sim.auth_http import AuthLayer
from edgeagent.sim.auth_request import request_attributes
from edgeagent.sim.auth_tls import ensure_server_tls
from edgeagent.sim.resources import RESOURCES, SERVICE_ACCOUNTS
from edgeagent.sim.server import create_app
from edgeagent.sim.store import Store

JSON = dict[str, Any]
DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
NS = "edgeagent-system"

# (identity, method, path, query): the agent's and the controller's calls.
CALLS: list[tuple[str, str, str, dict[str, str]]] = [
    ("agent", "GET", "/api/v1/pods", {"fieldSelector": "spec.nodeName=edge-1"}),
    ("agent", "GET", "/api/v1/pods", {"fieldSelector": "spec.nodeName=edge-1", "watch": "true"}),
    ("agent", "GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-1", {}),
    ("agent", "GET", "/api/v1/namespaces/default/pods/app-1", {}),
    ("agent", "PATCH", "/api/v1/namespaces/default/pods/app-1/status", {}),
    ("agent", "DELETE", "/api/v1/namespaces/default/pods/app-1", {}),
    ("controller", "GET", "/apis/apps/v1/daemonsets", {"watch": "true"}),
    ("controller", "GET", "/api/v1/nodes", {}),
    ("controller", "PATCH", "/api/v1/namespaces/default/pods/app-1/status", {}),
    ("controller", "POST", "/api/v1/namespaces/default/events", {}),
    ("controller", "PUT", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/edgeagent-controller", {}),
]


def _resource(kind: str) -> Any:
    return next(r for r in RESOURCES.values() if r.kind == kind)


def load(store: Store) -> None:
    for path in sorted(DEPLOY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                store.create(_resource(doc["kind"]), doc, namespace=doc["metadata"].get("namespace"))
    for i in range(20):
        store.create(_resource("Namespace"), {"metadata": {"name": f"team-{i}"}})
    for i in range(200):
        store.create(_resource("RoleBinding"), {
            "metadata": {"name": f"other-{i}", "namespace": f"team-{i % 20}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edgeagent-agent"},
            "subjects": [{"kind": "ServiceAccount", "name": f"sa-{i}", "namespace": f"team-{i % 20}"}]})


def tokens(auth: AuthLayer, store: Store) -> dict[str, str]:
    out = {}
    for who in ("agent", "controller"):
        sa = store.get(SERVICE_ACCOUNTS, NS, f"edgeagent-{who}")
        out[who] = auth.authenticator.service_account_token(NS, sa, 3600)[0]
    return out


def bench_eval(rounds: int) -> None:
    store = Store()
    load(store)
    auth = AuthLayer(store, "rbac", load_signing_key(None))
    bearer = {who: f"Bearer {t}" for who, t in tokens(auth, store).items()}
    calls = [(bearer[who], method, path, MultiDict(query)) for who, method, path, query in CALLS]
    samples: list[float] = []
    allowed = 0
    clock = time.perf_counter_ns
    for i in range(rounds):
        header, method, path, query = calls[i % len(calls)]
        start = clock()
        user = auth.authenticator.authenticate(header)
        assert user is not None
        decision = auth.decide(request_attributes(user, method, path, query))
        samples.append((clock() - start) / 1000)
        allowed += decision.allowed
    assert allowed == rounds, "every call of the agent and controller must be allowed by deploy/"
    note(f"{rounds} decisions over {len(CALLS)} agent/controller calls, deploy/ + 200 unrelated RoleBindings")
    report("rbac_eval_p50", percentile(samples, 50), "us")
    report("rbac_eval_p99", percentile(samples, 99), "us")


async def _serve(store: Store, auth: AuthLayer | None, ctx: ssl.SSLContext) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(create_app(store, auth=auth), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    return runner, f"https://127.0.0.1:{runner.addresses[0][1]}"


async def _p50(url: str, headers: dict[str, str], client: ssl.SSLContext, requests: int) -> float:
    samples = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client, limit=1)) as http:
        for _ in range(requests):
            start = time.perf_counter_ns()
            async with http.get(url, headers=headers) as resp:
                await resp.read()
                assert resp.status == 200, resp.status
            samples.append((time.perf_counter_ns() - start) / 1000)
    return percentile(samples, 50)


async def bench_http(requests: int) -> None:
    store = Store()
    load(store)
    store.create(_resource("Pod"), {"metadata": {"name": "app-1", "namespace": "default"},
                                    "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "i"}]}})
    auth = AuthLayer(store, "rbac", load_signing_key(None))
    token = tokens(auth, store)["agent"]
    with tempfile.TemporaryDirectory() as tmp:
        tls = ensure_server_tls(Path(tmp), "127.0.0.1")
        client = ssl.create_default_context(cafile=str(tls.ca_file))
        plain, plain_url = await _serve(store, None, tls.context())
        guarded, guarded_url = await _serve(store, auth, tls.context())
        try:
            path = "/api/v1/namespaces/default/pods/app-1"
            headers = {"Authorization": f"Bearer {token}"}
            await _p50(plain_url + path, headers, client, 200)  # warm-up
            await _p50(guarded_url + path, headers, client, 200)
            without, with_auth = [], []
            for _ in range(3):  # interleaved, so drift in machine load hits both alike
                without.append(await _p50(plain_url + path, headers, client, requests // 3))
                with_auth.append(await _p50(guarded_url + path, headers, client, requests // 3))
        finally:
            await guarded.cleanup()
            await plain.cleanup()
    note(f"{requests} GETs of one pod over HTTPS each way, one connection, agent ServiceAccount token")
    report("rbac_http_get_p50_none", sorted(without)[1], "us")
    report("rbac_http_get_p50_rbac", sorted(with_auth)[1], "us")
    report("rbac_http_get_p50_overhead", sorted(with_auth)[1] - sorted(without)[1], "us")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20000)
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    bench_eval(args.rounds)
    asyncio.run(bench_http(args.requests))
    return 0


if __name__ == "__main__":
    sys.exit(main())
