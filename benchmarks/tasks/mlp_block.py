"""A transformer MLP: Linear, GELU, Linear, residual."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, 4 * in_features)
        self.fc2 = nn.Linear(4 * in_features, in_features)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(x)))


batch = 2048
in_features = 1024


def get_inputs():
    return [torch.randn(batch, in_features)]


def get_init_inputs():
    return [in_features]
