"""1x1 Conv2d, hardswish, plus the input (same channels)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, cin):
        super().__init__()
        self.conv = nn.Conv2d(cin, cin, 1)

    def forward(self, x):
        return F.hardswish(self.conv(x)) + x


batch = 16
cin = 128
size = 56


def get_inputs():
    return [torch.randn(batch, cin, size, size)]


def get_init_inputs():
    return [cin]
