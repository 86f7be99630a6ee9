"""ConvNeXt-V2 stage: channels_first LayerNorm + stride-2 downsampling conv, then two ConvNeXt-V2
blocks (7x7 depthwise conv, channels_last LayerNorm, Linear 4x expansion, GELU, Global Response
Normalization, Linear projection, drop path).

Follows facebookresearch/ConvNeXt-V2 `models/convnextv2.py` (`Block`, the `downsample_layers`
entry `nn.Sequential(LayerNorm(dims[i], eps=1e-6, data_format="channels_first"), nn.Conv2d(dims[i],
dims[i+1], kernel_size=2, stride=2))`, the `stages` entry) and `models/utils.py` (`LayerNorm` with
the hand-written channels_first branch, `GRN` with `torch.norm(x, p=2, dim=(1,2), keepdim=True)`),
plus timm's `DropPath` / `drop_path` that the repo imports.

Shapes: input (4, 96, 56, 56) (output of the ConvNeXt-V2-T stem/stage 1 at 224px), stage 2 of
ConvNeXt-V2 with dims 96 -> 192, depth 2, drop_path rates [0.1, 0.15]. Output (4, 192, 28, 28).

Changes: only one downsample layer + one stage is built. GRN gamma/beta are zero-initialised in
the repo (making GRN an identity) and LayerNorm affine params are ones/zeros; all are set to
random non-trivial values under torch.no_grad() as a trained checkpoint has them. The repo's
trunc_normal_(std=.02) init of conv/linear weights is kept.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4
IN_DIM = 96
OUT_DIM = 192
HEIGHT = 56
WIDTH = 56
DEPTH = 2
DROP_PATH_RATES = (0.1, 0.15)


def drop_path(x, drop_prob: float = 0., training: bool = False, scale_by_keep: bool = True):
    """Drop paths (Stochastic Depth) per sample (when applied in main path of residual blocks)."""
    if drop_prob == 0. or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)  # work with diff dim tensors, not just 2D ConvNets
    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    if keep_prob > 0.0 and scale_by_keep:
        random_tensor.div_(keep_prob)
    return x * random_tensor


class DropPath(nn.Module):
    """Drop paths (Stochastic Depth) per sample  (when applied in main path of residual blocks)."""

    def __init__(self, drop_prob: float = 0., scale_by_keep: bool = True):
        super(DropPath, self).__init__()
        self.drop_prob = drop_prob
        self.scale_by_keep = scale_by_keep

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training, self.scale_by_keep)


class LayerNorm(nn.Module):
    """ LayerNorm that supports two data formats: channels_last (default) or channels_first.
    The ordering of the dimensions in the inputs. channels_last corresponds to inputs with
    shape (batch_size, height, width, channels) while channels_first corresponds to inputs
    with shape (batch_size, channels, height, width).
    """
    def __init__(self, normalized_shape, eps=1e-6, data_format="channels_last"):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.eps = eps
        self.data_format = data_format
        if self.data_format not in ["channels_last", "channels_first"]:
            raise NotImplementedError
        self.normalized_shape = (normalized_shape, )

    def forward(self, x):
        if self.data_format == "channels_last":
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        elif self.data_format == "channels_first":
            u = x.mean(1, keepdim=True)
            s = (x - u).pow(2).mean(1, keepdim=True)
            x = (x - u) / torch.sqrt(s + self.eps)
            x = self.weight[:, None, None] * x + self.bias[:, None, None]
            return x


class GRN(nn.Module):
    """ GRN (Global Response Normalization) layer
    """
    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(1, 1, 1, dim))
        self.beta = nn.Parameter(torch.zeros(1, 1, 1, dim))

    def forward(self, x):
        Gx = torch.norm(x, p=2, dim=(1,2), keepdim=True)
        Nx = Gx / (Gx.mean(dim=-1, keepdim=True) + 1e-6)
        return self.gamma * (x * Nx) + self.beta + x


class Block(nn.Module):
    """ ConvNeXtV2 Block.

    Args:
        dim (int): Number of input channels.
        drop_path (float): Stochastic depth rate. Default: 0.0
    """
    def __init__(self, dim, drop_path=0.):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim) # depthwise conv
        self.norm = LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim) # pointwise/1x1 convs, implemented with linear layers
        self.act = nn.GELU()
        self.grn = GRN(4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.drop_path = DropPath(drop_path) if drop_path > 0. else nn.Identity()

    def forward(self, x):
        input = x
        x = self.dwconv(x)
        x = x.permute(0, 2, 3, 1) # (N, C, H, W) -> (N, H, W, C)
        x = self.norm(x)
        x = self.pwconv1(x)
        x = self.act(x)
        x = self.grn(x)
        x = self.pwconv2(x)
        x = x.permute(0, 3, 1, 2) # (N, H, W, C) -> (N, C, H, W)

        x = input + self.drop_path(x)
        return x


class Model(nn.Module):
    def __init__(self, in_dim, out_dim, depth, drop_path_rates):
        super().__init__()
        self.downsample_layers = nn.ModuleList()
        downsample_layer = nn.Sequential(
            LayerNorm(in_dim, eps=1e-6, data_format="channels_first"),
            nn.Conv2d(in_dim, out_dim, kernel_size=2, stride=2),
        )
        self.downsample_layers.append(downsample_layer)

        self.stages = nn.ModuleList()
        stage = nn.Sequential(
            *[Block(dim=out_dim, drop_path=drop_path_rates[j]) for j in range(depth)]
        )
        self.stages.append(stage)

        self.apply(self._init_weights)

        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, LayerNorm):
                    m.weight.copy_(1.0 + 0.2 * torch.randn_like(m.weight))
                    m.bias.copy_(0.1 * torch.randn_like(m.bias))
                elif isinstance(m, GRN):
                    m.gamma.copy_(0.5 * torch.randn_like(m.gamma))
                    m.beta.copy_(0.1 * torch.randn_like(m.beta))

    def _init_weights(self, m):
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.trunc_normal_(m.weight, std=.02)
            nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = self.downsample_layers[0](x)
        x = self.stages[0](x)
        return x


def get_inputs():
    return [torch.randn(BATCH, IN_DIM, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_DIM, OUT_DIM, DEPTH, DROP_PATH_RATES]
