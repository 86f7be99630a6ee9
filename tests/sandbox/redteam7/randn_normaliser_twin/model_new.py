"""The honest twin of randn_normaliser: the same exp and the same OpenMP rows, but each row's own
max and sum (softmax_exact in kernels/softmax.cpp)."""

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
        lib.softmax_exact(x, out, rows, cols, kwrt.stream())
        return out
