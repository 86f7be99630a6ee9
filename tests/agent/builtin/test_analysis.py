"""The graph capture: shapes and ops from the task, clear messages for what cannot be captured."""

from __future__ import annotations

import torch

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


MANY_CONSTANTS = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.tables = [[(i * 4096 + j) / 7.0 for j in range(4096)] for i in range(16)]

    def forward(self, x):
        if x.shape[0] > 1:  # a branch on a size: captured by torch.export, not fx
            for t in self.tables:  # a list of Python numbers: a constant tensor made in the forward each
                x = x + torch.tensor(t)
        return x * 2.0


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
"""


def test_an_analysis_larger_than_the_sandbox_s_log_is_read_whole():
    """16 constants of 4096 values written into the graph: the analysis's result passes the 1 MiB
    of output the sandbox keeps (a large module's graph and exported code do too), which cut its
    JSON line and crashed the policy's planning."""
    an = analyze_source(MANY_CONSTANTS, profile=False)
    assert an.ok, an.error
    constants = [n for n in an.graph.nodes if n.op == "constant"]
    assert len(constants) == 16 and all(n.shape == [4096] for n in constants)
    assert constants[-1].attrs["value"][-1] == torch.tensor((15 * 4096 + 4095) / 7.0).item()  # float32, whole


def test_the_analysis_result_is_not_read_through_a_link_the_task_left(tmp_path):
    """The task runs in the analysis child, which can replace the result file with a link to a
    file of ours: the parent never follows it (its contents would be read as the analysis)."""
    secret = tmp_path / "secret.json"
    secret.write_text('{"ok": false, "error": "the parent\'s secret"}')
    src = task_source("row_softmax_small", rows=4, cols=8).replace(
        "def get_inputs():",
        "import atexit, os\n"
        f"atexit.register(lambda: (os.remove('analysis.json'), os.symlink({str(secret)!r}, 'analysis.json')))\n\n\n"
        "def get_inputs():",
    )
    an = analyze_source(src, profile=False)
    assert not an.ok and "the parent's secret" not in an.error
