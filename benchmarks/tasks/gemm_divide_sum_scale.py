"""GEMM, divide by 2, sum over the outputs, scale (KernelBench level 2 style): the sum over a linear layer's outputs is a matrix-vector product with summed weights."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size) * 0.02)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = torch.matmul(x, self.weight.T)
        x = x / 2
        x = torch.sum(x, dim=1, keepdim=True)
        x = x * self.scaling_factor
        return x


batch = 8192
in_features = 4096
hidden_size = 4096
scaling_factor = 1.5


def get_inputs():
    return [torch.randn(batch, in_features)]


def get_init_inputs():
    return [in_features, hidden_size, scaling_factor]
