"""Tensors that stay where they are: sealed memfds passed as file descriptors.

A message's large tensors (sandbox.channel, SHARE_MIN bytes and up) are copied once into a
memfd of the sending process (`pack`), which is then sealed (F_SEAL_WRITE | F_SEAL_GROW |
F_SEAL_SHRINK | F_SEAL_SEAL): from then on nobody, the sender included, can change, grow or
shrink it, and no writable mapping of it can exist. Only the descriptor crosses the channel
(SCM_RIGHTS over a unix socketpair); the children run in their own mount, pid and ipc
namespaces (private /tmp and /dev/shm), so a path would mean nothing to the other side.

- a child maps what it receives read-only (`Handle.tensor`: mmap PROT_READ, MAP_SHARED, then
  torch.frombuffer): a forward that writes to a trial input faults (SIGSEGV), and a sealed
  memfd cannot be remapped writable (mprotect refuses), so nothing a child received can change;
- the parent never maps anything: it forwards the descriptors (`Handle`) it received;
- every received descriptor is checked (`Handle.check`): a memfd, sealed, large enough; a child
  that sends a socket, a pipe or an unsealed file is refused.

Every system call used here (memfd_create, ftruncate, fcntl, mmap, sendmsg, recvmsg) is outside
sandbox/seccomp.py's denylist (tests/sandbox/test_transport.py checks it).

Memory: a memfd lives while a process holds its descriptor or a mapping of it; the senders and
the parent drop them after each trial, so a task needs about one trial's inputs and outputs at a
time. `require_host` turns a task that cannot fit into a clear error instead of an OOM kill.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import Any

SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL
REQUIRED_SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK
ALIGN = mmap.PAGESIZE  # each tensor starts on a page of its own in a packed memfd


class TooLarge(Exception):
    """The task's tensors do not fit this host (or the child's memory limit)."""


class BadHandle(ValueError):
    """A received descriptor that is not a sealed memfd of the announced size."""


def byte_view(t: Any) -> memoryview:
    """The bytes of a contiguous CPU tensor, without numpy (not installed everywhere)."""
    n = t.numel() * t.element_size()
    if n == 0:
        return memoryview(b"")
    return memoryview((ctypes.c_char * n).from_address(t.data_ptr())).cast("B")


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def new_memfd(size: int) -> int:
    """An empty sealable memfd of `size` bytes. Sizing it is a file-size change, which the
    children's RLIMIT_FSIZE (output_limit_mb) would refuse with SIGXFSZ: a child asks the parent
    for one (channel.request_memfd); writing into its pages through a mapping changes no size."""
    fd = os.memfd_create("kw-tensors", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
    except BaseException:
        os.close(fd)
        raise
    return fd


def pack(tensors: list[Any], alloc: Any = new_memfd) -> tuple[int, list[int]]:
    """Copy `tensors` (any device) into one new memfd (`alloc(size)`), each at a page-aligned
    offset, and seal it. Returns (fd, offsets). The copy goes straight from the tensor (a device
    tensor: one device-to-host copy) into the memfd's pages through a writable mapping, which is
    closed before sealing (F_SEAL_WRITE fails while a writable mapping exists)."""
    import torch

    offsets, size = [], 0
    for t in tensors:
        offsets.append(size)
        size += _aligned(t.numel() * t.element_size())
    fd = alloc(size)
    try:
        if os.fstat(fd).st_size != size:
            raise BadHandle(f"an allocated memfd has {os.fstat(fd).st_size} bytes, not {size}")
        if size:
            # populated at once: faster than a fault per fresh 4 KB page of shmem
            mm = mmap.mmap(
                fd, size, mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0), mmap.PROT_READ | mmap.PROT_WRITE
            )
            try:
                for t, off in zip(tensors, offsets, strict=True):
                    n = t.numel()
                    if n:
                        dst = torch.frombuffer(mm, dtype=t.dtype, count=n, offset=off)
                        dst.copy_(t.detach().reshape(-1))
                        del dst
            finally:
                mm.close()
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd, offsets


# Read-only mappings of this process, (start, end) by id: `is_mapped_read_only` tells a trial
# input that cannot change (the candidate then skips its before/after copy) from one that can.
_RO_SPANS: dict[int, tuple[int, int]] = {}
_RO_LOCK = threading.Lock()


def _register_span(mm: mmap.mmap, size: int) -> None:
    start = _address_of(mm)
    key = id(mm)
    with _RO_LOCK:
        _RO_SPANS[key] = (start, start + size)
    weakref.finalize(mm, _RO_SPANS.pop, key, None)


def _address_of(mm: mmap.mmap) -> int:
    """The start address of a read-only mapping (ctypes.from_buffer needs a writable buffer)."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.frombuffer(mm, dtype=torch.uint8, count=1).data_ptr()


