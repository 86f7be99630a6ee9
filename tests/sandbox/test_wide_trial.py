"""The wide-distribution trial's inputs (sandbox.wide_trial): heavy-tailed values of the task's
shapes and dtypes, made without holding a second copy of a large input."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from sandbox.wide_trial import widen

ROOT = Path(__file__).resolve().parents[2]


def test_floating_inputs_are_replaced_by_heavy_tailed_values_of_the_same_kind():
    torch.manual_seed(0)
    x, h, idx = torch.randn(100_003), torch.randn(8, 9).half(), torch.arange(5)
    out = widen([x, h, idx, 3.0], seed=7, chunk=1000)  # 100 chunks and a partial one
    assert out[0].shape == x.shape and out[0].dtype == torch.float32
    assert out[1].shape == h.shape and out[1].dtype == torch.float16
    assert out[2] is idx and out[3] == 3.0
    t = out[0] / (2.0 * float(x.std()))
    assert bool(torch.isfinite(t).all()) and int((t == 0).sum()) == 0  # every chunk written
    # Student-t, 3 dof: P(|t| > 5) is about 1.5%; a normal draw would give about 6e-7
    assert 0.008 < float((t.abs() > 5).float().mean()) < 0.03
    assert abs(float(t.mean())) < 0.05


def test_the_same_seed_gives_the_same_values_whatever_the_list():
    a = widen([torch.ones(10) * 3, torch.randn(50)], seed=11, chunk=16)
    b = widen([torch.ones(10) * 3, torch.randn(50)], seed=11, chunk=16)
    c = widen([torch.ones(10) * 3, torch.randn(50)], seed=12, chunk=16)
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])
    assert float(a[0].abs().max()) > 0  # a constant input (std 0) is widened with scale 1


def test_a_large_input_is_not_held_twice(tmp_path):
    """The old draw held the input, a normal draw and three more (about five copies): a 6 GiB
    input ran an 80 GB card out of memory. The peak here stays under half the input's size."""
    script = textwrap.dedent(
        """
        import resource, sys, torch
        from sandbox.wide_trial import widen
        torch.set_num_threads(1)
        inputs = [torch.randn(128 << 20)]  # 512 MiB
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        widen(inputs, 5, chunk=1 << 22)
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    grown = int(done.stdout.split()[-1])
    assert grown < (512 << 20) // 2, f"the peak grew by {grown / 2**20:.0f} MiB over a 512 MiB input"
