"""`edgeagent dashboard --allow-actions` over HTTP (issue 36): a button's POST makes exactly the write of the CLI
verb, with the dashboard's credentials; a POST that is not the page's own (no token, a wrong one, another
origin) is refused and writes nothing; without the flag there is no such route.

The dashboard runs in the test's event loop on 127.0.0.1 over the sim; the requests are aiohttp's, with the
headers a browser would send (the browser test shows a real cross-site page refused)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from edgeagent.fleet.actions import TOKEN_HEADER
from edgeagent.kube.client import KubeClient
from edgeagent.rollout.steer import ANNOTATION_STEER
from tests.conftest import SimFactory
from tests.integration.rbac.test_fleet_viewer import viewer, viewer_role
from tests.integration.rollout_cli.conftest import World, edgeagent
from tests.support.dashboard_server import dashboard
from tests.support.hook_proxy import HookProxy
from tests.support.rolloutplan_crd import create_plan, install_crd, read_plan, status, write_status

JSON = dict[str, Any]
REV = "5b4499c6c8"
STABLE = "6f4c69dbb4"


async def page_token(url: str) -> str:
    """The token the dashboard wrote into its page (empty without --allow-actions)."""
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200
        found = re.search(r'<meta name="edgeagent-token" content="([^"]*)">', await response.text())
    assert found is not None, "the page has no edgeagent-token meta tag"
    return found.group(1)


async def press(url: str, verb: str, *, name: str = "web", method: str = "POST", headers: JSON | None = None) \
        -> tuple[int, str, str]:
    """One request to a button's route: (status, body, content type)."""
    async with aiohttp.ClientSession() as session, \
            session.request(method, f"{url}api/actions/default/{name}/{verb}", headers=headers or {}) as response:
        return response.status, await response.text(), response.content_type


def own(url: str, token: str) -> JSON:
    """The headers the dashboard's own page sends with a press (as Chromium does: Origin, Sec-Fetch-Site)."""
    return {"Origin": url.rstrip("/"), "Sec-Fetch-Site": "same-origin", TOKEN_HEADER: token}


def request_of(plan: JSON) -> JSON | None:
    raw = (plan["metadata"].get("annotations") or {}).get(ANNOTATION_STEER)
    return dict(json.loads(raw)) if raw else None


def written(plan: JSON) -> JSON:
    """What a verb may change in a plan: its spec (less the DaemonSet it names) and the request, less its id
    (random, one per request)."""
    spec = {k: v for k, v in plan["spec"].items() if k != "daemonSet"}
    request = request_of(plan)
    return {"spec": spec, "request": {k: v for k, v in request.items() if k != "id"} if request else None}


async def mark_handled(world: World, name: str) -> None:
    """What the controller does with a request: record its id in status.steer."""
    request = request_of(await read_plan(world.admin, name))
    assert request is not None
    await write_status(world.admin, name, {"steer": {"id": request["id"], "verb": request["verb"], "result": "Done",
                                                     "message": "", "at": "2026-11-29T00:00:00Z"}})


def writes(world: World, agent: str, since: int) -> list[tuple[str, str, int]]:
    """The sim's audit of every write a user agent made after entry `since`: (verb, path, code)."""
    return [(e["verb"], e["path"], e["code"]) for e in list(world.sim.audit.entries)[since:]
            if e["userAgent"].startswith(agent) and e["verb"] not in ("GET", "HEAD")]


class WriteRecorder:
    """A proxy in front of the sim that records every write going through it: (client, method, path, content
    type, body), the client being the User-Agent's product (edgeagent-cli, edgeagent-dashboard)."""

    def __init__(self, world: World, kubeconfig: Path) -> None:
        self.proxy = HookProxy(world.sim.url)
        self.kubeconfig = kubeconfig
        self.writes: list[tuple[str, str, str, str, JSON]] = []
        self._requests: list[web.Request] = []
        self.proxy.before(self._match, self._record, times=-1)
        self._admin = world.sim.admin_kubeconfig

    async def start(self) -> None:
        await self.proxy.start()
        self.kubeconfig.write_text(self._admin.read_text().replace(self.proxy.upstream, self.proxy.url))

    def _match(self, request: web.Request) -> bool:
        if request.method in ("GET", "HEAD"):
            return False
        self._requests.append(request)
        return True

    async def _record(self) -> None:
        request = self._requests[-1]  # matched just before, with no await in between
        self.writes.append((request.headers.get("User-Agent", "").split("/")[0], request.method, request.path,
                            request.content_type, json.loads(await request.read())))

    def taken(self) -> list[tuple[str, str, str, str, JSON]]:
        writes, self.writes = self.writes, []
        return writes


