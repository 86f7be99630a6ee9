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
from typing import Any, NoReturn

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


_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # an int, without building a Stream object
_NULL = ctypes.c_void_p(0)
_Tensor = torch.Tensor


def stream(device: torch.device | None = None) -> ctypes.c_void_p:
    """The current CUDA stream (a cudaStream_t) of `device` (default: the current device) on the
    cuda backend; a null pointer on cpu. Runs in every timed call: a few hundred nanoseconds."""
    if not _ON_CUDA:
        return _NULL
    if _RAW_STREAM is not None:
        index = device.index if device is not None and device.index is not None else torch.cuda.current_device()
        return ctypes.c_void_p(_RAW_STREAM(index))
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)


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
    """One exported kernel function. The argument types are bound (ctypes argtypes) from the
    first call's Python types and rebound when a call's types differ, so a call converts in C:
    a launch from Python costs a few microseconds, which a sub-10-microsecond kernel notices."""

    def __init__(self, name: str, fn: Any):
        self.name = name
        self._fn = fn
        self._fn.restype = ctypes.c_int

    def _bind(self, args: tuple) -> None:
        """argtypes: the ctypes type _convert gives each argument (it raises for a bad one)."""
        self._fn.argtypes = [type(_convert(self.name, i, a)) for i, a in enumerate(args)]

    def __call__(self, *args: Any) -> None:
        # one comprehension, no call per argument: tensors become data pointers, the rest is
        # converted by ctypes in C; a bad tensor goes to _convert for the explanatory error
        raw = [(a.data_ptr() if a.is_contiguous() and a.is_cuda is _ON_CUDA else self._reject(args))
               if isinstance(a, _Tensor) else a for a in args]
        if self._fn.argtypes is None or len(self._fn.argtypes) != len(args):
            self._bind(args)
        _calls[self.name] = _calls.get(self.name, 0) + 1
        try:
            if _profile:
                with torch.profiler.record_function(f"kwrt::{self.name}"):
                    rc = self._fn(*raw)
            else:
                rc = self._fn(*raw)
        except ctypes.ArgumentError:  # this call's argument types differ from the bound ones
            self._bind(args)
            rc = self._fn(*raw)
        if rc != 0:
            raise KernelError(f"kernel function {self.name} returned error code {rc}")

    def _reject(self, args: tuple) -> NoReturn:
        for i, a in enumerate(args):
            _convert(self.name, i, a)
        raise KernelError(f"{self.name}: a tensor argument is not contiguous or not on {_BACKEND}")  # never reached


class _Library:
    def __init__(self, path: str):
        self.path = path
        self._cdll = ctypes.CDLL(path)

    def __getattr__(self, name: str) -> _Function:
        """Only for a function not looked up before: it is then stored on the instance, so later
        lookups (one per kernel call) never come here."""
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            fn = getattr(self._cdll, name)
        except AttributeError:
            raise AttributeError(f"the compiled kernels export no function {name!r} (declare it extern \"C\")") from None
        self.__dict__[name] = _Function(name, fn)
        return self.__dict__[name]


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
