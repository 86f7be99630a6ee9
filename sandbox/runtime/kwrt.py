"""kwrt: the candidate's bridge to its compiled kernels (fast path, no torch headers).

    import kwrt
    lib = kwrt.load()
    lib.softmax_rows(x, out, rows, cols, kwrt.stream())

Every exported kernel function is `extern "C" int f(...)`; a non-zero return raises
RuntimeError naming the function. Arguments: a torch.Tensor becomes its data pointer (it must
be contiguous and on the evaluation device, so the kernel gets what it expects), bool and int
become int64_t, float becomes float, None a null pointer. Calls are counted so the evaluator
can see that a custom kernel actually ran.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import torch

# Read once: these run inside every timed call of the candidate, where an environment lookup and
# an import statement per argument cost more than a small kernel (the evaluation child sets
# KW_BACKEND before any candidate code imports this module).
_BACKEND = os.environ.get("KW_BACKEND", "cpu")
_ON_CUDA = _BACKEND == "cuda"
_calls: dict[str, int] = {}
_profile = False  # set by the evaluator while profiling: calls then show up as profiler ranges
_lib: _Library | None = None


class KernelError(RuntimeError):
    pass


def stream() -> ctypes.c_void_p:
    """The current CUDA stream (a cudaStream_t) on the cuda backend; a null pointer on cpu."""
    if not _ON_CUDA:
        return ctypes.c_void_p(0)
    return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)


def _convert(name: str, index: int, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        if not value.is_contiguous():
            raise KernelError(f"{name}: argument {index} is a non-contiguous tensor (shape {tuple(value.shape)}, stride {value.stride()}); kernels get raw pointers and assume contiguous memory")
        if value.is_cuda != _ON_CUDA:
            raise KernelError(f"{name}: argument {index} is on {value.device}, but the kernels run on {_BACKEND}")
        return ctypes.c_void_p(value.data_ptr())
    if isinstance(value, bool):
        return ctypes.c_int64(int(value))
    if isinstance(value, int):
        return ctypes.c_int64(value)
    if isinstance(value, float):
        return ctypes.c_float(value)
    if value is None:
        return ctypes.c_void_p(None)
    if isinstance(value, ctypes.c_void_p | ctypes.c_int64 | ctypes.c_int32 | ctypes.c_float | ctypes.c_double):
        return value
    raise KernelError(f"{name}: argument {index} has unsupported type {type(value).__name__} (use tensors, int, float, bool, None)")


class _Function:
    def __init__(self, name: str, fn: Any):
        self.name = name
        self._fn = fn
        self._fn.restype = ctypes.c_int

    def __call__(self, *args: Any) -> None:
        converted = [_convert(self.name, i, a) for i, a in enumerate(args)]
        _calls[self.name] = _calls.get(self.name, 0) + 1
        if _profile:
            with torch.profiler.record_function(f"kwrt::{self.name}"):
                rc = self._fn(*converted)
        else:
            rc = self._fn(*converted)
        if rc != 0:
            raise KernelError(f"kernel function {self.name} returned error code {rc}")


class _Library:
    def __init__(self, path: str):
        self.path = path
        self._cdll = ctypes.CDLL(path)
        self._functions: dict[str, _Function] = {}

    def __getattr__(self, name: str) -> _Function:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._functions:
            try:
                fn = getattr(self._cdll, name)
            except AttributeError:
                raise AttributeError(f"the compiled kernels export no function {name!r} (declare it extern \"C\")") from None
            self._functions[name] = _Function(name, fn)
        return self._functions[name]


def load() -> _Library:
    """The workspace's compiled kernels (one shared library for all kernels/*.cu or *.cpp)."""
    global _lib
    if _lib is None:
        path = os.environ.get("KWRT_LIB")
        if not path or not os.path.exists(path):
            raise ImportError("kwrt.load(): this workspace has no compiled kernels (add kernels/*.cpp on cpu or kernels/*.cu on cuda)")
        _lib = _Library(path)
    return _lib


def calls() -> dict[str, int]:
    return dict(_calls)
