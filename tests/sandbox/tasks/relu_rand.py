"""ReLU on torch.rand inputs: all inputs are positive, so `return x` would pass without the
wide-distribution trial."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


n = 4096


def get_inputs():
    return [torch.rand(n)]


def get_init_inputs():
    return []
