"""Length-prefixed messages between the trusted parent and a child, over inherited pipes.

A message is a JSON header describing a tree of dicts (string keys), lists, tuples, strings,
numbers, booleans, None and tensors, followed by each tensor's raw bytes. Nothing is pickled,
so a hostile child cannot run code in the parent by sending a crafted message, and tensors
are written straight from their memory and read straight into freshly allocated ones (one
copy through the pipe each way, no archive, no checksum pass).

Tried and dropped (2026-11-29): tensor bytes beside the pipe in a memfd per direction. The
fresh shared-memory pages of each evaluation (4 KB, no huge pages for shmem) made it slower
than the 1 MB pipe: 4.40 against 3.83 s per evaluation on the H200 host.
"""

from __future__ import annotations

import json
import os
import select
import time
from typing import Any

HEADER = 8
_CHUNK = 1 << 24


class ChannelClosed(Exception):
    """The other side exited or closed its end."""


class ChannelTimeout(Exception):
    pass


class MessageTooLarge(Exception):
    pass


_F_SETPIPE_SZ = 1031


def widen_pipe(fd: int) -> int:
    """Grow a pipe's buffer from 64 KB to the host's limit (fs.pipe-max-size, 1 MB by default):
    a tensor then crosses in 16x fewer round trips; measured 0.77 -> 1.76 GB/s on the 2-core
    development machine. Returns the size in effect."""
    import fcntl

    for size in (16 << 20, 1 << 20):
        try:
            return fcntl.fcntl(fd, _F_SETPIPE_SZ, size)
        except OSError:
            continue
    return 1 << 16


def _dtypes() -> dict[str, Any]:
    import torch

    names = ["float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
             "complex64", "complex128", "float8_e4m3fn", "float8_e5m2"]
    return {n: getattr(torch, n) for n in names if hasattr(torch, n)}


def _encode_tree(obj: Any, tensors: list) -> Any:
    """`tensors` gets (tensor, its spec) pairs, in index order."""
    import torch

    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        spec = {"__tensor__": len(tensors), "dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape)}
        tensors.append((t, spec))
        return spec
    if isinstance(obj, dict):
        for k in obj:
            if not isinstance(k, str):
                raise TypeError(f"message dict keys must be strings, got {type(k).__name__}")
        return {"__dict__": {k: _encode_tree(v, tensors) for k, v in obj.items()}}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode_tree(v, tensors) for v in obj]}
    if isinstance(obj, list):
        return [_encode_tree(v, tensors) for v in obj]
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    raise TypeError(f"cannot send a {type(obj).__name__}")


def _byte_view(t: Any) -> memoryview:
    import torch

    return memoryview(t.reshape(-1).view(torch.uint8).numpy())


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        n = os.write(fd, view[:_CHUNK])
        view = view[n:]


def send(fd: int, obj: Any) -> None:
    items: list = []
    tree = _encode_tree(obj, items)
    header = json.dumps(tree).encode()
    _write_all(fd, memoryview(len(header).to_bytes(HEADER, "little") + header))
    for t, _ in items:
        if t.numel():
            _write_all(fd, _byte_view(t))


def _read_into(fd: int, view: memoryview, deadline: float | None) -> None:
    got = 0
    n = len(view)
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelTimeout()
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                raise ChannelTimeout()
        k = os.readv(fd, [view[got:got + _CHUNK]])
        if not k:
            raise ChannelClosed()
        got += k


def _decode_tree(node: Any, tensors: list) -> Any:
    if isinstance(node, list):
        return [_decode_tree(v, tensors) for v in node]
    if isinstance(node, dict):
        if "__tensor__" in node:
            return tensors[int(node["__tensor__"])]
        if "__tuple__" in node:
            return tuple(_decode_tree(v, tensors) for v in node["__tuple__"])
        return {k: _decode_tree(v, tensors) for k, v in node["__dict__"].items()}
    return node


def _tensor_specs(node: Any, out: list) -> None:
    if isinstance(node, list):
        for v in node:
            _tensor_specs(v, out)
    elif isinstance(node, dict):
        if "__tensor__" in node:
            out.append(node)
        elif "__tuple__" in node:
            _tensor_specs(node["__tuple__"], out)
        else:
            for v in node["__dict__"].values():
                _tensor_specs(v, out)


def recv(fd: int, timeout: float | None = None, max_bytes: int = 1 << 34) -> Any:
    import torch

    deadline = None if timeout is None else time.monotonic() + timeout
    head = bytearray(HEADER)
    _read_into(fd, memoryview(head), deadline)
    size = int.from_bytes(head, "little")
    if size > (64 << 20):
        raise MessageTooLarge(f"message header of {size} bytes exceeds the 64 MB limit")
    raw = bytearray(size)
    _read_into(fd, memoryview(raw), deadline)
    tree = json.loads(raw)
    specs: list = []
    _tensor_specs(tree, specs)
    specs.sort(key=lambda s: int(s["__tensor__"]))
    if [int(s["__tensor__"]) for s in specs] != list(range(len(specs))):
        raise ValueError("malformed message: tensor indices")
    dtypes = _dtypes()
    total = 0
    tensors = []
    for spec in specs:
        dtype = dtypes.get(spec["dtype"])
        if dtype is None:
            raise ValueError(f"malformed message: dtype {spec['dtype']!r}")
        shape = [int(x) for x in spec["shape"]]
        if any(x < 0 for x in shape):
            raise ValueError("malformed message: negative dimension")
        numel = 1
        for x in shape:
            numel *= x
        total += numel * torch.empty((), dtype=dtype).element_size()
        if total > max_bytes:
            raise MessageTooLarge(f"message of more than {max_bytes} bytes")
        t = torch.empty(shape, dtype=dtype)
        if numel:
            _read_into(fd, _byte_view(t), deadline)
        tensors.append(t)
    return _decode_tree(tree, tensors)
