"""kw_elt (agent/builtin/typed_elementwise.py) and kw_remap (agent/builtin/remap.py): the int64 and bool arithmetic of real modules'
masks and position indices, casts, fills, broadcast products, padding, rolls, repeats and
nearest upsampling, computed by our kernel under
torch-ops=forbid where they used to stay ATen calls and block the candidate. Each task is written
as the module it comes from writes it; the candidate runs next to the reference on fresh inputs
and no ATen op that computes may run in its forward."""

from __future__ import annotations

import pytest

from agent.builtin.pipeline import build_candidate, own_parts
from agent.builtin.policy import _forbid_blockers
from sandbox.audit import classify
from tests.agent.builtin.test_export_capture import _analysis, _check_candidate
from tests.agent.builtin.test_own_kernels import task

# Llama/Phi/Falcon: a causal mask from arange and a comparison, the padding mask cast and
# scaled, position ids as float
HF_MASKS = task(
    "self.attend(x, pad)",
    "torch.randn(2, 12, 16), (torch.rand(2, 12) > 0.2).long()",
    "        pass\n\n"
    "    def attend(self, x, pad):\n"
    "        t = x.shape[1]\n"
    "        pos = torch.arange(t, device=x.device)\n"
    "        causal = pos[None, :] > pos[:, None]\n"
    "        mask = torch.full((t, t), torch.finfo(x.dtype).min, device=x.device) * causal\n"
    "        mask = mask[None, None, :, :].expand(x.shape[0], 1, -1, -1).clone()\n"
    "        padding = mask[:, :, :, :t] + pad[:, None, None, :].to(x.dtype)\n"
    "        mask[:, :, :, :t] = mask[:, :, :, :t].masked_fill(padding == 0, torch.finfo(x.dtype).min)\n"
    "        scores = x @ x.transpose(1, 2) / 4.0 + mask[:, 0]\n"
    "        return scores.softmax(-1) @ x + pos.float()[None, :, None] * 0.01",
    args="x, pad",
)

# T5's relative position buckets: int64 arithmetic, a log of a float cast, min against a full, where
T5_BUCKETS = task(
    "self.bias(x)",
    "torch.randn(2, 4, 10, 10)",
    "        self.emb = nn.Embedding(32, 4)\n\n"
    "    def bucket(self, rel, num_buckets=32, max_distance=128):\n"
    "        num_buckets //= 2\n"
    "        out = (rel > 0).to(torch.long) * num_buckets\n"
    "        rel = torch.abs(rel)\n"
    "        max_exact = num_buckets // 2\n"
    "        is_small = rel < max_exact\n"
    "        large = max_exact + (torch.log(rel.float() / max_exact) / math.log(max_distance / max_exact)\n"
    "                             * (num_buckets - max_exact)).to(torch.long)\n"
    "        large = torch.min(large, torch.full_like(large, num_buckets - 1))\n"
    "        return out + torch.where(is_small, rel, large)\n\n"
    "    def bias(self, x):\n"
    "        q = torch.arange(x.shape[2], dtype=torch.long, device=x.device)[:, None]\n"
    "        k = torch.arange(x.shape[3], dtype=torch.long, device=x.device)[None, :]\n"
    "        b = self.emb(self.bucket(k - q)).permute(2, 0, 1).unsqueeze(0)\n"
    "        return x + b",
).replace("import torch\n", "import math\nimport torch\n", 1)

# MPT's causal mask drawn in float16 (`new_ones(s, s, dtype=float16).tril().to(bool)`), and
# arithmetic stored in float16 and bfloat16 (computed in float32, rounded to nearest even)
HALF_MASKS = task(
    "self.f(x)",
    "torch.randn(2, 16, 16) * 300",
    "        pass\n\n"
    "    def f(self, x):\n"
    "        s = x.shape[1]\n"
    "        m = x.new_ones(s, s, dtype=torch.float16).tril().to(torch.bool)\n"
    "        y = x.masked_fill(~m.view(1, s, s), -1e4)\n"
    "        h = (x * 1.37).to(torch.bfloat16) + 1\n"
    "        q = (x * 0.1).half() * 3 + torch.tensor(1e-7, dtype=torch.float16)\n"
    "        return (y / 300).softmax(-1), h, q, (x * 1e5).half()",  # each compared on its own
)

