"""Upgrade requests: accepted or queued by the upgrade service (upgrade.py), drained when the link returns
(drainer.py), followed to `succeeded`/`failed` (verifier.py), reported as Kubernetes Events (events.py).
"""
