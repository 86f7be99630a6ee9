"""Length-prefixed messages between the trusted parent and a child, over a unix socketpair.

A message is a JSON header describing a tree of dicts (string keys), lists, tuples, strings,
numbers, booleans, None and tensors. Nothing is pickled, so a hostile child cannot run code in
the parent by sending a crafted message. Tensors travel two ways:
- below SHARE_MIN bytes, up to INLINE_MAX bytes in all per message: their raw bytes follow the
  header, read into freshly allocated tensors;
- from SHARE_MIN up (and the small ones past INLINE_MAX): copied once into a sealed memfd of
  the sender (sandbox.shared.pack), whose
  descriptor rides with the header (SCM_RIGHTS). The receiver gets a `shared.Handle` per tensor;
  `recv(..., map=True)` (the children) maps them read-only, the parent forwards the handles.

- from SHARE_MIN up on a CUDA device, in a process that called `share_device_tensors` (the cuda
  backend's children): copied once, device to device, into an exported CUDA allocation
  (sandbox.device_share), whose descriptor rides the same way; the receiver gets a
  `device_share.DeviceHandle`, which a child turns into a private device copy. Without the driver's
  support, or out of device memory, such a tensor goes by memfd instead.

So a trial input goes reference -> candidate without the parent touching its bytes (on the cuda
backend without leaving the device), and a message's size no longer depends on the tensors in it.
`Traffic` counts what crossed.

What a receiver allocates for one message is bounded by what an honest sender can produce: a
header of MAX_HEADER bytes, inline tensors of less than SHARE_MIN bytes each and INLINE_MAX in
all; anything more is MessageTooLarge before it is allocated. The parent runs as root without
limits, and a candidate can write to its end of the socket itself (red team parent_memory: a
forged reply announcing one 2 GiB inline tensor took the evaluator to 2.2 GB).
"""

from __future__ import annotations

import array
import json
import os
import select
import socket
import time
from dataclasses import dataclass
from typing import Any

from . import device_share, shared

HEADER = 8
_CHUNK = 1 << 24
SHARE_MIN = 1 << 16  # tensors of 64 KB and more go by memfd
INLINE_MAX = 1 << 22  # inline tensor bytes per message (4 MB): smaller tensors past it go by memfd too
MAX_HEADER = 1 << 22  # a message's JSON header (4 MB): the largest honest one is a few hundred KB
MAX_FDS = 64  # descriptors one message may carry (one per memfd; a message packs its tensors into one)
HANDLES = (shared.Handle, device_share.DeviceHandle)  # what a parent receives for a shared tensor
_DEVICE = [False]  # share_device_tensors was called: large CUDA tensors go by exported allocation


def share_device_tensors() -> bool:
    """Send this process's large CUDA tensors by exported device allocation from now on, when the
    driver supports it (device_share.available); returns whether it does."""
    _DEVICE[0] = device_share.available()
    return _DEVICE[0]


class ChannelClosed(Exception):
    """The other side exited or closed its end."""


class ChannelTimeout(Exception):
    pass


class MessageTooLarge(Exception):
    pass


@dataclass
class Traffic:
    """What crossed one channel (both directions, counted by this end): messages, bytes through
    the socket (headers and small tensors), bytes handed over as sealed memfds (`shared_bytes`)
    and as exported device allocations (`device_bytes`), and the descriptors of both."""

    messages: int = 0
    socket_bytes: int = 0
    shared_bytes: int = 0
    device_bytes: int = 0
    descriptors: int = 0

    def add(self, other: Traffic) -> None:
        for k in ("messages", "socket_bytes", "shared_bytes", "device_bytes", "descriptors"):
            setattr(self, k, getattr(self, k) + getattr(other, k))


