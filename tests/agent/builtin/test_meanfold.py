"""A mean or sum over space after a convolution from sums of the input (agent.builtin.meanfold):
the candidate against the reference for transposed convolutions (strides, paddings, output
paddings, 1 to 3 dims) and stride-1 convolutions with padding, with ops constant over space in
between, keepdim or not, a sum, an adaptive pool to 1; and what it must leave alone."""

from __future__ import annotations

import torch

from agent.builtin.meanfold import fold_means
from agent.builtin.pipeline import build_candidate
from agent.builtin.rewrites import all_rewrites
from tests.agent.builtin.test_export_capture import _analysis, _check_candidate
from tests.agent.builtin.test_poolfold import _module, scale_weights

MEAN = "torch.mean({conv}({x}), dim=(2, 3), keepdim=True)"
FOLDED = {
    "conv_transpose2d, no padding (every tap lands)": ("ConvTranspose2d(4, 6, 3)", "Identity()", "2, 4, 9, 8", MEAN),
    "conv_transpose2d s2 p1 op1, a scale between, mean of the mean": (
        "ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)",
        "Identity()",
        "2, 4, 7, 6",
        "torch.mean(torch.mean({conv}({x}) * 0.5, dim=[2, 3], keepdim=True), dim=[2, 3], keepdim=True)",
    ),
    "conv2d k3 p1, shift between, sum without keepdim": (
        "Conv2d(4, 6, 3, padding=1)",
        "Identity()",
        "2, 4, 7, 9",
        "({conv}({x}) + self.shift_c).sum(dim=(-2, -1)).unsqueeze(-1).unsqueeze(-1)",
    ),
    "conv1d k3, no padding": (
        "Conv1d(3, 6, 3)",
        "Identity()",
        "2, 3, 11",
        "{conv}({x}).mean(dim=2, keepdim=True).unsqueeze(-1)",
    ),
    "conv_transpose3d s2 p1 op1, adaptive pool to 1": (
        "ConvTranspose3d(3, 4, 3, stride=2, padding=1, output_padding=1)",
        "AdaptiveAvgPool3d(1)",
        "2, 3, 4, 5, 3",
        "{pool}({conv}({x})).flatten(2).unsqueeze(-1)",
    ),
}
ALL_FOLDED = _module(FOLDED)


def test_the_mean_without_the_convolution_is_the_reference(tmp_path):
    an = _analysis(ALL_FOLDED, profile=False)
    assert an.ok, an.error
    rs = all_rewrites(an.graph)
    assert "fold_mean_of_conv" in [r.name for r in rs], [r.name for r in rs]
    g = rs[-1].graph
    convs = [n for n in g.nodes if n.op == "conv2d" or (n.op == "aten" and "conv" in n.attrs["target"])]
    assert not convs, [n.name for n in convs]  # no convolution is left
    c = build_candidate(g, an.data, "cpu", torch_ops="allow")

    _check_candidate(ALL_FOLDED, c.files, tmp_path, change=scale_weights(len(FOLDED)))


LEFT = {
    "a nonlinearity between": (
        "Conv2d(4, 6, 3, padding=1)",
        "Identity()",
        "2, 4, 8, 8",
        "torch.relu({conv}({x})).mean(dim=(2, 3))",
    ),
    "a mean over one spatial dim": ("ConvTranspose2d(4, 6, 3)", "Identity()", "2, 4, 8, 8", "{conv}({x}).mean(dim=2)"),
    "a strided convolution": (
        "Conv2d(4, 6, 3, stride=2, padding=1)",
        "Identity()",
        "2, 4, 8, 8",
        "{conv}({x}).mean(dim=(2, 3))",
    ),
    "grouped": ("ConvTranspose2d(4, 6, 3, groups=2)", "Identity()", "2, 4, 8, 8", "{conv}({x}).mean(dim=(2, 3))"),
    "an unpadded 3x3 convolution (25 terms)": (
        "Conv2d(4, 6, 3)",
        "Identity()",
        "2, 4, 9, 9",
        "{conv}({x}).mean(dim=(2, 3))",
    ),
}


def test_what_the_mean_fold_leaves_alone():
    an = _analysis(_module(LEFT), profile=False)
    assert an.ok, an.error
    assert fold_means(an.graph) is None


def test_the_interpreter_sums_the_boxes_of_the_weight():
    from agent.builtin.interp import _derived

    w = torch.randn(3, 4, 3, 3)  # a transposed convolution's [I, O, K, K]
    at = {"recipe": "tapbox", "boxes": [[(0, 1), (0, 3)], [(2, 3), (1, 2)]], "sign": -1, "transposed": True}
    want = -(w[:, :, 0:1, :].sum((2, 3)) + w[:, :, 2:3, 1:2].sum((2, 3))).t()
    torch.testing.assert_close(_derived(at, [w]), want)


FX_MEAN = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 6, 3, padding=1)

    def forward(self, x):
        return self.conv(x).mean(dim=(2, 3))


def get_inputs():
    return [torch.randn(2, 4, 9, 9)]


def get_init_inputs():
    return []
"""


def test_an_fx_graph_is_not_folded_its_sizes_stay_symbolic():
    """The terms (border rows, the number of positions) are the captured sizes': torch.fx's graph
    runs at any size (the sandbox's shape trial), so only an exported, guarded graph is folded."""
    an = _analysis(FX_MEAN, profile=False)
    assert an.ok and an.data["capture"] == "fx", (an.error, an.data.get("capture"))
    assert fold_means(an.graph) is None
    an.graph.meta["capture"] = "export"  # the same graph, were it guarded, would be folded
    assert fold_means(an.graph) is not None
