"""A Linear layer followed by ReLU: the GEMM may be a library call, the epilogue must be a kernel."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, fin, fout):
        super().__init__()
        self.proj = nn.Linear(fin, fout)

    def forward(self, x):
        return torch.relu(self.proj(x))


batch = 32
fin = 64
fout = 96


def get_inputs():
    return [torch.randn(batch, fin)]


def get_init_inputs():
    return [fin, fout]
