"""A ConvNeXt block (facebookresearch/ConvNeXt): depthwise 7x7 convolution, then channels-last
through a permute, LayerNorm, an inverted-bottleneck MLP, layer scale, permute back, residual."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim, layer_scale_init_value=1e-6):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(layer_scale_init_value * torch.ones((dim,)) + 0.1)

    def forward(self, x):
        input = x
        x = self.dwconv(x)
        x = x.permute(0, 2, 3, 1)  # (N, C, H, W) -> (N, H, W, C)
        x = self.norm(x)
        x = self.pwconv1(x)
        x = self.act(x)
        x = self.pwconv2(x)
        x = self.gamma * x
        x = x.permute(0, 3, 1, 2)  # (N, H, W, C) -> (N, C, H, W)
        return input + x


batch = 4
dim = 32
size = 28


def get_inputs():
    return [torch.randn(batch, dim, size, size)]


def get_init_inputs():
    return [dim]
