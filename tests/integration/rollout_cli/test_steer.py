"""`edgeagent rollout pause|resume|promote|abort|retry|undo DS`: each one PATCH of the RolloutPlan (never its
status), with UID and resourceVersion preconditions, idempotent, refusing what makes no sense (issue 35)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from edgeagent.kube.client import CONTENT_MERGE_PATCH
from edgeagent.rollout.steer import ANNOTATION_STEER, plan_path
from tests.integration.rollout_cli.conftest import Ran, World, edgeagent
from tests.support.hook_proxy import HookProxy
from tests.support.rolloutplan_crd import create_plan, read_plan, status, write_status

JSON = dict[str, Any]
REV = "5b4499c6c8"
STABLE = "6f4c69dbb4"


def request_of(plan: JSON) -> JSON:
    return dict(json.loads(plan["metadata"]["annotations"][ANNOTATION_STEER]))


async def handled(world: World, plan: JSON, **new_status: Any) -> None:
    """What the controller does with a request: record it in status.steer (and the transition it causes)."""
    request = request_of(await read_plan(world.admin, plan["metadata"]["name"]))
    await write_status(world.admin, plan["metadata"]["name"], {
        **new_status, "steer": {"id": request["id"], "verb": request["verb"], "result": "Done", "message": "",
                                "at": "2026-11-28T00:00:00Z"}})


async def test_pause_and_resume_write_spec_paused_once(world: World) -> None:
    await create_plan(world.admin)
    await write_status(world.admin, "web", status(REV))
    ran = await world.rollout("pause", "web")
    assert ran.code == 0, ran.err
    assert ran.out == 'rolloutplan "web" in namespace "default" paused (spec.paused: true): no pod moves and no ' \
                      "wave starts until resumed\n"
    plan = await read_plan(world.admin, "web")
    assert plan["spec"]["paused"] is True
    again = await world.rollout("pause", "web")
    assert (again.code, again.out) == (0, 'rolloutplan "web" in namespace "default" already paused '
                                          "(spec.paused: true)\n")
    assert (await read_plan(world.admin, "web"))["metadata"]["resourceVersion"] == plan["metadata"]["resourceVersion"]
    ran = await world.rollout("resume", "ds/web")
    assert ran.code == 0, ran.err
    assert (await read_plan(world.admin, "web"))["spec"]["paused"] is False
    again = await world.rollout("resume", "web")
    assert (again.code, again.out) == (0, 'rolloutplan "web" in namespace "default" already not paused '
                                          "(spec.paused: false)\n")


async def test_promote_names_the_revision_and_wave_seen_and_a_second_request_waits_for_the_first(world: World) \
        -> None:
    plan = await create_plan(world.admin)
    await write_status(world.admin, "web", status(REV, wave=2))
    ran = await world.rollout("promote", "web")
    assert ran.code == 0, ran.err
    assert "promote of wave 2/3 requested (revision 5b4499c6c8)" in ran.out
    request = request_of(await read_plan(world.admin, "web"))
    assert set(request) == {"id", "verb", "revision", "wave"}
    assert (request["verb"], request["revision"], request["wave"]) == ("promote", REV, 2)
    assert len(request["id"]) == 12 and int(request["id"], 16) >= 0
    # Not handled yet: a second request (even the same verb) is refused, and nothing is written.
    for verb in ("promote", "abort"):
        refused = await world.rollout(verb, "web")
        assert refused.code == 1 and refused.out == ""
        assert refused.err == ('edgeagent: error: a previous promote is not handled yet by the controller '
                               f'({ANNOTATION_STEER} id {request["id"]} on rolloutplan "web" in namespace "default"); '
                               "try again once it is\n")
    assert request_of(await read_plan(world.admin, "web")) == request
    # Handled (status.steer.id is the request's): the next request is written with a new id.
    await handled(world, plan, wave=3)
    ran = await world.rollout("abort", "web")
    assert ran.code == 0, ran.err
    second = request_of(await read_plan(world.admin, "web"))
    assert second["verb"] == "abort" and second["id"] != request["id"] and "wave" not in second


async def test_retry_and_undo(world: World) -> None:
    await create_plan(world.admin, onFailure="Rollback")
    history = [{"revision": REV, "images": ["nginx:bad"], "phase": "Progressing"},
               {"revision": STABLE, "images": ["nginx:1.25"], "phase": "Complete",
                "finishedAt": "2026-11-27T10:00:00Z"},
               {"revision": "0aborted00", "images": ["nginx:1.24"], "phase": "Aborted"}]
    await write_status(world.admin, "web", status(REV, phase="Aborted", stableRevision=STABLE, history=history))
    ran = await world.rollout("retry", "web")
    assert ran.code == 0, ran.err
    assert request_of(await read_plan(world.admin, "web"))["verb"] == "retry"
    await handled(world, await read_plan(world.admin, "web"), phase="Progressing")
    refused = await world.rollout("undo", "web", "--to-revision", "0aborted00")
    assert refused.code == 1
    assert refused.err == ('edgeagent: error: --to-revision 0aborted00: not a completed revision of rolloutplan "web" '
                           'in namespace "default" (completed: 6f4c69dbb4)\n')
    ran = await world.rollout("undo", "web")
    assert ran.code == 0, ran.err
    request = request_of(await read_plan(world.admin, "web"))
    assert (request["verb"], request["revision"], request["toRevision"]) == ("undo", REV, STABLE)
    shown = await world.rollout("history", "web")
    assert shown.code == 0, shown.err
    assert shown.out.splitlines() == [
        "REVISION    IMAGES      PHASE        FINISHED",
        "5b4499c6c8  nginx:bad   Progressing  -",
        "6f4c69dbb4  nginx:1.25  Complete     2026-11-27T10:00:00Z",
        "0aborted00  nginx:1.24  Aborted      -",
    ]
    as_json = json.loads((await world.rollout("history", "web", "-o", "json")).out)
    assert [h["revision"] for h in as_json["items"]] == [REV, STABLE, "0aborted00"]


async def test_refusals_are_one_line_and_write_nothing(world: World) -> None:
    ran = await world.rollout("promote", "nope")
    assert (ran.code, ran.err) == (1, 'edgeagent: error: daemonset "nope" not found in namespace "default"\n')
    await world.admin.create("/apis/apps/v1/namespaces/default/daemonsets", {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "bare"},
        "spec": {"selector": {"matchLabels": {"app": "bare"}}, "template": {
            "metadata": {"labels": {"app": "bare"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
    ran = await world.rollout("pause", "bare")
    assert ran.code == 1
    assert ran.err.startswith('edgeagent: error: daemonset "bare" in namespace "default" has no rolloutplan')
    await create_plan(world.admin)
    ran = await world.rollout("promote", "web")
    assert ran.code == 1 and "nothing to promote" in ran.err and "no status" in ran.err
    await write_status(world.admin, "web", status(REV, phase="Complete", wave=3))
    for verb, word in (("promote", "nothing to promote"), ("abort", "nothing to abort"),
                       ("retry", "nothing to retry")):
        ran = await world.rollout(verb, "web")
        assert ran.code == 1 and ran.err.count("\n") == 1 and word in ran.err, ran.err
    assert ANNOTATION_STEER not in ((await read_plan(world.admin, "web"))["metadata"].get("annotations") or {})
    await create_plan(world.admin, name="web-2")
    ran = await world.rollout("pause", "web")
    assert ran.code == 1 and '2 rolloutplans name daemonset "web"' in ran.err and "(web, web-2)" in ran.err


class PatchSpy:
    """A proxy in front of the sim that records the body of each PATCH of the plan and runs `meanwhile` (a
    change by someone else) before forwarding the first one."""

    def __init__(self, world: World, meanwhile: Callable[[], Awaitable[None]]) -> None:
        self.world = world
        self.meanwhile = meanwhile
        self.proxy = HookProxy(world.sim.url)
        self.bodies: list[JSON] = []
        self._requests: list[web.Request] = []
        self.proxy.before(self._match, self._before, times=-1)

    def _match(self, request: web.Request) -> bool:
        if request.method == "PATCH" and request.path == plan_path("default", "web"):
            self._requests.append(request)
            return True
        return False

    async def _before(self) -> None:
        self.bodies.append(json.loads(await self._requests[-1].read()))
        if len(self.bodies) == 1:
            await self.meanwhile()

    async def rollout(self, *args: str) -> Ran:
        await self.proxy.start()
        kubeconfig = self.world.sim.admin_kubeconfig.parent / "proxy.kubeconfig"
        kubeconfig.write_text(self.world.sim.admin_kubeconfig.read_text().replace(self.world.sim.url,
                                                                                   self.proxy.url))
        try:
            return await edgeagent("rollout", *args, "--kubeconfig", str(kubeconfig))
        finally:
            await self.proxy.stop()


async def test_a_plan_changed_between_read_and_write_is_read_again(world: World) -> None:
    """The PATCH carries the UID and resourceVersion read: a change in between gets a 409, the verb reads again
    and decides on what it finds (here someone else paused it, so pause has nothing left to write)."""
    await create_plan(world.admin)
    plan = await write_status(world.admin, "web", status(REV))

    async def someone_pauses() -> None:
        await world.admin.patch(plan_path("default", "web"), {"spec": {"paused": True}}, CONTENT_MERGE_PATCH)

    spy = PatchSpy(world, someone_pauses)
    ran = await spy.rollout("pause", "web")
    assert ran.code == 0, ran.err
    assert ran.out == 'rolloutplan "web" in namespace "default" already paused (spec.paused: true)\n'
    (body,) = spy.bodies  # one PATCH, refused; the second read found nothing to write
    assert body == {"spec": {"paused": True}, "metadata": {"uid": plan["metadata"]["uid"],
                                                           "resourceVersion": plan["metadata"]["resourceVersion"]}}


async def test_a_plan_re_created_meanwhile_is_steered_only_after_reading_it_again(world: World) -> None:
    """A plan deleted and re-created under the same name between read and write: the write meant for the old
    one is refused, the request is decided again on the new plan (whose status the controller has not written:
    nothing to promote)."""
    old = await create_plan(world.admin)
    await write_status(world.admin, "web", status(REV))

    async def recreate() -> None:
        await world.admin.delete(plan_path("default", "web"))
        await create_plan(world.admin)

    spy = PatchSpy(world, recreate)
    ran = await spy.rollout("promote", "web")
    assert ran.code == 1
    assert "nothing to promote" in ran.err and "no status" in ran.err
    (body,) = spy.bodies
    assert body["metadata"]["uid"] == old["metadata"]["uid"]
    now = await read_plan(world.admin, "web")
    assert now["metadata"]["uid"] != old["metadata"]["uid"]
    assert ANNOTATION_STEER not in (now["metadata"].get("annotations") or {})
