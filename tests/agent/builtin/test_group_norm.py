"""Group norm (agent.builtin.lower): statistics, the per-channel affine and the elementwise ops after
it in one kernel over (N, G, C/G, prod S); a reader of another kind gets the value viewed back.
Checked against the module under both torch-ops policies."""

from __future__ import annotations

import pytest
import torch

from agent.builtin.pipeline import build_candidate, make_plan
from tests.agent.builtin.test_export_capture import _analysis, _check_candidate

TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.gn = nn.GroupNorm(4, 8)
        self.scale = nn.Parameter(torch.randn(8, 1, 1))

    def forward(self, x):
        y = self.gn(self.conv(x))
        return {body}


def get_inputs():
    return [torch.randn(2, 3, 9, 7)]


def get_init_inputs():
    return []
"""

CASES = {
    # Swish then a per-channel scale: every op joins the norm's kernel
    "swish_scale": ("(y * torch.sigmoid(y)) * self.scale", 1),
    # a mean over the spatial dims reads the normalised value in (N, C, H, W): its own kernel
    "gelu_then_mean": ("torch.mean(torch.nn.functional.gelu(y), dim=(2, 3))", 2),
    # the norm's output itself returned next to an op of it
    "two_outputs": ("(y, torch.tanh(y) + 1.0)", 1),
}


@pytest.mark.parametrize("torch_ops", ["allow", "forbid"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_group_norm_and_its_epilogue_share_a_kernel(name, torch_ops, tmp_path):
    body, groups = CASES[name]
    src = TASK.format(body=body)
    an = _analysis(src)
    assert an.ok, an.error
    plan = make_plan(an.graph)
    assert len(plan.groups) == groups
    c = build_candidate(an.graph, an.data, "cpu", torch_ops=torch_ops)
    _check_candidate(src, c.files, tmp_path, other_inputs=[[torch.randn(3, 3, 9, 7) * 4 + 1]])