def socketpair() -> tuple[socket.socket, socket.socket]:
    """(parent end, child end), with buffers widened for the small tensors that travel inline."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    for s in (a, b):
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            try:
                s.setsockopt(socket.SOL_SOCKET, opt, 4 << 20)
            except OSError:
                pass
    return a, b


def _dtypes() -> dict[str, Any]:
    import torch

    names = [
        "float64",
        "float32",
        "float16",
        "bfloat16",
        "int64",
        "int32",
        "int16",
        "int8",
        "uint8",
        "bool",
        "complex64",
        "complex128",
        "float8_e4m3fn",
        "float8_e5m2",
    ]
    return {n: getattr(torch, n) for n in names if hasattr(torch, n)}


def dtype_of(name: str) -> Any:
    """An allowlisted torch dtype by name; anything else is a malformed message."""
    dtype = _dtypes().get(name)
    if dtype is None:
        raise ValueError(f"malformed message: dtype {name!r}")
    return dtype


class _Outgoing:
    """A message's tensors while it is encoded: small ones inline, large ones for one memfd (or
    one exported device allocation), handles received earlier (the parent forwarding) by their
    own descriptors."""

    def __init__(self) -> None:
        self.inline: list = []
        self.to_pack: list = []  # (tensor, spec)
        self.to_export: list = []  # (CUDA tensor, spec)
        self.fds: list[int] = []
        self.shared_bytes = 0
        self.device_bytes = 0
        self.inline_bytes = 0

    def fd_index(self, fd: int) -> int:
        if fd not in self.fds:
            self.fds.append(fd)
        return self.fds.index(fd)

    def tensor(self, t: Any) -> dict:
        t = t.detach()
        spec: dict[str, Any] = {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape)}
        nbytes = t.numel() * t.element_size()
        # inline only below SHARE_MIN and INLINE_MAX in all: what a receiver accepts (`_read_body`)
        large = nbytes >= SHARE_MIN or self.inline_bytes + nbytes > INLINE_MAX
        if large and _DEVICE[0] and t.is_cuda:
            spec["__device__"] = -1  # filled in by `finish`
            self.to_export.append((t, spec))
        elif large:
            spec["__shared__"] = -1
            self.to_pack.append((t, spec))
        else:
            t = t.cpu().contiguous()
            spec["__tensor__"] = len(self.inline)
            self.inline.append(t)
            self.inline_bytes += nbytes
        return spec

    def handle(self, h: shared.Handle | device_share.DeviceHandle) -> dict:
        kind = "__device__" if isinstance(h, device_share.DeviceHandle) else "__shared__"
        if kind == "__device__":
            self.device_bytes += h.nbytes
        else:
            self.shared_bytes += h.nbytes
        spec = {"dtype": h.dtype, "shape": list(h.shape), kind: self.fd_index(h.fd.fd), "offset": h.offset}
        if isinstance(h, device_share.DeviceHandle):
            spec["size"] = h.size
        return spec

    def finish(self, alloc: Any) -> list[int]:
        """Export the large CUDA tensors into one device allocation and pack the other large
        tensors into one sealed memfd; returns the descriptors this process created (closed once
        sent: the receiver holds its own). Out of device memory, the CUDA tensors join the memfd."""
        own: list[int] = []
        try:
            if self.to_export:
                try:
                    fd, offsets, size = device_share.export([t for t, _ in self.to_export])
                except device_share.DeviceShareError:
                    for t, spec in self.to_export:
                        del spec["__device__"]
                        spec["__shared__"] = -1
                        self.to_pack.append((t, spec))
                else:
                    own.append(fd)
                    self._place(self.to_export, "__device__", fd, offsets)
                    for _, spec in self.to_export:
                        spec["size"] = size
                    self.device_bytes += sum(t.numel() * t.element_size() for t, _ in self.to_export)
            if self.to_pack:
                fd, offsets = shared.pack([t for t, _ in self.to_pack], alloc)
                own.append(fd)
                self._place(self.to_pack, "__shared__", fd, offsets)
                self.shared_bytes += sum(t.numel() * t.element_size() for t, _ in self.to_pack)
        except BaseException:
            for fd in own:
                shared._close_quietly(fd)
            raise
        return own

    def _place(self, items: list, kind: str, fd: int, offsets: list[int]) -> None:
        index = self.fd_index(fd)
        for (_, spec), off in zip(items, offsets, strict=True):
            spec[kind], spec["offset"] = index, off


def _encode_tree(obj: Any, out: _Outgoing) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return out.tensor(obj)
    if isinstance(obj, HANDLES):
        return out.handle(obj)
    if isinstance(obj, dict):
        for k in obj:
            if not isinstance(k, str):
                raise TypeError(f"message dict keys must be strings, got {type(k).__name__}")
        return {"__dict__": {k: _encode_tree(v, out) for k, v in obj.items()}}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode_tree(v, out) for v in obj]}
    if isinstance(obj, list):
        return [_encode_tree(v, out) for v in obj]
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    raise TypeError(f"cannot send a {type(obj).__name__}")


def send(sock: socket.socket, obj: Any, traffic: Traffic | None = None, alloc: Any = shared.new_memfd) -> None:
    """`alloc(size)` makes the memfd for the large tensors (a child: `request_memfd`)."""
    out = _Outgoing()
    tree = _encode_tree(obj, out)
    own = out.finish(alloc)
    try:
        header = json.dumps(tree).encode()
        first = len(header).to_bytes(HEADER, "little") + header
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", out.fds))] if out.fds else []
        sent = sock.sendmsg([first], anc)
        if sent < len(first):
            sock.sendall(memoryview(first)[sent:])
        inline = 0
        for t in out.inline:
            if t.numel():
                view = shared.byte_view(t)
                sock.sendall(view)
                inline += len(view)
    finally:
        for fd in own:
            shared._close_quietly(fd)
    if traffic is not None:
        traffic.messages += 1
        traffic.socket_bytes += len(first) + inline
        traffic.shared_bytes += out.shared_bytes
        traffic.device_bytes += out.device_bytes
        traffic.descriptors += len(out.fds)


def _wait(sock: socket.socket, deadline: float | None) -> None:
    if deadline is None:
        return
    left = deadline - time.monotonic()
    if left <= 0:
        raise ChannelTimeout()
    ready, _, _ = select.select([sock], [], [], left)
    if not ready:
        raise ChannelTimeout()


def _read_into(sock: socket.socket, view: memoryview, deadline: float | None) -> None:
    got = 0
    n = len(view)
    while got < n:
        _wait(sock, deadline)
        k = sock.recv_into(view[got : got + _CHUNK])
        if not k:
            raise ChannelClosed()
        got += k


def _read_head(sock: socket.socket, deadline: float | None) -> tuple[bytes, list[int]]:
    """The 8-byte length and the descriptors that came with the message's first bytes."""
    _wait(sock, deadline)
    data, anc, flags, _ = sock.recvmsg(HEADER, socket.CMSG_SPACE(MAX_FDS * 4))
    fds: list[int] = []
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            arr = array.array("i")
            arr.frombytes(payload[: len(payload) - len(payload) % arr.itemsize])
            fds.extend(arr)
    if flags & socket.MSG_CTRUNC:
        for fd in fds:
            shared._close_quietly(fd)
        raise MessageTooLarge(f"message with more than {MAX_FDS} descriptors")
    if not data:
        raise ChannelClosed()
    head = bytearray(data)
    if len(head) < HEADER:
        rest = bytearray(HEADER - len(head))
        _read_into(sock, memoryview(rest), deadline)
        head += rest
    return bytes(head), fds


