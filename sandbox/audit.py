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

import ast
import dataclasses
import dis
import functools
import re
import struct
import time
import types
from collections.abc import Callable
from pathlib import Path
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


def _catchable_signals() -> list[int]:
    import signal

    return sorted(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP))


_SIGNALS = _catchable_signals()


def _interceptors() -> dict[str, list]:
    """What runs candidate code inside the harness's own calls once forward has returned: a torch
    function mode sees every torch call the harness makes on an output (its clone, its copy out, its
    fingerprint), so a forward could return an unfinished output and finish it there, after the
    timer stopped; a dispatch mode likewise; a garbage-collector callback runs at the harness's
    allocations. Counted (modes) or kept (callbacks) before candidate code runs."""
    import _signal  # type: ignore[import-not-found]  # the C getsignal: no enum conversion (0.7 ms -> 2 us per check)
    import gc

    import torch

    return {
        "torch function mode": [torch._C._len_torch_function_stack()],
        "torch dispatch mode": [torch._C._len_torch_dispatch_stack()],
        "garbage-collector callback": list(gc.callbacks),
        # a Python signal handler gets the frame that runs when the signal arrives (the timer's,
        # for one sent from a thread at the right moment: red team 2026-12-06, round 7)
        "signal handler": [_signal.getsignal(s) for s in _SIGNALS],
        # DEBUG_SAVEALL keeps what the collector frees in gc.garbage, frames of finished calls
        # included, whose f_back leads to the live harness frames (round 7)
        "garbage-collector debug flag": [gc.get_debug()],
    }


def _same(a: list, b: list) -> bool:
    """Item by item identity (ints by value): an object of the candidate's with an `__eq__` that
    always says yes compares equal to anything."""
    return len(a) == len(b) and all(
        x is y or (type(x) is int and type(y) is int and x == y) for x, y in zip(a, b, strict=True)
    )


# ---- The harness snapshot: every module of the harness in the candidate's process, whole --------
# A list of watched functions missed what it did not name (Timer.block, patched through
# importlib, halved the candidate's times: the red team's a3, 2026-12-06); so every function and
# every class member of every harness module is kept, with what a function runs with.

_RUNTIME_MODULES = ("kwrt",)  # sandbox/runtime/kwrt.py, imported by its own name in the candidate
# Data one harness module rebinds in another (the worker turns kwrt's profiler ranges on and off);
# what a module rebinds itself (`global x`) is read from its code (`_rebound_names`).
_SET_BY_HARNESS = frozenset({"kwrt._profile"})
# Names Python itself adds to a module's or class's namespace on first use.
_ADDED_BY_PYTHON = frozenset({"__warningregistry__", "__annotations__", "__annotate__", "__annotations_cache__"})
_REBINDS = frozenset({dis.opmap["STORE_GLOBAL"], dis.opmap["DELETE_GLOBAL"]})
_MISSING = object()
HARNESS_EVERY_S = 0.05  # between two harness snapshot checks after forwards (`Integrity.left_active`)
_clock = time.monotonic  # bound before candidate code runs
_GENERATED = ("<string>", dataclasses.__file__)  # where the code of a dataclass's own methods comes from


def _is_harness_module(name: str) -> bool:
    return name == "sandbox" or name.startswith("sandbox.") or name in _RUNTIME_MODULES


def _harness_modules() -> dict[str, types.ModuleType]:
    """The harness's modules loaded in this process (sandbox.* and the kwrt runtime)."""
    import sys

    return {
        name: mod
        for name, mod in list(sys.modules.items())
        if _is_harness_module(name) and isinstance(mod, types.ModuleType)
    }


