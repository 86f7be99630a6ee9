"""An average pool after a convolution folded into it (agent.builtin.poolfold): the candidate
against the reference module for convolutions and transposed convolutions of 1 to 3 spatial dims,
strides, paddings, output paddings, groups and overlapping pools, with ops constant over space
between the two; and the shapes where the fold is not exact or not cheaper are left alone."""

from __future__ import annotations

import torch

from agent.builtin.pipeline import build_candidate
from agent.builtin.poolfold import fold_pools
from agent.builtin.rewrites import all_rewrites
from tests.agent.builtin.test_export_capture import _analysis, _check_candidate


def _module(cases: dict[str, tuple[str, str, str, str]]) -> str:
    """One KernelBench-format task whose forward runs every case on its own input and returns them
    all (one capture and one candidate for many geometries). A case: (convolution, pool, input
    shape, the body: a format string over {conv}, {pool} and {x})."""
    init, args, outs, inputs = [], [], [], []
    for i, (conv, pool, shape, body) in enumerate(cases.values()):
        init += [f"        self.conv{i} = nn.{conv}", f"        self.pool{i} = nn.{pool}"]
        args.append(f"x{i}")
        outs.append(body.format(conv=f"self.conv{i}", pool=f"self.pool{i}", x=f"x{i}"))
        inputs.append(f"torch.randn({shape})")
    return f"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
{chr(10).join(init)}
        self.shift_c = nn.Parameter(torch.randn(6, 1, 1))
        self.shift_c3 = nn.Parameter(torch.randn(4, 1, 1, 1))
        self.shift_hw = nn.Parameter(torch.randn(10, 10))

    def forward(self, {", ".join(args)}):
        return ({", ".join(f"torch.tanh({o})" for o in outs)},)


def get_inputs():
    return [{", ".join(inputs)}]


def get_init_inputs():
    return []
"""


def scale_weights(n: int):
    """A change to every case's convolution weight (conv0 ... conv{n-1}), for _check_candidate."""

    def change(m):
        for i in range(n):
            getattr(m, f"conv{i}").weight.mul_(-1.5)

    return change


PLAIN = "{pool}({conv}({x}))"
FOLDED = {
    "conv2d k3 s1": ("Conv2d(4, 6, 3)", "AvgPool2d(2)", "2, 4, 13, 12", PLAIN),
    "conv2d k3 s2 p1 groups 2, scale and shift between": (
        "Conv2d(4, 6, 3, stride=2, padding=1, groups=2)",
        "AvgPool2d(2)",
        "2, 4, 15, 17",
        "{pool}({conv}({x}) * 0.75 + self.shift_c)",
    ),
    "conv1d overlapping pool": ("Conv1d(3, 5, 5, padding=2)", "AvgPool1d(4, stride=3)", "2, 3, 29", PLAIN),
    "conv3d k3": ("Conv3d(2, 3, 3)", "AvgPool3d(2)", "2, 2, 7, 8, 9", PLAIN),
    "conv2d 1x1 (the pool goes first)": ("Conv2d(6, 4, 1)", "AvgPool2d(2)", "2, 6, 9, 10", PLAIN),
    "conv_transpose2d s2 p1 op1": (
        "ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1)",
        "AvgPool2d(2)",
        "2, 4, 6, 7",
        PLAIN,
    ),
    "conv_transpose3d s2 p1, scale between, shift after": (
        "ConvTranspose3d(3, 4, 3, stride=2, padding=1)",
        "AvgPool3d(2)",
        "2, 3, 5, 6, 4",
        "{pool}({conv}({x}) * 0.75) + self.shift_c3",
    ),
    "conv_transpose1d s3 k5 p2, groups 2": (
        "ConvTranspose1d(4, 6, 5, stride=3, padding=2, groups=2)",
        "AvgPool1d(3)",
        "2, 4, 11",
        PLAIN,
    ),
}
ALL_FOLDED = _module(FOLDED)


def test_the_folded_convolutions_are_the_reference(tmp_path):
    an = _analysis(ALL_FOLDED, profile=False)
    assert an.ok, an.error
    rs = all_rewrites(an.graph)
    assert "fold_pool_into_conv" in [r.name for r in rs], [r.name for r in rs]
    g = rs[-1].graph
    pools = [n for n in g.nodes if n.op == "aten" and "avg_pool" in n.attrs["target"]]
    one_by_one = list(FOLDED).index("conv2d 1x1 (the pool goes first)")
    # only the 1x1 convolution's pool is left, and it reads that case's input
    assert [p.args[0].name for p in pools] == [f"x{one_by_one}"], [(p.name, p.args) for p in pools]
    assert sum(n.attrs.get("recipe") == "tapfold" for n in g.nodes) == len(FOLDED) - 1
    c = build_candidate(g, an.data, "cpu", torch_ops="allow")

    # a changed weight is folded again (the derived weight follows its version)
    _check_candidate(ALL_FOLDED, c.files, tmp_path, change=scale_weights(len(FOLDED)))


LEFT = {
    "a nonlinearity between": ("Conv2d(4, 6, 3)", "AvgPool2d(2)", "2, 4, 12, 12", "{pool}(torch.relu({conv}({x})))"),
    "a pool with padding": ("Conv2d(4, 6, 3)", "AvgPool2d(2, padding=1)", "2, 4, 12, 12", PLAIN),
    "a pool in ceil mode": ("Conv2d(4, 6, 3)", "AvgPool2d(2, ceil_mode=True)", "2, 4, 13, 13", PLAIN),
    "a shift that varies over space": (
        "Conv2d(4, 6, 3)",
        "AvgPool2d(2)",
        "2, 4, 12, 12",
        "{pool}({conv}({x}) + self.shift_hw)",
    ),
    "a transposed convolution with another stride than the pool's": (
        "ConvTranspose2d(4, 3, 3, stride=2)",
        "AvgPool2d(3)",
        "2, 4, 6, 6",
        PLAIN,
    ),
    "a stride-1 pool that would widen the kernel": ("Conv2d(4, 6, 3)", "AvgPool2d(3, stride=1)", "2, 4, 12, 12", PLAIN),
    "a dilated convolution": ("Conv2d(4, 6, 3, dilation=2)", "AvgPool2d(2)", "2, 4, 12, 12", PLAIN),
    "a product of two convolutions": (
        "Conv2d(4, 6, 3)",
        "AvgPool2d(2)",
        "2, 4, 12, 12",
        "{pool}({conv}({x}) * {conv}({x}))",
    ),
}


def test_shapes_where_the_fold_is_not_exact_or_not_cheaper_are_left_alone():
    an = _analysis(_module(LEFT), profile=False)
    assert an.ok, an.error
    assert fold_pools(an.graph) is None


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