def is_mapped_read_only(t: Any) -> bool:
    """True when tensor `t`'s storage lies in a read-only mapping made by `Handle.tensor`."""
    try:
        p = t.untyped_storage().data_ptr()
    except Exception:
        return False
    with _RO_LOCK:
        return any(a <= p < b for a, b in _RO_SPANS.values())


class _Fd:
    """One received descriptor, closed when the last Handle using it is gone."""

    def __init__(self, fd: int):
        self.fd = fd
        self._finalizer = weakref.finalize(self, _close_quietly, fd)

    def close(self) -> None:
        self._finalizer()


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


@dataclass
class Passed:
    """A tensor that this process holds by a received descriptor (`offset` bytes into it)."""

    fd: _Fd
    dtype: str
    shape: list[int]
    offset: int

    @property
    def nbytes(self) -> int:
        from .channel import dtype_of

        n = 1
        for x in self.shape:
            n *= x
        return n * dtype_of(self.dtype).itemsize


class Handle(Passed):
    """A tensor in a sealed memfd: forwarded as is by the parent (which never maps it), mapped
    read-only by a child (`tensor`)."""

    def check(self) -> None:
        """Refuse anything but a sealed memfd covering this tensor (a hostile sender's socket,
        pipe, writable file or short memfd never reaches a mapping)."""
        try:
            seals = fcntl.fcntl(self.fd.fd, fcntl.F_GET_SEALS)
            size = os.fstat(self.fd.fd).st_size
        except OSError as exc:
            raise BadHandle(f"a passed descriptor is not a memfd ({exc.strerror})") from None
        if seals & REQUIRED_SEALS != REQUIRED_SEALS:
            raise BadHandle("a passed memfd is not sealed against writing, growing and shrinking")
        if self.offset < 0 or self.offset % ALIGN or self.offset + self.nbytes > size:
            raise BadHandle(
                f"a passed memfd of {size} bytes does not hold a tensor of {self.nbytes} bytes at {self.offset}"
            )

    def tensor(self) -> Any:
        """The tensor, mapped read-only: its own pages only, populated at once (faster than a
        fault per 4 KB page). Only the announced tensor is mapped, never the rest of the memfd,
        so what a mapping populates is what the message says it holds (the parent bounds what a
        candidate's outputs may hold before the reference maps them, protocol._run_trials)."""
        import torch

        from .channel import dtype_of

        dtype = dtype_of(self.dtype)
        n = self.nbytes // dtype.itemsize
        if n == 0:
            return torch.empty(self.shape, dtype=dtype)
        length = _aligned(self.nbytes)
        mapping = mmap.mmap(
            self.fd.fd, length, mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0), mmap.PROT_READ, offset=self.offset
        )
        _register_span(mapping, length)
        with warnings.catch_warnings():  # "the given buffer is not writable": that is the point
            warnings.simplefilter("ignore")
            return torch.frombuffer(mapping, dtype=dtype, count=n).view(self.shape)


# ---- memory ---------------------------------------------------------------------------------


def _meminfo_bytes(key: str) -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def host_limit() -> tuple[int, str]:
    """The memory this process may still use, and what sets it: RLIMIT_AS (the cpu backend's
    memory_limit_mb) or the host's available memory, whichever is smaller."""
    import resource

    limit, what = _meminfo_bytes("MemAvailable") or (1 << 62), "the host's available memory"
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        left = soft - _vm_size()
        if left < limit:
            limit, what = max(0, left), "the child's address-space limit (memory_limit_mb)"
    return limit, what


def _vm_size() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def require_host(needed: int, what: str) -> None:
    """Raise TooLarge with both numbers when `needed` bytes do not fit (`host_limit`)."""
    limit, source = host_limit()
    if needed > limit:
        raise TooLarge(
            f"task too large for this host: {what} needs {needed / 1e9:.1f} GB, limit {limit / 1e9:.1f} GB ({source})"
        )