def _function_parts(key: str, fn: types.FunctionType, out: dict[str, Any]) -> None:
    """What a function runs with, kept by identity: its code, defaults and closure cells."""
    out[f"{key}.__code__"] = fn.__code__
    out[f"{key}.__defaults__"] = fn.__defaults__
    out[f"{key}.__kwdefaults__"] = fn.__kwdefaults__
    for name, value in (fn.__kwdefaults__ or {}).items():  # a dict: edited in place, not replaced
        out[f"{key}.__kwdefaults__[{name}]"] = value
    for i, cell in enumerate(fn.__closure__ or ()):
        try:
            out[f"{key}.__closure__[{i}]"] = cell.cell_contents
        except ValueError:  # an empty cell
            pass


def _member_parts(key: str, value: Any, home: str, out: dict[str, Any], depth: int) -> None:
    """The parts of one namespace entry defined in module `home`: a function's, those of the
    functions behind a staticmethod, classmethod, property or functools cache, a class's members."""
    if isinstance(value, staticmethod | classmethod):
        out[f"{key}.__func__"] = value = value.__func__
    if isinstance(value, property):
        for part in ("fget", "fset", "fdel"):
            fn = out[f"{key}.{part}"] = getattr(value, part)
            if isinstance(fn, types.FunctionType):
                _function_parts(f"{key}.{part}", fn, out)
    elif isinstance(value, functools.cached_property):
        out[f"{key}.func"] = value.func
        _member_parts(f"{key}.func", value.func, home, out, depth)
    elif isinstance(value, functools._lru_cache_wrapper):
        out[f"{key}.__wrapped__"] = value.__wrapped__
        _member_parts(f"{key}.__wrapped__", value.__wrapped__, home, out, depth)
    elif isinstance(value, types.FunctionType) and value.__module__ == home:
        _function_parts(key, value, out)
    elif isinstance(value, type) and value.__module__ == home and depth < 3:
        _namespace_parts(key, vars(value), home, out, depth + 1)


def _namespace_parts(prefix: str, namespace: Any, home: str, out: dict[str, Any], depth: int = 0) -> None:
    for name, value in list(namespace.items()):
        key = f"{prefix}.{name}"
        out[key] = value
        _member_parts(key, value, home, out, depth)


def _module_snapshot(name: str, mod: types.ModuleType) -> dict[str, Any]:
    """Everything of one harness module by identity: its entry in sys.modules, every name in its
    namespace, and the parts of its functions and classes (`_member_parts`)."""
    out: dict[str, Any] = {f"sys.modules[{name}]": mod}
    _namespace_parts(name, vars(mod), name, out)
    return out


def _rebound_names(name: str, parts: dict[str, Any]) -> set[str]:
    """'module.x' for each global the module's own code rebinds (`global x`): data the harness
    changes as it runs (a library loaded on first use, the device lock), not candidate tampering."""
    found = {f"{name}.{n.partition('.')[2]}" for n in _SET_BY_HARNESS if n.partition(".")[0] == name}
    stack = [v for k, v in parts.items() if k.endswith(".__code__") and isinstance(v, types.CodeType)]
    while stack:
        code = stack.pop()
        if _REBINDS.intersection(code.co_code[::2]):
            found.update(f"{name}.{i.argval}" for i in dis.get_instructions(code) if i.opcode in _REBINDS)
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return found


def _from_harness_files(name: str, parts: dict[str, Any], folder: Path | None) -> bool:
    """A harness module first seen after the snapshot (imported lazily by the harness) is taken as
    it is then only if it and every function in it come from the harness's own files."""
    file = parts.get(f"{name}.__file__")
    if folder is None or not isinstance(file, str) or folder not in Path(file).parents:
        return False
    for key, code in parts.items():
        if key.endswith(".__code__") and isinstance(code, types.CodeType) and code.co_filename != file:
            method = key[: -len(".__code__")].rpartition(".")[2]
            if not (method.startswith("__") and code.co_filename in _GENERATED):  # dataclasses' methods
                return False
    return True


def _outermost(keys: list[str]) -> list[str]:
    """Keys without those inside another (a replaced function's code is part of the function)."""
    kept: list[str] = []
    for key in sorted(keys):
        if not any(key.startswith(k + ".") or key.startswith(k + "[") for k in kept):
            kept.append(key)
    return kept


