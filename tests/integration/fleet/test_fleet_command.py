"""`edgeagent fleet` and `edgeagent fleet nodes` against a simulated fleet with a node in every state."""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import os
import socket
import sys
from pathlib import Path

from edgeagent.kube.client import CONTENT_MERGE_PATCH, KubeClient
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.support.fleet_scenario import (
    EXPECTED,
    NODES,
    NS,
    WINDOW_MESSAGE,
    current_hash,
    manifest,
    mixed_fleet,
    post_sim,
)
from tests.support.rolloutplan_crd import create_plan, install_crd, status, write_status
from tests.support.waiting import eventually

EDGEAGENT = [str(Path(sys.executable).parent / "edgeagent")]


async def fleet(*args: str) -> tuple[int, str, str]:
    """`edgeagent fleet ARGS` as a user runs it: the console script, in its own process."""
    proc = await asyncio.create_subprocess_exec(*EDGEAGENT, "fleet", *args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def rows(text: str) -> list[list[str]]:
    """Cells of a kubectl-style table: a column starts where a header word follows two or more spaces."""
    lines = text.rstrip("\n").split("\n")
    header = lines[0]
    starts = [0, *(i for i in range(2, len(header)) if header[i] != " " and header[i - 2:i] == "  ")]
    cells = []
    for line in lines:
        bounds = [*starts, len(line) + 1]
        cells.append([line[a:b].strip() for a, b in itertools.pairwise(bounds)])
    return cells


async def test_fleet_counts_each_state_and_nodes_shows_one_row_per_node(sim_factory: SimFactory,
                                                                        tmp_path: Path) -> None:
    sim = await sim_factory(node_names=NODES)
    async with await KubeClient.connect(sim.admin_kubeconfig) as admin:
        world = await mixed_fleet(sim, admin)
        # A second, unmanaged DaemonSet is not the fleet's.
        plain = manifest("plain")
        del plain["metadata"]["annotations"]
        await admin.create(f"/apis/apps/v1/namespaces/{NS}/daemonsets", plain)
    kubeconfig = str(sim.admin_kubeconfig)

    code, out, err = await fleet("--kubeconfig", kubeconfig)
    assert code == 0, err
    table = rows(out)
    assert table[0] == ["NAME", "MODEL", "REVISION", "UP-TO-DATE", "WAVE", "PHASE", "HELD", "OFFLINE", "FAILED"]
    assert table[1:] == [["web", "OTA", world.revision, "1/6", "-", "Progressing", "1", "1", "1"]]
    # kubectl's spacing: three spaces after the widest cell of each column.
    assert out.splitlines()[0].startswith("NAME   MODEL   REVISION")

    code, out, err = await fleet("nodes", "--kubeconfig", kubeconfig, "-o", "wide")
    assert code == 0, err
    table = rows(out)
    assert table[0] == ["NODE", "READY", "HELD", "NEXT WINDOW", "VERSION", "LAST OUTCOME", "STATE", "LAST SEEN",
                        "WHY"]
    by_node = {r[0]: r for r in table[1:]}
    assert sorted(by_node) == NODES
    assert {node: by_node[node][6] for node in NODES} == EXPECTED
    assert by_node["edge-1"][2] == "OutsideMaintenanceWindow"
    assert by_node["edge-1"][3] == "2026-11-28 02:00 CET"
    assert by_node["edge-1"][8] == WINDOW_MESSAGE
    assert by_node["edge-2"][1] == "NotReady"
    assert by_node["edge-3"][5].startswith("UpgradeFailed (")
    assert by_node["edge-6"][4] == world.revision
    assert by_node["edge-5"][4].endswith("(outdated)")

    code, out, err = await fleet("nodes", "web", "--kubeconfig", kubeconfig, "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["kind"] == "FleetNodeList"
    assert {item["node"]: item["state"] for item in doc["items"]} == EXPECTED
    assert doc["items"][0]["held"] == {"reason": "OutsideMaintenanceWindow", "message": WINDOW_MESSAGE}

    code, out, err = await fleet("-o", "json", "--kubeconfig", kubeconfig)
    assert code == 0, err
    item = json.loads(out)["items"][0]
    assert (item["name"], item["upToDate"], item["desired"], item["held"], item["offline"], item["failed"]) == \
        ("web", 1, 6, 1, 1, 1)
    assert item["states"] == {"up to date": 1, "upgrading": 1, "waiting for its wave": 1, "held": 1, "stopped": 0,
                              "offline": 1, "failed": 1}


async def test_rollout_state_fills_wave_and_phase_and_selectors_filter(sim: SimCluster, admin: KubeClient) -> None:
    ds = manifest()
    ds["metadata"]["labels"] = {"tier": "edge"}
    await admin.create(f"/apis/apps/v1/namespaces/{NS}/daemonsets", ds)
    revision = await eventually(lambda: current_hash(admin), what="web's first revision")
    # The web's RolloutPlan, its status as the controller writes it for the revision being rolled.
    await install_crd(admin)
    await create_plan(admin, steps=[1, "25%", "50%", "100%"], bake="1h")
    await write_status(admin, "web", status(revision, phase="Baking", wave=2, waves=4,
                                            bakeStartedAt="2026-01-01T00:00:00Z"))
    await admin.create(f"/apis/apps/v1/namespaces/{NS}/daemonsets", manifest("other"))
    await admin.patch("/api/v1/nodes/edge-1", {"metadata": {"labels": {"zone": "north"}}}, CONTENT_MERGE_PATCH)
    kubeconfig = str(sim.admin_kubeconfig)

    code, out, _ = await fleet("-l", "tier=edge", "--kubeconfig", kubeconfig)
    assert code == 0
    assert [r[0] for r in rows(out)[1:]] == ["web"]
    assert rows(out)[1][4:6] == ["2/4", "Baking"]

    code, out, _ = await fleet("-A", "--kubeconfig", kubeconfig)
    assert rows(out)[0][0] == "NAMESPACE"
    assert [r[:2] for r in rows(out)[1:]] == [["default", "other"], ["default", "web"]]

    code, out, _ = await fleet("nodes", "-l", "zone=north", "--kubeconfig", kubeconfig)
    assert [r[0] for r in rows(out)[1:]] == ["edge-1"]
    assert rows(out)[0][4:6] == ["OTHER", "WEB"]  # one VERSION column per DaemonSet, named after it


async def test_unknown_daemonset_and_unreachable_cluster_are_one_line_and_exit_1(sim: SimCluster,
                                                                               tmp_path: Path) -> None:
    code, out, err = await fleet("nodes", "nope", "--kubeconfig", str(sim.admin_kubeconfig))
    assert (code, out) == (1, "")
    assert err == 'edgeagent: error: daemonset "nope" not found in namespace "default"\n'

    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(sim.admin_kubeconfig.read_text().replace(sim.url, f"http://127.0.0.1:{port}"))
    code, out, err = await fleet("--kubeconfig", str(dead))
    assert (code, out) == (1, "")
    assert err.startswith(f"edgeagent: error: cannot reach the API server at http://127.0.0.1:{port}")
    assert err.count("\n") == 1


async def test_no_managed_daemonset_says_so_like_kubectl(sim: SimCluster) -> None:
    code, out, err = await fleet("--kubeconfig", str(sim.admin_kubeconfig))
    assert (code, out, err) == (0, "", "No managed DaemonSets found in default namespace.\n")


async def test_watch_prints_the_table_once_then_only_the_rows_that_change(sim_factory: SimFactory) -> None:
    """`fleet nodes --watch`: a cut link prints edge-2's row again, and nothing else (not the table)."""
    sim = await sim_factory(node_names=["edge-1", "edge-2", "edge-3"])
    async with await KubeClient.connect(sim.admin_kubeconfig) as admin:
        await admin.create(f"/apis/apps/v1/namespaces/{NS}/daemonsets", manifest())
        await eventually(lambda: current_hash(admin), what="web's first revision")
    proc = await asyncio.create_subprocess_exec(*EDGEAGENT, "fleet", "nodes", "--watch", "-o", "wide",
                                                "--kubeconfig", str(sim.admin_kubeconfig),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                stdin=asyncio.subprocess.DEVNULL)
    assert proc.stdout is not None
    try:
        async def line() -> str:
            assert proc.stdout is not None
            return (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().rstrip("\n")

        first = [await line() for _ in range(4)]
        assert first[0].startswith("NODE ") and [r.split()[0] for r in first[1:]] == ["edge-1", "edge-2", "edge-3"]
        # Pods come up (a row per node that changed), then the cut: only edge-2's row, offline.
        await post_sim(sim, "/sim/v1/nodes/edge-2/disconnect")
        while "offline" not in (changed := await line()):
            assert changed.split()[0] in ("edge-1", "edge-2", "edge-3"), changed  # a row, never the header again
        assert changed.split()[:2] == ["edge-2", "NotReady"]
    finally:
        proc.terminate()
        await proc.wait()
async def test_a_server_that_never_answers_is_named_with_how_long_was_waited(sim: SimCluster,
                                                                              tmp_path: Path) -> None:
    """Issue 38 item 9: a server that accepts connections and never answers ended, after 16 s, in
    `…daemonsets: TimeoutError: ` with nothing after it."""
    from edgeagent.fleet.command import FleetConfig, main

    accepted: list[asyncio.StreamWriter] = []

    async def hold_open(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # read nothing, answer nothing

    silent = await asyncio.start_server(hold_open, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    dead = tmp_path / "silent.kubeconfig"
    dead.write_text(sim.admin_kubeconfig.read_text().replace(sim.url, f"http://127.0.0.1:{port}"))
    out, err = io.StringIO(), io.StringIO()
    try:
        code = await asyncio.to_thread(main, FleetConfig(kubeconfig=dead, request_timeout=0.5), out=out, err=err)
    finally:
        for writer in accepted:
            writer.close()
        silent.close()
        await silent.wait_closed()
    assert (code, out.getvalue()) == (1, "")
    assert err.getvalue() == (f"edgeagent: error: cannot reach the API server at http://127.0.0.1:{port}: GET "
                              "/apis/apps/v1/namespaces/default/daemonsets: no answer within 0.5 s\n")


async def test_a_missing_or_empty_kubeconfig_is_a_usage_error(tmp_path: Path) -> None:
    """Issue 38 item 10: exit 2 as for every other command (docs/cli.md), and `KUBECONFIG=` says it is empty
    rather than "kubeconfig not found: ."."""
    code, out, err = await fleet("--kubeconfig", str(tmp_path / "absent"))
    assert (code, out, err) == (2, "", f"edgeagent: error: kubeconfig not found: {tmp_path / 'absent'}\n")
    proc = await asyncio.create_subprocess_exec(*EDGEAGENT, "fleet", stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
                                                env={**os.environ, "KUBECONFIG": ""})
    raw_out, raw_err = await asyncio.wait_for(proc.communicate(), 60)
    assert (proc.returncode, raw_out) == (2, b"")
    assert raw_err.decode() == ("edgeagent: error: KUBECONFIG='': set but empty: name a kubeconfig file, or unset "
                                "it to use the in-cluster config\n")
