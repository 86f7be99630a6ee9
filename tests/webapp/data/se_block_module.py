"""A squeeze-and-excitation block as people write it: its own class names and constructor, no
KernelBench functions, a helper class and a module-level constant."""

import torch
from torch import nn

REDUCTION = 4


class Squeeze(nn.Module):
    def forward(self, x):
        return x.mean(dim=(2, 3))


class SEBlock(nn.Module):
    """Squeeze-and-excitation: channel attention from global pooling."""

    def __init__(self, channels: int, reduction: int = REDUCTION):
        super().__init__()
        self.squeeze = Squeeze()
        self.fc1 = nn.Linear(channels, channels // reduction)
        self.fc2 = nn.Linear(channels // reduction, channels)

    def forward(self, x):
        s = torch.sigmoid(self.fc2(torch.relu(self.fc1(self.squeeze(x)))))
        return x * s[:, :, None, None]


class TokenMixer(SEBlock):
    def forward(self, tokens, mask=None):
        return tokens


def helper(x):
    return x