class HarnessSnapshot:
    """Every harness module in this process, taken before candidate code runs (`_module_snapshot`),
    and the names the harness itself rebinds."""

    def __init__(self) -> None:
        self.modules = {name: _module_snapshot(name, mod) for name, mod in _harness_modules().items()}
        self.rebound: set[str] = set()
        for name, parts in self.modules.items():
            self.rebound |= _rebound_names(name, parts)
        package = self.modules.get("sandbox", {}).get("sandbox.__file__")
        self.folder = Path(package).parent if isinstance(package, str) else None

    def _may_differ(self, key: str) -> bool:
        return key in self.rebound or any(key.startswith(r + ".") for r in self.rebound)

    @staticmethod
    def _may_be_added(key: str, name: str, value: Any) -> bool:
        """Python's own lazily created names, and a package's submodule bound on its import."""
        import sys

        attr = key[len(name) + 1 :]
        if key.rpartition(".")[2] in _ADDED_BY_PYTHON:
            return True
        return "." not in attr and value is not None and sys.modules.get(f"{name}.{attr}") is value

    def changes(self) -> list[str]:
        """What candidate code changed in the harness since the snapshot, as findings."""
        now = _harness_modules()
        found = []
        for name in sorted(now.keys() - self.modules.keys()):  # imported since, by the harness or not
            parts = self.modules[name] = _module_snapshot(name, now[name])
            self.rebound |= _rebound_names(name, parts)
            if not _from_harness_files(name, parts, self.folder):
                found.append(f"harness module {name} was not loaded from the harness's own files")
        for name, before in self.modules.items():
            if now.get(name) is not before[f"sys.modules[{name}]"]:
                found.append(f"harness module {name} was replaced or removed in sys.modules by candidate code")
                continue
            current = _module_snapshot(name, now[name])
            changed = [k for k, v in before.items() if current.get(k, _MISSING) is not v and not self._may_differ(k)]
            added = [k for k in current.keys() - before.keys() if not self._may_be_added(k, name, current[k])]
            for key in _outermost(changed + added):
                what = "added to" if key in added else "changed in"
                found.append(f"{key} was {what} the harness by candidate code")
        return found


