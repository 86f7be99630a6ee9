"""Split broadcasts read in place (pipeline.read_gaps_in_place): x / rms with rms [B, 1, H, W]
against x [B, C, H, W] (RMS norm over channels, KernelBench L1/36) reads rms through a two-block
index instead of an expand copied to the input's size (7 GiB there). On by default on cuda; the
CPU's kernels take the same index when asked, which is how it is checked here end to end."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from agent.builtin.fusion import GAP
from agent.builtin.graph import analyze_source
from agent.builtin.pipeline import _gap_of, build_candidate
from sandbox import EvalOptions, evaluate

from .test_codegen import _CUBLAS_STANDIN

RMS = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        rms = torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + self.eps)
        return x / rms + {extra}

def get_inputs():
    return [torch.rand(3, 5, 6, 7), {more}]

def get_init_inputs():
    return []
"""


def test_the_pattern_is_two_blocks_around_a_gap():
    full = [3, 5, 6, 7]
    assert _gap_of([3, 1, 6, 7], full) == (0, 1, 2)
    assert _gap_of([3, 1, 1, 7], full) == (0, 1, 3)
    assert _gap_of([5, 1, 7], full) == (1, 2, 3)
    assert _gap_of([3, 1, 6, 1], full) is None  # not to the last dim
    assert _gap_of([1, 5, 6, 7], full) is None  # one block: a GEN operand already
    assert _gap_of([3, 1, 6, 7, 7], full) is None  # more dims than the group


@pytest.mark.parametrize(
    "extra, more, args",
    [("0.0", "", "x"), pytest.param("y", "torch.rand(5, 1, 7)", "x, y", marks=pytest.mark.slow)],
    ids=["rms over channels", "and a second gap operand, [C, 1, W]"],
)
def test_a_gap_operand_is_read_in_place_and_correct(extra, more, args, tmp_path):
    src = RMS.format(extra=extra, more=more).replace("def forward(self, x):", f"def forward(self, {args}):")
    src = src.replace("[torch.rand(3, 5, 6, 7), ]", "[torch.rand(3, 5, 6, 7)]")
    an = analyze_source(src, profile=False)
    assert an.ok, an.error
    cuda = build_candidate(an.graph, an.data, "cuda", torch_ops="allow")
    gaps = [o for grp in cuda.plan.groups for o in grp.operands if o.kind == GAP]
    assert gaps and "% inner" in cuda.files["kernels/fused.cu"]
    model = cuda.files["model_new.py"]
    calls = [line for line in model.splitlines() if "lib.fused" in line or "contiguous" in line or "_kw_contig" in line]
    assert calls and not any("kwexp" in line for line in calls)  # no kernel reads, and nothing copies, an expand
    assert "_kwexp" not in model and "_kwshape" not in model  # nor does the forward make one it no longer reads
    cpu = build_candidate(an.graph, an.data, "cpu", torch_ops="allow", gaps=True)
    assert any(o.kind == GAP for grp in cpu.plan.groups for o in grp.operands)
    res = evaluate(
        src, cpu.files, EvalOptions(backend="cpu", torch_ops="allow", compile_baseline=False, timing_budget_s=0.05)
    )
    assert res.status.value == "ok", res.reasons
    if shutil.which("nvcc"):
        inc = tmp_path / "inc"
        inc.mkdir()
        (inc / "cublas_v2.h").write_text(_CUBLAS_STANDIN)
        (tmp_path / "f.cu").write_text(cuda.files["kernels/fused.cu"])
        r = subprocess.run(
            ["nvcc", "-O3", "-arch=sm_90", f"-I{inc}", "-c", str(tmp_path / "f.cu"), "-o", str(tmp_path / "f.o")],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stderr[-2000:]
