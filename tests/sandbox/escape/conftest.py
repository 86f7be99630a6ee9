"""Fixtures of the escape tests: a token per test, the loopback listener, the attacks' config."""

from __future__ import annotations

import secrets

import pytest

from .support import Listener, base_cfg


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