class Integrity:
    """Harness objects and global flags captured before candidate code runs."""

    def __init__(self, refusals: Callable[[], list[str]] | None = None) -> None:
        import sys
        import threading

        self.refusals = refusals  # sandbox.audit_hook's record, in the candidate's process
        self.interceptors = _interceptors()
        self.objects = _watched_objects()
        self.flags = precision_flags()
        self.threads = threading.active_count()
        self.trace = (sys.gettrace(), sys.getprofile())
        self.harness = HarnessSnapshot()
        # kept here: rebinding the module's names to stop the check, then putting them back, hides nothing
        self.clock, self.every = _clock, HARNESS_EVERY_S
        self.harness_checked = self.clock()

    def left_active(self) -> list[tuple[str, str]]:
        """('tamper', finding) for each interceptor candidate code left in place (`_interceptors`).
        Checked as soon as each forward returns, before the harness touches its outputs, and
        again by `check`; the harness snapshot too, now and then (`_harness_now_and_then`)."""
        now = _interceptors()
        found = [
            ("tamper", f"candidate code left a {what} active, which would run inside the harness's own calls")
            for what, before in self.interceptors.items()
            if not _same(now[what], before)
        ]
        return found + self._harness_now_and_then()

    def _harness_now_and_then(self) -> list[tuple[str, str]]:
        """The harness snapshot's findings, at most every HARNESS_EVERY_S of these calls (2-3 ms
        each): a patch the candidate put back before `check` ran still took effect between blocks,
        while a forward had returned, where this runs."""
        if self.clock() - self.harness_checked < self.every:
            return []
        found = [("tamper", finding) for finding in self.harness.changes()]
        self.harness_checked = self.clock()
        return found

    def check(self) -> list[tuple[str, str]]:
        """(kind, finding) pairs; kind 'flags' for precision/global flags, 'tamper', 'thread'."""
        import sys
        import threading

        found: list[tuple[str, str]] = self.left_active()
        if self.refusals is not None:
            found.extend(
                ("tamper", f"candidate code tried {why}, which the sandbox refused") for why in self.refusals()
            )
        current = _watched_objects()
        for name, obj in self.objects.items():
            if current.get(name) is not obj:
                found.append(("tamper", f"{name} was replaced by candidate code"))
        found.extend(("tamper", finding) for finding in self.harness.changes())
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
        r"\b_python_dispatch\b|\b_get_current_dispatch_mode\b|\bis_in_torch_dispatch_mode\b|_DisableTorchDispatch|\b_disable_current_modes\b|__torch_dispatch__"
        # the stack's depth told the trials (recorded) from the timed calls (a2, 2026-12-06)
        r"|\b_len_torch_dispatch_stack\b|\b_get_dispatch_stack_at\b|\b_get_dispatch_mode\b|\b_set_dispatch_mode\b"
        r"|\b_unset_dispatch_mode\b|\b_pop_torch_dispatch_stack\b|\b_push_on_torch_dispatch_stack\b"
        r"|\b_len_torch_function_stack\b|\b_get_function_stack_at\b|\b_pop_torch_function_stack\b"
        r"|\b_push_on_torch_function_stack\b",
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
    (r"\b__class__\s*=(?!=)|\b_make_subclass\b|\b_make_wrapper_subclass\b", "builds tensor subclasses (lazy outputs)"),
    (r"\bbuiltins\b|__builtins__", "touches builtins"),
    (
        r"\bsched_setaffinity\b|\bpthread_setaffinity_np\b|\bset_num_threads\b|\bset_num_interop_threads\b"
        r"|\bomp_set_num_threads\b|\bthreadpool_limits\b",
        "changes the thread count or CPU affinity the evaluation fixed (the baselines keep theirs)",
    ),
]


def scan_source(files: dict[str, str]) -> list[str]:
    findings = []
    own = {Path(n).with_suffix("").as_posix().replace("/", ".") for n in files if n.endswith(".py")}
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
        findings.extend(
            f"{name}:{lineno}: {why}: {lines[lineno - 1].strip()[:120]}" for lineno, why in _scan_tree(files[name], own)
        )
    return findings


# ---- Static scan, on the syntax tree: what an alias or a name built at run time hides from the
# line rules (the red team's a3 reached sandbox.timing through importlib.import_module("sand" +
# "box.timing") and patched Timer.block with setattr).

_IMPORTERS = ("import_module", "__import__")
# Modules whose attributes, looked up by a computed name, reach the audit or the harness.
_INTERNALS = (
    "torch._C",
    "torch.ops",
    "torch._ops",
    "torch.utils",
    "sys",
    "importlib",
    "builtins",
    "gc",
    "inspect",
    "kwrt",
)
_DICT_WRITES = ("update", "__setitem__", "__delitem__", "setdefault", "pop", "popitem", "clear")


