"""Leader election with a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does it.

Two replicas that both delete pods would each spend the whole budget. So only the holder of the Lease
reconciles; the other keeps its caches warm and takes over when the holder stops renewing.

- GET the Lease; 404 → POST it (409: someone else just did → not leader).
- Held by another identity and not expired → back off and retry. Expiry is judged by when *we* last saw
  the record change plus its `leaseDurationSeconds` (client-go's rule), so clock skew between replicas
  cannot make a live leader look expired.
- Otherwise PUT with the fetched resourceVersion (409: lost the race). The same holder keeps its
  `acquireTime`; a new holder adds 1 to `leaseTransitions`. Timestamps are MicroTime.
- The leader renews every `renew_interval`; if no renewal succeeds for `renew_deadline` (shorter than the
  lease) or a renewal finds another holder, it stops leading at once — before anyone else may take over. A
  renewal still waiting for a slow answer at the deadline is given up (it used to keep a leader leading
  until the answer came, seconds after a standby had taken over: two leaders, found by the soak).
- On shutdown a leader releases the Lease (empty holder) so that the next one need not wait.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Coroutine
from typing import Any

from edgeagent import log
from edgeagent.aio import cancel_and_wait
from edgeagent.kube.client import KubeClient, KubeError, KubeUnreachable
from edgeagent.kube.errors import Conflict, NotFound
from edgeagent.kube.timeutil import format_micro_time

JSON = dict[str, Any]


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float,
        renew_interval: float,
        renew_deadline: float | None = None,
        retry_period: float | None = None,
        release_on_exit: bool = True,
        on_change: Callable[[bool], None] | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if not identity:
            raise ValueError("leader election needs a non-empty identity")
        self._client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_interval = min(renew_interval, lease_duration / 3)
        self.renew_deadline = renew_deadline if renew_deadline is not None else lease_duration * 2 / 3
        self.retry_period = retry_period if retry_period is not None else self.renew_interval
        self.release_on_exit = release_on_exit
        self._on_change = on_change
        self._wall = wall_clock
        self.is_leader = False
        self.transitions_seen = 0
        self._observed: tuple[str, str] | None = None
        self._observed_at = 0.0
        self._log = log.get("edgeagent.controller.leader").bind(lease=f"{namespace}/{name}", identity=identity)

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    @property
    def collection(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"

    def _duration_seconds(self) -> int:
        return max(1, math.ceil(self.lease_duration))

    def _set_leader(self, leading: bool) -> None:
        if leading == self.is_leader:
            return
        self.is_leader = leading
        self._log.info("leadership_acquired" if leading else "leadership_lost")
        if self._on_change is not None:
            self._on_change(leading)

    def _observe(self, spec: JSON) -> None:
        record = (str(spec.get("holderIdentity") or ""), str(spec.get("renewTime") or ""))
        if record != self._observed:
            self._observed = record
            self._observed_at = time.monotonic()

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when we hold the Lease afterwards. Raises only KubeUnreachable/5xx KubeError."""
        now = format_micro_time(self._wall())
        try:
            lease = await self._client.get(self.path)
        except NotFound:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self._duration_seconds(),
                         "acquireTime": now, "renewTime": now, "leaseTransitions": 0},
            }
            try:
                created = await self._client.create(self.collection, body)
            except Conflict:
                return False
            self._observe(created.get("spec") or {})
            return True

        spec = lease.get("spec") or {}
        self._observe(spec)
        holder = str(spec.get("holderIdentity") or "")
        duration = spec.get("leaseDurationSeconds")
        duration_s = float(duration) if isinstance(duration, int | float) else self.lease_duration
        expired = time.monotonic() > self._observed_at + duration_s
        if holder and holder != self.identity and not expired:
            return False

        same_holder = holder == self.identity
        transitions = spec.get("leaseTransitions")
        transitions_n = transitions if isinstance(transitions, int) else 0
        new_spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self._duration_seconds(),
            "acquireTime": spec.get("acquireTime") if same_holder and spec.get("acquireTime") else now,
            "renewTime": now,
            "leaseTransitions": transitions_n if same_holder else transitions_n + 1,
        }
        updated = dict(lease)
        updated["spec"] = new_spec
        try:
            stored = await self._client.replace(self.path, updated)
        except Conflict:
            return False
        if not same_holder:
            self.transitions_seen += 1
        self._observe(stored.get("spec") or new_spec)
        return True

    async def _attempt(self) -> bool | None:
        """True/False as above; None when the API could not be asked (counts against the renew deadline)."""
        try:
            return await self.try_acquire_or_renew()
        except (KubeUnreachable, KubeError) as exc:
            self._log.warning("lease_request_failed", error=str(exc))
            return None

    async def _acquire(self) -> float:
        """Returns when the successful attempt was sent (the Lease was written no earlier than that)."""
        while True:
            sent = time.monotonic()
            if await self._attempt():
                self._set_leader(True)
                return sent
            # Jitter so that standbys do not hit the API server in step.
            await asyncio.sleep(self.retry_period * random.uniform(1.0, 1.2))

    async def _lead(self, lead: Callable[[], Coroutine[Any, Any, None]], renewed_at: float) -> None:
        """Run `lead` while renewing; return when leadership is lost (`lead` is cancelled then).

        The renew deadline is kept whatever the API server does: a renewal still waiting for its answer (a
        slow or blackholed server) is abandoned when the deadline comes, since the others judge the Lease by
        the last renewal they saw. Renewals count from when they were sent, not answered, for the same reason.
        """
        task = asyncio.create_task(lead(), name="leader-work")
        last_renewed = renewed_at
        try:
            while True:
                left = last_renewed + self.renew_deadline - time.monotonic()
                done, _ = await asyncio.wait({task}, timeout=max(0.0, min(self.renew_interval, left)))
                if done:
                    task.result()  # work ended (or failed): nothing to lead any more
                    return
                sent = time.monotonic()
                left = last_renewed + self.renew_deadline - sent
                result: bool | None = None
                if left > 0:
                    try:
                        async with asyncio.timeout(left):
                            result = await self._attempt()
                    except TimeoutError:
                        result = None
                if result:
                    last_renewed = sent
                    continue
                if result is False:
                    self._log.warning("lease_taken_stepping_down")
                    return
                if time.monotonic() - last_renewed >= self.renew_deadline:
                    self._log.warning("lease_not_renewed_stepping_down",
                                      renew_deadline=self.renew_deadline)
                    return
        finally:
            self._set_leader(False)
            await cancel_and_wait(task)

    async def release(self) -> None:
        """Give the Lease up (empty holder, 1 s) so a standby takes over without waiting for expiry."""
        try:
            lease = await self._client.get(self.path, timeout=2.0)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            now = format_micro_time(self._wall())
            released = dict(lease)
            released["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1,
                                "renewTime": now, "acquireTime": now}
            await self._client.replace(self.path, released, timeout=2.0)
            self._log.info("lease_released")
        except (KubeError, KubeUnreachable) as exc:
            self._log.warning("lease_release_failed", error=str(exc))

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Forever: become leader, run `lead` until leadership is lost, then try again. Cancel to stop."""
        held = False
        try:
            while True:
                renewed_at = await self._acquire()
                held = True
                await self._lead(lead, renewed_at)
                held = False
                await asyncio.sleep(self.retry_period)
        finally:
            if held and self.release_on_exit:
                await asyncio.shield(self.release())
