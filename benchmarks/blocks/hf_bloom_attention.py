"""BLOOM's self-attention as transformers' modeling_bloom.py writes it (v4.40): ALiBi slopes built
per head, fused query_key_value, scores by `alibi.baddbmm(q, k, beta, alpha=1/sqrt(d))`, the
causal mask filled with float32's minimum, softmax in float32, bmm with V over [B*H]."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def build_alibi_tensor(attention_mask, num_heads, dtype):
    batch_size, seq_length = attention_mask.shape
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    base = torch.tensor(
        2 ** (-(2 ** -(math.log2(closest_power_of_2) - 3))), device=attention_mask.device, dtype=torch.float32
    )
    powers = torch.arange(1, 1 + closest_power_of_2, device=attention_mask.device, dtype=torch.int32)
    slopes = torch.pow(base, powers)
    if closest_power_of_2 != num_heads:
        extra_base = torch.tensor(
            2 ** (-(2 ** -(math.log2(2 * closest_power_of_2) - 3))), device=attention_mask.device, dtype=torch.float32
        )
        num_remaining_heads = min(closest_power_of_2, num_heads - closest_power_of_2)
        extra_powers = torch.arange(1, 1 + 2 * num_remaining_heads, 2, device=attention_mask.device, dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(extra_base, extra_powers)], dim=0)
    arange_tensor = ((attention_mask.cumsum(dim=-1) - 1) * attention_mask)[:, None, :]
    alibi = slopes[..., None] * arange_tensor
    return alibi.reshape(batch_size * num_heads, 1, seq_length).to(dtype)


class Model(nn.Module):
    def __init__(self, hidden_size, n_head):
        super().__init__()
        self.hidden_size = hidden_size
        self.num_heads = n_head
        self.head_dim = self.hidden_size // self.num_heads
        self.inv_norm_factor = 1.0 / math.sqrt(self.head_dim)
        self.beta = 1.0
        self.query_key_value = nn.Linear(self.hidden_size, 3 * self.hidden_size, bias=True)
        self.dense = nn.Linear(self.hidden_size, self.hidden_size)

    def _split_heads(self, fused_qkv):
        batch_size, seq_length, three_times_hidden_size = fused_qkv.shape
        fused_qkv = fused_qkv.view(batch_size, seq_length, self.num_heads, 3, self.head_dim)
        query_layer = (
            fused_qkv[..., 0, :].transpose(1, 2).reshape(batch_size * self.num_heads, seq_length, self.head_dim)
        )
        key_layer = (
            fused_qkv[..., 1, :].permute(0, 2, 3, 1).reshape(batch_size * self.num_heads, self.head_dim, seq_length)
        )
        value_layer = (
            fused_qkv[..., 2, :].transpose(1, 2).reshape(batch_size * self.num_heads, seq_length, self.head_dim)
        )
        return query_layer, key_layer, value_layer

    def forward(self, hidden_states):
        batch_size, q_length, _ = hidden_states.shape
        attention_mask_2d = torch.ones(batch_size, q_length, dtype=torch.long, device=hidden_states.device)
        alibi = build_alibi_tensor(attention_mask_2d, self.num_heads, hidden_states.dtype)
        causal = torch.triu(torch.ones(q_length, q_length, dtype=torch.bool, device=hidden_states.device), diagonal=1)
        attention_mask = causal[None, None, :, :].expand(batch_size, 1, q_length, q_length)

        fused_qkv = self.query_key_value(hidden_states)
        query_layer, key_layer, value_layer = self._split_heads(fused_qkv)
        kv_length = key_layer.shape[-1]
        matmul_result = alibi.baddbmm(batch1=query_layer, batch2=key_layer, beta=self.beta, alpha=self.inv_norm_factor)
        attention_scores = matmul_result.view(batch_size, self.num_heads, q_length, kv_length)
        attn_weights = torch.masked_fill(attention_scores, attention_mask, torch.finfo(attention_scores.dtype).min)
        attention_probs = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(hidden_states.dtype)
        attention_probs_reshaped = attention_probs.view(batch_size * self.num_heads, q_length, kv_length)
        context_layer = torch.bmm(attention_probs_reshaped, value_layer)
        context_layer = context_layer.view(batch_size, self.num_heads, q_length, self.head_dim)
        context_layer = context_layer.permute(0, 2, 1, 3).reshape(batch_size, q_length, self.num_heads * self.head_dim)
        return self.dense(context_layer)


batch_size = 2
seq_len = 128
hidden_size = 256
n_head = 8


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size, n_head]
