"""agent.builtin.guard: a generated forward runs only on the module it was generated for. The
digest is computed in the analysis child on the reference and, by the same function copied into
model_new.py, on the candidate's module; these tests load a real generated model_new.py."""

from __future__ import annotations

import torch.nn as nn

from agent.builtin.guard import guard_digest
from agent.builtin.pipeline import build_candidate
from tests.agent.builtin.test_export_capture import RUNTIME, _analysis, _module

TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale, groups):
        super().__init__()
        self.scale = scale
        self.groups = groups
        self.conv = nn.Conv2d(4, 8, 3, padding=1)

    def forward(self, x):
        y = self.conv(x).reshape(x.shape[0], self.groups, -1)
        return torch.atan(y * self.scale)


def get_inputs():
    return [torch.randn(2, 4, 6, 6)]


def get_init_inputs():
    return [0.5, 2]
"""


def test_the_candidate_runs_its_kernels_only_on_the_module_it_was_generated_for(monkeypatch):
    monkeypatch.syspath_prepend(str(RUNTIME))  # model_new.py imports kwrt
    an = _analysis(TASK)
    assert an.ok and an.data["capture"] == "export", an.error
    files = build_candidate(an.graph, an.data, "cpu", torch_ops="allow").files
    assert "_KW_GUARD = ('export'" in files["model_new.py"] and len(an.data["guard"]["digest"]) == 64
    cand = _module("guard_candidate", files["model_new.py"])

    def specialised(*init, change=None) -> bool:
        m = cand.ModelNew(*init)
        if change:
            change(m)
        return cand._kw_specialised(m)

    assert specialised(0.5, 2)
    assert specialised(0.25, 2)  # scale is read at run time (bound): another value is fine
    assert not specialised(0.5, 4)  # the reshape baked groups = 2 into the graph
    assert not specialised(0.5, 2, change=lambda m: setattr(m.conv, "stride", (2, 2)))
    assert not specialised(0.5, 2, change=lambda m: setattr(m, "conv", nn.Conv2d(4, 8, 5, padding=2)))
    assert not specialised(0.5, 2, change=lambda m: m.add_module("extra", nn.ReLU()))


def test_an_fx_digest_follows_the_tree_and_the_flags_not_the_sizes():
    a, b = nn.Sequential(nn.Linear(4, 8), nn.ReLU()), nn.Sequential(nn.Linear(16, 2), nn.ReLU())
    assert guard_digest(a, "fx", set()) == guard_digest(b, "fx", set())
    assert guard_digest(a, "export", set()) != guard_digest(b, "export", set())
    c = nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True))  # a flag
    assert guard_digest(a, "fx", set()) != guard_digest(c, "fx", set())
