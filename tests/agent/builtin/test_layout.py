"""Channels-last convolutions (agent.builtin.layout): the rewritten graph computes the module's
function, a channel reduction becomes a trailing-dim reduction that the row kernels fuse, the
generated candidate is correct under both torch-ops policies, and nothing of ours reads a
channels-last tensor as if it were NCHW."""

from __future__ import annotations

import pytest
import torch

from agent.builtin.interp import run_graph
from agent.builtin.lower import lower
from agent.builtin.pipeline import build_candidate
from agent.builtin.rewrites import channels_last_convs
from tests.agent.builtin.test_export_capture import _analysis, _check_candidate, _module

TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.{conv}
        self.bias = nn.Parameter(torch.randn({bias}))

    def forward(self, x):
        y = self.conv(x)
        return {body}


def get_inputs():
    return [torch.randn({inputs})]


def get_init_inputs():
    return []
"""

CASES = {
    # per-channel bias and an elementwise chain (KernelBench L2/1's shape)
    "conv2d_relu_bias": dict(
        conv="Conv2d(3, 8, 3)", bias="8, 1, 1", body="torch.relu(y) + self.bias", inputs="2, 3, 10, 9"
    ),
    # a minimum over channels, kept dim, then elementwise: a row reduction in NHWC order
    "conv2d_min_tanh": dict(
        conv="Conv2d(4, 6, 3)",
        bias="1, 1, 1",
        body="torch.tanh(torch.min(y, dim=1, keepdim=True)[0]) * self.bias",
        inputs="2, 4, 8, 8",
    ),
    # softmax over channels then a per-channel scale
    "conv2d_softmax_scale": dict(
        conv="Conv2d(4, 6, 3, padding=1)",
        bias="6, 1, 1",
        body="torch.softmax(y, dim=1) * self.bias",
        inputs="2, 4, 7, 5",
    ),
    # a 3-d convolution (torch.export: an aten island), logsumexp over channels without keepdim
    "conv3d_logsumexp": dict(
        conv="Conv3d(3, 5, 3)", bias="1", body="torch.logsumexp(y, dim=1) + self.bias", inputs="2, 3, 6, 7, 5"
    ),
    # a transposed 3-d convolution with a reduction over depth: the channel stays, the order follows
    "convt3d_amax_depth": dict(
        conv="ConvTranspose3d(3, 4, 3, stride=2)",
        bias="4, 1, 1",
        body="torch.sigmoid(torch.amax(y, dim=2)) - self.bias",
        inputs="2, 3, 3, 4, 5",
    ),
}


def _src(name: str) -> str:
    return TASK.format(**CASES[name])


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_rewritten_graph_computes_the_module(name):
    src = _src(name)
    an = _analysis(src)
    assert an.ok, an.error
    r = channels_last_convs(an.graph)
    assert r is not None and r.name == "channels_last"
    g = r.graph
    assert any(n.op == "channels_last" for n in g.nodes)
    out = g.node(g.output.refs()[0])
    # the output permuted back (a view), unless a reduction over channels left the reference's order
    assert (out.op == "permute") == (name != "conv3d_logsumexp")
    if an.data["capture"] == "export":
        return  # interp runs fx-level graphs only; the candidate test below runs the exported ones
    mod = _module(f"m_{name}", src)
    torch.manual_seed(0)
    model = mod.Model().eval()
    x = mod.get_inputs()
    with torch.no_grad():
        expected = model(*x)
        got = run_graph(g, model, x)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(run_graph(lower(g), model, x), expected, rtol=1e-4, atol=1e-5)


def test_a_channel_reduction_becomes_a_trailing_row_reduction():
    an = _analysis(_src("conv2d_softmax_scale"))
    g = channels_last_convs(an.graph).graph
    sm = next(n for n in g.nodes if n.op == "softmax")
    assert sm.attrs["dim"] == 3 and sm.shape == [2, 7, 5, 6]
    lower(g)  # over NCHW the lowering refuses a softmax over dim 1 (a kernel of its own); here it is a row
    an = _analysis(_src("conv3d_logsumexp"))
    lse = next(n for n in channels_last_convs(an.graph).graph.nodes if n.op == "logsumexp")
    assert lse.attrs["dim"] == [4] and lse.shape == [2, 4, 5, 3]


@pytest.mark.parametrize("torch_ops", ["allow", "forbid"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_candidate_is_correct(name, torch_ops, tmp_path):
    src = _src(name)
    an = _analysis(src)
    g = channels_last_convs(an.graph).graph
    c = build_candidate(g, an.data, "cpu", torch_ops=torch_ops)
    code = c.files["model_new.py"]
    assert "channels-last memory" in code
    _check_candidate(src, c.files, tmp_path, other_inputs=[[torch.randn(*_shape(name))]])


def _shape(name: str) -> list[int]:
    return [int(s) for s in CASES[name]["inputs"].split(",")]


def test_a_reader_in_nchw_order_reads_through_a_copy_and_the_result_matches(tmp_path):
    """A reader outside the region that is neither the output nor a convolution (a flatten then a
    sum over the last dim) reads the value permuted back, which a kernel of ours copies to NCHW at
    its boundary: named in the description, and the candidate is correct."""
    src = TASK.format(
        conv="Conv2d(3, 4, 3)", bias="1", body="torch.sum(y.flatten(1), dim=1) * self.bias", inputs="2, 3, 6, 6"
    )
    an = _analysis(src)
    r = channels_last_convs(an.graph)
    assert r is not None and "1 value(s) are read back in NCHW order through a copy" in r.detail
    c = build_candidate(r.graph, an.data, "cpu", torch_ops="allow")
    assert ".contiguous()" in c.files["model_new.py"]
    _check_candidate(src, c.files, tmp_path)


CHAIN = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 6, 3, stride=2)

    def forward(self, x):
        y = torch.relu(self.a(x))
        return torch.amax(torch.sigmoid(self.b(y)), dim=1)


def get_inputs():
    return [torch.randn(2, 3, 9, 11)]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("torch_ops", ["allow", "forbid"])
def test_a_convolution_reads_the_previous_ones_channels_last_output_as_it_lies(torch_ops, tmp_path):
    an = _analysis(CHAIN)
    r = channels_last_convs(an.graph)
    assert r is not None and r.detail.startswith("Gave a (") and ", b (" in r.detail  # both convolutions
    g = r.graph
    b = next(n for n in g.nodes if n.op == "conv2d" and n.attrs.get("module") == "b")
    assert g.node(b.args[0].name).op == "permute"  # conv a's relu, permuted back: a view, no copy
    c = build_candidate(g, an.data, "cpu", torch_ops=torch_ops)
    _check_candidate(CHAIN, c.files, tmp_path, other_inputs=[[torch.randn(3, 3, 9, 11)]])


def test_the_channels_last_weight_follows_a_changed_parameter(tmp_path):
    """The weight's channels-last copy is kept between calls and made again when the parameter
    changes in place (its version moves), as after an optimiser step or load_state_dict."""
    src = _src("conv2d_relu_bias")
    an = _analysis(src)
    c = build_candidate(channels_last_convs(an.graph).graph, an.data, "cpu", torch_ops="allow")
    assert "_kw_kept(self, '_kw_cl', " in c.files["model_new.py"]
    _check_candidate(src, c.files, tmp_path, change=lambda m: m.conv.weight.mul_(-1.5))


RESIDUAL = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.a1 = nn.Conv2d(8, 8, 3, padding=1)
        self.a2 = nn.Conv2d(8, 8, 3, padding=1)
        self.b1 = nn.Conv2d(8, 8, 3, padding=1)
        self.b2 = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        x = torch.relu(self.a2(torch.relu(self.a1(x))) + x)
        return torch.relu(self.b2(torch.relu(self.b1(x))) + x)


def get_inputs():
    return [torch.randn(2, 3, 7, 6)]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("torch_ops", ["allow", "forbid"])
def test_residual_blocks_stay_channels_last_without_copies(torch_ops, tmp_path):
    """A residual add of two convolutions' values reads both as they lie: each is another region's
    value viewed back, so nothing of the two blocks is copied to NCHW."""
    an = _analysis(RESIDUAL)
    r = channels_last_convs(an.graph)
    assert r is not None and "through a copy" not in r.detail
    adds = [n for n in r.graph.nodes if n.op == "add" and len(n.shape or []) == 4 and n.shape[-1] == 8]
    assert len(adds) >= 2  # the residual adds moved into NHWC order
    c = build_candidate(r.graph, an.data, "cpu", torch_ops=torch_ops)
    _check_candidate(RESIDUAL, c.files, tmp_path, other_inputs=[[torch.randn(1, 3, 5, 9)]])


SIZED = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3)
        self.scale = nn.Parameter(torch.randn(channels, 1, 1))

    def forward(self, x):
        return torch.softmax(torch.relu(self.conv(x)) * self.scale, dim=1)


channels = {c}


def get_inputs():
    return [torch.randn(2, 3, 8, 7)]


def get_init_inputs():
    return [channels]
"""