def _aliases(nodes: list[ast.AST], own: set[str]) -> dict[str, str]:
    """Local name -> the module or object an import statement bound to it (`import torch as t`:
    t -> torch); the candidate's own modules and relative imports are left out."""
    out: dict[str, str] = {}
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.partition(".")[0] not in own:
                    out[a.asname or a.name.partition(".")[0]] = a.name if a.asname else a.name.partition(".")[0]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.partition(".")[0] not in own:
                out.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
    return out


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """`t._C` -> 'torch._C' through the aliases; None for anything but names and attributes."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, aliases)
        return f"{base}.{node.attr}" if base else None
    return None


def _imports_by_name(node: ast.AST, aliases: dict[str, str]) -> bool:
    return isinstance(node, ast.Call) and (_dotted(node.func, aliases) or "").rpartition(".")[2] in _IMPORTERS


def _base(node: ast.AST) -> ast.AST:
    """What an attribute, item, getattr() or vars() chain starts from."""
    while True:
        if isinstance(node, ast.Attribute | ast.Subscript):
            node = node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "vars")
            and node.args
        ):
            node = node.args[0]
        else:
            return node


def _from_import(node: ast.AST, imported: set[str], aliases: dict[str, str]) -> bool:
    """Whether an expression is (part of) a module or class that an import gave this file."""
    base = _base(node)
    return (isinstance(base, ast.Name) and base.id in imported) or _imports_by_name(base, aliases)


def _imported_names(nodes: list[ast.AST], aliases: dict[str, str]) -> set[str]:
    """Names bound by imports, and (twice over, for chains) names assigned from them:
    `T = importlib.import_module(x).Timer` makes T one."""
    imported = set(aliases)
    assignments = [n for n in nodes if isinstance(n, ast.Assign)]
    for _ in range(2):
        for node in assignments:
            if _from_import(node.value, imported, aliases):
                imported.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return imported


def _through_namespace(node: ast.AST) -> bool:
    """`X.__dict__[...]` or `vars(X)[...]`: a write into a namespace."""
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
        if isinstance(node, ast.Attribute) and node.attr == "__dict__":
            return True
        if isinstance(node, ast.Call):
            return isinstance(node.func, ast.Name) and node.func.id == "vars"
        node = node.value
    return False


def _patched_by_call(node: ast.Call, imported: set[str], aliases: dict[str, str]) -> bool:
    """setattr/delattr (or __setattr__/__delattr__) on an imported module or class, or a dict
    method writing through its __dict__ or vars()."""
    func = node.func
    if isinstance(func, ast.Name) and func.id in ("setattr", "delattr"):
        return bool(node.args) and _from_import(node.args[0], imported, aliases)
    if isinstance(func, ast.Attribute) and func.attr in ("__setattr__", "__delattr__"):
        given = 2 if func.attr == "__setattr__" else 1  # type.__setattr__(X, n, v) or X.__setattr__(n, v)
        subject = node.args[0] if len(node.args) > given else func.value
        return _from_import(subject, imported, aliases)
    if isinstance(func, ast.Attribute) and func.attr in _DICT_WRITES:
        return _through_namespace(func.value) and _from_import(func.value, imported, aliases)
    return False


def _patches(node: ast.AST, imported: set[str], aliases: dict[str, str]) -> bool:
    """A write to a module or class it imported: setattr/delattr on one, an attribute assigned or
    deleted, an item written through its __dict__ or vars()."""
    if isinstance(node, ast.Call):
        return _patched_by_call(node, imported, aliases)
    if isinstance(node, ast.Assign | ast.Delete):
        targets = node.targets
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        targets = [node.target]
    else:
        return False
    for t in targets:
        if isinstance(t, ast.Attribute) and _from_import(t, imported, aliases):
            return True
        if isinstance(t, ast.Subscript) and _through_namespace(t.value) and _from_import(t, imported, aliases):
            return True
    return False


def _scan_tree(text: str, own: set[str]) -> list[tuple[int, str]]:
    """(line, why) for what the line rules cannot see: modules imported by a computed name or the
    harness's, torch internals looked up by a computed name, writes to imported modules or classes,
    and the line rules applied again to names resolved through import aliases."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []  # model_new.py's syntax is checked by the build; other files are not run as such
    nodes = list(ast.walk(tree))
    aliases = _aliases(nodes, own)
    imported = _imported_names(nodes, aliases)
    found: dict[str, int] = {}
    for node in nodes:
        for why in _tree_rules(node, aliases, imported):
            found.setdefault(why, getattr(node, "lineno", 1))
    return sorted(((line, why) for why, line in found.items()), key=lambda f: f[0])


