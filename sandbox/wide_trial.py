"""The wide-distribution trial's inputs: the task's own inputs' shapes and dtypes, filled with
signed heavy-tailed values (Student-t, 3 degrees of freedom, scaled by each input's spread), so
a kernel that is only right near zero or for small magnitudes (a truncated series, a clamp, a
lookup table) fails a trial.

Why a module of its own: a Student-t draw needs a normal and a chi-squared sample; drawn at once
for a 6 GiB input (KernelBench level 1 at its published sizes) that held the input, its normal
draw and three more normal draws on the device together (30 GiB) and ran an 80 GB card out of
memory beside the candidate (docs/benchmarks.md, thirty-seventh and thirty-ninth sessions). Here
each input is dropped before its replacement is made, and the replacement is filled a chunk at a
time: the trial holds one input's bytes plus a few chunk-sized temporaries.
"""

from __future__ import annotations

import math
from typing import Any

CHUNK = 1 << 24  # elements per step: five float32 temporaries of 64 MiB at most
BOUND = 1e4  # a finite range every floating dtype the tasks use can hold


def widen(inputs: list[Any], seed: int, chunk: int = CHUNK) -> list[Any]:
    """`inputs` with each non-empty floating tensor replaced (in the list itself, which the
    caller gives up) by a heavy-tailed one of the same shape, dtype and device; the rest as they
    are. One generator per device, seeded with `seed`: the same seed gives the same values."""
    import torch

    gens: dict[Any, Any] = {}
    for i in range(len(inputs)):  # not enumerate: its reused result tuple would keep x alive
        x = inputs[i]
        if not (isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 0):
            continue
        shape, dtype, device = x.shape, x.dtype, x.device
        scale = _spread(x)
        inputs[i] = x = None  # the original's memory goes back before its replacement is made
        gen = gens.get(device) or gens.setdefault(device, torch.Generator(device=device).manual_seed(seed))
        out = torch.empty(shape, dtype=dtype, device=device)
        _fill_student_t(out.view(-1), gen, 2.0 * scale, chunk)
        inputs[i] = out
    return inputs


def _spread(x: Any) -> float:
    """The input's standard deviation, 1.0 where it has none (one value, or not finite)."""
    scale = float(x.float().std()) if x.numel() > 1 else 1.0
    return scale if math.isfinite(scale) and scale > 0 else 1.0


def _fill_student_t(flat: Any, gen: Any, scale: float, chunk: int) -> None:
    """Writes scale * t(3 dof), clamped to +-BOUND, into the contiguous 1-d `flat`, `chunk`
    elements at a time: t = z / sqrt(chi2_3 / 3), z and the three squared normals drawn in float32."""
    import torch

    for start in range(0, flat.numel(), chunk):
        n = min(chunk, flat.numel() - start)
        z = torch.randn(n, generator=gen, dtype=torch.float32, device=flat.device)
        chi = torch.randn((3, n), generator=gen, dtype=torch.float32, device=flat.device).pow_(2).mean(0)
        z.div_(chi.clamp_min_(1e-3).sqrt_()).mul_(scale).clamp_(-BOUND, BOUND)
        flat[start : start + n].copy_(z)
        del z, chi
