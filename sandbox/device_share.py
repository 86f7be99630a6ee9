"""Device tensors that stay on the device: CUDA allocations passed as file descriptors.

On the cuda backend a message's large device tensors (sandbox.channel) are copied once, device
to device, into a fresh allocation made with the CUDA driver's virtual memory API (`cuMemCreate`
with a POSIX file descriptor as its shareable handle, `export`). Only that descriptor crosses the
channel (SCM_RIGHTS), as a sealed memfd does on the cpu backend (sandbox.shared): the children run
in their own pid and ipc namespaces, where the runtime's legacy IPC handles (`cudaIpcGetMemHandle`)
do not open, and a descriptor means the same thing on both sides.

The receiver imports the descriptor, maps the announced bytes, copies them (device to device)
into memory of its own and drops the mapping at once (`DeviceHandle.tensor`). So:
- a sender's own tensors are never exported: what the other side can reach is a copy made for it,
  and the expected outputs never leave the reference;
- what a receiver works on is private to it, whatever the sender does with its allocation later
  (a hostile candidate holding the descriptor of its outputs can change them only before the
  reference's copy, which is no different from having written them that way);
- the parent never touches CUDA: it forwards the descriptors it received, like memfds.
A descriptor that is not a CUDA allocation, or one smaller than the tensor it announces, fails
at import or at map (`BadHandle`), before a byte is read.

Nothing here is available without a CUDA driver; `available()` says whether it is, and a sender
without it (or out of device memory) sends the tensor through a memfd instead. The bindings are
plain ctypes on libcuda's stable C API (cuda.h), so no extra package is needed in the sandbox.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any

from .shared import BadHandle, Passed

ALIGN = 512  # each tensor of an export starts on a 512-byte boundary (any dtype's vector loads)

# cuda.h enums
_ALLOCATION_TYPE_PINNED = 1
_HANDLE_TYPE_POSIX_FD = 1
_LOCATION_DEVICE = 1
_ACCESS_READWRITE = 3
_GRANULARITY_MINIMUM = 0
_OUT_OF_MEMORY = 2


class DeviceShareError(Exception):
    """A driver call failed (its CUresult and name in the message)."""

    def __init__(self, call: str, code: int):
        super().__init__(f"{call} failed with CUresult {code}")
        self.code = code


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class _AllocationProp(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", _Location),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", _AllocFlags),
    ]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_u64 = ctypes.c_ulonglong
_SIGNATURES: dict[str, list[Any]] = {
    "cuMemGetAllocationGranularity": [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(_AllocationProp), ctypes.c_int],
    "cuMemCreate": [ctypes.POINTER(_u64), ctypes.c_size_t, ctypes.POINTER(_AllocationProp), _u64],
    "cuMemRelease": [_u64],
    "cuMemAddressReserve": [ctypes.POINTER(_u64), ctypes.c_size_t, ctypes.c_size_t, _u64, _u64],
    "cuMemAddressFree": [_u64, ctypes.c_size_t],
    "cuMemMap": [_u64, ctypes.c_size_t, ctypes.c_size_t, _u64, _u64],
    "cuMemUnmap": [_u64, ctypes.c_size_t],
    "cuMemSetAccess": [_u64, ctypes.c_size_t, ctypes.POINTER(_AccessDesc), ctypes.c_size_t],
    "cuMemExportToShareableHandle": [ctypes.c_void_p, _u64, ctypes.c_int, _u64],
    "cuMemImportFromShareableHandle": [ctypes.POINTER(_u64), ctypes.c_void_p, ctypes.c_int],
    "cuMemcpyDtoDAsync_v2": [_u64, _u64, ctypes.c_size_t, ctypes.c_void_p],
}
_LIB: Any = None


def _lib() -> Any:
    global _LIB
    if _LIB is None:
        lib = ctypes.CDLL("libcuda.so.1")
        for name, args in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        _LIB = lib
    return _LIB


def _call(name: str, *args: Any) -> None:
    code = getattr(_lib(), name)(*args)
    if code != 0:
        raise DeviceShareError(name, code)


def _device() -> int:
    import torch

    return torch.cuda.current_device()


def _prop(device: int) -> _AllocationProp:
    prop = _AllocationProp()
    prop.type = _ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = _HANDLE_TYPE_POSIX_FD
    prop.location = _Location(_LOCATION_DEVICE, device)
    return prop


_GRANULARITY: dict[int, int] = {}


def _granularity(device: int) -> int:
    if device not in _GRANULARITY:
        g = ctypes.c_size_t()
        _call("cuMemGetAllocationGranularity", ctypes.byref(g), ctypes.byref(_prop(device)), _GRANULARITY_MINIMUM)
        _GRANULARITY[device] = g.value
    return _GRANULARITY[device]


def available() -> bool:
    """A CUDA driver with the virtual memory API, and an initialised device in this process."""
    try:
        import torch

        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return False
        _granularity(_device())
        return True
    except (OSError, AttributeError, DeviceShareError, RuntimeError):
        return False


def _rounded(n: int, to: int) -> int:
    return (n + to - 1) // to * to


class _Mapping:
    """`size` bytes of allocation `handle` mapped at a reserved address, readable and writable
    by this process's device; `close` unmaps and frees the address range."""

    def __init__(self, handle: int, size: int, device: int):
        self.size = size
        ptr = _u64()
        _call("cuMemAddressReserve", ctypes.byref(ptr), size, 0, 0, 0)
        self.ptr = ptr.value
        try:
            _call("cuMemMap", self.ptr, size, 0, handle, 0)
        except DeviceShareError:
            _call("cuMemAddressFree", self.ptr, size)
            raise
        try:
            desc = _AccessDesc(_Location(_LOCATION_DEVICE, device), _ACCESS_READWRITE)
            _call("cuMemSetAccess", self.ptr, size, ctypes.byref(desc), 1)
        except DeviceShareError:
            self.close()
            raise

    def close(self) -> None:
        _call("cuMemUnmap", self.ptr, self.size)
        _call("cuMemAddressFree", self.ptr, self.size)


