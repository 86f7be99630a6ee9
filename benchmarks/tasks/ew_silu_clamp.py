"""Elementwise chain: SiLU then clamp to a range."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.clamp(F.silu(x), min=-0.25, max=2.0)


rows = 8192
cols = 8192


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
