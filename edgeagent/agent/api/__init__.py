"""The agent's HTTP API on the node: routes (http.py, hold_api.py), how answers look (responses.py), the bearer
token (auth.py, token_file.py). Its Prometheus metrics are one level up (metrics.py), as every feature counts.
"""
