"""A free loopback port, for the launcher's private redis-server, the benches and the tests.

No Django import here: scripts/launcher.py and tests/support import it before any settings exist.
"""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now (the OS picks it; a caller binds it soon after)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
