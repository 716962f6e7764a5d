"""Retrying a broken state directory without flooding the journal.

An unwritable state dir is a condition that lasts (disk full, read-only mount) and that the agent keeps
retrying, so each retry must not cost a log line: a failure *episode* is logged when it starts, then as a
reminder every `reminder_interval` seconds, and its end is logged once. Retries back off exponentially.
Pure: callers pass the time in, so tests can run a day of failures without waiting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from edgeagent import backoff

RETRY_BASE = 0.5
RETRY_CAP = 60.0
REMINDER_INTERVAL = 600.0


def retry_delay(failures: int, *, base: float = RETRY_BASE, cap: float = RETRY_CAP) -> float:
    """Seconds to wait after `failures` consecutive failures: base, 2·base, 4·base … at most `cap`."""
    return backoff.exponential(max(1, failures), initial=base, cap=cap)


@dataclass
class Episode:
    """Consecutive failures of one kind of operation; decides which of them deserve a log line."""

    reminder_interval: float = REMINDER_INTERVAL
    failures: int = 0
    _last_logged: float = -math.inf

    def failed(self, now: float) -> bool:
        """Count a failure; True when it should be logged (the first of an episode, or a reminder is due)."""
        self.failures += 1
        if self.failures == 1 or now - self._last_logged >= self.reminder_interval:
            self._last_logged = now
            return True
        return False

    def succeeded(self) -> int:
        """End the episode; the number of failures it had (0: there was none, nothing to log)."""
        failures, self.failures, self._last_logged = self.failures, 0, -math.inf
        return failures
