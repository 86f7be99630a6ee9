"""3xTF32 convolutions (agent/builtin/tf32x3.py CONV_HELPER) without a GPU: the thirds stacked
along the input channels per group, for plain, grouped, strided, transposed and 3-d convolutions,
run through a CPU model of the split kernel and of cuDNN's call (float64, so what is checked is
the layout: a third paired with the wrong one is off by about 2^-11 of the result, the scheme's
own error is about 2^-22); the first call's timing decides and is kept per shape; which
convolutions the generator hands to the helper. The GPU numbers are docs/benchmarks.md's
(benchmarks/conv3x_probe.py)."""

from __future__ import annotations

import ctypes

import pytest
import torch
import torch.nn.functional as F

from agent.builtin import tf32x3
from agent.builtin.graph import analyze_source
from agent.builtin.modelgen import KEPT_HELPER
from agent.builtin.pipeline import build_candidate

from .test_codegen import _exec_model
from .test_tf32x3 import CpuLib, reference_and_candidate


class CpuConvLib(CpuLib):
    """The split kernel on the CPU (test_tf32x3.CpuLib), counting its calls."""

    def __init__(self):
        super().__init__()
        self.splits = 0

    def kw_split3_tf32(self, *args):
        self.splits += 1
        super().kw_split3_tf32(*args)


def _cudnn_on_cpu(x, w, transposed, stride, padding, dilation, output_padding, groups):
    """cuDNN's convolution as F.conv*d in float64 (the thirds are exact in float32)."""
    nd = w.dim() - 2
    x, w = x.double(), w.double()
    if transposed:
        conv = getattr(F, f"conv_transpose{nd}d")
        return conv(x, w, None, stride, padding, output_padding, groups, dilation).float()
    return getattr(F, f"conv{nd}d")(x, w, None, stride, padding, dilation, groups).float()


def _ns(faster: bool = True) -> dict:
    ns: dict = {"torch": torch, "ctypes": ctypes}
    exec(KEPT_HELPER + tf32x3.CONV_HELPER, ns)
    ns["_kw_cudnn"] = _cudnn_on_cpu
    ns["_kw_faster"] = lambda fast, slow: faster
    return ns


CASES = {
    "conv2d": (
        torch.ops.aten.conv2d.default,
        "conv",
        (2, 12, 9, 9),
        (8, 12, 3, 3),
        dict(stride=[1, 1], padding=[1, 1]),
    ),
    "grouped, strided": (
        torch.ops.aten.conv2d.default,
        "conv",
        (2, 12, 11, 11),
        (9, 4, 3, 3),
        dict(stride=[2, 2], padding=[1, 1], dilation=[1, 1], groups=3),
    ),
    "conv3d": (torch.ops.aten.conv3d.default, "conv", (2, 6, 5, 6, 7), (4, 6, 3, 3, 3), {}),
    "transposed 2-d, grouped, output padding": (
        torch.ops.aten.conv_transpose2d.input,
        "conv_transpose",
        (2, 8, 6, 5),
        (8, 3, 3, 2),
        dict(stride=[2, 2], padding=[1, 0], output_padding=[1, 1], groups=2, dilation=[1, 1]),
    ),
    "transposed 3-d": (
        torch.ops.aten.conv_transpose3d.input,
        "conv_transpose",
        (2, 6, 4, 5, 3),
        (6, 5, 3, 3, 3),
        dict(stride=[2, 2, 2], padding=[1, 1, 1]),
    ),
}


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_stacked_thirds_compute_the_convolution(case, with_bias):
    op, kind, xs, ws, geometry = CASES[case]
    torch.manual_seed(0)
    x, w = torch.randn(xs), torch.randn(ws)
    out_channels = ws[1] * geometry.get("groups", 1) if kind == "conv_transpose" else ws[0]
    bias = torch.randn(out_channels) if with_bias else None
    ns, lib, module = _ns(), CpuConvLib(), torch.nn.Module()
    got = ns["_kw_conv3"](lib, op, kind, None, module, "c", x, w, bias, **geometry)
    exact = op(x.double(), w.double(), None if bias is None else bias.double(), **geometry)
    assert lib.splits == 2  # the input and the weight
    scale = op(x.double().abs(), w.double().abs(), None, **geometry)  # the sum of |terms| per output
    err = ((got.double() - exact).abs() / scale.clamp_min(1e-30)).max().item()  # no terms: both exact
    assert err < 1e-5, err  # the scheme's own: ~2^-22; a wrong pairing (a lo third left out): ~2^-11
    ns["_kw_conv3"](lib, op, kind, None, module, "c", x, w, bias, **geometry)
    assert lib.splits == 3  # the weight's split is kept: only the input is split again


def test_float32_is_kept_where_it_timed_faster_and_the_pick_is_kept_per_shape():
    ns, lib = _ns(faster=False), CpuConvLib()
    op, kind, xs, ws, geometry = CASES["conv2d"]
    timed = []
    ns["_kw_faster"] = lambda fast, slow: timed.append(1) or False
    x, w = torch.randn(xs), torch.randn(ws)
    for _ in range(3):
        got = ns["_kw_conv3"](lib, op, kind, None, torch.nn.Module(), "c", x, w, None, **geometry)
    assert torch.equal(got, op(x, w, None, **geometry)) and lib.splits == 0 and len(timed) == 1
    ns["_kw_conv3"](lib, op, kind, None, torch.nn.Module(), "c", torch.randn(3, *xs[1:]), w, None, **geometry)
    assert len(timed) == 2  # another batch is another shape: timed again


