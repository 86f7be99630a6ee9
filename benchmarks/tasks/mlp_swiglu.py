"""A SwiGLU MLP: silu(x W1) * (x W3), then W2."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, hidden):
        super().__init__()
        self.w1 = nn.Linear(in_features, hidden, bias=False)
        self.w3 = nn.Linear(in_features, hidden, bias=False)
        self.w2 = nn.Linear(hidden, in_features, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


batch = 2048
in_features = 1024
hidden = 2816


def get_inputs():
    return [torch.randn(batch, in_features)]


def get_init_inputs():
    return [in_features, hidden]
