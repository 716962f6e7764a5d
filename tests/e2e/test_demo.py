"""`edgeagent demo`: the narrated scenario runs end to end, and a claim that does not hold fails it loudly."""

from __future__ import annotations

import io
import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from edgeagent.demo import scenario
from edgeagent.demo.narration import Narrator, StepFailed

REPO = Path(__file__).resolve().parents[2]
# How long the demo may take before it fails by itself (its overall deadline, clean-up included), and a margin:
# a test waiting less than that fails a demo that is only slow on a loaded machine (issue 38 item 13), and
# one waiting more cannot hang, because the demo ends itself.
DEMO_BOUND = scenario.OVERALL_DEADLINE + scenario.SHUTDOWN_WAIT + 20

# One line per claim the issue asks the demo to show; each is printed only after it was checked.
KEY_LINES = [
    "Step 1. Start a simulated cluster with three edge nodes",
    "[ok] edge-2 and edge-3 NotReady, edge-1 Ready",
    "[ok] edge-2 still runs its nginx:1.19.4 pod",
    "[ok] edge-3 still runs its nginx:1.19.4 pod",
    "[ok] no DELETE was sent for the pods on edge-2 and edge-3",
    "[ok] every node runs a Ready nginx:1.19.5 pod",
    "[ok] PodNeedUpgrade=True on all three pods",
    "PodImageReady=True (PullImageSuccess): nginx:1.19.6 is on edge-1, nothing was upgraded",
    "[ok] 202: queued until the node is open",
    "still runs: the held node waits",
    "is Ready on revision",  # the upgrades listing: succeeded once the replacement is Ready (verified)
    "[ok] the agent on edge-2 reports its cloud link disconnected",
    "[ok] 202 with the id of the queued request",
    "[ok] the agent died of SIGKILL",
    "[ok] offline, the restarted agent serves nginx-ota-",
    "survived the crash, still queued",
    "succeeded",
    "[ok] edge-3 still runs nginx:1.19.4 with PodNeedUpgrade=True",
    "[ok] the rollout stopped in wave 1/2 and rolled back by itself",
    "is marked RolledBack",
    "[ok] only the canary",
    "exited 0 on SIGTERM",
    "Demo complete:",
]


