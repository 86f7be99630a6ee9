"""Deformable DETR's multi-scale deformable attention as fundamentalvision/Deformable-DETR writes it
(models/ops/modules/ms_deform_attn.py's MSDeformAttn, 2020-2021) with the pure-PyTorch computation of
models/ops/functions/ms_deform_attn_func.py's ms_deform_attn_core_pytorch in place of MSDeformAttnFunction.apply (the
CUDA extension), as mmcv's MultiScaleDeformableAttention does off the GPU with multi_scale_deformable_attn_pytorch:
value_proj over the flattened multi-level input, sampling_offsets and attention_weights Linears over the query,
softmax over n_levels * n_points, sampling locations = reference_points + offsets / (W, H) of each level, then per
level `value.split([H_ * W_ for H_, W_ in value_spatial_shapes], dim=1)`, flatten / transpose / reshape to
[N * heads, D, H, W], F.grid_sample(mode="bilinear", padding_mode="zeros", align_corners=False) at 2 * loc - 1, the
stacked samples weighted and summed, and output_proj. The inputs are the ones DeformableTransformerEncoderLayer
passes: query (src + pos), reference_points [N, Len_q, n_levels, 2] in [0, 1], input_flatten, and the int64
input_spatial_shapes [n_levels, 2] and input_level_start_index [n_levels] tensors (with the forward's assert that
the shapes add up to Len_in). Sizes smaller than Deformable DETR's (d_model 256, 8 heads, 4 levels, 4 points, the
levels of a ~800x1200 image): d_model 64 in 4 heads, 3 levels of 16x16, 8x8 and 4x4 (336 tokens, each a query),
4 points, batch 2. Changed: _reset_parameters as written, then sampling_offsets.weight and attention_weights.weight
drawn from N(0, 0.02 / 0.1) as a stand-in for trained ones (Deformable DETR starts both at zero: offsets and weights
that ignore the query); no padding mask."""

import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.init import constant_, xavier_uniform_


def ms_deform_attn_core_pytorch(value, value_spatial_shapes, sampling_locations, attention_weights):
    # for debug and test only,
    # need to use cuda version instead
    N_, S_, M_, D_ = value.shape
    _, Lq_, M_, L_, P_, _ = sampling_locations.shape
    value_list = value.split([H_ * W_ for H_, W_ in value_spatial_shapes], dim=1)
    sampling_grids = 2 * sampling_locations - 1
    sampling_value_list = []
    for lid_, (H_, W_) in enumerate(value_spatial_shapes):
        # N_, H_*W_, M_, D_ -> N_, H_*W_, M_*D_ -> N_, M_*D_, H_*W_ -> N_*M_, D_, H_, W_
        value_l_ = value_list[lid_].flatten(2).transpose(1, 2).reshape(N_ * M_, D_, H_, W_)
        # N_, Lq_, M_, P_, 2 -> N_, M_, Lq_, P_, 2 -> N_*M_, Lq_, P_, 2
        sampling_grid_l_ = sampling_grids[:, :, :, lid_].transpose(1, 2).flatten(0, 1)
        # N_*M_, D_, Lq_, P_
        sampling_value_l_ = F.grid_sample(
            value_l_, sampling_grid_l_, mode="bilinear", padding_mode="zeros", align_corners=False
        )
        sampling_value_list.append(sampling_value_l_)
    # (N_, Lq_, M_, L_, P_) -> (N_, M_, Lq_, L_, P_) -> (N_, M_, 1, Lq_, L_*P_)
    attention_weights = attention_weights.transpose(1, 2).reshape(N_ * M_, 1, Lq_, L_ * P_)
    output = (torch.stack(sampling_value_list, dim=-2).flatten(-2) * attention_weights).sum(-1).view(N_, M_ * D_, Lq_)
    return output.transpose(1, 2).contiguous()


def _is_power_of_2(n):
    if (not isinstance(n, int)) or (n < 0):
        raise ValueError("invalid input for _is_power_of_2: {} (type: {})".format(n, type(n)))  # noqa: UP032
    return (n & (n - 1) == 0) and n != 0


