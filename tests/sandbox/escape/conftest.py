"""Fixtures of the escape tests: a token per test, the loopback listener, the attacks' config."""

from __future__ import annotations

import secrets

import pytest

from sandbox import protocol

from .support import Listener, base_cfg


@pytest.fixture(autouse=True)
def walls_only(monkeypatch):
    """The attacks here probe the operating system's walls, so the run-time refusals in the
    candidate's process (sandbox.audit_hook, tested in tests/sandbox/test_audit_hook.py) are off,
    as the static scan is (every attack builds its names at run time)."""
    monkeypatch.setattr(protocol, "RUN_TIME_REFUSALS", False)


@pytest.fixture
def token() -> str:
    return secrets.token_hex(6)


@pytest.fixture
def listener():
    lst = Listener()
    yield lst
    lst.close()


@pytest.fixture
def cfg(token, listener) -> dict:
    """What every attack is told: the listener's port and socket, Redis's port, a token."""
    return base_cfg(token, listener)
