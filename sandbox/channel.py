"""Length-prefixed messages between the trusted parent and a child, over inherited pipes.

Payloads are `torch.save` archives read back with `weights_only=True`: plain containers,
numbers, strings and tensors, never arbitrary pickled objects, so a hostile child cannot run
code in the parent by sending a crafted message.
"""

from __future__ import annotations

import io
import os
import select
import time
from typing import Any

HEADER = 8


class ChannelClosed(Exception):
    """The other side exited or closed its end."""


class ChannelTimeout(Exception):
    pass


class MessageTooLarge(Exception):
    pass


def encode(obj: Any) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def decode(data: bytes | memoryview) -> Any:
    import torch

    return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")


def send(fd: int, obj: Any) -> None:
    import torch

    buf = io.BytesIO()
    buf.write(b"\0" * HEADER)
    torch.save(obj, buf)
    view = buf.getbuffer()
    view[:HEADER] = (len(view) - HEADER).to_bytes(HEADER, "little")
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd: int, n: int, deadline: float | None) -> memoryview:
    out = bytearray(n)
    view = memoryview(out)
    got = 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelTimeout()
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                raise ChannelTimeout()
        k = os.readv(fd, [view[got:got + (1 << 24)]])
        if not k:
            raise ChannelClosed()
        got += k
    return view


def recv(fd: int, timeout: float | None = None, max_bytes: int = 1 << 33) -> Any:
    deadline = None if timeout is None else time.monotonic() + timeout
    size = int.from_bytes(bytes(_read_exact(fd, HEADER, deadline)), "little")
    if size > max_bytes:
        raise MessageTooLarge(f"message of {size} bytes exceeds the {max_bytes} byte limit")
    return decode(_read_exact(fd, size, deadline))
