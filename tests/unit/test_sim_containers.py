"""The container statuses the simulated kubelet reports (edgeagent/sim/containers.py), as a real kubelet words them."""

from __future__ import annotations

from edgeagent.sim.containers import crash_looping


def test_a_crash_looping_container_waits_with_the_kubelet_s_back_off_message_and_its_last_instance_failed() -> None:
    """One wording for the launcher's crash loop and for a crash after an in-place restart (sim/image_restart.py)."""
    assert crash_looping("default", "web-x", "u1", "main", "containerd://c1", 20.0, "2026-01-01T00:00:00Z") == {
        "state": {"waiting": {"reason": "CrashLoopBackOff",
                              "message": "back-off 20s restarting failed container=main pod=web-x_default(u1)"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": "2026-01-01T00:00:00Z",
                                     "finishedAt": "2026-01-01T00:00:00Z", "containerID": "containerd://c1"}},
    }
    assert crash_looping("ns", "p", "u", "c", "", 2.5, "t")["state"]["waiting"]["message"] == (
        "back-off 2.5s restarting failed container=c pod=p_ns(u)")
