"""Classes of KernelBench problems that the CPU coverage run (python -m benchmarks.kernelbench
--coverage) found without a generated candidate, each with a task written here in KernelBench's
format (issue 18)."""

from __future__ import annotations

import torch

from agent.builtin.pipeline import build_candidate, library_parts, own_parts
from agent.builtin.policy import _forbid_blockers
from tests.agent.builtin.test_export_capture import _analysis, _check_candidate

SCALAR_INPUT = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, s):
        return torch.multiply(torch.tanh(a * s), a) + s


def get_inputs():
    return [torch.randn(16, 12), 2.5]


def get_init_inputs():
    return []
"""


def test_a_number_passed_to_forward_is_a_runtime_scalar_of_the_kernel(tmp_path):
    """(torch.multiply is mul for the fx capture.)"""
    an = _analysis(SCALAR_INPUT, profile=False)
    assert an.ok, an.error
    c = build_candidate(an.graph, an.data, "cpu", torch_ops="forbid")
    assert not library_parts(c.plan) and len(c.plan.groups) == 1
    assert "float(v_s)" in c.files["model_new.py"]
    _check_candidate(SCALAR_INPUT, c.files, tmp_path, other_inputs=[[torch.randn(16, 12), -0.75]])


COMPOSITES = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.inorm = nn.InstanceNorm2d(4)
        self.inorm_affine = nn.InstanceNorm2d(4, affine=True)

    def forward(self, a, b, x, p, q, r):
        return (torch.einsum("bijl,lk->bijk", a, b), self.inorm(x), self.inorm_affine(x) * 2.0,
                F.triplet_margin_loss(p, q, r, margin=0.5))


def get_inputs():
    return [torch.randn(2, 3, 4, 5), torch.randn(5, 6), torch.randn(2, 4, 6, 7), torch.randn(8, 16),
            torch.randn(8, 16), torch.randn(8, 16)]


def get_init_inputs():
    return []
"""


def test_einsum_instance_norm_and_triplet_loss_become_ops_the_generator_has(tmp_path):
    """einsum and the triplet margin loss are decomposed in the capture (a matmul; norms and elementwise
    ops); instance norm is a group norm with one group per channel."""
    an = _analysis(COMPOSITES, profile=False)
    assert an.ok, an.error
    assert set(an.data["islands"]) == {"aten.norm.ScalarOpt_dim"}  # the pairwise distances: our kw_reduce
    assert [n.attrs["groups"] for n in an.graph.nodes if n.op == "groupnorm"] == [4, 4]
    c = build_candidate(an.graph, an.data, "cpu", torch_ops="forbid")
    assert _forbid_blockers(c.plan) == []
    _check_candidate(COMPOSITES, c.files, tmp_path)


RMS_OVER_CHANNELS = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, eps):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        rms = torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + self.eps)
        return x / rms + torch.softmax(x, dim=1) + torch.amax(x, dim=(1, 2), keepdim=True)


def get_inputs():
    return [torch.randn(2, 6, 5, 7)]


def get_init_inputs():
    return [1e-5]
"""


def test_reductions_over_channels_and_their_split_broadcast_stay_right_at_other_shapes(tmp_path):
    """KernelBench's RMS norm over dim 1: an fx graph (symbolic sizes). The mean, the softmax and the
    amax over dims other than the last are our kernels, which take their sizes from the input at run
    time; x / rms reads rms [B, 1, H, W] through an expand to x's shape, made contiguous by kw_gather."""
    an = _analysis(RMS_OVER_CHANNELS, profile=False)
    assert an.ok and an.data["capture"] == "fx", an.error
    c = build_candidate(an.graph, an.data, "cpu", torch_ops="forbid")
    assert _forbid_blockers(c.plan) == [] and {k for _, k in own_parts(c.plan)} == {"kw_reduce", "kw_softmax_mid"}
    model = c.files["model_new.py"]
    assert "_kw_around(" in model and ".expand(*" in model and "_kw_contig(lib, " in model
    _check_candidate(RMS_OVER_CHANNELS, c.files, tmp_path, other_inputs=[[torch.randn(3, 4, 2, 9)]])


INT_DIVISOR = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features, divisor):
        super().__init__()
        self.fc = nn.Linear(features, features)
        self.divisor = divisor

    def forward(self, x):
        return torch.relu(self.fc(x) / self.divisor)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return [8, 2]
"""


def test_an_int_attribute_in_arithmetic_is_read_at_run_time(tmp_path):
    """KernelBench level 2 #71: x / self.divisor with divisor = 2 from the init arguments, which the
    sandbox's shape trial changes (2 -> 3): bound to self.divisor as a float attribute is."""
    an = _analysis(INT_DIVISOR, profile=False)
    assert an.ok and an.data["capture"] == "fx", an.error
    c = build_candidate(an.graph, an.data, "cpu", torch_ops="forbid")
    model = c.files["model_new.py"]
    assert "float(self.divisor)" in model
    _check_candidate(INT_DIVISOR, c.files, tmp_path)
    (tmp_path / "other").mkdir()
    _check_candidate(INT_DIVISOR.replace("return [8, 2]", "return [8, 3]"), c.files, tmp_path / "other")


