"""Narration and checking for `edgeagent demo`: numbered steps, commands with their real output, waits.

The demo is a proof, not a slide show: every claim it prints is preceded by a check, and a check that
does not hold within its deadline stops the demo with one line naming the step and what was last seen.
Commands are shown as `$ command` with what that command really printed below it, indented a little
deeper than the narration (OUTPUT_INDENT), so a reader (and the demo's test) can tell them apart; output
cut short says so in a last line of its own.
"""

from __future__ import annotations

import asyncio
import textwrap
import time
from collections.abc import Awaitable, Callable
from typing import TextIO, TypeVar

T = TypeVar("T")

INDENT = "    "
OUTPUT_INDENT = "      "
TRIMMED = "[{} more lines not shown]"
WIDTH = 100
# How often conditions are polled: fast enough to show a transition promptly, slow enough to be cheap.
POLL_INTERVAL = 0.05

Probe = Callable[[], Awaitable[tuple[T | None, str]]]


class StepFailed(Exception):
    """A narrated claim did not hold; `str()` is the one line printed to the user."""

    def __init__(self, step: int, title: str, message: str) -> None:
        self.step = step
        self.title = title
        self.message = message
        super().__init__(f"step {step} ({title}): {message}")


class Narrator:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.started = time.monotonic()
        self.step_no = 0
        self.title = "start-up"
        self.checks = 0
        self._aliases: list[tuple[str, str]] = []

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def _print(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def banner(self, text: str) -> None:
        self._print(text)
        self._print("=" * len(text))

    def part(self, title: str, why: str) -> None:
        """A group of steps (one upgrade model), with what OpenYurt does and what we add."""
        self._print()
        self._print(f"--- {title} ---")
        self._paragraph(why, indent="")

    def step(self, title: str, why: str) -> None:
        self.step_no += 1
        self.title = title
        self._print()
        self._print(f"Step {self.step_no}. {title}  [t+{self.elapsed:.1f}s]")
        self._paragraph(why)

    def _paragraph(self, text: str, indent: str = INDENT) -> None:
        for line in textwrap.wrap(" ".join(text.split()), WIDTH - len(indent)):
            self._print(indent + line)

    def say(self, text: str) -> None:
        self._paragraph(text)

    def alias(self, long: str, short: str) -> None:
        """Print `short` instead of `long` in commands (temporary paths make command lines unreadable)."""
        self._aliases.append((long, short))

    def shorten(self, text: str) -> str:
        for long, short in self._aliases:
            text = text.replace(long, short)
        return text

    def command(self, text: str) -> None:
        self._print(f"{INDENT}$ {self.shorten(text)}")

    def output(self, text: str, *, max_lines: int | None = None) -> None:
        """What a command printed, verbatim, optionally cut short (then a last line says so)."""
        lines = text.splitlines()
        hidden = 0
        if max_lines is not None and len(lines) > max_lines:
            lines, hidden = lines[:max_lines], len(lines) - max_lines
        for line in lines:
            self._print(OUTPUT_INDENT + line)
        if hidden:
            self._print(OUTPUT_INDENT + TRIMMED.format(hidden))

    def ok(self, text: str) -> None:
        """A claim that was just checked."""
        self.checks += 1
        self._print(f"{INDENT}[ok] {text}")

    def fail(self, message: str) -> StepFailed:
        return StepFailed(self.step_no, self.title, message)

    def check(self, condition: bool, claim: str, seen: str) -> None:
        if not condition:
            raise self.fail(f"expected {claim}; but {seen}")
        self.ok(claim)

    async def wait_for(self, probe: Probe[T], *, timeout: float, what: str) -> T:
        """Poll until `probe` returns a value; its second item describes the state seen, for the failure line.

        Errors the probe raises are part of what was seen (an API call may fail while links flap), not
        a reason to give up early; only the deadline ends the wait.
        """
        deadline = time.monotonic() + timeout
        seen = "nothing observed yet"
        while True:
            try:
                value, seen = await probe()
            except StepFailed:
                raise
            except Exception as exc:  # shown as what was seen; a bug shows up here too, never silently
                value, seen = None, f"{type(exc).__name__}: {exc}"
            if value is not None:
                return value
            if time.monotonic() >= deadline:
                raise self.fail(f"timed out after {timeout:g}s waiting for {what}; last seen: {seen}")
            await asyncio.sleep(POLL_INTERVAL)