def _edgeagent() -> list[str]:
    script = Path(sys.executable).parent / "edgeagent"
    return [str(script)] if script.exists() else [sys.executable, "-m", "edgeagent.cli"]


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention `text` (the demo's children carry its work dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{entry.name}: {cmdline}")
    return found


SHIM = """#!/bin/sh
# Records what the real program printed, outside the demo's reach, then prints it unchanged.
record="{log}/$(date +%s%N)-$$"
printf '%s\\n' "$@" > "$record.args"
"{real}" "$@" > "$record.out"
code=$?
cat "$record.out"
exit $code
"""


def _shimmed_path(tmp_path: Path) -> tuple[str, Path]:
    """A PATH whose kubectl and curl are wrappers recording each run's arguments and stdout."""
    bin_dir, log = tmp_path / "bin", tmp_path / "runs"
    bin_dir.mkdir()
    log.mkdir()
    for program in ("kubectl", "curl"):
        real = shutil.which(program)
        assert real is not None, f"{program} is needed for the demo"
        shim = bin_dir / program
        shim.write_text(SHIM.format(log=log, real=real))
        shim.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", log


def _shown_commands(stdout: str) -> list[tuple[str, list[str]]]:
    """Every `$ command` the demo printed with the output lines printed under it."""
    blocks: list[tuple[str, list[str]]] = []
    for line in stdout.splitlines():
        if line.startswith("    $ "):
            blocks.append((line[6:], []))
        elif blocks and line.startswith("      "):
            blocks[-1][1].append(line[6:])
        elif blocks and line.strip():
            blocks.append(("", []))  # narration ends a command's output
    return [b for b in blocks if b[0]]


@pytest.mark.slow(seconds=30)
def test_demo_runs_the_whole_scenario_and_shows_what_each_command_really_printed(tmp_path: Path) -> None:
    """Each kubectl and curl output printed is byte for byte what that program wrote (recorded by a wrapper)."""
    path, runs = _shimmed_path(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEAGENT_")}
    env["PATH"] = path
    result = subprocess.run([*_edgeagent(), "demo"], capture_output=True, text=True, timeout=DEMO_BOUND, cwd=REPO,
                            env=env, check=False)
    assert result.returncode == 0, f"demo failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    missing = [line for line in KEY_LINES if line not in result.stdout]
    assert not missing, f"narration lacks {missing}:\n{result.stdout}"
    steps = [int(n) for n in re.findall(r"^Step (\d+)\. ", result.stdout, flags=re.MULTILINE)]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 10
    assert "DEMO FAILED" not in result.stdout + result.stderr  # (`kubectl get rp` has a FAILED column)
    assert "HTTP 200:" not in result.stdout and "seed" not in result.stdout

    workdir = re.search(r"Work directory: (\S+) \(shown as \$DEMO", result.stdout)
    assert workdir
    shown = [(cmd, out) for cmd, out in _shown_commands(result.stdout) if cmd.split()[0] in ("kubectl", "curl")]
    recorded = sorted(runs.glob("*.args"))
    assert len(shown) == len(recorded) >= 15, (len(shown), len(recorded))
    for (command, printed), args_file in zip(shown, recorded, strict=True):
        program = command.split()[0]
        args = args_file.read_text().split("\n")[:-1]
        assert shlex.split(command.replace("$DEMO", workdir.group(1))) == [program, *args]
        real = args_file.with_suffix(".out").read_text()
        assert printed == real.splitlines(), f"{command}: printed {printed!r}, the program wrote {real!r}"
    kinds = {cmd.split()[1] for cmd, _ in shown if cmd.startswith("kubectl ")}
    assert {"get", "apply", "set"} <= kinds
    header = next(out for cmd, out in shown if cmd == "kubectl get nodes -o wide")[0]
    assert header.split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE",
                              "KERNEL-VERSION", "CONTAINER-RUNTIME"]


def _start_demo(*args: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEAGENT_")}
    # Unbuffered: select() then sees exactly what is left to read.
    return subprocess.Popen([*_edgeagent(), "demo", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            bufsize=0, cwd=REPO, env=env)


def _read_until(proc: subprocess.Popen[bytes], marker: str, timeout: float = DEMO_BOUND) -> str:
    """stdout up to the line holding `marker` (the demo prints and flushes line by line)."""
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if not ready:
            continue
        line = proc.stdout.readline().decode()
        if not line:
            break
        seen.append(line)
        if marker in line:
            return "".join(seen)
    proc.kill()
    _, err = proc.communicate()
    raise AssertionError(f"no {marker!r} within {timeout}s:\n{''.join(seen)}\nstderr: {err.decode()}")


def _gone(workdir: str) -> bool:
    return not _processes_mentioning(workdir)


@pytest.mark.slow(seconds=35)
def test_keep_leaves_the_cluster_usable_by_hand_until_ctrl_c(tmp_path: Path) -> None:
    proc = _start_demo("--keep")
    try:
        shown = _read_until(proc, "To stop: press Ctrl-C here")
        kubeconfig = re.search(r"export KUBECONFIG=(\S+?);", shown)
        assert kubeconfig, shown
        nodes = subprocess.run(["kubectl", "--kubeconfig", kubeconfig.group(1), "--cache-dir", str(tmp_path),
                                "get", "nodes"], capture_output=True, text=True, timeout=30, check=False)
        assert nodes.returncode == 0 and nodes.stdout.split()[:5] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
        _dashboard_as_printed(shown)
        proc.send_signal(signal.SIGINT)
        out, err = (data.decode() for data in proc.communicate(timeout=60))
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "exited 0 on SIGTERM" in out and "Demo complete:" in out
    workdir = re.search(r"Work directory: (\S+) ", shown)
    assert workdir and _gone(workdir.group(1))


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only, whatever *_proxy says


def _dashboard_as_printed(shown: str) -> None:
    """The dashboard command the --keep step prints serves the demo's fleet (on another port: 8080 may be taken)."""
    printed = re.search(r"`edgeagent dashboard --kubeconfig\s+(\S+)\s+--port 8080`", shown)  # lines are wrapped
    assert printed, shown
    argv = [*_edgeagent(), "dashboard", "--kubeconfig", printed.group(1), "--port", "0"]
    dash = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        assert dash.stdout is not None
        line = dash.stdout.readline().decode()  # printed once it listens
        url = re.search(r"serving (http://127\.0\.0\.1:\d+/)", line)
        assert url, line
        deadline = time.monotonic() + 60  # a deadline for a hang: the sync takes well under a second
        while True:
            with _NO_PROXY.open(url.group(1) + "api/snapshot", timeout=30) as response:
                snapshot = json.loads(response.read())
            if snapshot["health"]["state"] == "ok" and len(snapshot["nodes"]) == 3:
                break
            assert time.monotonic() < deadline, snapshot
            time.sleep(0.1)  # polling the snapshot until synced, with a deadline
        assert {ds["k"] for ds in snapshot["daemonsets"]} >= {"default/nginx-ota"}
    finally:
        dash.terminate()
        code: int | None = None
        try:
            code = dash.wait(timeout=30)
        except subprocess.TimeoutExpired:
            dash.kill()  # leave nothing behind, and fail
            dash.wait()
        assert code == 0


@pytest.mark.slow
def test_killing_the_demo_takes_its_children_with_it() -> None:
    proc = _start_demo()
    try:
        shown = _read_until(proc, "$ edgeagent run --node-name edge-2")
        workdir = re.search(r"Work directory: (\S+) ", shown)
        assert workdir
        assert _processes_mentioning(workdir.group(1))  # controller and agents are running
        proc.kill()  # SIGKILL: the demo's own clean-up cannot run
        proc.communicate(timeout=30)
        deadline = time.monotonic() + 20
        while not _gone(workdir.group(1)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _gone(workdir.group(1)), _processes_mentioning(workdir.group(1))
    finally:
        if proc.poll() is None:
            proc.kill()
        if "workdir" in locals() and workdir:
            shutil.rmtree(workdir.group(1), ignore_errors=True)


@pytest.mark.slow
def test_a_step_that_fails_ends_the_demo_with_exit_1_naming_it_and_no_child_left(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # An agent flag the CLI rejects: the agent exits 2 at start-up, so the step that waits for it must fail.
    monkeypatch.setattr(scenario, "AGENT_FLAGS", ["--probe-interval", "-1"])
    out, err = io.StringIO(), io.StringIO()
    code = scenario.run_demo(out, err)
    assert code == 1
    message = err.getvalue()
    assert re.search(r"DEMO FAILED at step \d+ \(Start a node agent on edge-1 and on edge-2\): "
                     r"agent on edge-1 exited with code 2", message), message
    assert "Demo complete" not in out.getvalue()
    kept = re.search(r"logs kept in (\S+)", message)
    assert kept, message
    logs = Path(kept.group(1))
    assert (logs / "controller.log").exists() and (logs / "agent-edge-1.log").exists()
    assert _processes_mentioning(str(logs.parent)) == []
    shutil.rmtree(logs.parent)


def test_a_claim_that_does_not_hold_names_the_step_and_what_was_seen() -> None:
    narrator = Narrator(io.StringIO())
    narrator.step("Cut the links", "why")
    with pytest.raises(StepFailed) as caught:
        narrator.check(False, "edge-2 NotReady", "edge-2 was Ready")
    assert str(caught.value) == "step 1 (Cut the links): expected edge-2 NotReady; but edge-2 was Ready"


async def test_a_wait_that_times_out_reports_the_last_state_seen() -> None:
    narrator = Narrator(io.StringIO())
    narrator.step("Reconnect", "why")
    seen = iter(["state queued", "state running"])

    async def probe() -> tuple[bool | None, str]:
        return None, next(seen, "state running")

    with pytest.raises(StepFailed) as caught:
        await narrator.wait_for(probe, timeout=0.1, what="the request to succeed")
    assert "step 1 (Reconnect): timed out after 0.1s waiting for the request to succeed" in str(caught.value)
    assert str(caught.value).endswith("last seen: state running")


async def test_a_probe_error_is_reported_as_what_was_seen_not_a_crash() -> None:
    narrator = Narrator(io.StringIO())
    narrator.step("Start", "why")

    async def probe() -> tuple[bool | None, str]:
        raise ConnectionRefusedError("connection refused")

    with pytest.raises(StepFailed, match="last seen: ConnectionRefusedError: connection refused"):
        await narrator.wait_for(probe, timeout=0.05, what="the agent")


def test_command_output_is_printed_verbatim_and_trimming_says_so() -> None:
    out = io.StringIO()
    narrator = Narrator(out)
    narrator.output("a  b\n\nc", max_lines=None)
    narrator.output("1\n2\n3\n4", max_lines=2)
    assert out.getvalue() == "      a  b\n      \n      c\n      1\n      2\n      [2 more lines not shown]\n"
