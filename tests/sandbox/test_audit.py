"""The audit's own parts: the harness snapshot, the syntax-tree rules of the static scan, the
native rules, and the built libraries' imported symbols (sandbox.audit). The end-to-end cases are
hack candidates (tests/sandbox/hacks, docs/hacks.md); the slow test here builds the red team's
load_inline module for real."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from sandbox import EvalOptions, audit, evaluate
from tests.sandbox.helpers import task

# ---- the harness snapshot ------------------------------------------------------------------


@pytest.fixture
def snapshot():
    import sandbox.timing  # the module the red team patched (a3)
    import sandbox.worker  # noqa: F401

    snap = audit.HarnessSnapshot()
    assert snap.changes() == []
    return snap


def test_a_replaced_method_is_seen(snapshot):
    from sandbox.timing import Timer

    original = Timer.__dict__["block"]
    try:
        Timer.block = lambda self, *a, **k: 0.0
        assert snapshot.changes() == ["sandbox.timing.Timer.block was changed in the harness by candidate code"]
    finally:
        Timer.block = original
    assert snapshot.changes() == []


def test_what_a_function_runs_with_is_seen(snapshot):
    """Code, defaults, keyword defaults edited in place, a rebound constant, an added member."""
    import sandbox.timing as timing

    fn = timing.Timer.block
    code, hold = fn.__code__, timing.HOLD_CALLS
    try:
        fn.__code__ = (lambda self, fn, input_sets, calls, series, after_call=None, rewarm=0: 0.0).__code__
        timing.HOLD_CALLS = hold + 1
        timing.Series.extra = staticmethod(len)
        found = snapshot.changes()
    finally:
        fn.__code__ = code
        timing.HOLD_CALLS = hold
        del timing.Series.extra
    assert found == [
        "sandbox.timing.HOLD_CALLS was changed in the harness by candidate code",
        "sandbox.timing.Series.extra was added to the harness by candidate code",
        "sandbox.timing.Timer.block.__code__ was changed in the harness by candidate code",
    ]


def test_a_module_replaced_in_the_module_table_is_seen(snapshot):
    real = sys.modules["sandbox.timing"]
    try:
        sys.modules["sandbox.timing"] = type(real)("sandbox.timing")
        assert snapshot.changes() == [
            "harness module sandbox.timing was replaced or removed in sys.modules by candidate code"
        ]
    finally:
        sys.modules["sandbox.timing"] = real


def test_what_the_harness_rebinds_itself_is_not_tampering(snapshot):
    """`global SOCK_IN` in the worker, kwrt's library loaded on first use: read from their code."""
    import sandbox.worker as worker

    assert "sandbox.worker.SOCK_IN" in snapshot.rebound
    sock = worker.SOCK_IN
    try:
        worker.SOCK_IN = object()
        assert snapshot.changes() == []
    finally:
        worker.SOCK_IN = sock


def test_a_module_first_seen_later_must_come_from_the_harness_files(snapshot):
    fake = type(sys)("sandbox.kw_audit_probe")
    fake.__file__ = "/elsewhere/kw_audit_probe.py"
    exec("def f():\n    return 1\n", fake.__dict__)
    sys.modules[fake.__name__] = fake
    try:
        assert snapshot.changes() == [
            "harness module sandbox.kw_audit_probe was not loaded from the harness's own files"
        ]
    finally:
        del sys.modules[fake.__name__]


def test_the_snapshot_is_also_taken_after_forwards_now_and_then(monkeypatch):
    """A patch put back before the end check still took effect between blocks: left_active, run
    after each forward, compares the snapshot too (at most every HARNESS_EVERY_S)."""
    from sandbox.timing import Timer

    monkeypatch.setattr(audit, "HARNESS_EVERY_S", 0.0)
    integrity = audit.Integrity()
    original = Timer.__dict__["one"]
    try:
        Timer.one = lambda self, fn, inputs: (0.0, fn(*inputs))
        assert ("tamper", "sandbox.timing.Timer.one was changed in the harness by candidate code") in (
            integrity.left_active()
        )
    finally:
        Timer.one = original


