"""Linear + BatchNorm1d (eval) + ReLU: the batch norm folds into the linear layer."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x):
        return torch.relu(self.bn(self.fc(x)))


batch = 4096
in_features = 2048
out_features = 2048


def get_inputs():
    return [torch.randn(batch, in_features)]


def get_init_inputs():
    return [in_features, out_features]
