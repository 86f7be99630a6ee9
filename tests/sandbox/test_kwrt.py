"""kwrt, the candidate's bridge to its compiled kernels: arguments reach C with the right types
(argtypes bound per signature from the first call of it, a new signature when a call's argument
kinds change), bad arguments get an explanatory error on the first call and on the fast path of a
bound signature alike, and every call that reaches C is counted exactly (the evaluator's proof that
a custom kernel ran)."""

from __future__ import annotations

import ctypes
import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

RUNTIME = Path(__file__).resolve().parents[2] / "sandbox" / "runtime"

SOURCE = r"""
#include <cstdint>
// out[i] = a[i] * s + k; returns 7 when asked to fail, so the error path is exercised
extern "C" int axpk(const float* a, float* out, int64_t n, float s, int64_t k, void* stream) {
    if (n < 0) return 7;
    for (int64_t i = 0; i < n; ++i) out[i] = a[i] * s + (float)k;
    return stream == nullptr ? 0 : 9;
}
// writes its first argument as C sees it: a value, or a pointer's address
extern "C" int echo(int64_t v, int64_t* out) { out[0] = v; return 0; }
// out = a + bias, bias optional (a null pointer adds nothing)
extern "C" int add_opt(const float* a, const float* bias, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = a[i] + (bias ? bias[i] : 0.0f);
    return 0;
}
extern "C" int twice_d(const double* a, double* out, int32_t n, double s, void* stream) {
    for (int32_t i = 0; i < n; ++i) out[i] = 2.0 * a[i] + s;
    return 0;
}
"""


@pytest.fixture
def kwrt(tmp_path, monkeypatch):
    src = tmp_path / "k.cpp"
    src.write_text(SOURCE)
    lib = tmp_path / "libk.so"
    subprocess.run(["g++", "-O1", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True, timeout=120)
    monkeypatch.setenv("KWRT_LIB", str(lib))
    monkeypatch.setenv("KW_BACKEND", "cpu")
    monkeypatch.syspath_prepend(str(RUNTIME))
    sys.modules.pop("kwrt", None)
    mod = importlib.import_module("kwrt")
    yield mod
    sys.modules.pop("kwrt", None)


def test_arguments_reach_c_with_their_types_and_calls_are_counted(kwrt):
    lib = kwrt.load()
    a = torch.arange(8, dtype=torch.float32)
    out = torch.empty(8)
    lib.axpk(a, out, 8, 0.5, 3, kwrt.stream())
    assert torch.equal(out, a * 0.5 + 3)
    lib.axpk(a, out, 8, 2, 1, kwrt.stream())  # an int where the first call passed a float: still a float in C
    assert torch.equal(out, a * 2 + 1)
    lib.axpk(a, out, 4, 1.0, True, None)  # bool as int64, None as a null stream
    assert torch.equal(out[:4], a[:4] + 1)
    assert kwrt.calls()["axpk"] == 3


def test_explicit_ctypes_values_rebind_the_argument_types(kwrt):
    lib = kwrt.load()
    a = torch.arange(5, dtype=torch.float64)
    out = torch.empty(5, dtype=torch.float64)
    lib.twice_d(a, out, ctypes.c_int32(5), ctypes.c_double(0.25), kwrt.stream())
    assert torch.equal(out, 2 * a + 0.25)
    lib.twice_d(a, out, ctypes.c_int32(3), ctypes.c_double(1.0), kwrt.stream())
    assert torch.equal(out[:3], 2 * a[:3] + 1.0)


def test_bad_arguments_and_failing_kernels_get_clear_errors(kwrt):
    lib = kwrt.load()
    a = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    out = torch.empty(16)
    with pytest.raises(kwrt.KernelError, match="argument 0 is a non-contiguous tensor"):
        lib.axpk(a.t(), out, 16, 1.0, 0, kwrt.stream())
    with pytest.raises(kwrt.KernelError, match="argument 3 has unsupported type str"):
        lib.axpk(a, out, 16, "1.0", 0, kwrt.stream())
    with pytest.raises(kwrt.KernelError, match="axpk returned error code 7"):
        lib.axpk(a, out, -1, 1.0, 0, kwrt.stream())
    with pytest.raises(AttributeError, match="export no function 'nope'"):
        lib.nope(a)
    lib.axpk(a, out, 16, 1.0, 0, kwrt.stream())  # the function still works after the errors
    assert torch.equal(out, a.flatten() + 0)


def test_a_bound_signature_still_refuses_bad_tensors(kwrt):
    lib = kwrt.load()
    a = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    out = torch.empty(16)
    lib.axpk(a, out, 16, 1.0, 0, None)  # binds the signature: later calls take the fast path
    with pytest.raises(kwrt.KernelError, match="argument 0 is a non-contiguous tensor"):
        lib.axpk(a.t(), out, 16, 1.0, 0, None)
    with pytest.raises(kwrt.KernelError, match="argument 1 is on meta, but the kernels run on cpu"):
        lib.axpk(a, torch.empty(16, device="meta"), 16, 1.0, 0, None)
    with pytest.raises(kwrt.KernelError, match="argument 2 has unsupported type str"):
        lib.axpk(a, out, "16", 1.0, 0, None)
    assert kwrt.calls() == {"axpk": 1}  # the refused calls never reached C


def test_a_tensor_becomes_a_pointer_wherever_it_is_passed(kwrt):
    lib = kwrt.load()
    out = torch.zeros(1, dtype=torch.int64)
    lib.echo(5, out)
    assert out.item() == 5
    seven = torch.tensor([7])  # a one-element integer tensor converts to 7 in ctypes' int64 argtype
    lib.echo(seven, out)
    assert out.item() == seven.data_ptr()
    lib.echo(6, out)
    assert out.item() == 6


def test_alternating_signatures_convert_each_call_and_count_exactly(kwrt):
    lib = kwrt.load()
    a, bias, out = torch.arange(6, dtype=torch.float32), torch.full((6,), 0.5), torch.empty(6)
    for i in range(10):
        if i % 2:
            lib.add_opt(a, None, out, 6)
            assert torch.equal(out, a)
        else:
            lib.add_opt(a, bias, out, 6)
            assert torch.equal(out, a + 0.5)
    held = lib.add_opt  # a call kept from before the signature changed still converts its own arguments
    lib.add_opt(a, None, out, 6)
    held(a, bias, out, 6)
    assert torch.equal(out, a + 0.5)
    with pytest.raises(kwrt.KernelError, match="axpk returned error code 7"):
        lib.axpk(a, out, -1, 1.0, 0, None)  # reached C: counted
    assert kwrt.calls() == {"add_opt": 12, "axpk": 1}


def test_profiling_calls_show_up_as_ranges_and_are_counted(kwrt):
    lib = kwrt.load()
    a, out = torch.arange(4, dtype=torch.float32), torch.empty(4)
    lib.axpk(a, out, 4, 1.0, 0, None)
    kwrt._profile = True  # what the evaluator's profile command sets
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            lib.axpk(a, out, 4, 2.0, 0, None)
    finally:
        kwrt._profile = False
    assert torch.equal(out, a * 2)
    assert "kwrt::axpk" in {evt.name for evt in prof.events()}
    assert kwrt.calls() == {"axpk": 2}
