"""An MLP-Mixer block as timm's models/mlp_mixer.py writes it (timm 0.9-1.0, 2023-2025): MixerBlock = norm1
(LayerNorm, eps 1e-6), the token-mixing timm.layers.Mlp applied across the tokens (`self.norm1(x).transpose(1, 2)`:
fc1 / GELU / dropout / identity norm / fc2 / dropout over seq_len, transposed back), DropPath, the residual; then
norm2, the channel-mixing Mlp and the second residual. mlp_ratio (0.5, 4.0) as mixer_s16_224 / mixer_b16_224 build
it (tokens_dim = 0.5 * dim, channels_dim = 4 * dim); the block's DropPath (timm.layers.drop: drop_path with
bernoulli_ and scale_by_keep, the identity in eval) built with a drop path rate of 0.1 as a deeper block's share.
Sizes smaller than mixer_s16_224 (512 wide over 14x14 = 196 patches): 128 wide over a 7x7 patch grid (seq_len 49:
tokens_dim 64, channels_dim 512) at batch 2. Changed: timm.layers' to_2tuple, Mlp and DropPath written out (no
device/dtype kwargs), one block instead of MlpMixer's stem + blocks + head, PyTorch's default Linear init instead of
MlpMixer's _init_weights (xavier_uniform_, mlp biases N(0, 1e-6): close to zero, which would hide the biases)."""

from functools import partial

import torch
import torch.nn as nn


def to_2tuple(x):
    if isinstance(x, (tuple, list)):
        return tuple(x)
    return (x, x)


def drop_path(x, drop_prob: float = 0.0, training: bool = False, scale_by_keep: bool = True):
    """Drop paths (Stochastic Depth) per sample (when applied in main path of residual blocks).

    This is the same as the DropConnect impl I created for EfficientNet, etc networks, however,
    the original name is misleading as 'Drop Connect' is a different form of dropout in a separate paper...
    See discussion: https://github.com/tensorflow/tpu/issues/494#issuecomment-532968956 ... I've opted for
    changing the layer and argument names to 'drop path' rather than mix DropConnect as a layer name and use
    'survival rate' as the argument.

    """
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)  # work with diff dim tensors, not just 2D ConvNets
    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    if keep_prob > 0.0 and scale_by_keep:
        random_tensor.div_(keep_prob)
    return x * random_tensor


class DropPath(nn.Module):
    """Drop paths (Stochastic Depth) per sample  (when applied in main path of residual blocks)."""

    def __init__(self, drop_prob: float = 0.0, scale_by_keep: bool = True):
        super().__init__()
        self.drop_prob = drop_prob
        self.scale_by_keep = scale_by_keep

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training, self.scale_by_keep)

    def extra_repr(self):
        return f"drop_prob={round(self.drop_prob, 3):0.3f}"


class Mlp(nn.Module):
    """MLP as used in Vision Transformer, MLP-Mixer and related networks"""

    def __init__(
        self,
        in_features,
        hidden_features=None,
        out_features=None,
        act_layer=nn.GELU,
        norm_layer=None,
        bias=True,
        drop=0.0,
        use_conv=False,
    ):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        bias = to_2tuple(bias)
        drop_probs = to_2tuple(drop)
        linear_layer = partial(nn.Conv2d, kernel_size=1) if use_conv else nn.Linear

        self.fc1 = linear_layer(in_features, hidden_features, bias=bias[0])
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop_probs[0])
        self.norm = norm_layer(hidden_features) if norm_layer is not None else nn.Identity()
        self.fc2 = linear_layer(hidden_features, out_features, bias=bias[1])
        self.drop2 = nn.Dropout(drop_probs[1])

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.drop1(x)
        x = self.norm(x)
        x = self.fc2(x)
        x = self.drop2(x)
        return x


class MixerBlock(nn.Module):
    """Residual Block w/ token mixing and channel MLPs
    Based on: 'MLP-Mixer: An all-MLP Architecture for Vision' - https://arxiv.org/abs/2105.01601
    """

    def __init__(
        self,
        dim,
        seq_len,
        mlp_ratio=(0.5, 4.0),
        mlp_layer=Mlp,
        norm_layer=partial(nn.LayerNorm, eps=1e-6),  # noqa: B008
        act_layer=nn.GELU,
        drop=0.0,
        drop_path=0.0,
    ):
        super().__init__()
        tokens_dim, channels_dim = [int(x * dim) for x in to_2tuple(mlp_ratio)]
        self.norm1 = norm_layer(dim)
        self.mlp_tokens = mlp_layer(seq_len, tokens_dim, act_layer=act_layer, drop=drop)
        self.drop_path = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = norm_layer(dim)
        self.mlp_channels = mlp_layer(dim, channels_dim, act_layer=act_layer, drop=drop)

    def forward(self, x):
        x = x + self.drop_path(self.mlp_tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2))
        x = x + self.drop_path(self.mlp_channels(self.norm2(x)))
        return x


class Model(nn.Module):
    """One MixerBlock as MlpMixer builds it (stem's patch tokens in, [B, seq_len, dim] out)."""

    def __init__(self, dim, seq_len, drop_path_rate):
        super().__init__()
        self.block = MixerBlock(dim, seq_len, mlp_ratio=(0.5, 4.0), drop_path=drop_path_rate)

    def forward(self, x):
        return self.block(x)


batch_size = 2
seq_len = 7 * 7  # a 112x112 image in 16x16 patches
dim = 128
drop_path_rate = 0.1


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, seq_len, drop_path_rate]
