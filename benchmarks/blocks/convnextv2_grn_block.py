"""ConvNeXt V2's Block (facebookresearch/ConvNeXt-V2, models/convnextv2.py): depthwise 7x7 conv,
permute to channels-last, LayerNorm, pointwise Linear, GELU, GRN (global response normalisation:
an L2 norm over the spatial dims, divided by its channel mean), pointwise Linear, permute back,
residual. DropPath at rate 0 is an identity. Written out as in the repository."""

import torch
import torch.nn as nn


class GRN(nn.Module):
    """GRN (Global Response Normalization) layer"""

    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(1, 1, 1, dim))
        self.beta = nn.Parameter(torch.zeros(1, 1, 1, dim))

    def forward(self, x):
        Gx = torch.norm(x, p=2, dim=(1, 2), keepdim=True)
        Nx = Gx / (Gx.mean(dim=-1, keepdim=True) + 1e-6)
        return self.gamma * (x * Nx) + self.beta + x


class Block(nn.Module):
    def __init__(self, dim, drop_path=0.0):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.grn = GRN(4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.drop_path = nn.Identity()

    def forward(self, x):
        input = x
        x = self.dwconv(x)
        x = x.permute(0, 2, 3, 1)  # (N, C, H, W) -> (N, H, W, C)
        x = self.norm(x)
        x = self.pwconv1(x)
        x = self.act(x)
        x = self.grn(x)
        x = self.pwconv2(x)
        x = x.permute(0, 3, 1, 2)  # (N, H, W, C) -> (N, C, H, W)

        x = input + self.drop_path(x)
        return x


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.block = Block(dim)
        with torch.no_grad():  # trained GRN parameters are not zero
            self.block.grn.gamma.normal_(0, 0.1)
            self.block.grn.beta.normal_(0, 0.1)

    def forward(self, x):
        return self.block(x)


def get_inputs():
    return [torch.randn(8, 96, 56, 56)]


def get_init_inputs():
    return [96]