def _tree_rules(node: ast.AST, aliases: dict[str, str], imported: set[str]) -> list[str]:
    out = []
    if isinstance(node, ast.Call) and _imports_by_name(node, aliases):
        arg = node.args[0] if node.args else None
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
            out.append("imports a module by a name built at run time")
        elif arg.value.partition(".")[0] == "sandbox":
            out.append("imports the harness (sandbox) by name")
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) >= 2
    ):
        home = _dotted(node.args[0], aliases) or ""
        computed = not (isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str))
        if computed and any(home == m or home.startswith(m + ".") for m in _INTERNALS):
            what = "a torch internal" if home.startswith("torch") else f"an attribute of {home}"
            out.append(f"looks up {what} by a name built at run time")
    if _patches(node, imported, aliases):
        out.append("writes to a module or class it imported (patching)")
    for name in _renamed(node, aliases):
        out.extend(why for rx, why in _name_rules() if rx.search(name))
    return out


def _renamed(node: ast.AST, aliases: dict[str, str]) -> list[str]:
    """The full names an import alias hides in the source text: `s.modules` after `import sys as
    s`, `Thread` after `from threading import Thread` (the import statement itself)."""
    if isinstance(node, ast.ImportFrom) and node.module:
        return [f"{node.module}.{a.name}" for a in node.names]
    root = node
    while isinstance(root, ast.Attribute):
        root = root.value
    if isinstance(root, ast.Name) and aliases.get(root.id, root.id) != root.id:
        return [_dotted(node, aliases) or ""]
    return []


@functools.cache
def _name_rules() -> list[tuple[re.Pattern[str], str]]:
    """The line rules that judge a name alone (not the assignments)."""
    return [(re.compile(pattern), why) for pattern, why in _SOURCE_RULES if "=" not in pattern]


