"""Scans of our own on the GPU (run on the H200): a contiguous line longer than a block is scanned
by a whole block (kw_scan_rows_kernel), short or strided lines one per thread; both match ATen's
cumsum / cumprod through the real sandbox under torch-ops=forbid, and the timing is printed next
to eager (KernelBench L1/89-93 at smaller sizes)."""

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


def test_scans_of_our_own_pass_the_sandbox_on_the_gpu(tmp_path):
    an = analyze_source(SCANS, profile=False)
    assert an.ok, an.error
    cand = build_candidate(an.graph, an.data, "cuda", torch_ops="forbid")
    assert "kw_scan" in {k for _, k in own_parts(cand.plan)}
    opts = EvalOptions(
        backend="cuda", torch_ops="forbid", compile_baseline=False, timing_budget_s=0.3, cache_dir=str(tmp_path)
    )
    res = evaluate(SCANS, cand.files, opts)
    assert res.status.value == "ok", res.reasons
    assert any("kw_scan_rows_kernel" in k for k in res.audit.kernels), res.audit.kernels
    assert any(k.startswith("kw_scan_kernel") or "kw_scan_kernel" in k for k in res.audit.kernels), res.audit.kernels
    print(f"scans: ours {res.timing.candidate.median_ms:.4f} ms, eager {res.timing.eager.median_ms:.4f} ms")
