"""The agent's view of the cloud: whether the API server is reachable (monitor.py) and the node's pod cache
fed by the watch, which `GET /pods` serves with or without the cloud (cache.py).
"""
