"""A squeeze-and-excitation block as people write it: global average pool by `mean`, two
linear layers, and the channel gate broadcast with `s[:, :, None, None]`."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, reduction=4):
        super().__init__()
        self.fc1 = nn.Linear(channels, channels // reduction)
        self.fc2 = nn.Linear(channels // reduction, channels)

    def forward(self, x):
        s = x.mean(dim=(2, 3))
        s = torch.relu(self.fc1(s))
        s = torch.sigmoid(self.fc2(s))
        return x * s[:, :, None, None]


batch = 8
channels = 64
size = 28


def get_inputs():
    return [torch.randn(batch, channels, size, size)]


def get_init_inputs():
    return [channels]
