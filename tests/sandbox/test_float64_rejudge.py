"""A candidate more exact than the float32 reference passes (judged against the task in
float64); a wrong one that is just as far from the reference still fails. CPU backend."""

from __future__ import annotations

from sandbox import evaluate
from sandbox.schema import Status

# (x * 1.0001).sum - x.sum on large values: the float32 reference loses most of the digits of
# the small difference; computed in float64 it is 1e-4 * sum(x) almost exactly.
TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return (x * 1.0001).sum(dim=1) - x.sum(dim=1)


rows = 64
cols = 8192


def get_inputs():
    return [torch.randn(rows, cols) * 100]


def get_init_inputs():
    return []
"""

MODEL_NEW = """import kwrt
import torch
import torch.nn as nn

lib = kwrt.load()


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
        lib.scaled_row_sum(x, out, x.shape[0], x.shape[1])
        return out
"""

KERNEL = """#include <cstdint>
extern "C" int scaled_row_sum(const float* x, float* out, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) {
        double s = 0;
        for (int64_t c = 0; c < cols; ++c) s += (double)x[r * cols + c];
        out[r] = (float)(s * %s);
    }
    return 0;
}
"""


def _files(scale: str) -> dict[str, str]:
    return {"model_new.py": MODEL_NEW, "kernels/rowsum.cpp": KERNEL % scale}


def test_more_exact_than_the_reference_passes(quick):
    res = evaluate(TASK, _files("1e-4"), quick())
    assert res.status == Status.OK, res.reasons
    rejudged = [t for t in res.trials if "float64" in t.message]
    assert rejudged, [t.message for t in res.trials]
    assert any("float64" in f for f in res.audit.findings)


def test_wrong_by_as_much_as_the_reference_error_still_fails(quick):
    # 10% off: outside the tolerance of the float32 reference (as the exact one is), and ten times
    # farther from the float64 result than the float32 reference itself
    res = evaluate(TASK, _files("1.1e-4"), quick())
    assert res.status == Status.INCORRECT, res.reasons
    assert any("against float64" in r for r in res.reasons), res.reasons
