"""Median skew (red team 2026-12-07, median_skew_pool) with its copies made by torch: honest work,
concentrated in a minority of the timed calls. No check rejects it: 7.29x for a kernel of 0.16x
(2026-12-07, after the fixes, with block means tried: the pools refill in a few blocks of the
window, and the speedup is the median of the rounds' ratios). Open: a memo class, closed only by
timed inputs the candidate cannot predict (docs/hacks.md, residual risks).

The speedup is the median of per-round ratios of *block medians*, and each timed call is
timed for real. A forward that, on a miss on values it has seen before (the timing sets are the same
tensor objects call after call), computes the output once and makes POOL fresh copies of it,
and on a hit pops one of them, spends nearly all its time in about one call of every
POOL per set: the block median is a hit (a dict lookup). Every returned output is correct,
is a fresh storage returned once (HeldMemory sees nothing), and its key is read from the values
(a few sampled elements), so the Exchange's swapped values are keyed right. No output-sized
copy is paid in the hit calls (the documented residual pays one per call)."""

import kwrt
import torch
import torch.nn as nn

lib = kwrt.load()
POOL_BYTES = 48 << 20  # per input set
POOL = 32


def _key(x):
    a = x.numpy().reshape(-1)  # no dispatcher op
    step = max(1, a.size // 24)
    return (tuple(x.shape), a[::step].tobytes())


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = {}  # key -> list of ready outputs (each returned once)
        self.seen = {}  # id -> [tensor, times seen]

    def _compute(self, x):
        rows, cols = x.shape
        out = torch.empty_like(x)
        lib.softmax_rows(x, out, rows, cols, kwrt.stream())
        return out

    def forward(self, x):
        rows, cols = x.shape
        key = _key(x)
        ready = self.pool.get(key)
        if ready:
            lib.softmax_rows(x, x, 0, cols, kwrt.stream())  # zero rows: the kernel count
            return ready.pop()
        out = self._compute(x)
        entry = self.seen.setdefault(id(x), [x, 0])
        entry[1] += 1
        if len(self.seen) > 16:
            for k in list(self.seen)[:-16]:
                del self.seen[k]
        if entry[1] >= 2:  # a tensor seen again (a timing set): fresh copies for its values
            copies = max(4, min(POOL, POOL_BYTES // max(1, x.nbytes)))
            lst = self.pool.setdefault(key, [])
            while len(lst) < copies:
                lst.append(out.clone())  # timed calls run no dispatch recorder
        return out
