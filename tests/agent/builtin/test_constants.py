"""Tensors a forward makes from Python values (agent.builtin.constants): N-BEATS builds its
seasonality bases with numpy in every forward and keeps its blocks' weights in plain lists.
Under torch-ops=forbid its casts and concatenations of those bases were ATen calls, its
9216-value bases were refused, and its weights became constants of the candidate."""

from __future__ import annotations

import torch

from agent.builtin.pipeline import build_candidate
from agent.builtin.policy import _forbid_blockers
from tests.agent.builtin.test_export_capture import _analysis, _check_candidate

BASES = """
import numpy as np
import torch
import torch.nn as nn


def basis(p, n):
    t = np.arange(n) / n
    s1 = torch.tensor(np.array([np.cos(2 * np.pi * i * t) for i in range(p)])).float()
    s2 = torch.tensor(np.array([np.sin(2 * np.pi * i * t) for i in range(p)])).float()
    return torch.cat([s1, s2])


class Block(nn.Module):
    def __init__(self, units, p):
        super().__init__()
        self.fc = nn.Linear(units, 2 * p)


class Model(nn.Module):
    def __init__(self, units, p, n):
        super().__init__()
        self.p, self.n = p, n
        self.blocks = [Block(units, p) for _ in range(2)]  # a plain list: export lifts their weights
        self.weights = nn.ParameterList([q for b in self.blocks for q in b.fc.parameters()])

    def forward(self, x):
        out = torch.zeros(x.shape[0], self.n)
        for b in range(len(self.blocks)):
            theta = torch.relu(self.blocks[b].fc(x))
            out = out + theta.mm(basis(self.p, self.n).to(x.device))
        return out


def get_inputs():
    return [torch.randn(4, 32)]


def get_init_inputs():
    return [32, 48, 96]  # two bases of 96 x 96 float64 values each step
"""


def test_a_large_basis_made_in_the_forward_is_one_constant_and_the_weights_stay_parameters(tmp_path):
    an = _analysis(BASES)
    assert an.ok and an.data["capture"] == "export", an.error
    consts = [n for n in an.graph.nodes if n.op == "constant"]
    params = {n.attrs["path"] for n in an.graph.nodes if n.op == "param"}
    # the casts and the cat folded at capture, once; only what the forward reads is kept
    assert [n.shape for n in consts] == [[96, 96], [96, 96]] and all("b64" in n.attrs for n in consts)
    assert consts[0].dtype == "float32"
    assert params == {"weights.0", "weights.1", "weights.2", "weights.3"}
    c = build_candidate(an.graph, an.data, "cpu", torch_ops="forbid")
    assert not _forbid_blockers(c.plan), _forbid_blockers(c.plan)
    src = c.files["model_new.py"]
    assert "import base64" in src and len(src) < 120_000

    def reweigh(model):  # the candidate reads the model's weights, not copies of them
        for q in model.weights:
            q.mul_(-0.5)

    _check_candidate(BASES, c.files, tmp_path, change=reweigh)


def test_a_constant_past_the_limit_is_named():
    src = BASES.replace("return [32, 48, 96]", "return [32, 300, 256]")  # 600 x 256 = 153600 values
    an = _analysis(src)
    assert not an.ok and "values; at most 65536 are carried into the candidate" in an.error, an.error


def test_base64_constants_round_trip_every_dtype():
    from agent.builtin import constants

    for t in (torch.randn(70, 80).double(), torch.randn(5000).half(), torch.rand(9000) > 0.5, torch.arange(5000)):
        attrs = constants.encode(t)
        assert attrs is not None and "b64" in attrs
        assert torch.equal(constants.decode(attrs, list(t.shape)), t)
    assert "value" in constants.encode(torch.ones(3, 4)) and constants.encode(torch.ones(1 << 17)) is None