# ---- static scan: the syntax tree ------------------------------------------------------------


def scan(code: str) -> list[str]:
    return audit.scan_source({"model_new.py": code})


@pytest.mark.parametrize(
    "code, why",
    [
        ('import importlib\nm = importlib.import_module("sand" + "box.timing")\n', "name built at run time"),
        ("from importlib import import_module as im\nname = 'x'\nm = im(name)\n", "name built at run time"),
        ('m = __import__("s" + "ys")\n', "name built at run time"),
        ('import importlib\nm = importlib.import_module("sandbox.timing")\n', "imports the harness"),
        ('import torch\nd = getattr(torch._C, "_len_torch_" + "dispatch_stack")\n', "torch internal"),
        ("import sys as s\nm = s.modules\n", "module table"),
        ("from threading import Thread\n", "starts Python threads"),
        ("import torch as t\nt.allclose = lambda *a: True\n", "patching"),
        ('import torch\nsetattr(torch.Tensor, "clone", None)\n', "patching"),
        ('import torch\nvars(torch.nn.Module)["__call__"] = None\n', "patching"),
        ("import torch\ntorch.nn.Module.__dict__.update(x=1)\n", "patching"),
        ('import torch\nT = torch.nn.Module\nsetattr(T, "__call__", None)\n', "patching"),
        ("import torch\nn = torch._C._len_torch_dispatch_stack()\n", "dispatch modes"),
        ("import torch\nm = torch._C._get_dispatch_mode(None)\n", "dispatch modes"),
        ("import torch\nm = torch._C._get_dispatch_stack_at(0)\n", "dispatch modes"),
        ("from torch.utils import _python_dispatch\n", "dispatch modes"),
        ("m = __builtins__\n", "builtins"),
        ("import os\nos.sched_setaffinity(0, {0, 1})\n", "CPU affinity"),
        ("import torch\ntorch.set_num_threads(64)\n", "CPU affinity"),
        ("import torch\nclass L(torch.Tensor):\n    pass\ny = torch.ones(1)\ny.__class__ = L\n", "tensor subclasses"),
    ],
)
def test_the_scan_flags(code, why):
    found = scan(code)
    assert any(why in f for f in found), found


def test_comparing_a_class_is_not_building_a_subclass():
    """torchvision's ConvNormActivation warns `if self.__class__ == ConvNormActivation` (found
    on its MaxViT block, 2026-12-06: every candidate of it, the fallback too, was rejected)."""
    code = "class A:\n    def f(self):\n        return self.__class__ == A or self.__class__  ==  A\n"
    assert not [f for f in scan(code) if "tensor subclasses" in f], scan(code)


def test_what_honest_wrappers_write_is_not_flagged():
    code = """
import importlib
import kwrt
import torch
import torch.nn as nn

lib = kwrt.load()
math = importlib.import_module("math")
DTYPE = getattr(torch, "float" + "32")


class ModelNew(nn.Module):
    def __init__(self, dtype="float32"):
        super().__init__()
        self.dtype = getattr(torch, dtype)
        self.__dict__["_kw_cache"] = None
        setattr(self, "scale", nn.Parameter(torch.ones(1)))

    def forward(self, x):
        cache = self.__dict__.get("_kw_cache")
        out = torch.empty_like(x)
        lib.f(x, out, x.numel(), torch.get_num_threads(), kwrt.stream())
        return out
"""
    assert scan(code) == []


def test_own_modules_are_the_candidates_to_write():
    files = {
        "model_new.py": "import helpers\nfrom helpers import STATE\nhelpers.calls = 1\nSTATE.seen = True\n",
        "helpers.py": "class STATE:\n    seen = False\n\ncalls = 0\n",
    }
    assert audit.scan_source(files) == []


# ---- static scan: C/C++ --------------------------------------------------------------------


