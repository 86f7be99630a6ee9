"""LayerNorm followed by GELU."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.ln = nn.LayerNorm(cols)

    def forward(self, x):
        return F.gelu(self.ln(x))


rows = 16384
cols = 4096


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return [cols]
