"""The shape trial (issue 17, item 2): a candidate that is right only at the benchmark's size, or
below it, must fail. The trial scales the task's module-level size constants down AND up (where
the reference runs and the inputs stay within bounds) and says which shapes it checked."""

from __future__ import annotations

from sandbox import evaluate
from sandbox.schema import Status
from tests.sandbox.helpers import task

# Computes only the top-left 512x512 tile of the product (the rest stays zero): exact at the
# task's N = 512 and at any smaller N, wrong at 1024, where it covers a quarter of the output.
TOP_LEFT_TILE = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, A, B):
        n, m = A.shape[0], B.shape[1]
        t, u = min(n, 512), min(m, 512)
        out = torch.zeros(n, m, dtype=A.dtype, device=A.device)
        out[:t, :u] = A[:t] @ B[:, :u]
        return out
"""


def test_a_kernel_that_computes_only_the_benchmarks_tile_fails_the_larger_shape(quick):
    res = evaluate(task("matmul_512.py"), {"model_new.py": TOP_LEFT_TILE}, quick(torch_ops="allow", cpu_threads=1))
    assert res.status == Status.INCORRECT, (res.status, res.reasons)
    shape = [t for t in res.trials if t.kind == "shape"]
    assert [t.passed for t in shape if "N=512->1024" in t.message] == [False], [t.message for t in shape]
    assert all(t.passed for t in res.trials if t.kind == "random")  # right at the benchmark's size
    assert any("N=512->1024" in r for r in res.reasons)


def test_the_result_says_which_shapes_were_checked(quick):
    honest = {"model_new.py": task("matmul_512.py").replace("class Model(", "class ModelNew(")}
    res = evaluate(task("matmul_512.py"), honest, quick(torch_ops="allow", cpu_threads=1))
    assert res.status == Status.OK, res.reasons
    notes = [t.message for t in res.trials if t.kind == "shape"]
    assert any("N=512->384" in n for n in notes) and any("N=512->1024" in n for n in notes), notes
    assert any(
        f.startswith("protocol: shapes checked: N=512 (benchmark, inputs 512x512, 512x512); N=512->384; N=512->1024")
        for f in res.audit.findings
    ), res.audit.findings
