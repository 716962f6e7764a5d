"""The node-side commands that call the agent's HTTP API: `edgeagent pods|upgrade|upgrades|imagepull`
(commands.py) and `edgeagent hold|release` (hold.py). Kept light: no aiohttp server, no Kubernetes client.
"""
