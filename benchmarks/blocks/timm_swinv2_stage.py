"""A Swin Transformer V2 stage as timm's models/swin_transformer_v2.py (timm 1.0.x, 2025) writes it: PatchMerging
(pad, reshape to 2x2 patches, permute, flatten(3), Linear, post-LayerNorm), then two SwinTransformerV2Blocks, the
second shifted: torch.roll cyclic shift, F.pad to whole windows, window_partition / window_reverse (view + permute +
contiguous), WindowAttention with q/k/v biases concatenated around a zero k_bias buffer into one F.linear, cosine
attention (F.normalize of q and k, logit_scale clamped to log(100) and exp'd), the continuous relative position bias
(cpb_mlp, a Linear-ReLU-Linear over the registered log-spaced relative_coords_table buffer, indexed by the
relative_position_index buffer, 16 * sigmoid), the shifted-window attn_mask buffer (built with masked_fill of -100)
added through a 5-D view, nn.Softmax, and res-post-norm (`x + norm1(attn(x))`, `x + norm2(mlp(x))`) with timm's Mlp
and GELU. Shapes as swinv2_tiny_window8_256's second stage (96 -> 192 channels, 6 heads, window 8) on a 32x32 map.
Changed: timm.layers' Mlp, GELU, to_2tuple and ndgrid written out, get_act_layer('gelu') resolved to GELU, no
device/dtype kwargs, no drop path (drop_path=0: nn.Identity), no gradient checkpointing / set_input_size, and
q_bias/v_bias drawn at random instead of zeros and the post-norms left at LayerNorm's defaults instead of
SwinTransformerV2._init_respostnorm's zeros (stand-ins for trained weights, so that every branch shows)."""

import math
from typing import Optional, Tuple, Type, Union  # noqa: UP035

import torch
import torch.nn as nn
import torch.nn.functional as F

_int_or_tuple_2_t = Union[int, Tuple[int, int]]  # noqa: UP006, UP007


def to_2tuple(x):
    if isinstance(x, (tuple, list)):
        return tuple(x)
    return (x, x)


def ndgrid(*tensors) -> Tuple[torch.Tensor, ...]:  # noqa: UP006
    """generate N-D grid in dimension order."""
    return torch.meshgrid(*tensors, indexing="ij")


class GELU(nn.Module):
    """Applies the Gaussian Error Linear Units function (w/ dummy inplace arg)"""

    def __init__(self, inplace: bool = False):
        super().__init__()

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return F.gelu(input)


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
        linear_layer = nn.Linear

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


def window_partition(
    x: torch.Tensor,
    window_size: Tuple[int, int],  # noqa: UP006
) -> torch.Tensor:
    """Partition into non-overlapping windows."""
    B, H, W, C = x.shape
    x = x.view(B, H // window_size[0], window_size[0], W // window_size[1], window_size[1], C)
    windows = x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window_size[0], window_size[1], C)
    return windows


def window_reverse(
    windows: torch.Tensor,
    window_size: Tuple[int, int],  # noqa: UP006
    img_size: Tuple[int, int],  # noqa: UP006
) -> torch.Tensor:
    """Merge windows back to feature map."""
    H, W = img_size
    C = windows.shape[-1]
    x = windows.view(-1, H // window_size[0], W // window_size[1], window_size[0], window_size[1], C)
    x = x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, H, W, C)
    return x


