"""The task's precision (EvalOptions.precision): the reference and the candidate both run with
the model's floating parameters and buffers and every floating input cast to it, and the preset's
tolerance for that dtype judges the outputs."""

from __future__ import annotations

import pytest

from sandbox import evaluate
from sandbox.options import EvalOptions

TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 32)

    def forward(self, x, idx):
        return self.lin(x).softmax(-1)[idx]


def get_inputs():
    return [torch.randn(16, 64), torch.randint(0, 16, (8,))]


def get_init_inputs():
    return []
"""

# the candidate states the dtypes it was given, so the test can see what it ran with
CANDIDATE = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 32)

    def forward(self, x, idx):
        assert x.dtype == torch.{dtype} and self.lin.weight.dtype == torch.{dtype}, (x.dtype, self.lin.weight.dtype)
        assert idx.dtype == torch.int64  # integer inputs keep their dtype
        return self.lin(x).softmax(-1)[idx]
"""


def _opts(precision: str) -> EvalOptions:
    return EvalOptions(
        backend="cpu", torch_ops="allow", compile_baseline=False, timing_budget_s=0.05, precision=precision
    )


@pytest.mark.parametrize("precision", ["bfloat16", pytest.param("float16", marks=pytest.mark.slow)])
def test_both_sides_run_in_the_tasks_precision(precision):
    res = evaluate(TASK, {"model_new.py": CANDIDATE.format(dtype=precision)}, _opts(precision))
    assert res.status.value == "ok", res.reasons
    assert res.options["precision"] == precision
    assert all(t.passed for t in res.trials)


def test_task_precision_keeps_the_tasks_dtypes():
    res = evaluate(TASK, {"model_new.py": CANDIDATE.format(dtype="float32")}, _opts("task"))
    assert res.status.value == "ok", res.reasons
    wrong = evaluate(TASK, {"model_new.py": CANDIDATE.format(dtype="float32")}, _opts("bfloat16"))
    assert wrong.status.value != "ok"  # the candidate's own check sees bfloat16 inputs


def test_an_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="precision must be one of"):
        _opts("int8").validate()
