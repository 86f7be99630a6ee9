"""Generated CUDA kernels whose source checks (test_codegen.py) cannot show them right: run through
the real sandbox on the GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

from agent.builtin.graph import analyze_source  # noqa: E402
from agent.builtin.pipeline import build_candidate  # noqa: E402
from sandbox import evaluate  # noqa: E402

from .conftest import cuda_options  # noqa: E402
from .test_codegen import LOGIT_SCALE  # noqa: E402


def test_a_per_row_output_without_a_reduction_is_computed(tmp_path):
    """SwinV2's per-head logit scale (log of a 0-d tensor, clamp, exp): every SwinV2 candidate put
    out NaN while the elementwise kernel left such outputs unwritten."""
    an = analyze_source(LOGIT_SCALE, device="cuda", profile=False)
    assert an.ok, an.error
    res = evaluate(
        LOGIT_SCALE, build_candidate(an.graph, an.data, "cuda").files, cuda_options(tmp_path, torch_ops="allow")
    )
    assert res.status.value == "ok", res.reasons
