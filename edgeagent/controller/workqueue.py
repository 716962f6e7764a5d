"""A keyed work queue in the style of client-go's: one entry per DaemonSet however many events arrive.

- A key waiting in the queue is not added twice (a burst of pod events becomes one reconcile).
- A key being processed is never handed to a second worker; if it is added meanwhile it is queued again
  when the first worker calls `done`, so no change is missed and no two reconciles of one DaemonSet race.
- Failures are retried with per-key exponential backoff (`add_rate_limited`) until `forget`.
"""

from __future__ import annotations

import asyncio
from collections import deque

from edgeagent import backoff


class ShutDown(Exception):
    """The queue was shut down while waiting for work."""


class WorkQueue:
    def __init__(self, *, base_delay: float = 0.005, max_delay: float = 60.0) -> None:
        self._queue: deque[str] = deque()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._failures: dict[str, int] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._timer_due: dict[str, float] = {}
        self._base_delay = base_delay
        self._max_delay = max_delay
        # Waiters re-check the deque after every wake-up, so one Event serves any number of workers.
        self._ready = asyncio.Event()
        self._shutdown = False
        # Counters for metrics.
        self.adds = 0
        self.retries = 0

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: str) -> None:
        if self._shutdown or key in self._dirty:
            return
        self.adds += 1
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
            self._notify()

    def add_after(self, key: str, delay: float) -> None:
        """Add once `delay` has passed; an earlier pending wake-up for the key wins over a later one."""
        if self._shutdown:
            return
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        existing = self._timer_due.get(key)
        if existing is not None and existing <= due:
            return
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._timer_due[key] = due
        self._timers[key] = loop.call_at(due, self._fire, key)

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self._timer_due.pop(key, None)
        self.add(key)

    def add_rate_limited(self, key: str) -> float:
        """Retry after a backoff that doubles with each consecutive failure of this key."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = backoff.exponential(failures + 1, initial=self._base_delay, cap=self._max_delay)
        self.retries += 1
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        return self._failures.get(key, 0)

    async def get(self) -> str:
        while not self._queue:
            if self._shutdown:
                raise ShutDown
            self._ready.clear()
            await self._ready.wait()
        key = self._queue.popleft()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.append(key)
            self._notify()

    def shutdown(self) -> None:
        self._shutdown = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._timer_due.clear()
        self._notify()

    def _notify(self) -> None:
        self._ready.set()