# Mistral's sliding window: bool triangles, not, and; then a fill of the scores
SLIDING = task(
    "self.window(x)",
    "torch.randn(2, 9, 9)",
    "        pass\n\n"
    "    def window(self, x):\n"
    "        t = x.shape[-1]\n"
    "        causal = torch.tril(torch.ones(t, t, dtype=torch.bool, device=x.device))\n"
    "        far = torch.tril(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=-4)\n"
    "        keep = causal & ~far\n"
    "        return x.masked_fill(~keep, float('-inf')).softmax(-1)",
)

# integer semantics that differ from C's: floor division and remainder of negatives, clamp, sign,
# pow, bitwise ops, a float cast truncated, NaN through minimum
INTEGERS = task(
    "(a // b, a % b, torch.clamp(a, -7, 9), torch.sign(a) * b, a ** 2, (a & 6) | (b ^ 3), (x * 3).to(torch.long), "
    "torch.minimum(x, y), torch.where(a > 0, x, 0.5), (a != b).float() - x, "
    "((a.to(torch.int32) + 100).to(torch.uint8) * 2).float() ** torch.arange(7, dtype=torch.int32) * 1e-3)",
    "torch.randint(-50, 50, (6, 7)), torch.randint(1, 9, (6, 7)) * (torch.randint(0, 2, (6, 7)) * 2 - 1), "
    "torch.randn(6, 7), torch.where(torch.rand(6, 7) < 0.2, float('nan'), torch.randn(6, 7))",
    args="a, b, x, y",
)

# StyleGAN2's modulated weight and Mamba's outer product: float products broadcast on both sides
# (the fusion generator's groups cannot start there), and a stack of selected planes
PRODUCTS = task(
    "(self.w[None] * s[:, None, :, None, None], (u[:, :, :, None] * v[:, :, None, :]).sum(-1), "
    "torch.stack([u[:, 0], u[:, 1] * 2.0], dim=1))",
    "torch.randn(3, 5), torch.randn(2, 4, 6), torch.randn(2, 4, 7)",
    "        self.w = nn.Parameter(torch.randn(6, 5, 3, 3))",
    args="s, u, v",
)

# kw_remap (agent/builtin/remap.py): U-Net's pad before a cat, Swin's roll, padding modes, repeat
# (of a bool mask too), nearest upsampling by a factor and to a size that is not a multiple
REMAPS = task(
    "(F.pad(x, (1, 2, 0, 3)), F.pad(x, (2, 1, 1, 2), mode='reflect'), F.pad(x, (1, 1, 2, 0), mode='replicate'), "
    "F.pad(x, (3, 1, 1, 1), mode='circular'), torch.roll(x, shifts=(-2, 3), dims=(1, 3)), "
    "x.permute(0, 2, 1, 3).repeat(1, 2, 1, 3), (x > 0).repeat(2, 1, 1, 1).float(), "
    "F.interpolate(x, scale_factor=2, mode='nearest'), F.interpolate(x, size=(7, 13), mode='nearest'), "
    "F.pad(x, (-1, 2, 0, 0), value=0.5), self.assign(x))",
    "torch.randn(2, 3, 5, 6)",
    "        pass\n\n"
    "    def assign(self, x):  # slice assignments (slice_scatter): a stepped one, one from the end\n"
    "        y = x * 2.0\n"
    "        y[:, :, 1::2] = x[:, :, :2] + 1.0\n"
    "        y[..., -2:] = 0.25\n"
    "        m = torch.zeros(1, 5, 6, 1, dtype=torch.long, device=x.device)\n"
    "        m[:, 1:3, 2:, :] = 3\n"
    "        return y + m.permute(0, 3, 1, 2)",
)

# kw_bilinear (agent/builtin/bilinear.py): U-Net's up block, with and without align_corners, by a
# factor and to a size
BILINEAR = task(
    "(F.interpolate(x, scale_factor=2, mode='bilinear', align_corners=True), "
    "F.interpolate(x, scale_factor=2, mode='bilinear'), F.interpolate(x, size=(7, 13), mode='bilinear'), "
    "F.interpolate(x, scale_factor=1.5, mode='bilinear'))",
    "torch.randn(2, 3, 5, 6)",
)

