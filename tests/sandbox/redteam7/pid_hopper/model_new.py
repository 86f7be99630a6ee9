"""An honest softmax whose kernel library starts a pid-hopping process that burns CPU while the
candidate is stopped, i.e. while the baselines are timed (see kernels/softmax.cpp)."""

import kwrt
import torch
import torch.nn as nn

lib = kwrt.load()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        rows, cols = x.shape
        out = torch.empty_like(x)
        lib.softmax_rows(x, out, rows, cols, kwrt.stream())
        return out
