"""The five case studies on the CUDA backend (run by the lead on the H200)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]

from agent.builtin import BuiltinPolicy  # noqa: E402
from benchmarks.case_studies import CASES  # noqa: E402
from benchmarks.runner import TASKS_DIR, run_task  # noqa: E402

ALGEBRAIC = {"diag_scale_matmul", "gemm_divide_sum_scale"}


@pytest.mark.parametrize("case", CASES)
def test_case_study_on_cuda(case):
    out, res = run_task(TASKS_DIR / f"{case}.py", "cuda", {}, BuiltinPolicy(), max_turns=30)
    assert out.correct, out.summary
    assert "kernels/fused.cu" in res.best.files
    if case in ALGEBRAIC:
        assert out.speedup_vs_eager is not None and out.speedup_vs_eager > 10.0, out.summary
    else:
        assert out.reward is not None and out.reward >= 1
