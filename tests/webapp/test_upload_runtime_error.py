"""An uploaded module that parses but fails when it runs: the error that matters (the shape
mismatch, where in the user's file) comes first, not the tracer's wrapper about its own nodes.
Real tracebacks: torch.fx ShapeProp and a plain call on a module whose inputs do not fit."""

from __future__ import annotations

import importlib.util
import traceback

import pytest

from webapp.jobs.task_check import error_that_matters

MISFIT = """import torch
from torch import nn


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 8)

    def forward(self, x):
        return torch.relu(self.proj(x))
"""
EXPECTED = "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x16 and 32x8) (task.py, line 11, in forward)"


@pytest.fixture
def head(tmp_path):
    path = tmp_path / "task.py"
    path.write_text(MISFIT)
    spec = importlib.util.spec_from_file_location("misfit_task", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Head()


def failure(fn) -> str:
    try:
        fn()
    except Exception:  # the traceback is what is tested
        return traceback.format_exc()
    raise AssertionError("it ran")


def test_shapeprop_s_wrapper_gives_way_to_the_shape_mismatch(head):
    import torch
    from torch.fx.passes.shape_prop import ShapeProp

    text = failure(lambda: ShapeProp(torch.fx.symbolic_trace(head)).propagate(torch.randn(4, 16)))
    assert "ShapeProp error for" in text  # the wrapper is there, and last
    # (the traced forward is torch.fx's generated code: no frame of the user's file to name)
    assert error_that_matters(text) == "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x16 and 32x8)"


def test_a_plain_call_says_the_same(head):
    import torch

    assert error_that_matters(failure(lambda: head(torch.randn(4, 16)))) == EXPECTED


def test_a_message_without_a_traceback_is_kept():
    assert (
        error_that_matters("task: Model(*get_init_inputs()) failed\nmore") == "task: Model(*get_init_inputs()) failed"
    )
    assert error_that_matters("") == ""
