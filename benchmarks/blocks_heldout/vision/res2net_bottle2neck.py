"""Res2Net's Bottle2neck pair as Res2Net/Res2Net-PretrainedModels res2net.py writes it: width =
floor(planes * baseWidth / 64), conv1 to width*scale channels, `torch.split(out, self.width, 1)`, a Python loop
over `self.nums` 3x3 conv + BN + ReLU applied to `sp = sp + spx[i]` (or `spx[i]` alone for i == 0 and for the
'stage' type), torch.cat growing `out`, the last split passed through (or nn.AvgPool2d'ed for 'stage'), conv3 /
bn3, the downsample and `out += residual`. A stage start as res2net50_26w_4s's layer2: a stride-2 'stage' block
with the conv + BN downsample, then a 'normal' block. width 13 (odd channel counts). Changed: BN statistics
randomised as a trained checkpoint has them."""

import math

import torch
import torch.nn as nn


class Bottle2neck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None, baseWidth=26, scale=4, stype='normal'):
        """ Constructor
        Args:
            inplanes: input channel dimensionality
            planes: output channel dimensionality
            stride: conv stride. Replaces pooling layer.
            downsample: None when stride = 1
            baseWidth: basic width of conv3x3
            scale: number of scale.
            type: 'normal': normal set. 'stage': first block of a new stage.
        """
        super(Bottle2neck, self).__init__()

        width = int(math.floor(planes * (baseWidth / 64.0)))
        self.conv1 = nn.Conv2d(inplanes, width * scale, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width * scale)

        if scale == 1:
            self.nums = 1
        else:
            self.nums = scale - 1
        if stype == 'stage':
            self.pool = nn.AvgPool2d(kernel_size=3, stride=stride, padding=1)
        convs = []
        bns = []
        for i in range(self.nums):
            convs.append(nn.Conv2d(width, width, kernel_size=3, stride=stride, padding=1, bias=False))
            bns.append(nn.BatchNorm2d(width))
        self.convs = nn.ModuleList(convs)
        self.bns = nn.ModuleList(bns)

        self.conv3 = nn.Conv2d(width * scale, planes * self.expansion, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)

        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stype = stype
        self.scale = scale
        self.width = width

    def forward(self, x):
        residual = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        spx = torch.split(out, self.width, 1)
        for i in range(self.nums):
            if i == 0 or self.stype == 'stage':
                sp = spx[i]
            else:
                sp = sp + spx[i]
            sp = self.convs[i](sp)
            sp = self.relu(self.bns[i](sp))
            if i == 0:
                out = sp
            else:
                out = torch.cat((out, sp), 1)
        if self.scale != 1 and self.stype == 'normal':
            out = torch.cat((out, spx[self.nums]), 1)
        elif self.scale != 1 and self.stype == 'stage':
            out = torch.cat((out, self.pool(spx[self.nums])), 1)

        out = self.conv3(out)
        out = self.bn3(out)

        if self.downsample is not None:
            residual = self.downsample(x)

        out += residual
        out = self.relu(out)

        return out


class Model(nn.Module):
    def __init__(self, inplanes, planes, baseWidth=26, scale=4):
        super().__init__()
        block = Bottle2neck
        downsample = nn.Sequential(
            nn.Conv2d(inplanes, planes * block.expansion,
                      kernel_size=1, stride=2, bias=False),
            nn.BatchNorm2d(planes * block.expansion),
        )
        layers = []
        layers.append(block(inplanes, planes, 2, downsample=downsample,
                            stype='stage', baseWidth=baseWidth, scale=scale))
        inplanes = planes * block.expansion
        layers.append(block(inplanes, planes, baseWidth=baseWidth, scale=scale))
        self.layer = nn.Sequential(*layers)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.1, 0.1)
                    m.running_var.uniform_(0.5, 1.5)
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.1, 0.1)

    def forward(self, x):
        return self.layer(x)


batch = 2
inplanes = 64
planes = 32
size = 24


def get_inputs():
    return [torch.randn(batch, inplanes, size, size)]


def get_init_inputs():
    return [inplanes, planes]