def test_a_generated_file_over_the_workspace_limit_is_a_generation_error():
    """L3/15 DenseNet-121: its forward op by op is about 300 KB of Python, which the workspace
    refuses (256 KB per file); the evaluation then found no model_new.py. Now the step says why."""
    import pytest

    from agent.builtin.pipeline import GenerationError, check_sizes
    from agent.workspace import MAX_FILE_BYTES

    check_sizes({"model_new.py": "x" * MAX_FILE_BYTES})
    with pytest.raises(GenerationError, match="over the workspace's limit"):
        check_sizes({"model_new.py": "x" * (MAX_FILE_BYTES + 1)})


SCALAR_BESIDE_A_ROW_LOOP = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.w = nn.Parameter(torch.randn(d, d))
        self.scale_factor = 3

    def forward(self, x):
        h = self.norm(x)
        scale = torch.sqrt(torch.tensor(h.size(-1), dtype=torch.float) * self.scale_factor)
        return (h @ self.w) / scale.to(dtype=h.dtype)


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return [32]
"""


def test_a_scalar_computed_beside_a_row_loop_is_stored_once(tmp_path):
    """DeBERTa-v2's `sqrt(tensor(head_size) * scale_factor)` joined its LayerNorm's row group and
    was stored at out[r] for every row into a one-element tensor: heap corruption (2026-12-06).
    Every group output now holds exactly one value per element or per row of its group."""
    import math

    an = _analysis(SCALAR_BESIDE_A_ROW_LOOP, profile=False)
    assert an.ok, an.error
    c = build_candidate(an.graph, an.data, "cpu", torch_ops="allow")
    for grp in c.plan.groups:
        for o in grp.outputs:
            n = c.plan.graph.node(o)
            want = grp.full if grp.space[o] == "full" else grp.full[: grp.split]
            assert math.prod(n.dims) == math.prod(want), (grp.name, o, n.dims, grp.full, grp.split)
    _check_candidate(SCALAR_BESIDE_A_ROW_LOOP, c.files, tmp_path)


REVIN = """
import torch
import torch.nn as nn


class Model(nn.Module):
    \"\"\"PatchTST's RevIN normalisation: statistics over every dim but the first and last.\"\"\"

    def __init__(self, num_features, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.affine_weight = nn.Parameter(torch.rand(num_features) + 0.5)

    def forward(self, x, y):
        dim2reduce = tuple(range(1, x.ndim - 1))
        mean = torch.mean(x, dim=dim2reduce, keepdim=True).detach()
        stdev = torch.sqrt(torch.var(x, dim=dim2reduce, keepdim=True, unbiased=False) + self.eps).detach()
        x = (x - mean) / stdev * self.affine_weight
        return x + y.std(dim=0, keepdim=True) + torch.var_mean(y, dim=1)[0][:, None, None]


def get_inputs():
    return [torch.randn(4, 24, 7), torch.randn(4, 7)]


def get_init_inputs():
    return [7]
"""


def test_variance_and_standard_deviation_are_reductions_we_write(tmp_path):
    """var, std and var_mean (PatchTST's RevIN named `var` as its blocker under forbid)."""
    an = _analysis(REVIN, profile=False)
    assert an.ok, an.error
    assert an.data["capture"] == "export"
    c = build_candidate(an.graph, an.data, "cpu", torch_ops="forbid")
    assert not library_parts(c.plan) and not _forbid_blockers(c.plan)
    ops: dict[str, int] = {}
    _check_candidate(REVIN, c.files, tmp_path, ops=ops)
    assert not [op for op in ops if "var" in op or "std" in op]


OBJECTNESS = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, obj, cls):
        o = obj.sigmoid()
        return cls.sigmoid() * o, o


def get_inputs():
    return [torch.randn(2, 1, 6, 5), torch.randn(2, 7, 6, 5)]


def get_init_inputs():
    return []
"""


def test_a_value_returned_and_broadcast_into_a_larger_group_gets_a_kernel_of_its_own(tmp_path):
    """YOLOX's decoupled head (benchmarks/blocks_heldout/round2): the objectness sigmoid
    ([B, 1, H, W]) is read by the class scores' group ([B, C, H, W]) and returned too. It fits
    no group's outputs, and stayed a torch call, a blocker under forbid; now it is a kernel of its
    own, which the class scores' group reads."""
    an = _analysis(OBJECTNESS, profile=False)
    assert an.ok, an.error
    c = build_candidate(an.graph, an.data, "cpu", torch_ops="forbid")
    assert not library_parts(c.plan), [n.name for n in library_parts(c.plan)]
    alone = [grp for grp in c.plan.groups if [n.op for n in grp.nodes] == ["sigmoid"] and grp.nodes[0].dims[1] == 1]
    assert len(alone) == 1, [[n.name for n in grp.nodes] for grp in c.plan.groups]
    _check_candidate(OBJECTNESS, c.files, tmp_path)