# kw_affine_grid and kw_grid_sample (agent/builtin/gridsample.py): a spatial transformer's
# F.affine_grid + F.grid_sample with and without align_corners, to the input's size and another;
# a flow field's grid (some of it outside [-1, 1]) with each padding mode, bilinear and nearest
GRID_SAMPLE = task(
    "(F.grid_sample(x, F.affine_grid(t, x.size(), align_corners=False), align_corners=False), "
    "F.grid_sample(x, F.affine_grid(t, (2, 3, 6, 8), align_corners=True), padding_mode='border', align_corners=True), "
    "F.grid_sample(x, g, mode='nearest', padding_mode='reflection'), "
    "F.grid_sample(x, g, padding_mode='reflection', align_corners=True), "
    "F.grid_sample(x, g, mode='nearest', align_corners=True), F.grid_sample(x, g, padding_mode='border'))",
    "torch.randn(2, 3, 9, 11), torch.randn(2, 2, 3) * 0.8, torch.rand(2, 7, 5, 2) * 2.6 - 1.3",
    args="x, t, g",
)

# kw_embedding_bag (agent/builtin/embedbag.py): nn.EmbeddingBag's sum (DLRM), mean with a padding
# row and per-sample weights, max over 2-D bags, include_last_offset; offsets with empty bags;
# kw_index_pair: DLRM's `z[:, li, lj]`
EMBEDDING_BAG = task(
    "(self.bags[0](i, o), self.bags[1](i, o), F.embedding_bag(i, self.bags[0].weight, o, mode='sum', "
    "per_sample_weights=p), self.bags[2](i.view(6, 4)), "
    "F.embedding_bag(i, self.bags[1].weight, o, include_last_offset=True), self.pairs(i, o))",
    "torch.randint(0, 11, (24,)), torch.tensor([0, 3, 3, 10, 17, 24]), torch.rand(24)",
    "        self.bags = torch.nn.ModuleList([torch.nn.EmbeddingBag(11, 8, mode='sum'), "
    "torch.nn.EmbeddingBag(11, 8, mode='mean', padding_idx=2), torch.nn.EmbeddingBag(11, 8, mode='max')])\n\n"
    "    def pairs(self, i, o):  # DLRM's interaction: the strictly lower triangle by two index lists\n"
    "        t = self.bags[0](i, o).view(2, 3, 8)\n"
    "        z = torch.bmm(t, t.transpose(1, 2))\n"
    "        li = torch.tensor([a for a in range(3) for b in range(a)])\n"
    "        lj = torch.tensor([b for a in range(3) for b in range(a)])\n"
    "        return z[:, li, lj]",
    args="i, o, p",
)

# torch.gather along a dim (DeBERTa's relative-position scores): an index smaller than x off the
# dim; repeat_interleave along a dim (GPT-J's rotary tables)
GATHER = task(
    "(torch.gather(x, 1, i) + torch.gather(x.transpose(1, 2), 2, j).sum(), torch.repeat_interleave(x, 3, dim=2))",
    "torch.randn(2, 5, 6), torch.randint(0, 5, (2, 4, 6)), torch.randint(0, 5, (2, 6, 3))",
    args="x, i, j",
)

# cumulative sums of masks: DETR's sine positions (`mask.cumsum(1, dtype=torch.float32)` of a bool
# mask), BLOOM's alibi positions (`(mask.cumsum(-1) - 1) * mask` of an int64 mask: int64), an int32
# cumsum along the first dim and an int64 cumprod
SCANS = task(
    "(self.positions(m), self.alibi(a), torch.cumsum(a.to(torch.int32), 0), torch.cumprod(a + 1, dim=1))",
    "torch.rand(2, 5, 6) > 0.3, (torch.rand(3, 7) > 0.2).long()",
    "        pass\n\n"
    "    def positions(self, m):\n"
    "        y = m.cumsum(1, dtype=torch.float32)\n"
    "        return y / (y[:, -1:, :] + 1e-6) * 6.2832\n\n"
    "    def alibi(self, a):\n"
    "        return ((a.cumsum(dim=-1) - 1) * a)[:, None, :]",
    args="m, a",
)

