"""Conv2d + BatchNorm2d (eval) + ReLU: batch norm folds into the convolution, ReLU fuses into its epilogue."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


batch = 16
cin = 64
cout = 64
size = 56


def get_inputs():
    return [torch.randn(batch, cin, size, size)]


def get_init_inputs():
    return [cin, cout]