THREADS_WHY = "changes the thread count or CPU affinity the evaluation fixed (the baselines keep theirs)"
INTERPRETER_WHY = (
    "calls the Python C API from the kernels' library (native code reaching the interpreter's frames reaches "
    "the harness's live objects: the timer, the per-call checks)"
)
BELOW_DISPATCHER_WHY = "calls ATen below the dispatcher, where the audit's op recorder cannot see the torch ops it runs"

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
    (  # the red team's a4 took every CPU of the host while eager had the configured threads
        r"\bsched_setaffinity\b|\bpthread_setaffinity_np\b|\bpthread_attr_setaffinity_np\b|\bomp_set_num_threads\b"
        r"|\bkmp_set_\w+|\bnum_threads\s*\((?!\s*omp_get_max_threads\s*\(\s*\)\s*\))",
        THREADS_WHY,
    ),
]
# Under torch-ops=forbid: ATen reached below the dispatcher's Python key, where the op recorder
# sits (the red team's a5 called at::_ops::_softmax::redispatch with the CPU key: no op recorded).
_BELOW_DISPATCHER_RULES: list[tuple[str, str]] = [
    (
        r"\bredispatch\w*|\bat::native::|(?:Exclude|Include|Force)DispatchKeyGuard|DispatchKeySet|\bDispatchKey::"
        r"|AutoDispatch(?:Below|Skip)\w*|\b_force_tls_local_dispatch_key_set\b|\btls_set_dispatch_key_\w+"
        r"|\braw_local_dispatch_key_set\b|LocalDispatchKeySet|\bc10::Dispatcher\b|\bfindSchemaOrThrow\b"
        r"|\bat::(?:cpu|meta|composite\w+)::"
        # the same from Python: torch.ops.aten.x.default.redispatch, torch._C's key guards
        r"|\b_op_dk\b|\b_dispatch_call_boxed\b|\b_dispatch_tls_\w+|PythonDispatcher",
        BELOW_DISPATCHER_WHY,
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


def _scan_lines(files: dict[str, str], rules: list[tuple[str, str]]) -> list[str]:
    """The first line of each C/C++ source (and .py, for load_inline strings) each rule matches."""
    findings = []
    for name in sorted(files):
        if not name.endswith((".cu", ".cpp", ".cc", ".cxx", ".h", ".hpp", ".cuh", ".inc", ".py")):
            continue
        lines = files[name].splitlines()
        for pattern, why in rules:
            rx = re.compile(pattern)
            for lineno, line in enumerate(lines, 1):
                if line.lstrip().startswith("//"):
                    continue
                if rx.search(line):
                    findings.append(f"{name}:{lineno}: {why}: {line.strip()[:120]}")
                    break
    return findings


def scan_native(files: dict[str, str]) -> list[str]:
    return _scan_lines(files, _NATIVE_RULES)


# ---- The built libraries' imported symbols ----------------------------------------------------
# A macro or a string built at compile time hides a name from the source rules; the built shared
# object's undefined dynamic symbols name every function it calls in another library, whatever
# the source looked like. Read here with struct: no binary tool parses the candidate's build
# outside the sandbox, and none has to be installed where the parent runs.

_SHT_DYNSYM = 11
# at::<backend>::<op>(Tensor...) calls one backend's kernel directly (ATen/ops/*_<backend>_dispatch.h).
_BACKENDS = frozenset(
    {"cpu", "cuda", "meta", "mps", "xpu", "mkldnn", "quantizedcpu", "quantizedcuda", "sparsecpu", "sparsecuda"}
    | {"sparsecsrcpu", "sparsecsrcuda", "nestedtensorcpu", "nestedtensorcuda", "compositeexplicitautograd"}
    | {"compositeexplicitautogradnonfunctional", "compositeimplicitautograd", "compositeimplicitautogradnestedtensor"}
)
# Not the guards that take keys out of the thread's set (ExcludeDispatchKeyGuard,
# _force_tls_local_dispatch_key_set): torch's own headers import them for torch::empty_like and
# c10::InferenceMode in honest extensions, so only the source rules name them.
_THREAD_SYMBOLS = frozenset(
    {"sched_setaffinity", "pthread_setaffinity_np", "pthread_attr_setaffinity_np", "omp_set_num_threads"}
)
# The fast path's library holds plain C/C++/CUDA kernels on raw pointers: it has no use for the
# Python C API, through which a kernel walked from PyEval_GetFrame to the timer's hook and replaced
# the harness's per-call fingerprint list, and was judged correct with uninitialised outputs (red
# team 2026-12-07, forged_fingerprints). A load_inline module imports the C API through pybind11
# (PyFrame_GetBack and PyEval_GetBuiltins among it), and a name looked up at run time (dlsym,
# which CUDA's static runtime imports into every nvcc-built library) is not seen: this closes the
# fast path's plain route only (docs/hacks.md, residual risks).
KERNELS_LIBRARY = "the kernels' library"
_C_API = re.compile(r"_?Py[A-Z_]")


def undefined_symbols(path: str | Path) -> list[str]:
    """The undefined (imported) dynamic symbols of an ELF64 little-endian shared object, weak ones
    included. Raises ValueError (or struct.error) for anything else or a malformed file."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01":
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    if shentsize != 64 or not shnum:
        raise ValueError("no section headers")
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * 64) for i in range(shnum)]
    tables = [s for s in sections if s[1] == _SHT_DYNSYM]
    if not tables:
        raise ValueError("no dynamic symbol table")
    names = []
    for _, _, _, _, offset, size, link, _, _, entsize in tables:
        strings = data[sections[link][4] : sections[link][4] + sections[link][5]]
        step = entsize or 24
        for pos in range(offset + step, offset + size, step):  # entry 0 is the null symbol
            st_name, _, _, shndx = struct.unpack_from("<IBBH", data, pos)
            if shndx == 0 and st_name:  # SHN_UNDEF: defined in another library
                names.append(strings[st_name : strings.index(b"\0", st_name)].decode("ascii", "replace"))
    return names


def qualified_name(symbol: str) -> tuple[list[str], str]:
    """(['at', '_ops', '_softmax', 'redispatch'], rest of the symbol) for an Itanium-mangled C++
    name, ([name], '') for a C one. Namespaces are spelt out in full there (a substitution only
    refers back), so the leading names are enough to tell where a function lives."""
    name = symbol.partition("@")[0]
    if not name.startswith("_Z"):
        return [name], ""
    nested = name.startswith("_ZN")
    i = 3 if nested else 2
    while nested and i < len(name) and name[i] in "rVKRO":  # cv- and ref-qualifiers of a method
        i += 1
    parts = []
    while i < len(name) and name[i].isdigit():
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        parts.append(name[j : j + int(name[i:j])])
        i = j + int(name[i:j])
        if not nested:
            break
    return parts, name[i:]


def _symbol_why(symbol: str, forbid: bool, python_api: bool = True) -> str | None:
    """Why an imported symbol matters, or None: thread count or affinity (always), the Python C
    API (where `python_api` is False: the fast path's library); ATen below the dispatcher (under
    torch-ops=forbid): a redispatch entry, at::native, one backend's kernel called directly, the
    dispatcher's own operator lookups (a typed handle's redispatch is inline)."""
    parts, rest = qualified_name(symbol)
    if not parts:  # std:: and other abbreviated names
        return None
    if parts[0] in _THREAD_SYMBOLS:
        return THREADS_WHY
    if not python_api and not rest and _C_API.match(parts[0]):
        return INTERPRETER_WHY
    if not forbid or len(parts) < 2 or parts[0] not in ("at", "c10"):
        return None
    if any(p.startswith("redispatch") for p in parts) or parts[1] == "native" or parts[1].startswith("AutoDispatch"):
        return BELOW_DISPATCHER_WHY
    if len(parts) == 3 and parts[0] == "at" and parts[1] in _BACKENDS and "6Tensor" in rest:
        return BELOW_DISPATCHER_WHY
    if parts[:2] == ["c10", "Dispatcher"] and parts[-1] in ("findSchema", "findSchemaOrThrow", "findOp"):
        return BELOW_DISPATCHER_WHY
    return None


def built_libraries(artifacts: Any) -> list[tuple[str, Path]]:
    """(label, path) of each shared object the build produced (sandbox.build.Artifacts): the fast
    path's library and every load_inline module."""
    found = [(KERNELS_LIBRARY, Path(artifacts.library))] if getattr(artifacts, "library", None) else []
    folder = getattr(artifacts, "inline_dir", None)
    for entry in getattr(artifacts, "inline_manifest", None) or []:
        if folder:
            found.append((f"load_inline module {entry.get('name')}", Path(folder) / entry["file"]))
    return found


def scan_dispatch(files: dict[str, str], torch_ops: str) -> list[str]:
    """Under torch-ops=forbid, the sources' names for ATen below the dispatcher
    (`_BELOW_DISPATCHER_RULES`); protocol's scan step, before anything is built."""
    return _scan_lines(files, _BELOW_DISPATCHER_RULES) if torch_ops == "forbid" else []


def scan_libraries(artifacts: Any, torch_ops: str) -> list[str]:
    """Findings that stop the evaluation once the build is done, about what the dispatch recorder
    and the thread settings cannot see in the built libraries' imported symbols (`_symbol_why`):
    not fooled by macros or names built at compile time. A library whose symbols cannot be read
    fails closed under torch-ops=forbid."""
    forbid = torch_ops == "forbid"
    findings = []
    for label, path in built_libraries(artifacts):
        try:
            symbols = undefined_symbols(path)
        except (OSError, ValueError, struct.error) as exc:
            if forbid:
                findings.append(
                    f"{label}: its imported symbols could not be read ({exc}), so torch-ops=forbid cannot be checked"
                )
            continue
        by_why: dict[str, list[str]] = {}
        for symbol in symbols:
            why = _symbol_why(symbol, forbid, python_api=label != KERNELS_LIBRARY)
            if why:
                by_why.setdefault(why, []).append("::".join(qualified_name(symbol)[0]))
        findings.extend(
            f"{label}: {why}: it imports {', '.join(sorted(set(names))[:4])}" for why, names in by_why.items()
        )
    return findings
