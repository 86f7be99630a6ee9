"""The graph capture: shapes and ops from the task, clear messages for what cannot be captured."""

from __future__ import annotations

from agent.builtin.graph import analyze_source

from .conftest import task_source

CONTROL_FLOW = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x


def get_inputs():
    return [torch.randn(4, 4)]


def get_init_inputs():
    return []
"""

UNKNOWN_OP = CONTROL_FLOW.replace(
    """        if x.sum() > 0:
            return x * 2
        return x""",
    "        return torch.cumsum(x, dim=1)",
)

CRASHING = CONTROL_FLOW.replace("class Model(nn.Module):", "import os\nos._exit(3)\n\nclass Model(nn.Module):")


def test_it_captures_shapes_ops_and_the_eager_profile():
    an = analyze_source(task_source("rmsnorm_swish", rows=32, hidden=64))
    assert an.ok, an.error
    ops = [n.op for n in an.graph.nodes]
    assert ops == ["input", "pow", "mean", "add", "rsqrt", "mul", "param", "mul", "sigmoid", "mul", "output"]
    assert an.graph.node("mean").shape == [32, 1]
    assert an.graph.node("p_weight").attrs["path"] == "weight"
    assert all(n.dtype == "float32" for n in an.graph.nodes if n.op not in ("output",))
    rows = an.data["eager_profile"]["rows"]
    assert rows and all(r["name"].startswith("aten::") for r in rows)


def test_it_binds_model_attributes_to_runtime_scalars():
    an = analyze_source(task_source("linear_gelu_residual", batch=8, features=16), profile=False)
    assert an.ok, an.error
    scalars = [a for n in an.graph.nodes for a in n.args if type(a).__name__ == "Scalar"]
    bound = [s for s in scalars if s.expr == "self.scale"]
    # scale = 0.5 equals GELU's literal 0.5: only the multiply by self.scale is bound to it
    assert len(bound) == 1
    assert any(s.value == 0.5 and s.expr is None for s in scalars)


def test_it_explains_data_dependent_control_flow():
    an = analyze_source(CONTROL_FLOW, profile=False)
    assert not an.ok
    assert "data-dependent control flow" in an.error


def test_an_op_outside_the_vocabulary_is_captured_by_export_as_an_island():
    an = analyze_source(UNKNOWN_OP, profile=False)
    assert an.ok, an.error
    assert an.data["capture"] == "export"
    assert "cumsum" in an.data["fx_error"] and "not supported" in an.data["fx_error"]
    island = next(n for n in an.graph.nodes if n.op == "aten")
    assert island.attrs["target"] == "aten.cumsum.default" and island.shape == [4, 4]


def test_a_task_that_kills_its_process_does_not_take_the_agent_with_it():
    an = analyze_source(CRASHING, profile=False)
    assert not an.ok
    assert "exit 3" in an.error


def test_a_proxy_that_is_not_control_flow_is_not_called_control_flow():
    """fx's other Proxy errors (iterating one, einops refusing one) are not data-dependent control
    flow: the note says what fx said and no more (KernelBench's Mamba2 read as control flow)."""
    src = CONTROL_FLOW.replace("if x.sum() > 0:", "for _ in x:")
    an = analyze_source(src, profile=False)
    assert "data-dependent control flow" not in an.data.get("fx_error", an.error or ""), an.data


def test_an_assert_on_sizes_is_not_called_data_dependent():
    """fx refuses `assert x.size(1) == 4` as it refuses a branch on values; export captures it. The
    note names the line and does not say data-dependent (DiT's and Attention U-Net's shape asserts
    read as data-dependent control flow)."""
    src = CONTROL_FLOW.replace("        if x.sum() > 0:\n", '        assert x.size(1) == 4, "four"\n        if True:\n')
    an = analyze_source(src, profile=False)
    assert an.ok and an.data["capture"] == "export", an.error
    assert "data-dependent" not in an.data["fx_error"]
    assert 'assert x.size(1) == 4, "four"' in an.data["fx_error"] and "line 8" in an.data["fx_error"]
