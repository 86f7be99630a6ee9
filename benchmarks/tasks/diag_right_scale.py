"""X @ diag(d): a column scaling written as a GEMM with a dense diagonal matrix."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, d):
        return x @ torch.diag(d)


N = 2048
M = 2048


def get_inputs():
    return [torch.randn(N, M), torch.randn(M)]


def get_init_inputs():
    return []
