"""What the candidate's forward did, and the rules it is judged by.

- `OpRecorder` (child): a TorchDispatchMode that records every aten/custom op the forward
  dispatched, including ops called from C++ extensions (they go through the dispatcher too).
- `classify`: allocation, views, metadata and library GEMM/convolution are allowed under
  torch-ops=forbid; anything else that computes is a torch compute op -> rejected.
- `Integrity` (child): snapshots the objects the harness relies on (timers, synchronize,
  comparison helpers, precision flags) before candidate code runs and reports any change.
- `scan_source` (parent): static findings in the candidate's files for the known tampering
  techniques (frame walking, dispatch-mode games, timer/harness patching, threads, fork).
"""

from __future__ import annotations

import re
from typing import Any

ALLOWED_ALLOC = {
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "zeros",
    "zeros_like",
    "new_zeros",
    "ones",
    "ones_like",
    "new_ones",
    "full",
    "full_like",
    "new_full",
    "fill_",
    "zero_",
    "scalar_tensor",
    "lift_fresh",
    "lift_fresh_copy",
    "resize_",
    "set_",
    "_local_scalar_dense",
    "item",
    "is_contiguous",
    "sym_size",
    "sym_stride",
    "sym_numel",
    "sym_storage_offset",
    "size",
    "stride",
    "dim",
    "numel",
    "is_same_size",
    "record_stream",
    "detach",
    "detach_",
    "alias",
    "_has_compatible_shallow_copy_type",
}
ALLOWED_VIEWS = {
    "view",
    "_unsafe_view",
    "reshape",
    "_reshape_alias",
    "as_strided",
    "t",
    "transpose",
    "permute",
    "expand",
    "expand_as",
    "squeeze",
    "unsqueeze",
    "select",
    "slice",
    "narrow",
    "split",
    "split_with_sizes",
    "chunk",
    "unbind",
    "flatten",
    "unflatten",
    "movedim",
    "view_as",
    "diagonal",
    "unfold",
    "view_as_real",
    "view_as_complex",
    "contiguous",
    "squeeze_",
    "unsqueeze_",
    "t_",
    "transpose_",
    "as_strided_",
}
ALLOWED_LIBRARY = {  # cuBLAS/cuDNN on GPU, oneDNN/MKL on CPU: the paper allows calling them
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "matmul",
    "linear",
    "addmv",
    "mv",
    "dot",
    "_scaled_mm",
    "convolution",
    "_convolution",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "cudnn_convolution",
    "cudnn_convolution_transpose",
    "mkldnn_convolution",
    "_mkldnn_convolution",
    "convolution_overrideable",
    "_convolution_mode",
    "_nnpack_spatial_convolution",
    "miopen_convolution",
    "slow_conv2d_forward",
    "_slow_conv2d_forward",
    "thnn_conv2d",
    "slow_conv3d_forward",
    "slow_conv_transpose2d",
    "slow_conv_dilated2d",
    "_mm_plus_mm",
}


def op_name(func: Any) -> str:
    try:
        return f"{func.namespace}::{func.overloadpacket.__name__}"
    except AttributeError:
        return str(func)


def classify(op: str) -> str:
    """'alloc' | 'view' | 'library' | 'custom' | 'compute'."""
    ns, _, name = op.partition("::")
    if ns not in ("aten", "prims"):
        return "custom"  # a TORCH_LIBRARY op registered by the candidate's own extension
    if name in ALLOWED_ALLOC:
        return "alloc"
    if name in ALLOWED_VIEWS:
        return "view"
    if name in ALLOWED_LIBRARY:
        return "library"
    return "compute"


