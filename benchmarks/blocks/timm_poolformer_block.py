"""PoolFormer (v1) blocks as timm's models/metaformer.py writes them: MetaFormerBlock with the Pooling token mixer
(nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False) minus its input), GroupNorm1 (timm.layers.norm: a
GroupNorm with one group, through F.group_norm), timm.layers.Mlp with use_conv (1x1 Conv2d, GELU, 1x1 Conv2d),
Scale layer scales (`x * self.scale.view(self.shape)`) and identity res scales / drop paths, driven by a
MetaFormerStage whose downsample is nn.Identity (poolformer_s12's first stage: two blocks of width 64 at 56x56).
Changed: timm's layers written out (fast_norm off, no device/dtype kwargs), layer_scale_init_value 0.1 instead of
poolformer_s12's 1e-5 (a stand-in for trained scales, so that the branches show in the output)."""

from functools import partial
from typing import Optional, Type  # noqa: UP035

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


def to_2tuple(x):
    if isinstance(x, (tuple, list)):
        return tuple(x)
    return (x, x)


class GroupNorm1(nn.GroupNorm):
    """Group Normalization with 1 group.
    Input: tensor in shape [B, C, *]
    """

    def __init__(self, num_channels, **kwargs):
        super().__init__(1, num_channels, **kwargs)
        self.fast_norm = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)


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


class Scale(nn.Module):
    """
    Scale vector by element multiplications.
    """

    def __init__(self, dim: int, init_value: float = 1.0, trainable: bool = True, use_nchw: bool = True):
        super().__init__()
        self.shape = (dim, 1, 1) if use_nchw else (dim,)
        self.scale = nn.Parameter(init_value * torch.ones(dim), requires_grad=trainable)

    def forward(self, x):
        return x * self.scale.view(self.shape)


class Pooling(nn.Module):
    """
    Implementation of pooling for PoolFormer: https://arxiv.org/abs/2111.11418
    """

    def __init__(self, pool_size: int = 3, **kwargs):
        super().__init__()
        self.pool = nn.AvgPool2d(pool_size, stride=1, padding=pool_size // 2, count_include_pad=False)

    def forward(self, x):
        y = self.pool(x)
        return y - x


class MetaFormerBlock(nn.Module):
    """
    Implementation of one MetaFormer block.
    """

    def __init__(
        self,
        dim: int,
        token_mixer: Type[nn.Module] = Pooling,  # noqa: UP006
        mlp_act: Type[nn.Module] = nn.GELU,  # noqa: UP006
        mlp_bias: bool = False,
        norm_layer: Type[nn.Module] = GroupNorm1,  # noqa: UP006
        proj_drop: float = 0.0,
        drop_path: float = 0.0,
        use_nchw: bool = True,
        layer_scale_init_value: Optional[float] = None,  # noqa: UP045
        res_scale_init_value: Optional[float] = None,  # noqa: UP045
        **kwargs,
    ):
        super().__init__()
        ls_layer = partial(Scale, dim=dim, init_value=layer_scale_init_value, use_nchw=use_nchw)
        rs_layer = partial(Scale, dim=dim, init_value=res_scale_init_value, use_nchw=use_nchw)

        self.norm1 = norm_layer(dim)
        self.token_mixer = token_mixer(dim=dim, proj_drop=proj_drop, **kwargs)
        self.drop_path1 = nn.Identity()
        self.layer_scale1 = ls_layer() if layer_scale_init_value is not None else nn.Identity()
        self.res_scale1 = rs_layer() if res_scale_init_value is not None else nn.Identity()

        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(
            dim,
            int(4 * dim),
            act_layer=mlp_act,
            bias=mlp_bias,
            drop=proj_drop,
            use_conv=use_nchw,
        )
        self.drop_path2 = nn.Identity()
        self.layer_scale2 = ls_layer() if layer_scale_init_value is not None else nn.Identity()
        self.res_scale2 = rs_layer() if res_scale_init_value is not None else nn.Identity()

    def forward(self, x):
        x = self.res_scale1(x) + self.layer_scale1(self.drop_path1(self.token_mixer(self.norm1(x))))
        x = self.res_scale2(x) + self.layer_scale2(self.drop_path2(self.mlp(self.norm2(x))))
        return x


class MetaFormerStage(nn.Module):
    def __init__(
        self,
        in_chs: int,
        out_chs: int,
        depth: int = 2,
        token_mixer: Type[nn.Module] = nn.Identity,  # noqa: UP006
        mlp_act: Type[nn.Module] = nn.GELU,  # noqa: UP006
        mlp_bias: bool = False,
        norm_layer: Type[nn.Module] = GroupNorm1,  # noqa: UP006
        proj_drop: float = 0.0,
        layer_scale_init_value: Optional[float] = None,  # noqa: UP045
        res_scale_init_value: Optional[float] = None,  # noqa: UP045
        **kwargs,
    ):
        super().__init__()
        self.grad_checkpointing = False
        self.use_nchw = True

        # don't downsample if in_chs and out_chs are the same
        self.downsample = nn.Identity()

        self.blocks = nn.Sequential(
            *[
                MetaFormerBlock(
                    dim=out_chs,
                    token_mixer=token_mixer,
                    mlp_act=mlp_act,
                    mlp_bias=mlp_bias,
                    norm_layer=norm_layer,
                    proj_drop=proj_drop,
                    drop_path=0.0,
                    layer_scale_init_value=layer_scale_init_value,
                    res_scale_init_value=res_scale_init_value,
                    use_nchw=self.use_nchw,
                    **kwargs,
                )
                for i in range(depth)
            ]
        )

    def forward(self, x: Tensor):
        x = self.downsample(x)
        B, C, H, W = x.shape

        if not self.use_nchw:
            x = x.reshape(B, C, -1).transpose(1, 2)

        x = self.blocks(x)

        if not self.use_nchw:
            x = x.transpose(1, 2).reshape(B, C, H, W)

        return x


class Model(nn.Module):
    def __init__(self, dim, depth, layer_scale_init_value):
        super().__init__()
        self.stage = MetaFormerStage(
            dim,
            dim,
            depth=depth,
            token_mixer=Pooling,
            mlp_act=nn.GELU,
            mlp_bias=True,
            norm_layer=GroupNorm1,
            layer_scale_init_value=layer_scale_init_value,
            res_scale_init_value=None,
        )

    def forward(self, x):
        return self.stage(x)


batch = 2
dim = 64
depth = 2
size = 56


def get_inputs():
    return [torch.randn(batch, dim, size, size)]


def get_init_inputs():
    return [dim, depth, 0.1]