def test_the_candidate_follows_other_init_arguments(tmp_path):
    """The sandbox's shape trial builds the model with other init arguments: the views of the bias
    and of per-channel operands take the channel count at run time (-1), not the captured one."""
    an = _analysis(SIZED.format(c=8))
    c = build_candidate(channels_last_convs(an.graph).graph, an.data, "cpu", torch_ops="allow")
    _check_candidate(SIZED.format(c=8), c.files, tmp_path)
    (tmp_path / "other").mkdir()
    _check_candidate(SIZED.format(c=5), c.files, tmp_path / "other")


def test_the_layout_candidate_is_measured_where_it_can_win():
    """On the CPU always; on a GPU only where the convolutions run in 16-bit (cuDNN's NHWC
    kernels are its tensor-core ones; in float32 without TF32 they lost on the H200)."""
    from agent.builtin.policy import _layout_may_pay

    fp32 = {"inputs": [{"shape": [8, 3, 32, 32], "dtype": "float32"}]}
    half = {"inputs": [{"shape": [8, 3, 32, 32], "dtype": "float16"}]}
    assert _layout_may_pay("cpu", fp32, {})
    assert not _layout_may_pay("cuda", fp32, {})
    assert not _layout_may_pay("cuda", half, {"precision": "float32"})
    assert _layout_may_pay("cuda", fp32, {"precision": "bfloat16"})
    assert _layout_may_pay("cuda", half, None)
