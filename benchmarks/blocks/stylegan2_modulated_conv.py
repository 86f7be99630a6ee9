"""StyleGAN2's modulated convolution as rosinality/stylegan2-pytorch's model.py writes it (master, 2020-2021):
ModulatedConv2d with demodulate=True and fused=True (the default) and neither upsample nor downsample, the 3x3 conv
of a StyledConv: its style goes through EqualLinear(style_dim, in_channel, bias_init=1) (weight N(0, 1) / lr_mul,
scaled by 1 / sqrt(in_dim) * lr_mul in F.linear, bias * lr_mul), the weight [1, out, in, k, k] * 1 / sqrt(fan_in)
is multiplied by the style viewed [batch, 1, in, 1, 1], demodulated by torch.rsqrt(weight.pow(2).sum([2, 3, 4]) +
1e-8), viewed [batch * out, in, k, k] and applied as one grouped convolution over the batch folded into the channels
(input.view(1, batch * in_channel, h, w), groups=batch), the output viewed back to [batch, out, h, w].
Sizes smaller than the 1024px generator's 512-channel layers: 64 channels in and out at 16x16, style_dim 128,
batch 4. Changed: conv2d_gradfix.conv2d (a wrapper that falls back to F.conv2d unless its custom gradient is
enabled) written as F.conv2d, the upsample / downsample (Blur, conv_transpose2d) and fused=False branches dropped,
EqualLinear's fused_leaky_relu branch (activation="fused_lrelu") dropped since the modulation has no activation;
EqualLinear's bias drawn from 1 + N(0, 0.1) as a stand-in for a trained bias (rosinality starts it at bias_init=1)."""

import math

import torch
from torch import nn
from torch.nn import functional as F


class EqualLinear(nn.Module):
    def __init__(self, in_dim, out_dim, bias=True, bias_init=0, lr_mul=1, activation=None):
        super().__init__()

        self.weight = nn.Parameter(torch.randn(out_dim, in_dim).div_(lr_mul))

        if bias:
            self.bias = nn.Parameter(torch.zeros(out_dim).fill_(bias_init))

        else:
            self.bias = None

        self.activation = activation

        self.scale = (1 / math.sqrt(in_dim)) * lr_mul
        self.lr_mul = lr_mul

    def forward(self, input):
        if self.activation:
            raise NotImplementedError("fused_leaky_relu is not part of this block")

        else:
            out = F.linear(input, self.weight * self.scale, bias=self.bias * self.lr_mul)

        return out

    def __repr__(self):
        return f"{self.__class__.__name__}({self.weight.shape[1]}, {self.weight.shape[0]})"


class ModulatedConv2d(nn.Module):
    def __init__(
        self,
        in_channel,
        out_channel,
        kernel_size,
        style_dim,
        demodulate=True,
        upsample=False,
        downsample=False,
        blur_kernel=[1, 3, 3, 1],  # noqa: B006
        fused=True,
    ):
        super().__init__()

        self.eps = 1e-8
        self.kernel_size = kernel_size
        self.in_channel = in_channel
        self.out_channel = out_channel
        self.upsample = upsample
        self.downsample = downsample

        if upsample or downsample:
            raise NotImplementedError("the Blur of an up/downsampling layer is not part of this block")

        fan_in = in_channel * kernel_size**2
        self.scale = 1 / math.sqrt(fan_in)
        self.padding = kernel_size // 2

        self.weight = nn.Parameter(torch.randn(1, out_channel, in_channel, kernel_size, kernel_size))

        self.modulation = EqualLinear(style_dim, in_channel, bias_init=1)

        self.demodulate = demodulate
        self.fused = fused

    def __repr__(self):
        return (
            f"{self.__class__.__name__}({self.in_channel}, {self.out_channel}, {self.kernel_size}, "
            f"upsample={self.upsample}, downsample={self.downsample})"
        )

    def forward(self, input, style):
        batch, in_channel, height, width = input.shape

        if not self.fused:
            weight = self.scale * self.weight.squeeze(0)
            style = self.modulation(style)

            if self.demodulate:
                w = weight.unsqueeze(0) * style.view(batch, 1, in_channel, 1, 1)
                dcoefs = (w.square().sum((2, 3, 4)) + 1e-8).rsqrt()

            input = input * style.reshape(batch, in_channel, 1, 1)

            out = F.conv2d(input, weight, padding=self.padding)

            if self.demodulate:
                out = out * dcoefs.view(batch, -1, 1, 1)

            return out

        style = self.modulation(style).view(batch, 1, in_channel, 1, 1)
        weight = self.scale * self.weight * style

        if self.demodulate:
            demod = torch.rsqrt(weight.pow(2).sum([2, 3, 4]) + 1e-8)
            weight = weight * demod.view(batch, self.out_channel, 1, 1, 1)

        weight = weight.view(batch * self.out_channel, in_channel, self.kernel_size, self.kernel_size)

        input = input.view(1, batch * in_channel, height, width)
        out = F.conv2d(input, weight, padding=self.padding, groups=batch)
        _, _, height, width = out.shape
        out = out.view(batch, self.out_channel, height, width)

        return out


class Model(nn.Module):
    """StyledConv's ModulatedConv2d (3x3, demodulated, fused) on a feature map and its per-sample style vector."""

    def __init__(self, in_channel, out_channel, kernel_size, style_dim):
        super().__init__()
        self.conv = ModulatedConv2d(in_channel, out_channel, kernel_size, style_dim, demodulate=True)
        with torch.no_grad():  # stand-in for a trained modulation bias
            self.conv.modulation.bias.add_(torch.randn_like(self.conv.modulation.bias) * 0.1)

    def forward(self, input, style):
        return self.conv(input, style)


batch_size = 4
in_channel = 64
out_channel = 64
kernel_size = 3
style_dim = 128
size = 16


def get_inputs():
    return [torch.randn(batch_size, in_channel, size, size), torch.randn(batch_size, style_dim)]


def get_init_inputs():
    return [in_channel, out_channel, kernel_size, style_dim]