CASES = {
    "scans": (SCANS, "kw_scan_t"),
    "gather": (GATHER, "kw_remap"),
    "bilinear": (BILINEAR, "kw_bilinear"),
    "grid_sample": (GRID_SAMPLE, "kw_grid_sample"),
    "embedding_bag": (EMBEDDING_BAG, "kw_embedding_bag"),
    "hf_masks": (HF_MASKS, "kw_elt"),
    "t5_buckets": (T5_BUCKETS, "kw_elt"),
    "sliding": (SLIDING, "kw_elt"),
    "integers": (INTEGERS, "kw_elt"),
    "products": (PRODUCTS, "kw_elt"),
    "half_masks": (HALF_MASKS, "kw_elt"),
    "remaps": (REMAPS, "kw_remap"),
}


SLOW_CASES = {"t5_buckets", "sliding", "products"}  # kw_elt again: the fast tier keeps one of each kernel


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_CASES else n for n in sorted(CASES)]
)
def test_masks_indices_and_casts_are_our_kernels_under_forbid(name, tmp_path):
    src, kernel = CASES[name]
    an = _analysis(src, profile=False)
    assert an.ok and an.data["capture"] == "export", an.error
    c = build_candidate(an.graph, an.data, "cpu", torch_ops="forbid")
    assert not _forbid_blockers(c.plan), _forbid_blockers(c.plan)
    assert kernel in {k for _, k in own_parts(c.plan)}
    ops: dict[str, int] = {}
    _check_candidate(src, c.files, tmp_path, ops=ops, equal_nan=True)
    assert ops and not [op for op in ops if classify(op) == "compute"], ops


def test_a_cast_to_the_dtype_it_has_is_the_tensor_itself(tmp_path):
    """Gemma's and T5's norms end `.type_as(x)` of float32 into float32: no copy (ATen's `to`
    returns the tensor), where a kw_elt launch would add a pass over the activations."""
    src = task("(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)).type_as(x) * 2.0", "torch.randn(4, 8, 32)")
    an = _analysis(src, profile=False)
    assert an.ok and an.data["capture"] == "export", an.error
    c = build_candidate(an.graph, an.data, "cpu", torch_ops="forbid")
    kernels = dict((n.name, k) for n, k in own_parts(c.plan))
    assert "alias" in kernels.values() and "kw_elt" not in kernels.values(), kernels
    _check_candidate(src, c.files, tmp_path)


def test_under_allow_these_ops_stay_atens():
    """Under torch-ops=allow ATen computes these ops (its kernels were faster than kw_elt's and
    kw_remap's per-element index arithmetic: StyleGAN2's block at 0.35x of eager with them, 1.03x
    without, CPU); the general kernels stand in only where forbid would reject the candidate."""
    src = PRODUCTS
    an = _analysis(src, profile=False)
    allow = build_candidate(an.graph, an.data, "cpu", torch_ops="allow")
    assert not {k for _, k in own_parts(allow.plan, "allow")} & {"kw_elt", "kw_remap", "kw_bilinear"}
    assert "_kw_elt(" not in allow.files["model_new.py"]
    forbid = build_candidate(an.graph, an.data, "cpu", torch_ops="forbid")
    assert "_kw_elt(" in forbid.files["model_new.py"]


def test_a_linear_of_a_transposed_view_keeps_its_bias_add_ours(tmp_path):
    """ATen's linear runs a strided 3-D input as a matmul, a copy and an aten::add (not one addmm):
    nn.MultiheadAttention's in-projection. Its bias add must be a kernel of ours under forbid."""
    src = task("self.fc(x.transpose(0, 1))", "torch.randn(5, 3, 8)", "        self.fc = nn.Linear(8, 8)")
    an = _analysis(src, profile=False)
    assert an.ok, an.error
    c = build_candidate(an.graph, an.data, "cpu", torch_ops="forbid")
    assert not _forbid_blockers(c.plan), _forbid_blockers(c.plan)
    ops: dict[str, int] = {}
    _check_candidate(src, c.files, tmp_path, ops=ops)
    assert ops and not [op for op in ops if classify(op) == "compute"], ops
