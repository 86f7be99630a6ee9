"""The SDPA candidate through the real sandbox on a GPU (agent.builtin.attention): float32
attention as one scaled-dot-product-attention call passes every check the written-out candidate
passes, and its timing is printed beside it (the speed is measured, never asserted)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

from agent.builtin.attention import attention_to_sdpa  # noqa: E402
from agent.builtin.graph import analyze_source  # noqa: E402
from agent.builtin.pipeline import build_candidate  # noqa: E402
from agent.builtin.rewrites import all_rewrites  # noqa: E402
from sandbox import evaluate  # noqa: E402

from .conftest import REPO, cuda_options  # noqa: E402
from .test_attention import ADDITIVE, CAUSAL  # noqa: E402


@pytest.mark.parametrize("name,src", [("causal", CAUSAL), ("additive", ADDITIVE)])
def test_sdpa_candidate_passes_the_sandbox(name, src, tmp_path):
    big = src.replace("torch.randn(2, 12, 32)", "torch.randn(16, 256, 256)").replace("[32, 4, 16]", "[256, 4, 512]")
    big = big.replace("torch.randn(3, 10, 24)", "torch.randn(16, 256, 256)").replace("[24, 3]", "[256, 4]")
    big = big.replace("torch.rand(3, 1, 1, 10)", "torch.rand(16, 1, 1, 256)")
    an = analyze_source(big, device="cuda", profile=False)
    assert an.ok, an.error
    rw = all_rewrites(an.graph)
    g = rw[-1].graph if rw else an.graph
    sdpa = attention_to_sdpa(g)
    assert sdpa is not None
    opts = cuda_options(tmp_path, torch_ops="allow", timing_budget_s=0.3)
    written = evaluate(big, build_candidate(g, an.data, "cuda", torch_ops="allow").files, opts)
    fused = evaluate(big, build_candidate(sdpa.graph, an.data, "cuda", torch_ops="allow").files, opts)
    assert written.status.value == "ok", written.reasons
    assert fused.status.value == "ok", fused.reasons
    assert any("attention" in k.lower() or "fmha" in k.lower() for k in fused.audit.kernels), fused.audit.kernels
    w, f = written.timing.candidate, fused.timing.candidate
    print(
        f"{name}: written out {w.median_ms:.4f} ms, SDPA {f.median_ms:.4f} ms, eager {written.timing.eager.median_ms:.4f} ms"
    )


# Attention blocks as published (benchmarks/blocks, their own sizes), each matched by a different
# form: baddbmm over merged heads, an ALiBi float mask, a relative position bias, einsum, einops,
# decomposed relative positions over split scores.
BLOCKS = [
    "hf_gpt_neox_attention",
    "hf_bloom_attention",
    "hf_t5_relative_attention",
    "perceiver_cross_attention",
    "diffusers_cross_attention_baddbmm",
    "einsum_attention",
    "lucidrains_vit_attention",
    "sam_rel_pos_attention",
]


@pytest.mark.parametrize("name", BLOCKS)
def test_sdpa_candidate_of_a_published_block_passes_the_sandbox(name, tmp_path):
    """The SDPA match of each block, through the sandbox at the block's own sizes: the flash or
    memory-efficient kernel must agree with the reference within the task's tolerance on fresh
    inputs, as the written-out candidate does."""
    if name == "lucidrains_vit_attention":
        pytest.importorskip("einops")
    src = (REPO / "benchmarks" / "blocks" / f"{name}.py").read_text()
    an = analyze_source(src, device="cuda", profile=False)
    assert an.ok, an.error
    rw = all_rewrites(an.graph)
    g = rw[-1].graph if rw else an.graph
    sdpa = attention_to_sdpa(g)
    assert sdpa is not None, f"{name}: attention not matched on the GPU capture"
    opts = cuda_options(tmp_path, torch_ops="allow", timing_budget_s=0.3)
    written = evaluate(src, build_candidate(g, an.data, "cuda", torch_ops="allow").files, opts)
    fused = evaluate(src, build_candidate(sdpa.graph, an.data, "cuda", torch_ops="allow").files, opts)
    assert written.status.value == "ok", written.reasons
    assert fused.status.value == "ok", fused.reasons
    w, f = written.timing.candidate, fused.timing.candidate
    print(
        f"{name}: written out {w.median_ms:.4f} ms, SDPA {f.median_ms:.4f} ms, "
        f"eager {fused.timing.eager.median_ms:.4f} ms, kernels {sorted(fused.audit.kernels)[:6]}"
    )
