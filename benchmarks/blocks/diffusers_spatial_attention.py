"""The spatial self-attention of a diffusers UNet mid block (models/attention_processor.py,
Attention with AttnProcessor2_0 and a group norm): (B, C, H, W) viewed to (B, H*W, C), GroupNorm over
channels, q/k/v projections, heads split with view+transpose, F.scaled_dot_product_attention, the
output projection, back to (B, C, H, W), residual, divided by rescale_output_factor. Written out
without the diffusers import."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class SpatialSelfAttention(nn.Module):
    def __init__(self, channels: int, heads: int, groups: int = 32, eps: float = 1e-6, rescale: float = 1.0):
        super().__init__()
        self.heads = heads
        self.rescale_output_factor = rescale
        self.group_norm = nn.GroupNorm(num_channels=channels, num_groups=groups, eps=eps, affine=True)
        self.to_q = nn.Linear(channels, channels)
        self.to_k = nn.Linear(channels, channels)
        self.to_v = nn.Linear(channels, channels)
        self.to_out = nn.ModuleList([nn.Linear(channels, channels), nn.Dropout(0.0)])

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        residual = hidden_states
        batch_size, channel, height, width = hidden_states.shape
        hidden_states = hidden_states.view(batch_size, channel, height * width).transpose(1, 2)

        hidden_states = self.group_norm(hidden_states.transpose(1, 2)).transpose(1, 2)
        query = self.to_q(hidden_states)
        key = self.to_k(hidden_states)
        value = self.to_v(hidden_states)

        inner_dim = key.shape[-1]
        head_dim = inner_dim // self.heads
        query = query.view(batch_size, -1, self.heads, head_dim).transpose(1, 2)
        key = key.view(batch_size, -1, self.heads, head_dim).transpose(1, 2)
        value = value.view(batch_size, -1, self.heads, head_dim).transpose(1, 2)

        hidden_states = F.scaled_dot_product_attention(query, key, value, dropout_p=0.0, is_causal=False)
        hidden_states = hidden_states.transpose(1, 2).reshape(batch_size, -1, self.heads * head_dim)
        hidden_states = hidden_states.to(query.dtype)

        hidden_states = self.to_out[0](hidden_states)
        hidden_states = self.to_out[1](hidden_states)
        hidden_states = hidden_states.transpose(-1, -2).reshape(batch_size, channel, height, width)
        hidden_states = hidden_states + residual
        return hidden_states / self.rescale_output_factor


class Model(nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.attn = SpatialSelfAttention(c, h)

    def forward(self, x):
        return self.attn(x)


def get_inputs():
    return [torch.randn(2, 512, 16, 16)]


def get_init_inputs():
    return [512, 8]