def make_recorder() -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpRecorder(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: dict[str, int] = {}

        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            name = op_name(func)
            self.ops[name] = self.ops.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    return OpRecorder()


def precision_flags() -> dict[str, Any]:
    import torch

    flags = {
        "matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "matmul.allow_fp16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "matmul.allow_bf16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "cudnn.deterministic": torch.backends.cudnn.deterministic,
        "cudnn.benchmark": torch.backends.cudnn.benchmark,
        "cudnn.enabled": torch.backends.cudnn.enabled,
        "default_dtype": str(torch.get_default_dtype()),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "num_threads": torch.get_num_threads(),
    }
    return flags


def _watched_objects() -> dict[str, Any]:
    import builtins
    import time
    from inspect import getattr_static as static

    import torch

    import sandbox.timing as timing

    watched = {
        "time.perf_counter": time.perf_counter,
        "time.time": time.time,
        "time.monotonic": time.monotonic,
        "torch.allclose": torch.allclose,
        "torch.equal": torch.equal,
        "torch.testing.assert_close": torch.testing.assert_close,
        "torch.isclose": torch.isclose,
        "torch.cuda.synchronize": torch.cuda.synchronize,
        "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.Event.elapsed_time": static(torch.cuda.Event, "elapsed_time"),
        "torch.cuda.Event.record": static(torch.cuda.Event, "record"),
        "torch.Tensor.clone": static(torch.Tensor, "clone"),
        "torch.Tensor.cpu": static(torch.Tensor, "cpu"),
        "torch.Tensor.to": static(torch.Tensor, "to"),
        "torch.Tensor.detach": static(torch.Tensor, "detach"),
        "torch.Tensor.data_ptr": static(torch.Tensor, "data_ptr"),
        "torch.Tensor.double": static(torch.Tensor, "double"),
        "torch.Tensor.__torch_function__": static(torch.Tensor, "__torch_function__"),
        "torch.nn.Module.__call__": static(torch.nn.Module, "__call__"),
        "torch.nn.Module._call_impl": static(torch.nn.Module, "_call_impl"),
        "torch.nn.Module.load_state_dict": static(torch.nn.Module, "load_state_dict"),
        "torch.save": torch.save,
        "builtins.isinstance": builtins.isinstance,
        "builtins.type": builtins.type,
        "sandbox.timing._perf_counter": timing._perf_counter,
        "sandbox.timing.Timer.one": timing.Timer.one,
        "sandbox.timing.Timer.run": timing.Timer.run,
        "sandbox.timing.summarize": timing.summarize,
    }
    for name in list(watched):
        obj = watched[name]
        if hasattr(obj, "__code__"):
            watched[name + ".__code__"] = obj.__code__
    return watched


CONV_SEARCH_SETTING = (
    "cuDNN searched the candidate's convolution algorithms (kwrt.search_conv_algorithms: "
    "torch.backends.cudnn.benchmark in its process); the eager and torch.compile baselines ran with "
    "PyTorch's default heuristics, as the reference is written"
)


def _asked_for_conv_search() -> bool:
    import sys

    kwrt = sys.modules.get("kwrt")
    return bool(kwrt is not None and kwrt.conv_search())


def settings_in_use() -> list[tuple[str, str]]:
    """Sanctioned settings the candidate asked for, as ('setting', words) findings: recorded,
    never a rejection."""
    import torch

    searched = _asked_for_conv_search() and torch.backends.cudnn.benchmark
    return [("setting", CONV_SEARCH_SETTING)] if searched else []


def _interceptors() -> dict[str, Any]:
    """What runs candidate code inside the harness's own calls once forward has returned: a torch
    function mode sees every torch call the harness makes on an output (its clone, its copy out, its
    fingerprint), so a forward could return an unfinished output and finish it there, after the
    timer stopped; a dispatch mode likewise; a garbage-collector callback runs at the harness's
    allocations. Counted (modes) or kept (callbacks) before candidate code runs."""
    import gc

    import torch

    return {
        "torch function mode": torch._C._len_torch_function_stack(),
        "torch dispatch mode": torch._C._len_torch_dispatch_stack(),
        "garbage-collector callback": list(gc.callbacks),
    }


class Integrity:
    """Harness objects and global flags captured before candidate code runs."""

    def __init__(self) -> None:
        import sys
        import threading

        self.interceptors = _interceptors()
        self.objects = _watched_objects()
        self.flags = precision_flags()
        self.threads = threading.active_count()
        self.trace = (sys.gettrace(), sys.getprofile())
        self._frozen_modules = dict(self._harness_code())

    @staticmethod
    def _harness_code() -> dict[str, Any]:
        import sys

        out = {}
        for modname in ("sandbox.worker", "sandbox.timing", "sandbox.audit", "sandbox.channel", "sandbox.harness"):
            mod = sys.modules.get(modname)
            if mod is None:
                continue
            for attr, value in vars(mod).items():
                code = getattr(value, "__code__", None)
                if code is not None:
                    out[f"{modname}.{attr}"] = code
        return out

    def left_active(self) -> list[tuple[str, str]]:
        """('tamper', finding) for each interceptor candidate code left in place (`_interceptors`).
        Checked as soon as each forward returns, before the harness touches its outputs, and
        again by `check`."""
        now = _interceptors()
        return [
            ("tamper", f"candidate code left a {what} active, which would run inside the harness's own calls")
            for what, before in self.interceptors.items()
            if now[what] != before
        ]

    def check(self) -> list[tuple[str, str]]:
        """(kind, finding) pairs; kind 'flags' for precision/global flags, 'tamper', 'thread'."""
        import sys
        import threading

        found: list[tuple[str, str]] = self.left_active()
        current = _watched_objects()
        for name, obj in self.objects.items():
            if current.get(name) is not obj:
                found.append(("tamper", f"{name} was replaced by candidate code"))
        for name, code in self._harness_code().items():
            if self._frozen_modules.get(name) is not code:
                found.append(("tamper", f"harness function {name} was modified"))
        flags = precision_flags()
        for key, value in self.flags.items():
            if key == "cudnn.benchmark" and _asked_for_conv_search():
                continue  # the one sanctioned setting, recorded by settings_in_use
            if flags.get(key) != value:
                found.append(("flags", f"global flag {key} changed from {value!r} to {flags.get(key)!r}"))
        if (sys.gettrace(), sys.getprofile()) != self.trace:
            found.append(("tamper", "a trace or profile hook was installed (sys.settrace/setprofile)"))
        if threading.active_count() > self.threads:
            names = [t.name for t in threading.enumerate()]
            found.append(
                (
                    "thread",
                    f"candidate code left {threading.active_count() - self.threads} extra Python thread(s) running: {names}",
                )
            )
        return found


# Static scan: each pattern is a technique with no place in an honest kernel wrapper.
_SOURCE_RULES: list[tuple[str, str]] = [
    (
        r"\bsys\._getframe\b|\binspect\.(stack|currentframe|getouterframes)\b|\bf_back\b|\bf_locals\b|\bf_globals\b",
        "inspects interpreter frames (could read the harness's state)",
    ),
    (r"\bgc\.get_objects\b|\bgc\.get_referrers\b", "walks the garbage collector's objects (could find harness data)"),
    (
        r"\b_python_dispatch\b|\b_get_current_dispatch_mode\b|\bis_in_torch_dispatch_mode\b|_DisableTorchDispatch|\b_disable_current_modes\b|__torch_dispatch__",
        "manipulates or detects torch dispatch modes (the audit)",
    ),
    (r"\bsys\.settrace\b|\bsys\.setprofile\b|\bthreading\.settrace\b", "installs trace hooks"),
    (
        r"\b(time|torch|kwrt|sandbox|F|nn)(\.[A-Za-z_]+)+\s*=[^=]",
        "assigns to an attribute of time/torch/kwrt/sandbox (patching or global flags)",
    ),
    (r"\bsetattr\s*\(\s*(time|torch|kwrt|sandbox|builtins)\b", "patches a module with setattr"),
    (r"\bimport\s+sandbox\b|\bfrom\s+sandbox\b|\bsys\.modules\b", "reaches into the harness or the module table"),
    (r"\bkwrt\._", "touches kwrt internals (call counters)"),
    (
        r"\b__code__\b|\bctypes\.pythonapi\b|\bPyFrame_|\bPyObject_SetAttr\b",
        "rewrites code objects or calls the Python C API",
    ),
    (r"\bos\.fork\b|\bmultiprocessing\b|\bsubprocess\b|\bos\.system\b|\bos\.exec", "starts processes"),
    (
        r"\bthreading\.Thread\b|\b_thread\.start_new|\bconcurrent\.futures\b",
        "starts Python threads (work outside the timed call)",
    ),
    (r"/proc/|\bptrace\b|\bprocess_vm_readv\b", "reads other processes or /proc"),
    (r"\bsignal\.(signal|setitimer|alarm)\b", "installs signal handlers or timers"),
    (r"\b__class__\s*=|\b_make_subclass\b|\b_make_wrapper_subclass\b", "builds tensor subclasses (lazy outputs)"),
    (r"\bbuiltins\b", "touches builtins"),
]


def scan_source(files: dict[str, str]) -> list[str]:
    findings = []
    for name in sorted(files):
        if not name.endswith(".py"):
            continue
        lines = files[name].splitlines()
        for pattern, why in _SOURCE_RULES:
            rx = re.compile(pattern)
            for lineno, line in enumerate(lines, 1):
                if line.lstrip().startswith("#"):
                    continue
                if rx.search(line):
                    findings.append(f"{name}:{lineno}: {why}: {line.strip()[:120]}")
                    break
    return findings


# C/C++ sources: symbols that only matter for escaping the rules (thread spawns outside OpenMP,
# symbol interposition, process control).
_NATIVE_RULES: list[tuple[str, str]] = [
    (r"\bpthread_create\b|\bstd::thread\b|\bstd::async\b", "starts native threads that can outlive the call"),
    (r"\bdlsym\b|\bdlopen\b|\bmprotect\b", "looks up or rewrites symbols at run time"),
    (r"\bfork\s*\(|\bexecv|\bsystem\s*\(|\bpopen\s*\(", "starts processes"),
    (r"/proc/|\bptrace\b", "reads other processes or /proc"),
    (
        r"\bcudaStreamCreate|\bcudaStreamCreateWithFlags|\bcudaStreamCreateWithPriority",
        "creates its own CUDA streams (work off the timed stream)",
    ),
    (
        r"\bcublasSetMathMode\b|CUBLAS_TF32_TENSOR_OP_MATH|CUBLAS_TENSOR_OP_MATH",
        "changes cuBLAS math mode (precision downgrade)",
    ),
]


def kernel_names(files: dict[str, str]) -> set[str]:
    """Names of the __global__ functions in the candidate's sources (.cu files and load_inline
    strings alike): the kernels that are its own when the profiler lists what a forward ran."""
    names = set()
    for text in files.values():
        for m in re.finditer(r"__global__([^;{]*)", text):
            head = re.sub(r"__launch_bounds__\s*\([^)]*\)", " ", m.group(1))
            first = re.search(r"(\w+)\s*\(", head)
            if first:
                names.add(first.group(1))
    return names


def scan_native(files: dict[str, str]) -> list[str]:
    findings = []
    for name in sorted(files):
        if not name.endswith((".cu", ".cpp", ".cc", ".cxx", ".h", ".hpp", ".cuh", ".py")):
            continue
        lines = files[name].splitlines()
        for pattern, why in _NATIVE_RULES:
            rx = re.compile(pattern)
            for lineno, line in enumerate(lines, 1):
                if line.lstrip().startswith("//"):
                    continue
                if rx.search(line):
                    findings.append(f"{name}:{lineno}: {why}: {line.strip()[:120]}")
                    break
    return findings