def _copy(dst: int, src: int, nbytes: int) -> None:
    """Device to device on torch's current stream (ordered after the work that made `src`)."""
    import torch

    if nbytes:
        stream = torch.cuda.current_stream()
        _call("cuMemcpyDtoDAsync_v2", dst, src, nbytes, ctypes.c_void_p(stream.cuda_stream))


def export(tensors: list[Any]) -> tuple[int, list[int], int]:
    """Copy the device tensors into one new allocation, each at an ALIGN-ed offset, and return
    (a POSIX descriptor of the allocation, the offsets, the allocation's size: a receiver maps
    the whole allocation, the driver maps no part of one). This process keeps no handle and no
    mapping of it: the allocation lives while a descriptor or an importer's handle does.
    Raises DeviceShareError (e.g. out of device memory: code `_OUT_OF_MEMORY`)."""
    import torch

    device = _device()
    offsets, size = [], 0
    for t in tensors:
        offsets.append(size)
        size += _rounded(t.numel() * t.element_size(), ALIGN)
    size = _rounded(max(size, 1), _granularity(device))
    handle = _u64()
    _call("cuMemCreate", ctypes.byref(handle), size, ctypes.byref(_prop(device)), 0)
    try:
        mapping = _Mapping(handle.value, size, device)
        try:
            keep = [t.detach().contiguous() for t in tensors]
            for t, off in zip(keep, offsets, strict=True):
                _copy(mapping.ptr + off, t.data_ptr(), t.numel() * t.element_size())
            torch.cuda.current_stream().synchronize()
        finally:
            mapping.close()
        fd = ctypes.c_int(-1)
        _call("cuMemExportToShareableHandle", ctypes.byref(fd), handle.value, _HANDLE_TYPE_POSIX_FD, 0)
    finally:
        _call("cuMemRelease", handle.value)
    return fd.value, offsets, size


@dataclass
class DeviceHandle(Passed):
    """A tensor in an exported CUDA allocation of `size` bytes: forwarded as is by the parent
    (which has no CUDA), copied onto the receiver's device by a child (`tensor`)."""

    size: int = 0

    def check(self) -> None:
        """The parent's check, without CUDA: a character device's descriptor (what NVIDIA's
        driver exports: one of /dev/nvidiactl) at an aligned offset; a socket, pipe, memfd or
        file is refused here, anything else by the driver at import."""
        import stat

        try:
            st = os.fstat(self.fd.fd)
        except OSError as exc:
            raise BadHandle(f"a passed device descriptor is not open ({exc.strerror})") from None
        if not stat.S_ISCHR(st.st_mode):
            raise BadHandle("a passed device descriptor is a socket, pipe or file, not a CUDA allocation")
        if self.offset < 0 or self.offset % ALIGN:
            raise BadHandle(f"a passed device tensor at offset {self.offset} is not aligned")
        if self.offset + self.nbytes > self.size:
            raise BadHandle(
                f"a passed CUDA allocation of {self.size} bytes does not hold {self.nbytes} bytes at {self.offset}"
            )

    def tensor(self) -> Any:
        """A private device copy of the tensor: import, map the allocation (of the size its
        message announces), copy the tensor's bytes, unmap. An allocation of another size fails
        to map (BadHandle): nothing past its end is read."""
        import torch

        from .channel import dtype_of

        dtype = dtype_of(self.dtype)
        out = torch.empty(self.nbytes, dtype=torch.uint8, device="cuda")
        if self.nbytes:
            device = _device()
            handle = _u64()
            try:
                _call(
                    "cuMemImportFromShareableHandle",
                    ctypes.byref(handle),
                    ctypes.c_void_p(self.fd.fd),
                    _HANDLE_TYPE_POSIX_FD,
                )
            except DeviceShareError as exc:
                raise BadHandle(f"a passed device descriptor is not a CUDA allocation ({exc})") from None
            try:
                try:
                    mapping = _Mapping(handle.value, self.size, device)
                except DeviceShareError as exc:
                    raise BadHandle(
                        f"a passed CUDA allocation does not hold {self.nbytes} bytes at {self.offset} ({exc})"
                    ) from None
                try:
                    _copy(out.data_ptr(), mapping.ptr + self.offset, self.nbytes)
                    torch.cuda.current_stream().synchronize()
                finally:
                    mapping.close()
            finally:
                _call("cuMemRelease", handle.value)
        return out.view(dtype).view(self.shape)