class MSDeformAttn(nn.Module):
    def __init__(self, d_model=256, n_levels=4, n_heads=8, n_points=4):
        """
        Multi-Scale Deformable Attention Module
        :param d_model      hidden dimension
        :param n_levels     number of feature levels
        :param n_heads      number of attention heads
        :param n_points     number of sampling points per attention head per feature level
        """
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError("d_model must be divisible by n_heads, but got {} and {}".format(d_model, n_heads))  # noqa: UP032
        _d_per_head = d_model // n_heads
        # you'd better set _d_per_head to a power of 2 which is more efficient in our CUDA implementation
        if not _is_power_of_2(_d_per_head):
            warnings.warn(  # noqa: B028
                "You'd better set d_model in MSDeformAttn to make the dimension of each attention head a power of 2 "
                "which is more efficient in our CUDA implementation."
            )

        self.im2col_step = 64

        self.d_model = d_model
        self.n_levels = n_levels
        self.n_heads = n_heads
        self.n_points = n_points

        self.sampling_offsets = nn.Linear(d_model, n_heads * n_levels * n_points * 2)
        self.attention_weights = nn.Linear(d_model, n_heads * n_levels * n_points)
        self.value_proj = nn.Linear(d_model, d_model)
        self.output_proj = nn.Linear(d_model, d_model)

        self._reset_parameters()

    def _reset_parameters(self):
        constant_(self.sampling_offsets.weight.data, 0.0)
        thetas = torch.arange(self.n_heads, dtype=torch.float32) * (2.0 * math.pi / self.n_heads)
        grid_init = torch.stack([thetas.cos(), thetas.sin()], -1)
        grid_init = (
            (grid_init / grid_init.abs().max(-1, keepdim=True)[0])
            .view(self.n_heads, 1, 1, 2)
            .repeat(1, self.n_levels, self.n_points, 1)
        )
        for i in range(self.n_points):
            grid_init[:, :, i, :] *= i + 1
        with torch.no_grad():
            self.sampling_offsets.bias = nn.Parameter(grid_init.view(-1))
        constant_(self.attention_weights.weight.data, 0.0)
        constant_(self.attention_weights.bias.data, 0.0)
        xavier_uniform_(self.value_proj.weight.data)
        constant_(self.value_proj.bias.data, 0.0)
        xavier_uniform_(self.output_proj.weight.data)
        constant_(self.output_proj.bias.data, 0.0)

    def forward(
        self,
        query,
        reference_points,
        input_flatten,
        input_spatial_shapes,
        input_level_start_index,
        input_padding_mask=None,
    ):
        """
        :param query                       (N, Length_{query}, C)
        :param reference_points            (N, Length_{query}, n_levels, 2), range in [0, 1], top-left (0,0), bottom-right (1, 1), including padding area
                                        or (N, Length_{query}, n_levels, 4), add additional (w, h) to form reference boxes
        :param input_flatten               (N, \\sum_{l=0}^{L-1} H_l \\cdot W_l, C)
        :param input_spatial_shapes        (n_levels, 2), [(H_0, W_0), (H_1, W_1), ..., (H_{L-1}, W_{L-1})]
        :param input_level_start_index     (n_levels, ), [0, H_0*W_0, H_0*W_0+H_1*W_1, H_0*W_0+H_1*W_1+H_2*W_2, ..., H_0*W_0+H_1*W_1+...+H_{L-1}*W_{L-1}]
        :param input_padding_mask          (N, \\sum_{l=0}^{L-1} H_l \\cdot W_l), True for padding elements, False for non-padding elements

        :return output                     (N, Length_{query}, C)
        """
        N, Len_q, _ = query.shape
        N, Len_in, _ = input_flatten.shape
        assert (input_spatial_shapes[:, 0] * input_spatial_shapes[:, 1]).sum() == Len_in

        value = self.value_proj(input_flatten)
        if input_padding_mask is not None:
            value = value.masked_fill(input_padding_mask[..., None], float(0))
        value = value.view(N, Len_in, self.n_heads, self.d_model // self.n_heads)
        sampling_offsets = self.sampling_offsets(query).view(N, Len_q, self.n_heads, self.n_levels, self.n_points, 2)
        attention_weights = self.attention_weights(query).view(N, Len_q, self.n_heads, self.n_levels * self.n_points)
        attention_weights = F.softmax(attention_weights, -1).view(N, Len_q, self.n_heads, self.n_levels, self.n_points)
        # N, Len_q, n_heads, n_levels, n_points, 2
        if reference_points.shape[-1] == 2:
            offset_normalizer = torch.stack([input_spatial_shapes[..., 1], input_spatial_shapes[..., 0]], -1)
            sampling_locations = (
                reference_points[:, :, None, :, None, :]
                + sampling_offsets / offset_normalizer[None, None, None, :, None, :]
            )
        elif reference_points.shape[-1] == 4:
            sampling_locations = (
                reference_points[:, :, None, :, None, :2]
                + sampling_offsets / self.n_points * reference_points[:, :, None, :, None, 2:] * 0.5
            )
        else:
            raise ValueError(
                "Last dim of reference_points must be 2 or 4, but get {} instead.".format(reference_points.shape[-1])  # noqa: UP032
            )
        output = ms_deform_attn_core_pytorch(value, input_spatial_shapes, sampling_locations, attention_weights)
        output = self.output_proj(output)
        return output


class Model(nn.Module):
    """The encoder layer's self-attention: MSDeformAttn(with_pos_embed(src, pos), reference_points, src, ...)."""

    def __init__(self, d_model, n_levels, n_heads, n_points):
        super().__init__()
        self.self_attn = MSDeformAttn(d_model, n_levels, n_heads, n_points)
        with torch.no_grad():  # stand-ins for trained offsets and attention weights
            self.self_attn.sampling_offsets.weight.normal_(0.0, 0.02)
            self.self_attn.attention_weights.weight.normal_(0.0, 0.1)

    def forward(self, query, reference_points, input_flatten, input_spatial_shapes, input_level_start_index):
        return self.self_attn(query, reference_points, input_flatten, input_spatial_shapes, input_level_start_index)


batch_size = 2
d_model = 64
n_heads = 4
n_levels = 3
n_points = 4
spatial_shapes = [(16, 16), (8, 8), (4, 4)]


def get_inputs():
    input_spatial_shapes = torch.as_tensor(spatial_shapes, dtype=torch.long)
    input_level_start_index = torch.cat(
        (input_spatial_shapes.new_zeros((1,)), input_spatial_shapes.prod(1).cumsum(0)[:-1])
    )
    len_in = sum(h * w for h, w in spatial_shapes)
    input_flatten = torch.randn(batch_size, len_in, d_model)
    query = input_flatten + torch.randn(batch_size, len_in, d_model)  # src + pos
    reference_points = torch.rand(batch_size, len_in, n_levels, 2)
    return [query, reference_points, input_flatten, input_spatial_shapes, input_level_start_index]


def get_init_inputs():
    return [d_model, n_levels, n_heads, n_points]
