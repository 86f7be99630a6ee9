"""A forward that returns a list, a one-tuple or nested lists and tuples: the generated forward
returns the same structure, which the sandbox compares exactly (HRNet's fuse layers return a
list; every generated candidate of one failed with "expected a list of 3, got a tuple of 3")."""

from __future__ import annotations

import pytest
import torch

from agent.builtin import outputs
from agent.builtin.pipeline import build_candidate
from tests.agent.builtin.test_export_capture import _analysis, _check_candidate

LIST_FX = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return [torch.relu(self.fc(x)), x * 2.0]


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
"""

# the assert on a size sends it to torch.export; a one-tuple inside a list
NESTED_EXPORT = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        assert x.size(1) == 8, "eight features"
        y = torch.sigmoid(x)
        return [y, (y + x,)], (x * 3.0,)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
"""

DICT_NAMEDTUPLE = """
import collections

import torch
import torch.nn as nn

Pair = collections.namedtuple("Pair", "a b")


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        assert x.size(1) == 8, "eight features"
        return {"logits": torch.relu(x), "pair": Pair(x + 1.0, x * 2.0)}


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
"""

ONE_TUPLE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        outputs = (torch.tanh(x) * 0.5,)
        return outputs


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize(
    "src, capture, structure",
    [
        (LIST_FX, "fx", ["list", ["t", "t"]]),
        (NESTED_EXPORT, "export", ["tuple", [["list", ["t", ["tuple", ["t"]]]], ["tuple", ["t"]]]]),
        (ONE_TUPLE, "fx", ["tuple", ["t"]]),
        (DICT_NAMEDTUPLE, "export", ["dict", ["t", ["tuple", ["t", "t"]]], ["logits", "pair"]]),
    ],
)
@pytest.mark.parametrize("torch_ops", ["allow", "forbid"])
def test_the_candidate_returns_the_reference_s_structure(src, capture, structure, torch_ops, tmp_path):
    an = _analysis(src, profile=False)
    assert an.ok, an.error
    assert an.data["capture"] == capture
    assert an.graph.output.attrs["structure"] == structure
    c = build_candidate(an.graph, an.data, "cpu", torch_ops=torch_ops)
    _check_candidate(src, c.files, tmp_path, other_inputs=[[torch.randn(4, 8)]])


def test_the_structure_is_rebuilt_in_order_and_its_count_checked():
    s = ["tuple", [["list", ["t", ["tuple", ["t"]]]], "t"]]
    assert outputs.expression(s, ["a", "b", "c"]) == "([a, (b,)], c)"
    assert outputs.rebuild(s, [1, 2, 3]) == ([1, (2,)], 3)
    with pytest.raises(ValueError):
        outputs.expression(s, ["a", "b", "c", "d"])
    assert outputs.default(1) == "t" and outputs.default(2) == ["tuple", ["t", "t"]]
    d = ["dict", ["t", ["list", ["t"]]], ["y", "z"]]
    assert outputs.expression(d, ["a", "b"]) == "{'y': a, 'z': [b]}"
    assert outputs.rebuild(d, [1, 2]) == {"y": 1, "z": [2]}
