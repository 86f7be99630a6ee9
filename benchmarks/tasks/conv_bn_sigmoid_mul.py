"""Conv2d + BatchNorm2d + a sigmoid self-gate (x * sigmoid(x))."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        h = self.bn(self.conv(x))
        return h * torch.sigmoid(h)


batch = 16
cin = 64
cout = 64
size = 56


def get_inputs():
    return [torch.randn(batch, cin, size, size)]


def get_init_inputs():
    return [cin, cout]
