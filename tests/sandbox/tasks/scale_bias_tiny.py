"""y = x * weight + bias with learned per-feature parameters: exercises the state_dict copy,
the reinit trial and the shape trial (features changes the parameter shapes)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return x * self.weight + self.bias


batch = 32
features = 128


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features]
