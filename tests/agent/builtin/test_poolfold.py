"""An average pool after a convolution folded into it (agent.builtin.poolfold): the candidate
against the reference module for convolutions and transposed convolutions of 1 to 3 spatial dims,
strides, paddings, output paddings, groups and overlapping pools, with ops constant over space
between the two; and the shapes where the fold is not exact or not cheaper are left alone."""

from __future__ import annotations

import pytest
import torch

from agent.builtin.pipeline import build_candidate
from agent.builtin.rewrites import all_rewrites
from tests.agent.builtin.test_export_capture import _analysis, _check_candidate

TEMPLATE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.{conv}
        self.pool = nn.{pool}
        self.scale = 0.75
        self.shift = nn.Parameter(torch.randn({shift}))

    def forward(self, x):
        return torch.tanh({body})


def get_inputs():
    return [torch.randn({x})]


def get_init_inputs():
    return []
"""


def _src(conv: str, pool: str, x: str, body: str = "self.pool(self.conv(x))", shift: str = "1") -> str:
    return TEMPLATE.format(conv=conv, pool=pool, x=x, body=body, shift=shift)


FOLDED = {
    "conv2d k3 s1": _src("Conv2d(4, 6, 3)", "AvgPool2d(2)", "2, 4, 13, 12"),
    "conv2d k3 s2 p1 groups 2, scale and shift between": _src(
        "Conv2d(4, 6, 3, stride=2, padding=1, groups=2)",
        "AvgPool2d(2)",
        "2, 4, 15, 17",
        "self.pool(self.conv(x) * self.scale + self.shift)",
        "6, 1, 1",
    ),
    "conv1d overlapping pool": _src("Conv1d(3, 5, 5, padding=2)", "AvgPool1d(4, stride=3)", "2, 3, 29"),
    "conv3d k3": _src("Conv3d(2, 3, 3)", "AvgPool3d(2)", "2, 2, 7, 8, 9"),
    "conv2d 1x1 (the pool goes first)": _src("Conv2d(6, 4, 1)", "AvgPool2d(2)", "2, 6, 9, 10"),
    "conv_transpose2d s2 p1 op1": _src(
        "ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1)", "AvgPool2d(2)", "2, 4, 6, 7"
    ),
    "conv_transpose3d s2 p1, scale between, shift after": _src(
        "ConvTranspose3d(3, 4, 3, stride=2, padding=1)",
        "AvgPool3d(2)",
        "2, 3, 5, 6, 4",
        "self.pool(self.conv(x) * self.scale) + self.shift",
        "4, 1, 1, 1",
    ),
    "conv_transpose1d s3 k5 p2, groups 2": _src(
        "ConvTranspose1d(4, 6, 5, stride=3, padding=2, groups=2)", "AvgPool1d(3)", "2, 4, 11"
    ),
}


@pytest.mark.parametrize("case", sorted(FOLDED))
def test_the_folded_convolution_is_the_reference(case, tmp_path):
    src = FOLDED[case]
    an = _analysis(src, profile=False)
    assert an.ok, an.error
    rs = all_rewrites(an.graph)
    assert "fold_pool_into_conv" in [r.name for r in rs], [r.name for r in rs]
    g = rs[-1].graph
    pools = [n for n in g.nodes if n.op == "aten" and "avg_pool" in n.attrs["target"]]
    if "1x1" in case:  # the pool reads the input; the convolution reads the pool
        assert len(pools) == 1 and pools[0].args[0].name == "x"
    else:
        assert not pools and any(n.attrs.get("recipe") == "tapfold" for n in g.nodes)
    c = build_candidate(g, an.data, "cpu", torch_ops="allow")
    assert "avg_pool" not in c.files["model_new.py"] or "1x1" in case
    # a changed weight is folded again (the derived weight follows the parameter's version)
    _check_candidate(src, c.files, tmp_path, change=lambda m: m.conv.weight.mul_(-1.5))


LEFT = {
    "a nonlinearity between": _src(
        "Conv2d(4, 6, 3)", "AvgPool2d(2)", "2, 4, 12, 12", "self.pool(torch.relu(self.conv(x)))"
    ),
    "a pool with padding": _src("Conv2d(4, 6, 3)", "AvgPool2d(2, padding=1)", "2, 4, 12, 12"),
    "a pool in ceil mode": _src("Conv2d(4, 6, 3)", "AvgPool2d(2, ceil_mode=True)", "2, 4, 13, 13"),
    "a shift that varies over space": _src(
        "Conv2d(4, 6, 3)", "AvgPool2d(2)", "2, 4, 12, 12", "self.pool(self.conv(x) + self.shift)", "10, 10"
    ),
    "a transposed convolution with another stride than the pool's": _src(
        "ConvTranspose2d(4, 3, 3, stride=2)", "AvgPool2d(3)", "2, 4, 6, 6"
    ),
    "a stride-1 pool that would widen the kernel": _src("Conv2d(4, 6, 3)", "AvgPool2d(3, stride=1)", "2, 4, 12, 12"),
    "a dilated convolution": _src("Conv2d(4, 6, 3, dilation=2)", "AvgPool2d(2)", "2, 4, 12, 12"),
}


@pytest.mark.parametrize("case", sorted(LEFT))
def test_shapes_where_the_fold_is_not_exact_or_not_cheaper_are_left_alone(case):
    an = _analysis(LEFT[case], profile=False)
    assert an.ok, an.error
    assert "fold_pool_into_conv" not in [r.name for r in all_rewrites(an.graph)]


def test_the_interpreter_and_the_kernel_fold_the_same_weight():
    """interp's tapfold (a sum of shifted slices) against a direct loop over the definition."""
    from agent.builtin.interp import _tapfold

    w = torch.randn(2, 3, 4, 5)
    at = {"taps": [6, 3], "window": [2, 3], "alpha": [1, 2], "beta": [-2, 1], "gamma": [0, -1], "scale": 1 / 6}
    out = _tapfold(w, at)
    ref = torch.zeros(2, 3, 6, 3)
    for t0 in range(6):
        for t1 in range(3):
            for j0 in range(2):
                for j1 in range(3):
                    u0, u1 = t0 - 2 * j0, 2 * t1 + j1 - 1
                    if 0 <= u0 < 4 and 0 <= u1 < 5:
                        ref[:, :, t0, t1] += w[:, :, u0, u1]
    torch.testing.assert_close(out, ref / 6)
