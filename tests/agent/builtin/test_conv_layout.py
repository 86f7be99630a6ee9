"""A convolution's output takes its input's memory format: a convolution of a permuted view (timm's
ConvNeXt permutes back from its channels-last LayerNorm) returns NHWC memory, which the fused
kernel after it must not read as NCHW."""

from __future__ import annotations

import pytest

from agent.builtin.graph import analyze_source
from agent.builtin.pipeline import build_candidate
from sandbox import EvalOptions, evaluate

from .conftest import REPO


@pytest.mark.slow
def test_the_kernel_after_a_convolution_of_a_permuted_view_gets_contiguous_memory(tmp_path):
    src = (REPO / "benchmarks" / "blocks" / "timm_convnext_layernorm2d_block.py").read_text()
    src = (
        src.replace("batch = 4", "batch = 2").replace("channels = 96", "channels = 16").replace("size = 28", "size = 8")
    )
    an = analyze_source(src, profile=False)
    assert an.ok, an.error
    files = build_candidate(an.graph, an.data, "cpu", torch_ops="allow").files
    opts = EvalOptions(
        backend="cpu", compile_baseline=False, timing_budget_s=0.05, torch_ops="allow", cache_dir=str(tmp_path)
    )
    res = evaluate(src, files, opts)
    assert res.status.value == "ok", res.reasons
