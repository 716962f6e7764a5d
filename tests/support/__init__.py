"""Helpers shared by tests in several directories (fixtures stay in conftest.py files)."""
