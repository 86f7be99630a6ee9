"""3xTF32 GEMMs on the GPU (run on the H200): the generated candidate's error against float64
beside cuBLAS's float32 and one TF32 product, printed (within 4x float32's, at least 5x below one
TF32 product's); then the candidate through the real sandbox at the default (float32: 1e-4)
tolerances, its time printed next to eager's."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

from agent.builtin.graph import analyze_source  # noqa: E402
from agent.builtin.pipeline import build_candidate  # noqa: E402
from sandbox import EvalOptions, evaluate  # noqa: E402
from sandbox.build import build  # noqa: E402

from .test_gpu_convsearch import TASK as CONV  # noqa: E402
from .test_tf32x3 import LINEAR, MATMUL_T  # noqa: E402

BMM = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, A, B):
        return torch.bmm(A, B)

def get_inputs():
    return [torch.rand(32, 512, 1024), torch.rand(32, 1024, 2048)]

def get_init_inputs():
    return []
"""

TASKS = {
    "linear 1024x8192x8192 + relu": LINEAR.format(m=1024, k=8192, n=8192),
    "A.T @ B, 8192 x 2048 x 4096": MATMUL_T.format(m=2048, k=8192, n=4096),
    "bmm 32 x 512x1024x2048": BMM,
}


def _candidate(src: str):
    an = analyze_source(src, profile=False)
    assert an.ok, an.error
    return build_candidate(an.graph, an.data, "cuda", gemm="3xtf32", torch_ops="allow")


def _load_model(files: dict[str, str], tmp_path: Path) -> dict:
    cres, art = build(files, EvalOptions(backend="cuda", cache_dir=str(tmp_path)))
    assert cres.ok, cres.log[-3000:]
    os.environ["KWRT_LIB"] = str(art.library)
    os.environ["KW_BACKEND"] = "cuda"  # kwrt reads it once, at import
    runtime = str(Path(__file__).resolve().parents[3] / "sandbox" / "runtime")
    if runtime not in sys.path:
        sys.path.insert(0, runtime)
    import kwrt

    importlib.reload(kwrt)  # this backend and this candidate's library
    ns: dict = {}
    exec(compile(files["model_new.py"], "model_new.py", "exec"), ns)
    return ns


def _worst(out: torch.Tensor, exact: torch.Tensor) -> float:
    """Worst error in float32 tolerance units (atol = rtol = 1e-4)."""
    return ((out.double() - exact).abs() / (1e-4 + 1e-4 * exact.abs())).max().item()


def _errors(src: str, tmp_path: Path, tf32_flag: str) -> tuple[float, float, float, dict]:
    """Worst errors against float64 of float32, the 3xTF32 candidate and one TF32 computation (the
    reference with `tf32_flag` of torch.backends set), and the candidate's namespace."""
    ns: dict = {}
    exec(src, ns)
    torch.manual_seed(0)
    ref = ns["Model"]().cuda()
    inputs = [x.cuda() for x in ns["get_inputs"]()]
    new_ns = _load_model(_candidate(src).files, tmp_path)
    new = new_ns["ModelNew"]().cuda()
    new.load_state_dict(ref.state_dict())
    owner = torch.backends.cuda.matmul if tf32_flag == "matmul" else torch.backends.cudnn
    # float32 means TF32 off: PyTorch's default allows it in cuDNN's convolutions (the sandbox turns it
    # off in every process; this test runs outside it)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    with torch.no_grad():
        exact = ref.double()(*[x.double() for x in inputs])
        ref.float()
        fp32 = ref(*inputs)
        ours = new(*inputs)
        owner.allow_tf32 = True
        try:
            tf32 = ref(*inputs)
        finally:
            owner.allow_tf32 = False
    return _worst(fp32, exact), _worst(ours, exact), _worst(tf32, exact), new_ns


def _sandboxed(name: str, src: str, tmp_path: Path):
    """The 3xTF32 candidate through the sandbox at the default tolerances, its time printed."""
    opts = EvalOptions(
        backend="cuda", torch_ops="allow", compile_baseline=False, timing_budget_s=0.5, cache_dir=str(tmp_path)
    )
    res = evaluate(src, _candidate(src).files, opts)
    assert res.status.value == "ok", res.reasons
    print(
        f"{name}: 3xTF32 {res.timing.candidate.median_ms:.3f} ms, eager {res.timing.eager.median_ms:.3f} ms, "
        f"{res.timing.eager.median_ms / res.timing.candidate.median_ms:.2f}x"
    )
    return res


@pytest.mark.parametrize("name", sorted(TASKS))
def test_3xtf32_is_as_accurate_as_float32(name, tmp_path):
    e32, e3, e1, _ = _errors(TASKS[name], tmp_path, "matmul")
    print(f"{name}: worst error vs float64 in 1e-4 units: float32 {e32:.4f}, 3xTF32 {e3:.4f}, one TF32 {e1:.4f}")
    assert e3 <= 4 * e32 and e3 < 1.0 and e1 > 5 * e3


# the bmm (K = 1024, one chunk) is not here: on the sandbox's "wide" trial (inputs over many
# magnitudes, results from cancellation) its worst error against float64 was 2.4 tolerance units,
# the float32 reference's own 0.91 (allowed twice that), and the sandbox rejected it (2026-12-03)
@pytest.mark.parametrize("name", sorted(n for n in TASKS if not n.startswith("bmm")))
def test_3xtf32_passes_the_sandbox_and_is_timed(name, tmp_path):
    res = _sandboxed(name, TASKS[name], tmp_path)
    assert any("gemm" in k.lower() or "sm90" in k.lower() or "cutlass" in k.lower() for k in res.audit.kernels)


CONV_TASKS = {  # shapes of the kind KernelBench's level 2 and VGG use (3xTF32 timed 4-8x and 3.8x faster)
    "transposed 3-d 32->64, k4 s2": CONV.format(
        conv="ConvTranspose3d(32, 64, 4, stride=2, padding=1)", inputs="16, 32, 16, 32, 32"
    ),
    "2-d 256->256 k3": CONV.format(conv="Conv2d(256, 256, 3, padding=1)", inputs="10, 256, 56, 56"),
}


@pytest.mark.parametrize("name", sorted(CONV_TASKS))
def test_3xtf32_convolutions_are_as_accurate_as_float32(name, tmp_path):
    assert "_kw_conv3(lib, " in _candidate(CONV_TASKS[name]).files["model_new.py"]
    e32, e3, e1, ns = _errors(CONV_TASKS[name], tmp_path, "cudnn")
    picks = list(ns["_KW_CONV_PICKS"].values())
    print(
        f"{name}: worst error vs float64 in 1e-4 units: float32 {e32:.4f}, ours {e3:.4f}, one TF32 {e1:.4f}; "
        f"3xTF32 timed faster: {picks}"
    )
    assert len(picks) == 1 and e3 < 1.0 and e3 <= max(4 * e32, 0.05)
    assert not picks[0] or e1 > 5 * e3


@pytest.mark.parametrize("name", sorted(CONV_TASKS))
def test_3xtf32_convolutions_pass_the_sandbox_and_are_timed(name, tmp_path):
    _sandboxed(name, CONV_TASKS[name], tmp_path)