def _is_tensor(node: dict) -> bool:
    return "__tensor__" in node or "__shared__" in node or "__device__" in node


def _decode_tree(node: Any, leaf: Any) -> Any:
    if isinstance(node, list):
        return [_decode_tree(v, leaf) for v in node]
    if isinstance(node, dict):
        if _is_tensor(node):
            return leaf(node)
        if "__tuple__" in node:
            return tuple(_decode_tree(v, leaf) for v in node["__tuple__"])
        return {k: _decode_tree(v, leaf) for k, v in node["__dict__"].items()}
    return node


def _tensor_specs(node: Any, out: list) -> None:
    if isinstance(node, list):
        for v in node:
            _tensor_specs(v, out)
    elif isinstance(node, dict):
        if _is_tensor(node):
            out.append(node)
        elif "__tuple__" in node:
            _tensor_specs(node["__tuple__"], out)
        else:
            for v in node["__dict__"].values():
                _tensor_specs(v, out)


def _shape(spec: dict) -> tuple[Any, list[int], int]:
    dtype = dtype_of(spec["dtype"])
    shape = [int(x) for x in spec["shape"]]
    if any(x < 0 for x in shape):
        raise ValueError("malformed message: negative dimension")
    numel = 1
    for x in shape:
        numel *= x
    return dtype, shape, numel


MAX_ALLOC = 1 << 40


def _read_message_head(sock: socket.socket, deadline: float | None) -> tuple[Any, list[int], int]:
    """A message's header: (tree, received descriptors, header size)."""
    head, raw_fds = _read_head(sock, deadline)
    size = int.from_bytes(head, "little")
    try:
        if size > MAX_HEADER:
            raise MessageTooLarge(f"message header of {size} bytes exceeds the {MAX_HEADER >> 20} MB limit")
        raw = bytearray(size)
        _read_into(sock, memoryview(raw), deadline)
        return json.loads(raw), raw_fds, size
    except BaseException:
        for fd in raw_fds:
            shared._close_quietly(fd)
        raise


def _control(tree: Any) -> str | None:
    """'alloc' (a child asks for a memfd) or 'memfd' (the answer), else None."""
    if isinstance(tree, dict) and isinstance(tree.get("__dict__"), dict) and len(tree["__dict__"]) == 1:
        key = next(iter(tree["__dict__"]))
        return {"__alloc__": "alloc", "__memfd__": "memfd"}.get(key)
    return None


def _serve_alloc(sock: socket.socket, tree: Any) -> None:
    size = tree["__dict__"]["__alloc__"]
    if not isinstance(size, int) or not 0 <= size <= MAX_ALLOC:
        raise ValueError(f"malformed message: memfd request of {size!r} bytes")
    fd = shared.new_memfd(size)
    try:
        header = json.dumps({"__dict__": {"__memfd__": 0}}).encode()
        sock.sendmsg(
            [len(header).to_bytes(HEADER, "little") + header],
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))],
        )
    finally:
        os.close(fd)


