"""3xTF32 GEMMs (agent/builtin/tf32x3.py) without a GPU: the generated forward's layouts, strides
and splits, run against a CPU model of the two CUDA entry points that follows cuBLAS's documented
column-major contract (cublasGemmStridedBatchedEx) and TF32's rounding; which GEMMs get the step;
and the .cu through nvcc. The GPU test (test_gpu_tf32x3.py) runs the real thing."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest
import torch

from agent.builtin import tf32x3
from agent.builtin.graph import analyze_source
from agent.builtin.modelgen import KEPT_HELPER
from agent.builtin.pipeline import build_candidate

from .test_codegen import _CUBLAS_STANDIN, _exec_model


def _tf32(x: torch.Tensor) -> torch.Tensor:
    """x rounded to TF32 as kw_tf32_round does (nearest, ties away from zero)."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


def _from_ptr(ptr, n: int) -> torch.Tensor:
    addr = ptr.value if isinstance(ptr, ctypes.c_void_p) else ptr.data_ptr()
    return torch.from_numpy(np.ctypeslib.as_array((ctypes.c_float * n).from_address(addr)))


class CpuLib:
    """The two entry points on the CPU, argument for argument; each chunk's GEMM in float64 over
    the thirds it is given, so what is checked is the layout, not the arithmetic."""

    calls: list[str]

    def __init__(self):
        self.calls = []

    def kw_split3_tf32(self, x, out, batch, p, q, kc, kp, kinner, lo_thirds, stream):
        self.calls.append("split")
        v = _from_ptr(x, batch * p * q).view(batch, p, q).clone()
        hi = _tf32(v)
        lo = _tf32(v - hi)
        k = q if kinner else p
        dim = 2 if kinner else 1
        pad = [0, kp - k] if kinner else [0, 0, 0, kp - k]  # zeros past K, as the caller allocates
        hi, lo = torch.nn.functional.pad(hi, pad), torch.nn.functional.pad(lo, pad)
        parts = []
        for t in range(kp // kc):
            piece = [x.narrow(dim, t * kc, kc) for x in (hi, lo)]
            parts += [piece[1] if (lo_thirds >> s) & 1 else piece[0] for s in range(3)]
        out.copy_(torch.cat(parts, dim=dim).view(out.shape))

    def kw_gemm_3xtf32(self, a, b, part, c, m, n, kc, chunks, ta, lda, sa, tb, ldb, sb, batch, stream):
        self.calls.append("gemm")
        fa, fb, fc = a.reshape(-1).double(), b.reshape(-1).double(), c.view(-1)
        ca, cb = (3 * kc * lda if ta else 3 * kc), (3 * kc if tb else 3 * kc * ldb)
        k = 3 * kc

        def colmajor(flat, off, rows, cols, ld):
            return flat.as_strided((rows, cols), (1, ld), off)

        for i in range(batch):
            acc = torch.zeros(n, m, dtype=torch.float64)
            for t in range(chunks):
                ob, oa = i * sb + t * cb, i * sa + t * ca
                opb = colmajor(fb, ob, k, n, ldb).t() if tb else colmajor(fb, ob, n, k, ldb)  # N x K
                opa = colmajor(fa, oa, m, k, lda).t() if ta else colmajor(fa, oa, k, m, lda)  # K x M
                acc += opb @ opa  # C^T, N x M, column-major with ldc = N
            fc.as_strided((n, m), (1, n), i * m * n).copy_(acc.float())


def _helper_ns(chunk: int = tf32x3.CHUNK) -> dict:
    ns: dict = {"torch": torch, "ctypes": ctypes}
    exec(KEPT_HELPER + tf32x3.HELPER, ns)
    ns["_KW_CHUNK"] = chunk
    return ns


CASES = {
    "2-d": lambda: (torch.rand(33, 70), torch.rand(70, 41)),
    "A transposed": lambda: (torch.rand(70, 33).t(), torch.rand(70, 41)),
    "B transposed": lambda: (torch.rand(33, 70), torch.rand(41, 70).t()),
    "both transposed": lambda: (torch.rand(70, 33).t(), torch.rand(41, 70).t()),
    "3-d x 2-d": lambda: (torch.rand(3, 17, 70), torch.rand(70, 41)),
    "3-d per batch transposed x 2-d": lambda: (torch.rand(3, 70, 17).transpose(1, 2), torch.rand(70, 41)),
    "bmm": lambda: (torch.rand(4, 17, 70), torch.rand(4, 70, 41)),
    "bmm, B transposed": lambda: (torch.rand(4, 17, 70), torch.rand(4, 41, 70).transpose(1, 2)),
    "2-d x 3-d": lambda: (torch.rand(17, 70), torch.rand(4, 70, 41)),
}


@pytest.mark.parametrize("chunk", [tf32x3.CHUNK, 32, 35])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_layout_reaches_the_gemm_with_the_right_strides(case, chunk):
    """Each layout cuBLAS can read in place gets the split and the chunked GEMM (K = 70: one
    chunk; chunks of 24 with K padded to 72; two of 35); the result is a @ b within the split's
    2^-21 (float64 accumulation here). A wrong leading dimension, stride, chunk offset, padding
    or third order is off by far more than that."""
    torch.manual_seed(0)
    a, b = CASES[case]()
    lib = CpuLib()
    out = _helper_ns(chunk)["_kw_mm3"](lib, a, b, None)
    want = torch.matmul(a.double(), b.double())
    assert lib.calls == ["split", "split", "gemm"]
    assert out.shape == want.shape
    err = ((out.double() - want).abs() / want.abs().clamp_min(1e-3)).max().item()
    assert err < 2e-6, f"{case}: worst relative error {err:.2e}"


def test_what_it_cannot_read_in_place_goes_to_torch_matmul():
    lib = CpuLib()
    mm3 = _helper_ns()["_kw_mm3"]
    a = torch.rand(2, 3, 5, 7)
    b = torch.rand(14, 4)[::2]  # a strided slice: rows 2 apart
    for x, y in (
        (a, torch.rand(2, 3, 7, 4)),
        (torch.rand(5, 7), b),
        (torch.rand(5, 7).double(), torch.rand(7, 4).double()),
    ):
        assert torch.allclose(mm3(lib, x, y, None), torch.matmul(x, y))
    assert lib.calls == []


def test_a_weight_is_split_once_while_it_is_unchanged():
    class M(torch.nn.Module):
        pass

    m, lib = M(), CpuLib()
    mm3 = _helper_ns()["_kw_mm3"]
    w = torch.rand(41, 70)
    x = torch.rand(9, 70)
    first = mm3(lib, x, w.t(), None, m, "mm")
    mm3(lib, x, w.t(), None, m, "mm")
    assert lib.calls.count("split") == 3  # x twice, w once
    with torch.no_grad():
        w.mul_(2.0)  # in place: the version moves
    again = mm3(lib, x, w.t(), None, m, "mm")
    assert lib.calls.count("split") == 5
    assert torch.allclose(again, 2 * first, rtol=1e-5)


LINEAR = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear({k}, {n}, bias=False)

    def forward(self, x):
        return torch.relu(self.fc(x))

def get_inputs():
    return [torch.rand({m}, {k})]

def get_init_inputs():
    return []
"""

MATMUL_T = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A.T, B)

def get_inputs():
    return [torch.rand({k}, {m}), torch.rand({k}, {n})]

def get_init_inputs():
    return []
"""


def _plan(src: str):
    an = analyze_source(src, profile=False)
    assert an.ok, an.error
    return an


@pytest.mark.slow  # moved out of the fast tier: CI near its 20 minutes (2026-12-06)
def test_only_gemms_estimated_to_gain_get_the_step():
    """The estimate against what the H200 measured (docs/benchmarks.md, 2026-12-03): 3xTF32 won on
    L2/22's linear (1024 x 8192 x 8192, 2.72x) and L1/17 (A @ B.T, 2048 x 8192 x 4096, 1.74x) and
    lost on L1/6 (256 x 524288 x 256: the split's traffic, 0.42x); a matrix-vector product and a
    small GEMM are bound by memory and launches."""
    cases = {
        "L2/22": (LINEAR.format(m=1024, k=8192, n=8192), True),
        "L1/17": (MATMUL_T.format(m=2048, k=8192, n=4096), True),
        "L1/6": (MATMUL_T.format(m=256, k=524288, n=256), False),
        "matvec": (MATMUL_T.format(m=4096, k=4096, n=1), False),
        "small": (LINEAR.format(m=8, k=16, n=16), False),
    }
    for name, (src, gains) in cases.items():
        assert tf32x3.pays_off(_plan(src).graph) is gains, name
    big = _plan(LINEAR.format(m=1024, k=2048, n=2048)).graph
    node = next(n for n in big.nodes if n.op in ("linear", "matmul_nt"))
    assert tf32x3.gemm_shape(big, node) == (1, 1024, 2048, 2048)


def reference_and_candidate(src: str, ns: dict) -> tuple:
    """(ModelNew from the candidate's namespace `ns`, the task's Model with the same weights, inputs)."""
    ref_ns: dict = {}
    exec(src, ref_ns)
    torch.manual_seed(1)
    ref = ref_ns["Model"]()
    new = ns["ModelNew"]()
    new.load_state_dict(ref.state_dict())
    return new, ref, ref_ns["get_inputs"]()


@pytest.fixture
def every_gemm(monkeypatch):
    """The tests below run tiny GEMMs that the estimate would leave to float32 cuBLAS."""
    monkeypatch.setattr(tf32x3, "node_pays", lambda g, node: node.op in ("matmul", "matmul_nt", "linear"))


@pytest.mark.parametrize("src", [LINEAR.format(m=24, k=40, n=33), MATMUL_T.format(m=24, k=40, n=33)])
def test_the_generated_forward_computes_the_reference(src, every_gemm):
    """The cuda candidate with gemm="3xtf32", run on the CPU through the CPU model of its entry
    points: the same values as the reference, and the split and GEMM are what ran."""
    an = _plan(src)
    cand = build_candidate(an.graph, an.data, "cuda", gemm="3xtf32", torch_ops="allow")
    model, cu = cand.files["model_new.py"], cand.files["kernels/fused.cu"]
    assert "_kw_mm3(lib, " in model and "CUBLAS_COMPUTE_32F_FAST_TF32" in cu
    calls: list[str] = []

    class Lib(CpuLib):
        def __init__(self):
            self.calls = calls

        def fused_0(self, x, out, *rest):  # the relu epilogue of the linear task
            out.copy_(torch.relu(x.view(out.shape)))

    ns = _exec_model(model, Lib)
    new, ref, inputs = reference_and_candidate(src, ns)
    torch.testing.assert_close(new(*inputs), ref(*inputs), rtol=1e-5, atol=1e-5)
    assert "gemm" in calls


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_tf32_source_passes_nvcc(tmp_path, every_gemm):
    include = tmp_path / "inc"
    include.mkdir()
    (include / "cublas_v2.h").write_text(_CUBLAS_STANDIN)
    an = _plan(LINEAR.format(m=24, k=40, n=33))
    code = build_candidate(an.graph, an.data, "cuda", gemm="3xtf32", torch_ops="allow").files["kernels/fused.cu"]
    path = tmp_path / "fused.cu"
    path.write_text(code)
    r = subprocess.run(
        ["nvcc", "-O3", "-arch=sm_90", f"-I{include}", "-c", str(path), "-o", str(tmp_path / "o.o")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-3000:]


LONE_BIAS = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(40, 33)

    def forward(self, x):
        return torch.sum(self.fc(x), dim=0)

def get_inputs():
    return [torch.rand(24, 40)]

def get_init_inputs():
    return []
"""


def test_a_linear_whose_bias_add_is_alone_is_still_ours_in_3xtf32(every_gemm):
    """With cuBLAS's float32 GEMM a lone bias add goes back into the library call (one launch
    fewer); in 3xTF32 the GEMM is worth more than that pass (KernelBench L2/88 kept F.linear and
    with it the float32 GEMM), so the linear stays ours."""
    an = _plan(LONE_BIAS)
    plain = build_candidate(an.graph, an.data, "cuda", torch_ops="allow").files["model_new.py"]
    fast = build_candidate(an.graph, an.data, "cuda", gemm="3xtf32", torch_ops="allow").files["model_new.py"]
    assert "torch.nn.functional.linear(" in plain
    assert "_kw_mm3(lib, " in fast and "torch.nn.functional.linear(" not in fast


def test_a_gemm_estimated_not_to_gain_stays_float32_in_the_3xtf32_candidate():
    an = _plan(LINEAR.format(m=24, k=40, n=33))
    cand = build_candidate(an.graph, an.data, "cuda", gemm="3xtf32", torch_ops="allow")
    assert "lib.gemm_nt(" in cand.files["model_new.py"] and "_kw_mm3" not in cand.files["model_new.py"]
