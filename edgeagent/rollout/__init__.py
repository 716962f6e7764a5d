"""Rollout plans, in one home: the RolloutPlan API types and validation (`api`), the plan arithmetic (node
order, wave sizes: `plan`), the pure state machine that moves the waves on (`machine`, `state`,
`requests`), the steering verbs (`steer`), the one model of where each node stands (`node_state`, `model`,
`placement`, `plan_source`) and the `edgeagent rollout` command (`status`, `command`, over `listing`).

The rules are pure functions of plain objects and a clock passed in, so the controller (which wires them to its
informers and writers), the agent's plan check, the fleet views and the command all read a plan the same way,
and the rules can be tested exhaustively. Only `steer`, `listing` (and `status.fetch_status` through it) and
`command` talk to the API server.
"""
