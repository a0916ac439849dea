"""Shared test helpers (tests/support/repos.py); no test module imports another."""