def normalized(body: JSON, plan: JSON) -> JSON:
    """A PATCH body with the plan's identity and the request's random id taken out, after checking that its
    preconditions are the plan as it was read (its UID and resourceVersion)."""
    body = json.loads(json.dumps(body))
    metadata = body.setdefault("metadata", {})
    assert (metadata.pop("uid", None), metadata.pop("resourceVersion", None)) == (
        plan["metadata"]["uid"], plan["metadata"]["resourceVersion"]), "a write without the plan's preconditions"
    annotations = metadata.get("annotations") or {}
    if ANNOTATION_STEER in annotations:
        annotations[ANNOTATION_STEER] = {k: v for k, v in json.loads(annotations[ANNOTATION_STEER]).items()
                                         if k != "id"}
    return dict(body)


async def test_a_press_makes_exactly_the_write_of_the_cli_verb(world: World, tmp_path: Path) -> None:
    """Two plans in the same state: the CLI steers `web`, the dashboard's buttons `api`, verb after verb, both
    through a proxy that records their writes. Each verb is the same single merge PATCH of the plan (never its
    status), with the same body (the preconditions being each plan as read, the request's id its own), it
    leaves the same change in the plan, and the page gets the CLI's own line."""
    for name in ("web", "api"):
        await create_plan(world.admin, daemonset=name, onFailure="Rollback")
        await write_status(world.admin, name, status(REV, wave=2, stableRevision=STABLE))
    recorder = WriteRecorder(world, tmp_path / "proxied.kubeconfig")
    await recorder.start()
    try:
        async with dashboard(recorder.kubeconfig, allow_actions=True) as url:
            token = await page_token(url)
            assert len(token) >= 40
            for verb in ("pause", "pause", "resume", "promote", "abort"):
                web_before, api_before = await read_plan(world.admin, "web"), await read_plan(world.admin, "api")
                ran = await edgeagent("rollout", verb, "web", "--kubeconfig", str(recorder.kubeconfig))
                assert ran.code == 0, ran.err
                by_cli = recorder.taken()
                code, text, kind = await press(url, verb, name="api", headers=own(url, token))
                assert (code, kind) == (200, "text/plain"), text
                assert text == ran.out.replace('"web"', '"api"'), verb
                by_dashboard = recorder.taken()
                assert [w[:4] for w in by_cli] == ([] if verb == "pause" and web_before["spec"].get("paused") else [
                    ("edgeagent-cli", "PATCH", "/apis/edgeagent.io/v1alpha1/namespaces/default/rolloutplans/web",
                     "application/merge-patch+json")]), verb
                assert [(w[1], w[2].removesuffix("/api") + "/web", w[3]) for w in by_dashboard] == \
                    [w[1:4] for w in by_cli], verb
                assert all(w[0] == "edgeagent-dashboard" for w in by_dashboard)
                assert [normalized(w[4], api_before) for w in by_dashboard] == \
                    [normalized(w[4], web_before) for w in by_cli], verb
                web, api = await read_plan(world.admin, "web"), await read_plan(world.admin, "api")
                assert written(api) == written(web), verb
                if verb in ("promote", "abort"):
                    assert request_of(api) is not None and request_of(api) != request_of(web)  # each its own id
                    for name in ("web", "api"):
                        await mark_handled(world, name)
    finally:
        await recorder.proxy.stop()
    assert written(await read_plan(world.admin, "api"))["request"] == {"verb": "abort", "revision": REV}


async def test_a_refusal_of_the_steering_rules_is_the_clis_line_as_text(world: World) -> None:
    """A promote while the previous one is pending, a plan not started, a DaemonSet without a plan: 409 with the
    line the CLI prints after `edgeagent: error:`, as plain text; nothing written."""
    await create_plan(world.admin)
    await write_status(world.admin, "web", status(REV))
    await create_plan(world.admin, daemonset="fresh")
    async with dashboard(world.sim.admin_kubeconfig, allow_actions=True) as url:
        token = await page_token(url)
        assert (await press(url, "promote", headers=own(url, token)))[0] == 200
        before = await read_plan(world.admin, "web")
        for name, verb in (("web", "promote"), ("web", "abort"), ("fresh", "promote"), ("nope", "pause")):
            ran = await world.rollout(verb, name)
            assert ran.code == 1
            assert await press(url, verb, name=name, headers=own(url, token)) == (
                409, ran.err.removeprefix("edgeagent: error: "), "text/plain")
        assert (await read_plan(world.admin, "web"))["metadata"]["resourceVersion"] == \
            before["metadata"]["resourceVersion"]
        # Not a button, or not a name: 404, nothing asked of the API server.
        mark = len(world.sim.audit.entries)
        assert (await press(url, "undo", headers=own(url, token)))[:2] == (
            404, "no such action 'undo': the buttons are promote, pause, resume, abort\n")
        code, text, _ = await press(url, "pause", name="Not_A_Name", headers=own(url, token))
        assert (code, text) == (404, "default/Not_A_Name is not a DaemonSet's namespace/name\n")
        assert writes(world, "edgeagent-dashboard/", mark) == []


