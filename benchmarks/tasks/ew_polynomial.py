"""A polynomial written as separate ops: 0.5 x^2 + 0.25 x - 1, then a sigmoid."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.sigmoid(0.5 * x.pow(2) + 0.25 * x - 1.0)


rows = 8192
cols = 8192


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