@pytest.mark.parametrize(
    "line, flagged",
    [
        ("sched_setaffinity(0, sizeof(set), &set);", True),
        ("pthread_setaffinity_np(t, sizeof(set), &set);", True),
        ("omp_set_num_threads(64);", True),
        ("#pragma omp parallel num_threads(nt)", True),
        ("#pragma omp parallel for num_threads(omp_get_max_threads())", False),
        ("#pragma omp parallel for if(parallel: rows * cols >= 131072) schedule(static)", False),
        ("#pragma omp parallel for simd if (parallel: n > (1 << 16))", False),
        ("int n = omp_get_num_threads(); int t = omp_get_thread_num();", False),
    ],
)
def test_thread_count_and_affinity(line, flagged):
    found = audit.scan_native({"kernels/k.cpp": f"void f() {{\n    {line}\n}}\n"})
    assert bool(found) == flagged, found
    assert not found or "CPU affinity" in found[0]


@pytest.mark.parametrize(
    "line",
    [
        "return at::_ops::_softmax::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), x, 1, false);",
        "return at::native::softmax(x, 1);",
        "c10::impl::ExcludeDispatchKeyGuard g(c10::DispatchKey::Python);",
        "at::AutoDispatchBelowADInplaceOrView guard;",
        "return at::cpu::_softmax(x, 1, false);",
        'auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::_softmax", "");',
    ],
)
def test_aten_below_the_dispatcher_under_forbid(line):
    files = {"model_new.py": f'SRC = r"""\n{line}\n"""\n'}
    assert audit.scan_dispatch(files, "forbid") and audit.scan_dispatch(files, "allow") == []
    assert audit.scan_native(files) == []  # not a rule of its own outside torch-ops=forbid


def test_python_reaching_below_the_dispatcher_under_forbid():
    code = "import torch\ny = torch.ops.aten._softmax.default.redispatch(ks, x, 1, False)\n"
    assert audit.scan_dispatch({"model_new.py": code}, "forbid")


# ---- the built libraries' imported symbols -------------------------------------------------


@pytest.mark.parametrize(
    "symbol, forbid, flagged",
    [
        ("_ZN2at4_ops8_softmax10redispatchEN3c1014DispatchKeySetERKNS_6TensorElb", True, True),
        ("_ZN2at4_ops8_softmax10redispatchEN3c1014DispatchKeySetERKNS_6TensorElb", False, False),
        ("_ZN2at4_ops8_softmax4callERKNS_6TensorElb", True, False),  # through the dispatcher: recorded
        ("_ZN2at6native8softmaxERKNS_6TensorElSt8optionalIN3c1010ScalarTypeEE", True, True),
        ("_ZN2at3cpu8_softmaxERKNS_6TensorElb", True, True),
        ("_ZN2at4cuda24getCurrentCUDABlasHandleEv", True, False),
        ("_ZN3c104impl23ExcludeDispatchKeyGuardC1ENS_14DispatchKeySetE", True, False),  # torch::empty_like's
        ("_ZN3c1010Dispatcher17findSchemaOrThrowEPKcS2_", True, True),
        ("sched_setaffinity@GLIBC_2.3.4", False, True),
        ("omp_set_num_threads", False, True),
        ("omp_get_thread_num", True, False),
        ("_ZNSt6vectorIiSaIiEE9push_backERKi", True, False),
    ],
)
def test_imported_symbols(symbol, forbid, flagged):
    assert bool(audit._symbol_why(symbol, forbid)) == flagged


@pytest.mark.parametrize("symbol", ["PyEval_GetFrame", "PyFrame_GetBack", "_PyThreadState_UncheckedGet", "Py_IncRef"])
def test_the_kernels_library_may_not_call_the_python_c_api(symbol):
    """Red team 2026-12-07 (forged_fingerprints): the fast path's kernels reached the timer's hook
    through the frames. A load_inline module imports these through pybind11 and keeps them."""
    assert audit._symbol_why(symbol, False, python_api=False) == audit.INTERPRETER_WHY
    assert audit._symbol_why(symbol, True) is None
    assert audit._symbol_why("Pyramid_sum", False, python_api=False) is None  # a kernel's own name


