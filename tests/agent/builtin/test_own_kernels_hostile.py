"""Our kernels read tables and images at positions that come from the inputs (an embedding bag's
indices and offsets, a grid sample's coordinates): inputs written to push those positions out of
range must never make a kernel read outside its tensors. ATen refuses out-of-table indices; ours
give the bag NaN (a wrong answer the checker sees); offsets are clamped; a coordinate of any
size or a non-finite one samples nothing outside the image. The candidates are built for honest
inputs and then called, in this process, with hostile ones of the same shapes."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from agent.builtin.pipeline import build_candidate
from tests.agent.builtin.test_export_capture import RUNTIME, _analysis, _compile, _module
from tests.agent.builtin.test_own_kernels import task

GRID = task(
    "(F.grid_sample(x, g, align_corners=False), F.grid_sample(x, g, mode='nearest', align_corners=False), "
    "F.grid_sample(x, g, mode='nearest', padding_mode='reflection', align_corners=False), "
    "F.grid_sample(x, g, padding_mode='border', align_corners=True))",
    "torch.randn(1, 2, 5, 6), torch.rand(1, 4, 4, 2) * 2 - 1",
    args="x, g",
)
BAGS = task(
    "(self.a(i, o), self.b(i, o))",
    "torch.randint(0, 11, (12,)), torch.tensor([0, 3, 6, 9])",
    "        self.a = torch.nn.EmbeddingBag(11, 4, mode='sum')\n"
    "        self.b = torch.nn.EmbeddingBag(11, 4, mode='max')",
    args="i, o",
)


def _models(src: str, tmp_path):
    an = _analysis(src, profile=False)
    assert an.ok, an.error
    c = build_candidate(an.graph, an.data, "cpu", torch_ops="forbid")
    kernel = next(p for p in c.files if p.startswith("kernels/"))
    os.environ["KWRT_LIB"] = _compile(c.files[kernel], tmp_path)
    sys.path.insert(0, str(RUNTIME))
    import kwrt

    kwrt._lib = None
    ref = _module(f"ref_{tmp_path.name}", src)
    cand = _module(f"cand_{tmp_path.name}", c.files["model_new.py"])
    m = ref.Model().eval()
    mn = cand.ModelNew().eval()
    mn.load_state_dict(m.state_dict())
    return m, mn


def test_extreme_grid_coordinates_sample_nothing_outside_the_image(tmp_path):
    try:
        m, mn = _models(GRID, tmp_path)
        x = torch.randn(1, 2, 5, 6)
        extreme = [float("nan"), float("inf"), -float("inf"), 1e30, -1e30, 3.0e9, -2.5e9, 0.5]
        g = torch.tensor(extreme * 4).view(1, 4, 4, 2)
        with torch.no_grad():
            honest = mn(x, torch.rand(1, 4, 4, 2) * 2 - 1)  # the specialised path (not the fallback)
            bilinear, nearest, reflected, border = mn(x, g)
        assert all(t.shape == (1, 2, 4, 4) for t in honest)
        bound = x.abs().max()
        assert bilinear.isfinite().all() and (bilinear.abs() <= bound).all(), bilinear
        assert border.isfinite().all() and (border.abs() <= bound).all(), border
        pixels = set(x.flatten().tolist()) | {0.0}
        for out in (nearest, reflected):  # nearest sampling reads one pixel or none
            assert set(out.flatten().tolist()) <= pixels, out
        # where the coordinates are finite and in range, it is the reference's answer
        with torch.no_grad():
            torch.testing.assert_close(
                mn(x, g.clamp(-1, 1).nan_to_num(0.0))[0], m(x, g.clamp(-1, 1).nan_to_num(0.0))[0]
            )
    finally:
        sys.path.remove(str(RUNTIME))
        os.environ.pop("KWRT_LIB", None)


def test_indices_outside_the_table_and_wild_offsets_read_nothing_outside_it(tmp_path):
    try:
        m, mn = _models(BAGS, tmp_path)
        offsets = torch.tensor([0, 3, 6, 9])
        i = torch.tensor([1, 2, 10**9, 4, -3, 5, 6, 7, 8, 9, 10, 0])  # bags 0 and 1 leave the table
        with torch.no_grad():
            summed, maxed = mn(i, offsets)
            ok = i.clone()
            ok[2], ok[4] = 0, 0
            want_sum, want_max = m(ok, offsets)
        for got, want in ((summed, want_sum), (maxed, want_max)):
            assert got[:2].isnan().all(), got  # ATen raises; the bag is NaN, never another row
            torch.testing.assert_close(got[2:], want[2:])
        wild = torch.tensor([0, 10**6, -7, 2**62])  # clamped to the indices: empty or whole bags
        drawn = torch.randint(0, 11, (12,))
        with torch.no_grad():
            summed, maxed = mn(drawn, wild)
        assert summed.isfinite().all() and maxed.isfinite().all()
        bound = m.a.weight[drawn].abs().sum(0)  # every drawn row, repeats counted: the most a whole bag sums to
        assert (summed.abs() <= bound + 1e-5).all(), summed  # no value from outside the table
    finally:
        sys.path.remove(str(RUNTIME))
        os.environ.pop("KWRT_LIB", None)


def test_a_cat_operand_whose_other_sizes_differ_raises_before_it_is_copied():
    """Res2Net's generalised candidate joined a 13x13 and a 12x12 map (a pool's size bound wrongly):
    kw_copy_block would have copied the smaller one out of place (or past the end of a larger)."""
    import math

    import torch

    from agent.builtin.ownkernels import DENSE_HELPER

    env: dict = {"torch": torch, "math": math}
    exec(DENSE_HELPER, env)
    copies: list = []

    class Lib:
        def kw_copy_block(self, *a):
            copies.append(a)

    a, b = torch.zeros(1, 2, 13, 13), torch.zeros(1, 3, 12, 12)
    with pytest.raises(RuntimeError, match="does not match"):
        env["_kw_cat"](Lib(), (b, a), 1, False, 0)  # checked before its copy: the first operand alone
    with pytest.raises(RuntimeError, match="does not match"):
        env["_kw_cat"](Lib(), (a, torch.zeros(1, 3, 13, 13)), 1, True, 0)  # stack: every size equal
    with pytest.raises(RuntimeError, match="does not match"):
        env["_kw_cat"](Lib(), (a, torch.zeros(1, 2, 13)), 1, False, 0)  # another rank
    assert len(copies) == 3  # the first operand of each: no mismatched operand was copied
    out = env["_kw_cat"](Lib(), (a, torch.zeros(1, 3, 13, 13)), 1, False, 0)
    assert out.shape == (1, 5, 13, 13) and len(copies) == 5