CONV_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose3d(8, 16, 3, stride=2, padding=1, bias={bias})
        self.conv = nn.Conv2d(16, 24, 3, padding=1, bias=False)

    def forward(self, x, y):
        return self.up(x), self.conv(y)


def get_inputs():
    return [torch.randn(2, 8, 5, 6, 4), torch.randn(2, 16, 12, 10)]


def get_init_inputs():
    return []
"""


@pytest.fixture
def every_conv(monkeypatch):
    """The tests below run tiny convolutions that would not be worth timing."""
    monkeypatch.setattr(tf32x3, "MIN_FLOP", 0)


@pytest.mark.parametrize("bias", [True, False])
def test_the_generated_forward_computes_the_reference(every_conv, bias):
    """The cuda candidate with gemm="3xtf32" through the CPU models: the reference's values, and
    both convolutions went through the helper."""
    src = CONV_TASK.format(bias=bias)
    an = analyze_source(src)
    model = build_candidate(an.graph, an.data, "cuda", gemm="3xtf32", torch_ops="allow").files["model_new.py"]
    assert model.count("= _kw_conv3(lib, torch.ops.aten.") == 2, model
    assert "torch.cudnn_convolution_transpose(" in model

    lib = CpuConvLib()
    ns = _exec_model(model, lambda *a, **k: lib)
    ns["_kw_cudnn"], ns["_kw_faster"] = _cudnn_on_cpu, (lambda fast, slow: True)
    new, ref, inputs = reference_and_candidate(src, ns)
    calls = []
    real = ns["_kw_conv3"]
    ns["_kw_conv3"] = lambda *a, **k: calls.append(a[2]) or real(*a, **k)
    got = new(*inputs)
    for g, e in zip(got, ref(*inputs), strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
    assert sorted(calls) == ["conv", "conv_transpose"]


def test_under_forbid_a_bias_inside_the_aten_call_stays_float32(every_conv):
    an = analyze_source(CONV_TASK.format(bias=True))
    model = build_candidate(an.graph, an.data, "cuda", gemm="3xtf32", torch_ops="forbid").files["model_new.py"]
    assert "torch.ops.aten.conv_transpose3d.input, 'conv_transpose'" not in model
    assert model.count("= _kw_conv3(lib, torch.ops.aten.conv2d.default, 'conv'") == 1


def test_small_convolutions_are_not_timed():
    small = analyze_source(CONV_TASK.format(bias=True)).graph
    assert not any(tf32x3.conv_worth_timing(small, n) for n in small.nodes)  # below MIN_FLOP


@pytest.mark.slow  # moved out of the fast tier: CI near its 20 minutes (2026-12-06)
def test_depthwise_convolutions_are_not_timed(every_conv):
    dw = CONV_TASK.format(bias=True).replace(
        "nn.Conv2d(16, 24, 3, padding=1, bias=False)", "nn.Conv2d(16, 16, 3, padding=1, groups=16)"
    )
    g = analyze_source(dw).graph
    conv = next(n for n in g.nodes if n.op == "conv2d")
    assert not tf32x3.conv_worth_timing(g, conv)  # 9 taps of one channel: bound by memory
    dense = analyze_source(dw.replace("groups=16", "groups=1")).graph
    assert tf32x3.conv_worth_timing(dense, next(n for n in dense.nodes if n.op == "conv2d"))


INCEPTION_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(32, 8, 1)
        self.reduce = nn.Conv2d(32, 12, 1)
        self.b = nn.Conv2d(12, 8, 5, padding=2)

    def forward(self, x):
        return torch.cat([self.a(x), self.b(self.reduce(x))], 1)


def get_inputs():
    return [torch.randn(2, 32, 6, 6)]


def get_init_inputs():
    return []
"""


class _CatLib(CpuConvLib):
    def kw_copy_block(self, src, dst, outer, n_src, n_dst, off, stream):
        dst.view(outer, n_dst)[:, off : off + n_src].copy_(src.reshape(outer, n_src))


@pytest.mark.parametrize("torch_ops", ["allow", "forbid"])
def test_a_convolution_that_keeps_its_bias_in_the_call_keeps_it_in_3xtf32(every_conv, torch_ops):
    """GoogleNet's Inception branches (KernelBench L3/7): a convolution feeding a cat or another
    convolution has no epilogue to fuse its bias add into, so lowering leaves the bias in the
    library call (pipeline.LONE_BIAS). The 3xTF32 candidate passed None for it: 9,965 of L3/7's
    10,000 outputs wrong. Under allow the helper adds it; under forbid (its add would be a torch
    op) the convolution stays the float32 library call with its bias."""
    an = analyze_source(INCEPTION_TASK)
    model = build_candidate(an.graph, an.data, "cuda", gemm="3xtf32", torch_ops=torch_ops).files["model_new.py"]
    helped = model.count("= _kw_conv3(lib, torch.ops.aten.conv2d.default, 'conv'")
    assert helped == (3 if torch_ops == "allow" else 0), model
    lib = _CatLib()
    ns = _exec_model(model, lambda *a, **k: lib)
    ns["_kw_cudnn"], ns["_kw_faster"] = _cudnn_on_cpu, (lambda fast, slow: True)
    new, ref, inputs = reference_and_candidate(INCEPTION_TASK, ns)
    torch.testing.assert_close(new(*inputs), ref(*inputs), rtol=1e-5, atol=1e-5)
    assert lib.splits == 2 * helped
