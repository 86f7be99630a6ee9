"""C = A @ B, 512x512 fp32: a size a kernel can hard-code (issue 17, item 2)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)


N = 512


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
