"""transformers' current eager attention as a vision encoder's self-attention calls it (SigLIP,
CLIP since 4.48): q/k/v projections, heads by view + transpose(1, 2), the module-level
`eager_attention_forward` (matmul with key.transpose(2, 3) times `self.scale`, the additive mask,
softmax in float32 then `.to(query.dtype)`, dropout, matmul), output projection. A padding mask as
the processor builds it: 0 where a patch is kept, the dtype's minimum where it is padding."""

import torch
import torch.nn as nn


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


class Model(nn.Module):
    def __init__(self, embed_dim, num_heads, attention_dropout=0.0):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scale = self.head_dim**-0.5
        self.dropout = attention_dropout
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, hidden_states, attention_mask):
        batch_size, seq_length, embed_dim = hidden_states.shape
        queries = self.q_proj(hidden_states)
        keys = self.k_proj(hidden_states)
        values = self.v_proj(hidden_states)
        queries = queries.view(batch_size, seq_length, self.num_heads, self.head_dim).transpose(1, 2)
        keys = keys.view(batch_size, seq_length, self.num_heads, self.head_dim).transpose(1, 2)
        values = values.view(batch_size, seq_length, self.num_heads, self.head_dim).transpose(1, 2)
        attn_output, attn_weights = eager_attention_forward(
            self,
            queries,
            keys,
            values,
            attention_mask,
            scaling=self.scale,
            dropout=0.0 if not self.training else self.dropout,
        )
        attn_output = attn_output.reshape(batch_size, seq_length, embed_dim).contiguous()
        return self.out_proj(attn_output)


batch_size = 8
num_patches = 196
embed_dim = 768
num_heads = 12


def get_inputs():
    hidden_states = torch.randn(batch_size, num_patches, embed_dim)
    keep = torch.ones(batch_size, num_patches, dtype=torch.bool)
    keep[:, num_patches - 16 :] = torch.rand(batch_size, 16) > 0.5  # padded patches at the end
    mask = torch.zeros(batch_size, 1, 1, num_patches)
    mask.masked_fill_(~keep[:, None, None, :], torch.finfo(torch.float32).min)
    return [hidden_states, mask]


def get_init_inputs():
    return [embed_dim, num_heads]
