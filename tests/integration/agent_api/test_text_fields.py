"""Text the agent accepts must be valid Unicode (issue 38 item 1): one rule, edgeagent/agent/text.py.

JSON can spell a lone surrogate (`"\\ud800"`) and a shell can pass bytes that are not UTF-8
(`edgeagent hold --reason $'\\xff\\xfe x'`); both reached the state store and answered
`500 internal error: UnicodeEncodeError` with a traceback in the log. Now: 400 naming the field (the CLI: exit
2 with one line), nothing stored, no traceback logged.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import aiohttp
import pytest
from structlog.testing import capture_logs

from edgeagent.agent.text import text_problem
from tests.integration.agent_api.conftest import AgentFactory

BAD_BODIES = [
    (b'{"reason": "\\ud800"}', "reason is not valid Unicode text: character 1 is U+D800, a lone surrogate"),
    (b'{"reason": "ok \\udfff"}', "reason is not valid Unicode text: character 4 is U+DFFF, a lone surrogate"),
    (b'{"until": "2030-01-01T00:00:00Z\\udcff"}', "until is not valid Unicode text: character 21 is the byte 0xff"),
    (b'{"\\ud800": "x"}', "a field name is not valid Unicode text: character 1 is U+D800, a lone surrogate"),
]


@pytest.mark.parametrize("accept", ["text/plain", "application/json"])
async def test_a_lone_surrogate_in_a_hold_is_400_naming_the_field_and_nothing_is_held(
        agent_factory: AgentFactory, offline_kubeconfig: Path, http: aiohttp.ClientSession, accept: str) -> None:
    agent = await agent_factory(kubeconfig=offline_kubeconfig)
    with capture_logs() as logs:
        for body, message in BAD_BODIES:
            async with http.post(f"{agent.url}/v1/hold", data=body, headers={
                    "Content-Type": "application/json", "Accept": accept}) as resp:
                text = await resp.text()
                assert resp.status == 400, text
                assert message in text, text
        async with http.get(f"{agent.url}/v1/hold") as resp:
            assert (await resp.json())["hold"] is None
    assert not [e for e in logs if e["log_level"] in ("error", "critical") or "exc_info" in e], logs
    # Valid text outside the BMP and escapes of it are fine.
    async with http.post(f"{agent.url}/v1/hold", data=b'{"reason": "\\ud83d\\ude00 \xf0\x9f\x9a\x80"}') as resp:
        assert resp.status == 200 and (await resp.json())["hold"]["reason"] == "\U0001f600 \U0001f680"


def test_the_rule_refuses_exactly_what_utf8_cannot_encode() -> None:
    for value in ("", "plain", "caf\u00e9", "\U0001f600", "\u0000", "\ufffd"):
        assert text_problem("x", value) is None
    assert text_problem("--reason", os.fsdecode(b"\xff\xfe x")) == (
        "--reason is not valid Unicode text: character 1 is the byte 0xff, which is not UTF-8")


async def test_the_cli_refuses_a_reason_that_is_not_utf8_with_one_line_and_exit_2(
        agent_factory: AgentFactory, offline_kubeconfig: Path, http: aiohttp.ClientSession) -> None:
    agent = await agent_factory(kubeconfig=offline_kubeconfig)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "edgeagent.cli", "hold", "--agent", agent.url, "--reason", b"\xff\xfe x",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert (proc.returncode, out) == (2, b""), err
    assert err.decode().splitlines() == [
        "edgeagent: error: --reason is not valid Unicode text: character 1 is the byte 0xff, which is not UTF-8"]
    async with http.get(f"{agent.url}/v1/hold") as resp:
        assert (await resp.json())["hold"] is None
