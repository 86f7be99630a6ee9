"""A YOLOv5 neck step (ultralytics/yolov5 models/common.py): Conv (conv + BatchNorm + SiLU),
nn.Upsample(scale_factor=2, mode="nearest"), torch.cat with the backbone's feature map, then C3 (two
1x1 Convs, Bottlenecks without shortcut, cat, a 1x1 Conv). Written out as in the repository."""

import torch
import torch.nn as nn


def autopad(k, p=None, d=1):
    if d > 1:
        k = d * (k - 1) + 1 if isinstance(k, int) else [d * (x - 1) + 1 for x in k]
    if p is None:
        p = k // 2 if isinstance(k, int) else [x // 2 for x in k]
    return p


class Conv(nn.Module):
    default_act = nn.SiLU()

    def __init__(self, c1, c2, k=1, s=1, p=None, g=1, d=1, act=True):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, autopad(k, p, d), groups=g, dilation=d, bias=False)
        self.bn = nn.BatchNorm2d(c2)
        self.act = self.default_act if act is True else act if isinstance(act, nn.Module) else nn.Identity()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c1, c2, shortcut=True, g=1, e=0.5):
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c_, c2, 3, 1, g=g)
        self.add = shortcut and c1 == c2

    def forward(self, x):
        return x + self.cv2(self.cv1(x)) if self.add else self.cv2(self.cv1(x))


class C3(nn.Module):
    def __init__(self, c1, c2, n=1, shortcut=True, g=1, e=0.5):
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c1, c_, 1, 1)
        self.cv3 = Conv(2 * c_, c2, 1)
        self.m = nn.Sequential(*(Bottleneck(c_, c_, shortcut, g, e=1.0) for _ in range(n)))

    def forward(self, x):
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class Model(nn.Module):
    def __init__(self, c_deep, c_skip, c_out):
        super().__init__()
        self.reduce = Conv(c_deep, c_out, 1, 1)
        self.up = nn.Upsample(None, 2, "nearest")
        self.c3 = C3(c_out + c_skip, c_out, n=1, shortcut=False)

    def forward(self, deep, skip):
        x = self.up(self.reduce(deep))
        return self.c3(torch.cat([x, skip], 1))


def get_inputs():
    return [torch.randn(4, 512, 20, 20), torch.randn(4, 256, 40, 40)]


def get_init_inputs():
    return [512, 256, 256]
