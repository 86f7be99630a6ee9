"""Scans and reductions of our own on the GPU (run on the H200), through the real sandbox under
torch-ops=forbid, the timing printed next to eager. A contiguous scan line longer than a block is
scanned by a whole block (kw_scan_rows_kernel), other lines one per thread; a long reduced line is
split over a block's threads (kw_reduce_cols_kernel where neighbouring lines lie side by side,
kw_reduce_lines_kernel where they do not), short ones one per thread (KernelBench L1/48-53 and
L1/89-93 at smaller sizes)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

from agent.builtin.graph import analyze_source  # noqa: E402
from agent.builtin.pipeline import build_candidate, own_parts  # noqa: E402
from sandbox import EvalOptions, evaluate  # noqa: E402

from .test_own_kernels import task  # noqa: E402

# rows of 5003 (tiles of 2048 with a ragged end), a strided scan over dim 1, a masked and a
# product scan: every branch of kw_scan in one candidate
SCANS = task(
    "(torch.cumsum(x * m, dim=1), torch.cumsum(x, dim=0), torch.cumprod(torch.sigmoid(x) * 0.02 + 0.99, dim=1))",
    "torch.randn(512, 5003), torch.rand(512, 5003) > 0.5",
    args="x, m",
)


# every reduction layout: columns (inner 100), lines (inner 3 and 1: an export graph keeps the
# trailing argmax an island), one per thread (a line of 20); sums, extremes and arg-extremes
REDUCTIONS = task(
    "(torch.mean(x, dim=1), torch.amax(x, dim=1), torch.argmin(x, dim=1), torch.sum(y, dim=1), "
    "torch.argmax(y, dim=1), torch.norm(z, p=1, dim=1), torch.argmax(z, dim=-1), torch.amin(x[:, :20], dim=1), torch.argmax(x[:, :20], dim=1))",
    "torch.randn(4, 300, 100), torch.randn(8, 700, 3), torch.randn(16, 900)",
    args="x, y, z",
)


def _evaluated(src: str, kernels: set[str], tmp_path) -> object:
    an = analyze_source(src, profile=False)
    assert an.ok, an.error
    cand = build_candidate(an.graph, an.data, "cuda", torch_ops="forbid")
    assert kernels <= {k for _, k in own_parts(cand.plan)}
    opts = EvalOptions(
        backend="cuda", torch_ops="forbid", compile_baseline=False, timing_budget_s=0.3, cache_dir=str(tmp_path)
    )
    res = evaluate(src, cand.files, opts)
    assert res.status.value == "ok", res.reasons
    print(f"ours {res.timing.candidate.median_ms:.4f} ms, eager {res.timing.eager.median_ms:.4f} ms")
    return res


def _ran(res, name: str) -> bool:
    return any(name in k for k in res.audit.kernels)


def test_scans_of_our_own_pass_the_sandbox_on_the_gpu(tmp_path):
    res = _evaluated(SCANS, {"kw_scan"}, tmp_path)
    assert _ran(res, "kw_scan_rows_kernel") and _ran(res, "kw_scan_kernel"), res.audit.kernels


def test_reductions_of_our_own_pass_the_sandbox_on_the_gpu(tmp_path):
    res = _evaluated(REDUCTIONS, {"kw_reduce", "kw_argreduce"}, tmp_path)
    for name in ("kw_reduce_cols_kernel", "kw_reduce_lines_kernel", "kw_reduce_kernel", "kw_argreduce_kernel"):
        assert _ran(res, name), (name, res.audit.kernels)


def test_gathers_masks_and_attention_of_views_pass_the_sandbox_on_the_gpu(tmp_path):
    """The kernels that let attention pass under forbid on the GPU: rows picked by an index
    (kw_index_rows, a strided index through kw_gather64), a causal mask from a buffer (kw_compare,
    kw_bool_to_float, a sliced bool mask through kw_gather8) and bmm of permuted heads (_kw_matmul)."""
    from .test_own_kernels import CASES

    src = task(
        "torch.softmax(torch.matmul(q.permute(0, 2, 1, 3), k.permute(0, 2, 3, 1)).masked_fill("
        "self.bias[:, :, :64, :64] == 0, float('-inf')), -1) + self.emb(i[:, ::2]).sum()",
        "torch.randn(2, 64, 4, 32), torch.randn(2, 64, 4, 32), torch.randint(0, 100, (2, 12))",
        "        self.emb = nn.Embedding(100, 8)\n"
        "        self.register_buffer('bias', torch.tril(torch.ones(128, 128)).view(1, 1, 128, 128))",
        args="q, k, i",
    )
    res = _evaluated(src, {"kw_index_rows", "kw_compare", "kw_bool_to_float"}, tmp_path)
    # the masks are hoisted into _kw_consts (computed at the first call, before the profiled trials):
    # the audit counts their kwrt calls
    for name in ("kw_index_rows", "kw_compare", "kw_bool_to_float", "kw_gather"):
        assert _ran(res, name), (name, res.audit.kernels)
    for name in ("gathers", "masks"):  # the CPU cases, on the GPU
        _evaluated(CASES[name][0], CASES[name][1], tmp_path)


def test_sdpa_written_out_passes_the_sandbox_on_the_gpu(tmp_path):
    """Causal F.scaled_dot_product_attention under forbid (matmul_forms.sdpa_written_out): the
    library GEMMs around our fused softmax and kw_tri's mask; no attention kernel of PyTorch's runs."""
    src = task(
        "torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) * 2.0",
        "torch.randn(4, 8, 256, 64), torch.randn(4, 8, 256, 64), torch.randn(4, 8, 256, 64)",
        args="q, k, v",
    )
    an = analyze_source(src, profile=False, write_out_attention=True)
    assert an.ok and an.data["capture"] == "export", an.error
    cand = build_candidate(an.graph, an.data, "cuda", torch_ops="forbid")
    opts = EvalOptions(
        backend="cuda", torch_ops="forbid", compile_baseline=False, timing_budget_s=0.3, cache_dir=str(tmp_path)
    )
    res = evaluate(src, cand.files, opts)
    assert res.status.value == "ok", res.reasons
    print(f"ours {res.timing.candidate.median_ms:.4f} ms, eager {res.timing.eager.median_ms:.4f} ms")
    assert not [k for k in res.audit.kernels if "fmha" in k.lower() or "flash" in k.lower()], res.audit.kernels
    assert _ran(res, "kw_tri"), res.audit.kernels


def test_a_generalised_candidate_passes_the_shape_trial_on_the_gpu():
    """minGPT's causal attention under forbid and the default preset on the GPU: the candidate's
    sizes and scale follow the inputs (agent/builtin/generalise.py), so both shape trials run our
    kernels with the bound scalars passed at run time."""
    from agent.builtin import BuiltinPolicy
    from agent.evaluator import LocalEvaluator
    from agent.loop import Budgets, run
    from agent.task import task_from_source

    from .test_export_capture import GPT2
    from .test_generalise import FORBID, _shapes_checked

    t = task_from_source(GPT2, "gpt2_attention", "cuda", dict(FORBID))
    res = run(
        t, BuiltinPolicy(profile_best=False, max_variants=1), LocalEvaluator(), Budgets(max_turns=3, confirmations=0)
    )
    assert res.verified, res.trajectory.finished().summary
    assert _shapes_checked(res), "no shape trial ran on the candidate"


@pytest.mark.parametrize(
    "name",
    ["hf_masks", "t5_buckets", "products", "remaps", "bilinear", "gather", "scans", "grid_sample", "embedding_bag"],
)
def test_masks_casts_and_remaps_pass_the_sandbox_on_the_gpu(name, tmp_path):
    """kw_elt, kw_remap, kw_bilinear, kw_scan_t and kw_grid_sample (int64/bool masks, casts, broadcast
    products, pads, rolls, nearest and bilinear upsampling, slice assignment, gather, cumsums of
    masks, affine grids and grid sampling, embedding bags): the
    CPU tests' tasks on the GPU."""
    from .test_typed_elementwise import CASES as TYPED

    src, kernel = TYPED[name]
    res = _evaluated(src, {kernel}, tmp_path)
    assert _ran(res, kernel), res.audit.kernels  # its kwrt calls (a hoisted mask runs before the profiled trials)
