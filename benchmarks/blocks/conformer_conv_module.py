"""The Conformer convolution module (Gulati et al.; as in torchaudio's conformer.py and ESPnet):
layer norm, a pointwise convolution doubling the channels, GLU, a depthwise 1-d convolution,
batch norm, SiLU, a pointwise convolution and dropout, on [batch, time, channels]."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_dim, num_channels, depthwise_kernel_size, dropout=0.0, bias=False):
        super().__init__()
        self.layer_norm = nn.LayerNorm(input_dim)
        self.sequential = nn.Sequential(
            nn.Conv1d(input_dim, 2 * num_channels, 1, stride=1, padding=0, bias=bias),
            nn.GLU(dim=1),
            nn.Conv1d(
                num_channels,
                num_channels,
                depthwise_kernel_size,
                stride=1,
                padding=(depthwise_kernel_size - 1) // 2,
                groups=num_channels,
                bias=bias,
            ),
            nn.BatchNorm1d(num_channels),
            nn.SiLU(),
            nn.Conv1d(num_channels, input_dim, kernel_size=1, stride=1, padding=0, bias=bias),
            nn.Dropout(dropout),
        )

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = self.layer_norm(input)
        x = x.transpose(1, 2)
        x = self.sequential(x)
        return x.transpose(1, 2)


batch = 4
time = 200
dim = 144
kernel = 31


def get_inputs():
    return [torch.randn(batch, time, dim)]


def get_init_inputs():
    return [dim, dim, kernel]
