"""Forged call times (the documented residual "native code can rewrite the timer's records",
quantified): a kernel call reaches the running Timer.block's local list `times` through CPython's
C API (kernels/softmax.cpp) and the forward divides every earlier entry by 50. The kernel is the
honest, slow softmax; only the parent's clock (protocol.account_on_parent_clock) stands between
this and a 50x "speedup"."""

import kwrt
import torch
import torch.nn as nn

lib = kwrt.load()
SCALE = 50.0


class Holder:
    times = None


HOLD = Holder()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.done = 0

    def forward(self, x):
        rows, cols = x.shape
        HOLD.times = None
        lib.grab_times(id(HOLD))
        t = HOLD.times
        if t is not None:
            if len(t) < self.done:  # a new block
                self.done = 0
            for i in range(self.done, len(t)):
                t[i] = t[i] / SCALE
            self.done = len(t)
        out = torch.empty_like(x)
        lib.softmax_rows(x, out, rows, cols, kwrt.stream())
        return out
