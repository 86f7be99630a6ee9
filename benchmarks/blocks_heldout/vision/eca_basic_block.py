"""ECA-Net's ECABasicBlock as BangguWu/ECANet models/eca_resnet.py and models/eca_module.py write it: conv3x3 /
BN / ReLU / conv3x3 / BN, then eca_layer (nn.AdaptiveAvgPool2d(1), a Conv1d(1, 1, k) across channels on
`y.squeeze(-1).transpose(-1, -2)` and back with `.transpose(-1, -2).unsqueeze(-1)`, sigmoid,
`x * y.expand_as(x)`), the downsample branch and `out += residual`. k_size from the paper's adaptive rule
(|log2(C) + b| / gamma, odd), as timm's EcaModule computes it. Two blocks as a stage start: stride 2 with a
1x1 conv + BN downsample, then stride 1. Changed: BN statistics randomised as a trained checkpoint has them."""

import math

import torch
import torch.nn as nn


def conv3x3(in_planes, out_planes, stride=1):
    "3x3 convolution with padding"
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                     padding=1, bias=False)


class eca_layer(nn.Module):
    """Constructs a ECA module.

    Args:
        channel: Number of channels of the input feature map
        k_size: Adaptive selection of kernel size
    """
    def __init__(self, channel, k_size=3):
        super(eca_layer, self).__init__()
        self.avg_pool = nn.AdaptiveAvgPool2d(1)
        self.conv = nn.Conv1d(1, 1, kernel_size=k_size, padding=(k_size - 1) // 2, bias=False)
        self.sigmoid = nn.Sigmoid()

    def forward(self, x):
        # x: input features with shape [b, c, h, w]
        b, c, h, w = x.size()

        # feature descriptor on the global spatial information
        y = self.avg_pool(x)

        # Two different branches of ECA module
        y = self.conv(y.squeeze(-1).transpose(-1, -2)).transpose(-1, -2).unsqueeze(-1)

        # Multi-scale information fusion
        y = self.sigmoid(y)

        return x * y.expand_as(x)


class ECABasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None, k_size=3):
        super(ECABasicBlock, self).__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes, 1)
        self.bn2 = nn.BatchNorm2d(planes)
        self.eca = eca_layer(planes, k_size)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        residual = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)
        out = self.eca(out)

        if self.downsample is not None:
            residual = self.downsample(x)

        out += residual
        out = self.relu(out)

        return out


class Model(nn.Module):
    def __init__(self, inplanes, planes, gamma=2, beta=1):
        super().__init__()
        t = int(abs(math.log(planes, 2) + beta) / gamma)
        k_size = max(t if t % 2 else t + 1, 3)
        downsample = nn.Sequential(
            nn.Conv2d(inplanes, planes * ECABasicBlock.expansion, kernel_size=1, stride=2, bias=False),
            nn.BatchNorm2d(planes * ECABasicBlock.expansion),
        )
        self.layer = nn.Sequential(
            ECABasicBlock(inplanes, planes, 2, downsample, k_size=k_size),
            ECABasicBlock(planes, planes, k_size=k_size),
        )
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.1, 0.1)
                    m.running_var.uniform_(0.5, 1.5)
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.1, 0.1)

    def forward(self, x):
        return self.layer(x)


batch = 4
inplanes = 32
planes = 64
size = 32


def get_inputs():
    return [torch.randn(batch, inplanes, size, size)]


def get_init_inputs():
    return [inplanes, planes]
