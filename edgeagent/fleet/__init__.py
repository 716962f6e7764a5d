"""Read-only views of the fleet: the `fleet` tables and the `dashboard` page, kept current by `live`.

They format; they do not decide. Each node's state, the lists they are computed from and the rollout plan's
reading are `edgeagent.rollout`'s (`node_state`, `model`, `listing`, `plan_source`), which `rollout status`
shares. Never imports the agent, the controller or the sim: everything shown is read from the objects the
agents and the controller already publish.
"""