def request_memfd(sock: socket.socket, size: int, inbox: list) -> int:
    """A child's memfd of `size` bytes, made by the parent (shared.new_memfd says why). Messages
    that arrive before the answer (the parent may have sent the next command) go to `inbox`."""
    header = json.dumps({"__dict__": {"__alloc__": size}}).encode()
    sock.sendall(len(header).to_bytes(HEADER, "little") + header)
    while True:
        tree, raw_fds, size_h = _read_message_head(sock, None)
        if _control(tree) == "memfd" and len(raw_fds) == 1:
            return raw_fds[0]
        inbox.append(_read_body(sock, tree, raw_fds, size_h, None, INLINE_MAX, True, None))


def recv(
    sock: socket.socket,
    timeout: float | None = None,
    max_bytes: int = INLINE_MAX,
    map: bool = False,
    traffic: Traffic | None = None,
    serve_alloc: bool = False,
) -> Any:
    """One message. Inline tensors arrive as fresh tensors (each below SHARE_MIN bytes, at most
    `max_bytes` and INLINE_MAX in all: more is MessageTooLarge, nothing allocated for it); shared
    ones as checked `shared.Handle`s, or mapped read-only when `map` (a child's use).
    `serve_alloc` (the parent): memfd requests that come first are answered on the way."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        tree, raw_fds, size = _read_message_head(sock, deadline)
        if not (serve_alloc and _control(tree) == "alloc"):
            break
        for fd in raw_fds:
            shared._close_quietly(fd)
        _serve_alloc(sock, tree)
    return _read_body(sock, tree, raw_fds, size, deadline, max_bytes, map, traffic)


def _read_body(
    sock: socket.socket,
    tree: Any,
    raw_fds: list[int],
    size: int,
    deadline: float | None,
    max_bytes: int,
    map: bool,
    traffic: Traffic | None,
) -> Any:
    """The rest of a message after its header: inline tensors, then the shared ones checked."""
    import torch

    fds = [shared._Fd(fd) for fd in raw_fds]  # closed when the last handle using one is gone
    specs: list = []
    _tensor_specs(tree, specs)
    inline = sorted((s for s in specs if "__tensor__" in s), key=lambda s: int(s["__tensor__"]))
    if [int(s["__tensor__"]) for s in inline] != list(range(len(inline))):
        raise ValueError("malformed message: tensor indices")
    total = socket_bytes = 0
    limit = min(max_bytes, INLINE_MAX)
    tensors = []
    for spec in inline:
        dtype, shape, numel = _shape(spec)
        nbytes = numel * dtype.itemsize
        if nbytes >= SHARE_MIN:  # an honest sender sends it by memfd
            raise MessageTooLarge(f"an inline tensor of {nbytes} bytes (inline tensors are below {SHARE_MIN})")
        total += nbytes
        if total > limit:
            raise MessageTooLarge(f"message of more than {limit} bytes of inline tensors")
        t = torch.empty(shape, dtype=dtype)
        if numel:
            _read_into(sock, shared.byte_view(t), deadline)
        socket_bytes += numel * dtype.itemsize
        tensors.append(t)
    handles: dict[int, Any] = {}
    shared_bytes = device_bytes = 0
    for spec in specs:
        kind = "__device__" if "__device__" in spec else "__shared__" if "__shared__" in spec else None
        if kind is None:
            continue
        index = int(spec[kind])
        if not 0 <= index < len(fds):
            raise ValueError("malformed message: descriptor index")
        _shape(spec)
        shape, offset = [int(x) for x in spec["shape"]], int(spec.get("offset", 0))
        if kind == "__device__":
            h: Any = device_share.DeviceHandle(fds[index], spec["dtype"], shape, offset, int(spec.get("size", 0)))
        else:
            h = shared.Handle(fds[index], spec["dtype"], shape, offset)
        h.check()
        if kind == "__device__":
            device_bytes += h.nbytes
        else:
            shared_bytes += h.nbytes
        handles[id(spec)] = h.tensor() if map else h
    if traffic is not None:
        traffic.messages += 1
        traffic.socket_bytes += HEADER + size + socket_bytes
        traffic.shared_bytes += shared_bytes
        traffic.device_bytes += device_bytes
        traffic.descriptors += len(fds)

    def leaf(node: dict) -> Any:
        return tensors[int(node["__tensor__"])] if "__tensor__" in node else handles[id(node)]

    return _decode_tree(tree, leaf)
