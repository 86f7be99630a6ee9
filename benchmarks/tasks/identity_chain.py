"""Redundant ops: clone, contiguous, double transpose and a multiply by one around a tanh."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = x.clone().contiguous()
        y = y.transpose(0, 1).transpose(0, 1)
        return torch.tanh(y * 1.0) + 1.0


rows = 8192
cols = 4096


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
