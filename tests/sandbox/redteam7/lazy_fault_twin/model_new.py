"""The honest twin of lazy_fault: the same AVX2 softmax, computed inside the forward."""

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
        lib.softmax_now(x, out, rows, cols)
        return out
