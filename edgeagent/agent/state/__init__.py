"""The agent's durable state: one SQLite database (store.py) and the retry pacing when its directory is
broken (episodes.py).
"""
