"""A forward that reads values back from tensors (`.item()`, `if tensor:`): captured with
draft_export where none of them is computed from the inputs' values (Transformer-XL's
`torch.sum(attn_mask).item()` on a mask made from sizes), refused where one is (a branch on the
data would be baked into the graph)."""

from __future__ import annotations

import torch

from agent.builtin import data_reads
from agent.builtin.pipeline import build_candidate
from tests.agent.builtin.test_export_capture import _analysis, _check_candidate

MASK_FROM_SIZES = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("stride", torch.tensor(2, dtype=torch.int64), persistent=False)

    def forward(self, x):
        t = x.size(1)
        mask = torch.triu(x.new_ones(t, t), diagonal=1).bool()
        y = torch.tanh(x) * 2.0
        if mask is not None and torch.sum(mask).item():
            y = y + 1.0
        if self.stride > 1:
            y = y * 0.5
        return y


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
"""

BRANCH_ON_DATA = MASK_FROM_SIZES.replace("if self.stride > 1:", "if x.sum() > 0:")


def test_reads_from_sizes_and_buffers_are_not_from_the_inputs():
    ns: dict = {}
    exec(MASK_FROM_SIZES, ns)
    r = data_reads.reads(ns["Model"](), ns["get_inputs"]())
    assert r.total == 2 and r.from_inputs == 0
    exec(BRANCH_ON_DATA, ns)
    r = data_reads.reads(ns["Model"](), ns["get_inputs"]())
    assert r.total == 2 and r.from_inputs == 1


def test_a_forward_whose_reads_do_not_depend_on_its_inputs_is_captured(tmp_path):
    an = _analysis(MASK_FROM_SIZES, profile=False)
    assert an.ok, an.error
    assert an.data["capture"] == "export"
    assert any("draft_export" in n for n in an.data["notes"])
    c = build_candidate(an.graph, an.data, "cpu", torch_ops="allow")
    _check_candidate(MASK_FROM_SIZES, c.files, tmp_path, other_inputs=[[torch.randn(4, 8)]])


def test_a_branch_on_the_inputs_values_is_still_refused():
    an = _analysis(BRANCH_ON_DATA, profile=False)
    assert not an.ok
    assert "1 of the 2 values the forward reads back from tensors are computed from its inputs' values" in an.error
