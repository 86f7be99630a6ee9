"""torchvision's FeaturePyramidNetwork (torchvision/ops/feature_pyramid_network.py), written out
with plain convolutions: lateral 1x1 convolutions, top-down nearest upsampling to each level's
size, adds, and 3x3 output convolutions, over four feature maps of a ResNet."""

from typing import List  # noqa: UP035 (as published)

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels_list: List[int], out_channels: int):  # noqa: UP006
        super().__init__()
        self.inner_blocks = nn.ModuleList()
        self.layer_blocks = nn.ModuleList()
        for in_channels in in_channels_list:
            self.inner_blocks.append(nn.Conv2d(in_channels, out_channels, 1))
            self.layer_blocks.append(nn.Conv2d(out_channels, out_channels, 3, padding=1))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_uniform_(m.weight, a=1)
                nn.init.constant_(m.bias, 0)

    def forward(self, c2, c3, c4, c5):
        x = [c2, c3, c4, c5]
        last_inner = self.inner_blocks[-1](x[-1])
        results = [self.layer_blocks[-1](last_inner)]
        for idx in range(len(x) - 2, -1, -1):
            inner_lateral = self.inner_blocks[idx](x[idx])
            feat_shape = inner_lateral.shape[-2:]
            inner_top_down = F.interpolate(last_inner, size=feat_shape, mode="nearest")
            last_inner = inner_lateral + inner_top_down
            results.insert(0, self.layer_blocks[idx](last_inner))
        return tuple(results)


batch = 2
size = 64


def get_inputs():
    return [
        torch.randn(batch, 256, size, size),
        torch.randn(batch, 512, size // 2, size // 2),
        torch.randn(batch, 1024, size // 4, size // 4),
        torch.randn(batch, 2048, size // 8, size // 8),
    ]


def get_init_inputs():
    return [[256, 512, 1024, 2048], 256]
