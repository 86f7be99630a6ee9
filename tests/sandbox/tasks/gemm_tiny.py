"""A plain GEMM: everything is a library call, so only a profiler can tell whether a custom
kernel really ran."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.mm(a, b)


m = 128
k = 256
n = 64


def get_inputs():
    return [torch.randn(m, k), torch.randn(k, n)]


def get_init_inputs():
    return []
