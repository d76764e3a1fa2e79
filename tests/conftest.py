"""Shared test setup: a clean environment, whatever the developer's shell exports."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # A developer's CRONWARDEN_* variables (or a .env) must not leak into the tests: each test
    # says what it points at.
    for name in list(os.environ):
        if name.startswith("CRONWARDEN_"):
            del os.environ[name]
