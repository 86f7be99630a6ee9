"""transformers' GPT-2 attention (GPT2Attention with its module-level eager_attention_forward, as in
transformers 4.5x): one c_attn projection split three ways (nn.Linear here where GPT-2 has Conv1D:
the same x @ W + b), heads by view + transpose, scores divided by a 0-d torch.full tensor, the
causal mask sliced from a boolean `bias` buffer and applied by torch.where with float32's minimum
(a 0-d tensor), softmax, `.type(value.dtype)`, dropout, output projection."""

import torch
import torch.nn as nn


def eager_attention_forward(module, query, key, value, attention_mask, head_mask=None, **kwargs):
    attn_weights = torch.matmul(query, key.transpose(-1, -2))
    if module.scale_attn_weights:
        attn_weights = attn_weights / torch.full(
            [], value.size(-1) ** 0.5, dtype=attn_weights.dtype, device=attn_weights.device
        )
    if not module.is_cross_attention:
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = module.bias[:, :, key_length - query_length : key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.full([], mask_value, dtype=attn_weights.dtype, device=attn_weights.device)
        attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1)
    attn_weights = attn_weights.type(value.dtype)
    attn_weights = module.attn_dropout(attn_weights)
    attn_output = torch.matmul(attn_weights, value)
    attn_output = attn_output.transpose(1, 2)
    return attn_output, attn_weights


class Model(nn.Module):
    def __init__(self, n_embd, n_head, n_positions):
        super().__init__()
        self.register_buffer(
            "bias",
            torch.tril(torch.ones((n_positions, n_positions), dtype=torch.bool)).view(1, 1, n_positions, n_positions),
            persistent=False,
        )
        self.embed_dim, self.num_heads = n_embd, n_head
        self.head_dim = n_embd // n_head
        self.scale_attn_weights = True
        self.is_cross_attention = False
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(0.0)

    def forward(self, hidden_states):
        query_states, key_states, value_states = self.c_attn(hidden_states).split(self.embed_dim, dim=2)
        shape_kv = (*key_states.shape[:-1], -1, self.head_dim)
        key_states = key_states.view(shape_kv).transpose(1, 2)
        value_states = value_states.view(shape_kv).transpose(1, 2)
        shape_q = (*query_states.shape[:-1], -1, self.head_dim)
        query_states = query_states.view(shape_q).transpose(1, 2)
        attn_output, _ = eager_attention_forward(self, query_states, key_states, value_states, None)
        attn_output = attn_output.reshape(*attn_output.shape[:-2], -1).contiguous()
        return self.c_proj(attn_output)


batch_size = 4
seq_len = 256
n_embd = 768
n_head = 12
n_positions = 1024


def get_inputs():
    return [torch.randn(batch_size, seq_len, n_embd)]


def get_init_inputs():
    return [n_embd, n_head, n_positions]
