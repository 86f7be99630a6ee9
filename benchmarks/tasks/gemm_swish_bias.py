"""matmul with a transposed weight, SiLU, plus a bias parameter."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * 0.02)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.02)

    def forward(self, x):
        h = torch.matmul(x, self.weight.T)
        return h * torch.sigmoid(h) + self.bias


batch = 4096
in_features = 2048
out_features = 2048


def get_inputs():
    return [torch.randn(batch, in_features)]


def get_init_inputs():
    return [in_features, out_features]
