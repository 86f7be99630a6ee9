"""Linear followed by LayerNorm: a GEMM with a row-reduction epilogue."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.ln = nn.LayerNorm(out_features)

    def forward(self, x):
        return self.ln(self.fc(x))


batch = 4096
in_features = 2048
out_features = 2048


def get_inputs():
    return [torch.randn(batch, in_features)]


def get_init_inputs():
    return [in_features, out_features]