async def test_a_post_that_is_not_the_pages_own_is_refused_and_writes_nothing(world: World) -> None:
    await create_plan(world.admin)
    plan = await write_status(world.admin, "web", status(REV))
    async with dashboard(world.sim.admin_kubeconfig, allow_actions=True) as url:
        token = await page_token(url)
        origin = url.rstrip("/")
        port = int(origin.rsplit(":", 1)[1])
        other = f"http://127.0.0.1:{port + 1 if port < 65535 else port - 1}"
        mark = len(world.sim.audit.entries)
        refused = {
            "no token": ({"Origin": origin, "Sec-Fetch-Site": "same-origin"}, "has no X-Edgeagent-Token header"),
            "a wrong token": (own(url, token[::-1]), "is not this dashboard's token"),
            "an empty token": (own(url, ""), "has no X-Edgeagent-Token header"),
            "another port's page": ({**own(url, token), "Origin": other, "Sec-Fetch-Site": "same-site"},
                                    f"comes from {other}, not from the dashboard's own page ({origin})"),
            "another site": ({**own(url, token), "Origin": "https://attacker.example", "Sec-Fetch-Site":
                              "cross-site"}, "comes from https://attacker.example"),
            "an opaque origin": ({**own(url, token), "Origin": "null"}, "comes from null"),
            "no Origin": ({TOKEN_HEADER: token}, "has no Origin header"),
            "a same-site fetch": ({**own(url, token), "Sec-Fetch-Site": "same-site"},
                                  "the browser says the request is same-site (Sec-Fetch-Site)"),
        }
        for case, (headers, why) in refused.items():
            code, text, kind = await press(url, "pause", headers=headers)
            assert (code, kind) == (403, "text/plain"), case
            assert text.startswith("refused: ") and why in text and text.count("\n") == 1, (case, text)
        # Another Host (DNS rebinding) is refused before anything else.
        code, text, _ = await press(url, "pause", headers={**own(url, token), "Host": "attacker.example"})
        assert code == 403 and "is not this machine's loopback address" in text
        # Only POST: a GET of the route, or a POST elsewhere, is not an action.
        assert (await press(url, "pause", method="GET", headers=own(url, token)))[0] == 405
        async with aiohttp.ClientSession() as session, \
                session.post(url + "api/snapshot", headers=own(url, token)) as response:
            assert response.status == 405
        assert writes(world, "edgeagent-dashboard/", mark) == []
        assert (await read_plan(world.admin, "web"))["metadata"]["resourceVersion"] == \
            plan["metadata"]["resourceVersion"]
        # The same request with the page's own headers is acted on.
        assert (await press(url, "pause", headers=own(url, token)))[0] == 200
        assert (await read_plan(world.admin, "web"))["spec"]["paused"] is True


async def test_without_allow_actions_there_is_no_route_no_token_and_no_write(world: World) -> None:
    await create_plan(world.admin)
    plan = await write_status(world.admin, "web", status(REV))
    async with dashboard(world.sim.admin_kubeconfig) as url:
        assert await page_token(url) == ""
        headers = own(url, "anything")
        code, text, _ = await press(url, "pause", headers=headers)
        assert (code, text) == (405, "the dashboard is read-only (started without --allow-actions)\n")
        assert (await press(url, "pause", method="GET", headers=headers))[0] == 404
    assert (await read_plan(world.admin, "web"))["metadata"]["resourceVersion"] == plan["metadata"]["resourceVersion"]


async def test_a_403_from_the_api_server_is_text_naming_the_permission(sim_factory: SimFactory, tmp_path: Path) \
        -> None:
    """The dashboard acts with the kubeconfig's credentials, not its own: a viewer (list and watch only) who
    presses promote gets the API server's 403, as text naming the permission the button needs, never "credentials
    rejected"; the plan is unchanged."""
    sim = await sim_factory(nodes=1, authorization="rbac")
    async with await KubeClient.connect(sim.admin_kubeconfig) as admin:
        await install_crd(admin)
        await create_plan(admin)
        plan = await write_status(admin, "web", status(REV))
        kubeconfig = await viewer(sim, admin, tmp_path, "fleet-viewer", viewer_role())
        async with dashboard(kubeconfig, allow_actions=True) as url:
            token = await page_token(url)
            code, text, kind = await press(url, "promote", headers=own(url, token))
        assert (code, kind) == (403, "text/plain")
        assert text.startswith("not allowed: the API server accepted your credentials but refused the promote of "
                               "default/web (403): ")
        assert ('cannot patch resource "rolloutplans" in API group "edgeagent.io" in the namespace "default"'
                in text)
        assert text.endswith('needs list and patch on rolloutplans.edgeagent.io in namespace "default"\n')
        assert "credentials rejected" not in text and "refused the credentials" not in text
        assert (await read_plan(admin, "web"))["metadata"]["resourceVersion"] == plan["metadata"]["resourceVersion"]
