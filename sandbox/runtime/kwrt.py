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
from collections.abc import Callable
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


_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # an int, without building a Stream object
_NULL = ctypes.c_void_p(0)
_Tensor = torch.Tensor
_ArgumentError = ctypes.ArgumentError
_ON_DEVICE = "is_cuda" if _ON_CUDA else "is_cpu"  # the tensor property a kernel argument must have
# the types a signature's non-tensor argument may have on the fast path: what _convert passes on
# (a one-element tensor would convert to its value in ctypes' argtypes, not to a pointer)
_PLAIN = frozenset(
    {bool, int, float, type(None), ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_float, ctypes.c_double}
)


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
    """The ctypes value of one argument, or a KernelError that says what is wrong with it."""
    if isinstance(value, torch.Tensor):
        if not value.is_contiguous():
            raise KernelError(
                f"{name}: argument {index} is a non-contiguous tensor (shape {tuple(value.shape)}, stride {value.stride()}); kernels get raw pointers and assume contiguous memory"
            )
        if not getattr(value, _ON_DEVICE):
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
    raise KernelError(
        f"{name}: argument {index} has unsupported type {type(value).__name__} (use tensors, int, float, bool, None)"
    )


def _fast_source(name: str, key: tuple) -> str:
    """The Python of one signature's call: `key` has "T" where the call passes a tensor and the
    ctypes type of any other argument. Tensor positions are checked inline (a tensor, contiguous,
    on the backend's device) and become data pointers; the others must be of a plain type and go
    to ctypes as they are, whose argtypes convert them in C and raise ArgumentError for a value
    of another ctypes type. Anything unexpected (another arity, a tensor where there was none or
    none where there was one, profiling) takes the slow path."""
    params = [f"a{i}" for i in range(len(key))]
    check = " and ".join(
        f"isinstance({p}, _Tensor) and {p}.is_contiguous() and {p}.{_ON_DEVICE}" if k == "T" else f"type({p}) in _PLAIN"
        for p, k in zip(params, key, strict=True)
    )
    raw = ", ".join(f"{p}.data_ptr()" if k == "T" else p for p, k in zip(params, key, strict=True))
    unpack = f"        {', '.join(params)}, = args\n" if params else ""
    return (
        f"def _make(_fn, _slow):\n"
        f"    def call(*args):\n"
        f"        if _profile or len(args) != {len(key)}:\n"
        f"            return _slow(args)\n"
        f"{unpack}"
        f"        if not ({check or 'True'}):\n"
        f"            return _slow(args)\n"
        f"        try:\n"
        f"            rc = _fn({raw})\n"
        f"        except _ArgumentError:\n"
        f"            return _slow(args)\n"
        f"        _calls[{name!r}] = _calls.get({name!r}, 0) + 1\n"
        f"        if rc != 0:\n"
        f"            raise KernelError(f'kernel function {name} returned error code {{rc}}')\n"
        f"    return call\n"
    )


class _Kernel:
    """One exported kernel function and its signatures. A signature (which arguments are tensors,
    the ctypes type of the others) gets its own ctypes function object, argtypes set once, and a
    generated call that does only what that signature needs: a launch from Python costs a few
    microseconds, which a sub-10-microsecond kernel notices. The first call and any call whose
    argument kinds differ from the current signature's go through `slow`, which checks every
    argument with `_convert` (the explanatory errors) and publishes that call's signature."""

    def __init__(self, library: _Library, name: str):
        self.library, self.name = library, name
        self._sigs: dict[tuple, tuple[Any, Callable[..., None]]] = {}

    def _signature(self, key: tuple) -> tuple[Any, Callable[..., None]]:
        if key not in self._sigs:
            cdll = self.library._cdll
            fn = cdll._FuncPtr((self.name, cdll))
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.c_void_p if k == "T" else k for k in key]
            scope: dict[str, Any] = {}
            exec(_fast_source(self.name, key), globals(), scope)  # our own template, names are C identifiers
            call = scope["_make"](fn, self.slow)
            call.__name__ = call.__qualname__ = self.name
            self._sigs[key] = (fn, call)
        return self._sigs[key]

    def call(self, *args: Any) -> None:
        self.slow(args)

    def slow(self, args: tuple) -> None:
        converted = [_convert(self.name, i, a) for i, a in enumerate(args)]
        key = tuple("T" if isinstance(a, _Tensor) else type(c) for a, c in zip(args, converted, strict=True))
        fn, call = self._signature(key)
        self.library._publish(self.name, call)  # later lookups get this signature's call
        raw = [c.value if isinstance(a, _Tensor) else a for a, c in zip(args, converted, strict=True)]
        try:
            if _profile:
                with torch.profiler.record_function(f"kwrt::{self.name}"):
                    rc = fn(*raw)
            else:
                rc = fn(*raw)
        except _ArgumentError as exc:
            raise KernelError(f"{self.name}: {exc}") from None
        _calls[self.name] = _calls.get(self.name, 0) + 1
        if rc != 0:
            raise KernelError(f"kernel function {self.name} returned error code {rc}")


class _Library:
    def __init__(self, path: str):
        self.path = path
        self._cdll = ctypes.CDLL(path)
        self._kernels: dict[str, _Kernel] = {}

    def __getattr__(self, name: str) -> Callable[..., None]:
        """Only for a function not looked up before: its call is then stored on the instance, so
        later lookups (one per kernel call) never come here."""
        if name.startswith("_") or not name.isidentifier():  # the generated call's source names it
            raise AttributeError(name)
        try:
            getattr(self._cdll, name)
        except AttributeError:
            raise AttributeError(f'the compiled kernels export no function {name!r} (declare it extern "C")') from None
        kernel = self._kernels[name] = _Kernel(self, name)
        self._publish(name, kernel.call)
        return kernel.call

    def _publish(self, name: str, call: Callable[..., None]) -> None:
        """`lib.name` is `call` from now on (benchmarks.timer_check wraps it here to time each kernel's calls)."""
        self.__dict__[name] = call


def load() -> _Library:
    """The workspace's compiled kernels (one shared library for all kernels/*.cu or *.cpp)."""
    global _lib
    if _lib is None:
        path = os.environ.get("KWRT_LIB")
        if not path or not os.path.exists(path):
            raise ImportError(
                "kwrt.load(): this workspace has no compiled kernels (add kernels/*.cpp on cpu or kernels/*.cu on cuda)"
            )
        _lib = _Library(path)
    return _lib


def calls() -> dict[str, int]:
    return dict(_calls)


_conv_search = False


def search_conv_algorithms() -> None:
    """Let cuDNN time its algorithms for each convolution shape on the first call and keep the
    fastest (torch.backends.cudnn.benchmark) in this process, the candidate's. A candidate may not
    set global flags itself (the static scan and the integrity check reject it); asked for here,
    the evaluation records it (a `setting:` finding) so that a speedup resting on cuDNN's search
    says so. The reference's eager and torch.compile baselines keep PyTorch's default heuristics,
    as the user's module runs them."""
    global _conv_search
    _conv_search = True
    torch.backends.cudnn.benchmark = True


def conv_search() -> bool:
    """Whether the candidate asked for cuDNN's algorithm search (search_conv_algorithms)."""
    return _conv_search
