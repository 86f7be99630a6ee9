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


# EnCodec's padding (HF EncodecConv1d): int64 buffers, a pad width computed from them and the
# input's length, read back as Python ints; BRANCHED also branches on one (`if length <= max_pad`)
PAD_FROM_BUFFERS = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("kernel_size", torch.tensor(4, dtype=torch.int64), persistent=False)
        self.register_buffer("stride", torch.tensor(2, dtype=torch.int64), persistent=False)
        self.conv = nn.Conv1d(8, 8, 4, stride=2)

    def forward(self, x):
        length = x.shape[-1]
        n_frames = (length - self.kernel_size) / self.stride + 1
        ideal = (torch.ceil(n_frames).to(torch.int64) - 1) * self.stride + self.kernel_size
        extra = ideal - length
        left = self.kernel_size - self.stride
        h = F.pad(torch.tanh(x), (int(left), int(extra)), mode="reflect")
        return self.conv(h) * 2.0


def get_inputs():
    return [torch.randn(2, 8, 31)]


def get_init_inputs():
    return []
"""

BRANCHED = PAD_FROM_BUFFERS.replace(
    '        h = F.pad(torch.tanh(x), (int(left), int(extra)), mode="reflect")',
    "        h = torch.tanh(x)\n        if length <= int(left):\n            h = F.pad(h, (0, 1))\n"
    '        h = F.pad(h, (int(left), int(extra)), mode="reflect")',
)


def _with_kernel_size(k):
    def change(m):
        m.kernel_size.fill_(k)

    return change


def test_values_read_back_from_buffers_are_folded_and_guarded(tmp_path):
    """The read values become constants (every shape downstream a plain size, no `.item()` left in
    the graph); the guard holds the buffers they came from, so the candidate runs the reference's
    forward once one of them changes, even in place after its first call."""
    for src in (PAD_FROM_BUFFERS, BRANCHED):
        an = _analysis(src, profile=False)
        assert an.ok, an.error
        assert an.data["capture"] == "export"
        assert sorted(an.data["guard"]["read"]) == ["kernel_size", "stride"]
        assert all(n.shape is None or all(type(d) is int for d in n.shape) for n in an.graph.nodes)
        c = build_candidate(an.graph, an.data, "cpu", torch_ops="allow")
        _check_candidate(src, c.files, tmp_path, other_inputs=[[torch.randn(2, 8, 40)]], change=_with_kernel_size(6))


def test_a_size_read_back_from_the_inputs_is_refused():
    src = PAD_FROM_BUFFERS.replace("int(extra)", "int(x.abs().sum() > 0)")
    an = _analysis(src, profile=False)
    assert not an.ok
    assert "computed from its inputs' values" in an.error
