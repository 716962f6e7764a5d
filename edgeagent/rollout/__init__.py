"""Rollout plans, in one home: the plan's API types and validation, the plan arithmetic (node order, wave
sizes), the pure state machine that moves the waves on, and what the controller, the agent's plan check, the
fleet views and `edgeagent rollout` read of it.

Pure: no I/O and no clock of its own, so the controller (which wires it to its informers and writers), the
agent and the commands all read a plan the same way, and its rules can be tested exhaustively.
"""