class WindowAttention(nn.Module):
    """Window based multi-head self attention (W-MSA) module with relative position bias.

    Supports both shifted and non-shifted window attention with continuous relative
    position bias and cosine attention.
    """

    def __init__(
        self,
        dim: int,
        window_size: Tuple[int, int],  # noqa: UP006
        num_heads: int,
        qkv_bias: bool = True,
        qkv_bias_separate: bool = False,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        pretrained_window_size: Tuple[int, int] = (0, 0),  # noqa: UP006
    ) -> None:
        super().__init__()
        self.dim = dim
        self.window_size = window_size  # Wh, Ww
        self.pretrained_window_size = to_2tuple(pretrained_window_size)
        self.num_heads = num_heads
        self.qkv_bias_separate = qkv_bias_separate

        self.logit_scale = nn.Parameter(torch.empty((num_heads, 1, 1)))

        # mlp to generate continuous relative position bias
        self.cpb_mlp = nn.Sequential(
            nn.Linear(2, 512, bias=True), nn.ReLU(inplace=True), nn.Linear(512, num_heads, bias=False)
        )

        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        if qkv_bias:
            self.q_bias = nn.Parameter(torch.empty(dim))
            self.register_buffer("k_bias", torch.empty(dim), persistent=False)
            self.v_bias = nn.Parameter(torch.empty(dim))
        else:
            self.q_bias = None
            self.k_bias = None
            self.v_bias = None
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.softmax = nn.Softmax(dim=-1)

        # Register empty buffers with correct shapes
        win_h, win_w = self.window_size
        self.register_buffer(
            "relative_coords_table",
            torch.empty(1, 2 * win_h - 1, 2 * win_w - 1, 2),
            persistent=False,
        )
        self.register_buffer(
            "relative_position_index",
            torch.empty(win_h * win_w, win_h * win_w, dtype=torch.long),
            persistent=False,
        )

        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialize parameters and buffers."""
        nn.init.constant_(self.logit_scale, math.log(10))
        if self.q_bias is not None:
            nn.init.zeros_(self.q_bias)
            nn.init.zeros_(self.v_bias)
        self._init_buffers()

    def _init_buffers(self) -> None:
        """Compute and fill non-persistent buffer values."""
        if self.k_bias is not None:
            self.k_bias.zero_()
        relative_coords_table, relative_position_index = self._make_pair_wise_relative_positions(
            device=self.proj.weight.device, dtype=self.proj.weight.dtype
        )
        self.relative_coords_table.copy_(relative_coords_table)
        self.relative_position_index.copy_(relative_position_index)

    def _make_pair_wise_relative_positions(
        self,
        device=None,
        dtype=None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:  # noqa: UP006
        """Compute pair-wise relative position index and coordinates table."""
        # get relative_coords_table
        relative_coords_h = torch.arange(
            -(self.window_size[0] - 1), self.window_size[0], device=device, dtype=torch.float32
        )
        relative_coords_w = torch.arange(
            -(self.window_size[1] - 1), self.window_size[1], device=device, dtype=torch.float32
        )
        relative_coords_table = torch.stack(ndgrid(relative_coords_h, relative_coords_w))
        relative_coords_table = relative_coords_table.permute(1, 2, 0).contiguous().unsqueeze(0)  # 1, 2*Wh-1, 2*Ww-1, 2
        if self.pretrained_window_size[0] > 0:
            relative_coords_table[:, :, :, 0] /= self.pretrained_window_size[0] - 1
            relative_coords_table[:, :, :, 1] /= self.pretrained_window_size[1] - 1
        else:
            relative_coords_table[:, :, :, 0] /= self.window_size[0] - 1
            relative_coords_table[:, :, :, 1] /= self.window_size[1] - 1
        relative_coords_table *= 8  # normalize to -8, 8
        relative_coords_table = (
            torch.sign(relative_coords_table) * torch.log2(torch.abs(relative_coords_table) + 1.0) / math.log2(8)
        )
        relative_coords_table = relative_coords_table.to(dtype=dtype)

        # get pair-wise relative position index for each token inside the window
        coords_h = torch.arange(self.window_size[0], device=device, dtype=torch.long)
        coords_w = torch.arange(self.window_size[1], device=device, dtype=torch.long)
        coords = torch.stack(ndgrid(coords_h, coords_w))  # 2, Wh, Ww
        coords_flatten = torch.flatten(coords, 1)  # 2, Wh*Ww
        relative_coords = coords_flatten[:, :, None] - coords_flatten[:, None, :]  # 2, Wh*Ww, Wh*Ww
        relative_coords = relative_coords.permute(1, 2, 0).contiguous()  # Wh*Ww, Wh*Ww, 2
        relative_coords[:, :, 0] += self.window_size[0] - 1  # shift to start from 0
        relative_coords[:, :, 1] += self.window_size[1] - 1
        relative_coords[:, :, 0] *= 2 * self.window_size[1] - 1
        relative_position_index = relative_coords.sum(-1)  # Wh*Ww, Wh*Ww

        return relative_coords_table, relative_position_index

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:  # noqa: UP045
        B_, N, C = x.shape

        if self.q_bias is None:
            qkv = self.qkv(x)
        else:
            qkv_bias = torch.cat((self.q_bias, self.k_bias, self.v_bias))
            if self.qkv_bias_separate:
                qkv = self.qkv(x)
                qkv += qkv_bias
            else:
                qkv = F.linear(x, weight=self.qkv.weight, bias=qkv_bias)
        qkv = qkv.reshape(B_, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)

        # cosine attention
        attn = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        logit_scale = torch.clamp(self.logit_scale, max=math.log(1.0 / 0.01)).exp()
        attn = attn * logit_scale

        relative_position_bias_table = self.cpb_mlp(self.relative_coords_table).view(-1, self.num_heads)
        relative_position_bias = relative_position_bias_table[self.relative_position_index.view(-1)].view(
            self.window_size[0] * self.window_size[1], self.window_size[0] * self.window_size[1], -1
        )  # Wh*Ww,Wh*Ww,nH
        relative_position_bias = relative_position_bias.permute(2, 0, 1).contiguous()  # nH, Wh*Ww, Wh*Ww
        relative_position_bias = 16 * torch.sigmoid(relative_position_bias)
        attn = attn + relative_position_bias.unsqueeze(0)

        if mask is not None:
            num_win = mask.shape[0]
            attn = attn.view(-1, num_win, self.num_heads, N, N) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.num_heads, N, N)
            attn = self.softmax(attn)
        else:
            attn = self.softmax(attn)

        attn = self.attn_drop(attn)

        x = (attn @ v).transpose(1, 2).reshape(B_, N, C)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x


class SwinTransformerV2Block(nn.Module):
    """Swin Transformer V2 Block."""

    def __init__(
        self,
        dim: int,
        input_resolution: _int_or_tuple_2_t,
        num_heads: int,
        window_size: _int_or_tuple_2_t = 7,
        shift_size: _int_or_tuple_2_t = 0,
        always_partition: bool = False,
        dynamic_mask: bool = False,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        proj_drop: float = 0.0,
        attn_drop: float = 0.0,
        drop_path: float = 0.0,
        act_layer: Type[nn.Module] = GELU,  # noqa: UP006
        norm_layer: Type[nn.Module] = nn.LayerNorm,  # noqa: UP006
        pretrained_window_size: _int_or_tuple_2_t = 0,
    ):
        super().__init__()
        self.dim = dim
        self.input_resolution = to_2tuple(input_resolution)
        self.num_heads = num_heads
        self.target_shift_size = to_2tuple(shift_size)  # store for later resize
        self.always_partition = always_partition
        self.dynamic_mask = dynamic_mask
        self.window_size, self.shift_size = self._calc_window_shift(window_size, shift_size)
        self.window_area = self.window_size[0] * self.window_size[1]
        self.mlp_ratio = mlp_ratio

        self.attn = WindowAttention(
            dim,
            window_size=to_2tuple(self.window_size),
            num_heads=num_heads,
            qkv_bias=qkv_bias,
            attn_drop=attn_drop,
            proj_drop=proj_drop,
            pretrained_window_size=to_2tuple(pretrained_window_size),
        )
        self.norm1 = norm_layer(dim)
        self.drop_path1 = nn.Identity()

        self.mlp = Mlp(
            in_features=dim,
            hidden_features=int(dim * mlp_ratio),
            act_layer=act_layer,
            drop=proj_drop,
        )
        self.norm2 = norm_layer(dim)
        self.drop_path2 = nn.Identity()

        self.register_buffer(
            "attn_mask",
            None if self.dynamic_mask else self.get_attn_mask(),
            persistent=False,
        )

    def get_attn_mask(
        self,
        x: Optional[torch.Tensor] = None,  # noqa: UP045
        device: Optional[torch.device] = None,  # noqa: UP045
        dtype: Optional[torch.dtype] = None,  # noqa: UP045
    ) -> Optional[torch.Tensor]:  # noqa: UP045
        """Generate attention mask for shifted window attention."""
        if any(self.shift_size):
            # calculate attention mask for SW-MSA
            if x is None:
                img_mask = torch.zeros((1, *self.input_resolution, 1), device=device, dtype=dtype)  # 1 H W 1
            else:
                img_mask = torch.zeros((1, x.shape[1], x.shape[2], 1), device=x.device, dtype=x.dtype)  # 1 H W 1
            cnt = 0
            for h in (
                (0, -self.window_size[0]),
                (-self.window_size[0], -self.shift_size[0]),
                (-self.shift_size[0], None),
            ):
                for w in (
                    (0, -self.window_size[1]),
                    (-self.window_size[1], -self.shift_size[1]),
                    (-self.shift_size[1], None),
                ):
                    img_mask[:, h[0] : h[1], w[0] : w[1], :] = cnt
                    cnt += 1
            mask_windows = window_partition(img_mask, self.window_size)  # nW, window_size, window_size, 1
            mask_windows = mask_windows.view(-1, self.window_area)
            attn_mask = mask_windows.unsqueeze(1) - mask_windows.unsqueeze(2)
            attn_mask = attn_mask.masked_fill(attn_mask != 0, float(-100.0)).masked_fill(attn_mask == 0, float(0.0))  # noqa: UP018 (as upstream)
        else:
            attn_mask = None
        return attn_mask

    def _calc_window_shift(
        self,
        target_window_size: _int_or_tuple_2_t,
        target_shift_size: Optional[_int_or_tuple_2_t] = None,  # noqa: UP045
    ) -> Tuple[Tuple[int, int], Tuple[int, int]]:  # noqa: UP006
        target_window_size = to_2tuple(target_window_size)
        if target_shift_size is None:
            # if passed value is None, recalculate from default window_size // 2 if it was active
            target_shift_size = self.target_shift_size
            if any(target_shift_size):
                # if there was previously a non-zero shift, recalculate based on current window_size
                target_shift_size = (target_window_size[0] // 2, target_window_size[1] // 2)
        else:
            target_shift_size = to_2tuple(target_shift_size)

        if self.always_partition:
            return target_window_size, target_shift_size

        target_window_size = to_2tuple(target_window_size)
        target_shift_size = to_2tuple(target_shift_size)
        window_size = [r if r <= w else w for r, w in zip(self.input_resolution, target_window_size)]  # noqa: B905 (as upstream)
        shift_size = [0 if r <= w else s for r, w, s in zip(self.input_resolution, window_size, target_shift_size)]  # noqa: B905 (as upstream)
        return tuple(window_size), tuple(shift_size)

    def _attn(self, x: torch.Tensor) -> torch.Tensor:
        B, H, W, C = x.shape

        # cyclic shift
        has_shift = any(self.shift_size)
        if has_shift:
            shifted_x = torch.roll(x, shifts=(-self.shift_size[0], -self.shift_size[1]), dims=(1, 2))
        else:
            shifted_x = x

        pad_h = (self.window_size[0] - H % self.window_size[0]) % self.window_size[0]
        pad_w = (self.window_size[1] - W % self.window_size[1]) % self.window_size[1]
        shifted_x = torch.nn.functional.pad(shifted_x, (0, 0, 0, pad_w, 0, pad_h))
        _, Hp, Wp, _ = shifted_x.shape

        # partition windows
        x_windows = window_partition(shifted_x, self.window_size)  # nW*B, window_size, window_size, C
        x_windows = x_windows.view(-1, self.window_area, C)  # nW*B, window_size*window_size, C

        # W-MSA/SW-MSA
        if getattr(self, "dynamic_mask", False):
            attn_mask = self.get_attn_mask(shifted_x)
        else:
            attn_mask = self.attn_mask
        attn_windows = self.attn(x_windows, mask=attn_mask)  # nW*B, window_size*window_size, C

        # merge windows
        attn_windows = attn_windows.view(-1, self.window_size[0], self.window_size[1], C)
        shifted_x = window_reverse(attn_windows, self.window_size, (Hp, Wp))  # B H' W' C
        shifted_x = shifted_x[:, :H, :W, :].contiguous()

        # reverse cyclic shift
        if has_shift:
            x = torch.roll(shifted_x, shifts=self.shift_size, dims=(1, 2))
        else:
            x = shifted_x
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, H, W, C = x.shape
        x = x + self.drop_path1(self.norm1(self._attn(x)))
        x = x.reshape(B, -1, C)
        x = x + self.drop_path2(self.norm2(self.mlp(x)))
        x = x.reshape(B, H, W, C)
        return x


class PatchMerging(nn.Module):
    """Patch Merging Layer."""

    def __init__(
        self,
        dim: int,
        out_dim: Optional[int] = None,  # noqa: UP045
        norm_layer: Type[nn.Module] = nn.LayerNorm,  # noqa: UP006
    ):
        super().__init__()
        self.dim = dim
        self.out_dim = out_dim or 2 * dim
        self.reduction = nn.Linear(4 * dim, self.out_dim, bias=False)
        self.norm = norm_layer(self.out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, H, W, C = x.shape

        pad_values = (0, 0, 0, W % 2, 0, H % 2)
        x = nn.functional.pad(x, pad_values)
        _, H, W, _ = x.shape

        x = x.reshape(B, H // 2, 2, W // 2, 2, C).permute(0, 1, 3, 4, 2, 5).flatten(3)
        x = self.reduction(x)
        x = self.norm(x)
        return x


class SwinTransformerV2Stage(nn.Module):
    """A Swin Transformer V2 Stage."""

    def __init__(
        self,
        dim: int,
        out_dim: int,
        input_resolution: _int_or_tuple_2_t,
        depth: int,
        num_heads: int,
        window_size: _int_or_tuple_2_t,
        always_partition: bool = False,
        dynamic_mask: bool = False,
        downsample: bool = False,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        proj_drop: float = 0.0,
        attn_drop: float = 0.0,
        drop_path: float = 0.0,
        act_layer: Type[nn.Module] = GELU,  # noqa: UP006
        norm_layer: Type[nn.Module] = nn.LayerNorm,  # noqa: UP006
        pretrained_window_size: _int_or_tuple_2_t = 0,
        output_nchw: bool = False,
    ) -> None:
        super().__init__()
        self.dim = dim
        self.input_resolution = input_resolution
        self.output_resolution = tuple(i // 2 for i in input_resolution) if downsample else input_resolution
        self.depth = depth
        self.output_nchw = output_nchw
        self.grad_checkpointing = False
        window_size = to_2tuple(window_size)
        shift_size = tuple([w // 2 for w in window_size])

        # patch merging / downsample layer
        if downsample:
            self.downsample = PatchMerging(dim=dim, out_dim=out_dim, norm_layer=norm_layer)
        else:
            assert dim == out_dim
            self.downsample = nn.Identity()

        # build blocks
        self.blocks = nn.ModuleList(
            [
                SwinTransformerV2Block(
                    dim=out_dim,
                    input_resolution=self.output_resolution,
                    num_heads=num_heads,
                    window_size=window_size,
                    shift_size=0 if (i % 2 == 0) else shift_size,
                    always_partition=always_partition,
                    dynamic_mask=dynamic_mask,
                    mlp_ratio=mlp_ratio,
                    qkv_bias=qkv_bias,
                    proj_drop=proj_drop,
                    attn_drop=attn_drop,
                    drop_path=drop_path[i] if isinstance(drop_path, list) else drop_path,
                    act_layer=act_layer,
                    norm_layer=norm_layer,
                    pretrained_window_size=pretrained_window_size,
                )
                for i in range(depth)
            ]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.downsample(x)

        for blk in self.blocks:
            x = blk(x)
        return x


class Model(nn.Module):
    """One SwinTransformerV2Stage on an NHWC feature map (timm's SwinTransformerV2 keeps NHWC between stages)."""

    def __init__(self, dim, out_dim, resolution, depth, num_heads, window_size):
        super().__init__()
        self.stage = SwinTransformerV2Stage(
            dim,
            out_dim,
            (resolution, resolution),
            depth,
            num_heads,
            window_size,
            downsample=True,
        )
        # stand-in for trained q/v biases (timm initialises them to zero)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, WindowAttention):
                    m.q_bias.normal_(0.0, 0.02)
                    m.v_bias.normal_(0.0, 0.02)

    def forward(self, x):
        return self.stage(x)


batch_size = 2
dim = 96
out_dim = 192
resolution = 32
depth = 2
num_heads = 6
window_size = 8


def get_inputs():
    return [torch.randn(batch_size, resolution, resolution, dim)]


def get_init_inputs():
    return [dim, out_dim, resolution, depth, num_heads, window_size]