def test_qualified_names():
    assert audit.qualified_name("_ZN2at4_ops8_softmax10redispatchEN3c1014DispatchKeySetERKNS_6TensorElb")[0] == [
        "at",
        "_ops",
        "_softmax",
        "redispatch",
    ]
    assert audit.qualified_name("_ZNK2at6Tensor4sizeEl")[0] == ["at", "Tensor", "size"]
    assert audit.qualified_name("GOMP_parallel@GOMP_4.0") == (["GOMP_parallel"], "")
    assert audit.qualified_name("_ZN12")[0] == [""]  # malformed: no exception


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++")
def test_the_symbols_a_macro_hides_are_read_from_the_library(tmp_path):
    """What the linker recorded, as `nm -D --undefined-only` lists it, whatever the source spelt."""
    src = tmp_path / "k.cpp"
    src.write_text(
        "#define JOIN(a, b) a##b\n"
        "namespace at { struct Tensor { void* p; }; namespace native { Tensor JOIN(soft, max)(const Tensor&); } }\n"
        'extern "C" int f(void* x) { at::Tensor t{x}; return x ? (int)(long)at::native::softmax(t).p : 0; }\n'
    )
    lib = tmp_path / "lib.so"
    subprocess.run(["g++", "-O2", "-fPIC", "-shared", "-fopenmp", str(src), "-o", str(lib)], check=True)
    symbols = audit.undefined_symbols(lib)
    if shutil.which("nm"):
        out = subprocess.run(["nm", "-D", "--undefined-only", str(lib)], capture_output=True, text=True).stdout
        assert set(symbols) == {line.split()[-1].partition("@")[0] for line in out.splitlines()}

    class Built:
        library, inline_dir, inline_manifest = str(lib), None, []

    found = audit.scan_libraries(Built, "forbid")
    assert len(found) == 1 and "at::native::softmax" in found[0]
    assert audit.scan_libraries(Built, "allow") == []


def test_a_library_that_cannot_be_read_fails_closed_under_forbid(tmp_path):
    bad = tmp_path / "lib.so"
    bad.write_bytes(b"\x7fELF\x02\x01" + b"\0" * 10)

    class Built:
        library, inline_dir, inline_manifest = str(bad), None, []

    assert "could not be read" in audit.scan_libraries(Built, "forbid")[0]
    assert audit.scan_libraries(Built, "allow") == []


# ---- the red team's a5, built for real ------------------------------------------------------

A5_HIDDEN = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
#include <ATen/ops/_softmax_ops.h>
#define JOIN(a, b) a##b
// at::_ops::_softmax::redispatch with the CPU key, every name a source rule reads pasted together
torch::Tensor fused_softmax(torch::Tensor x) {
    return at::_ops::_softmax::JOIN(re, dispatch)(c10::JOIN(Dispatch, KeySet)(c10::JOIN(Dispatch, Key)::CPU), x, 1, false);
}
"""
ext = load_inline("kw_hidden_softmax", cpp_sources=SRC, functions=["fused_softmax"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.fused_softmax(x)
'''


@pytest.mark.slow
def test_redispatch_hidden_from_the_source_rules_is_rejected(tmp_path):
    """About 50 s: the load_inline module is built. Before the symbol check it passed
    torch-ops=forbid with no op recorded (reward 1)."""
    files = {"model_new.py": A5_HIDDEN}
    assert audit.scan_source(files) == [] and audit.scan_dispatch(files, "forbid") == []
    options = EvalOptions(
        backend="cpu",
        cache_dir=str(tmp_path),
        compile_baseline=False,
        timing_budget_s=0.05,
        compile_timeout_s=400,
        eval_timeout_s=400,
    )
    res = evaluate(task("softmax_tiny.py"), files, options)
    assert res.status.value == "rejected", res.reasons
    assert "at::_ops::_softmax::redispatch" in " ".join(res.reasons)
