"""Cross-attention as diffusers' Attention computes it with the classic AttnProcessor (before
PyTorch 2's SDPA processor, and still what `set_attn_processor(AttnProcessor())` selects): heads
moved into the batch (head_to_batch_dim), scores by `baddbmm` of an uninitialised tensor with
beta=0, softmax, bmm, heads moved back, to_out; latents attend to a text encoder's states."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, query_dim, cross_attention_dim, heads, dim_head):
        super().__init__()
        inner_dim = dim_head * heads
        self.scale = dim_head**-0.5
        self.heads = heads
        self.to_q = nn.Linear(query_dim, inner_dim, bias=False)
        self.to_k = nn.Linear(cross_attention_dim, inner_dim, bias=False)
        self.to_v = nn.Linear(cross_attention_dim, inner_dim, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(inner_dim, query_dim), nn.Dropout(0.0)])

    def head_to_batch_dim(self, tensor, out_dim=3):
        head_size = self.heads
        if tensor.ndim == 3:
            batch_size, seq_len, dim = tensor.shape
            extra_dim = 1
        else:
            batch_size, extra_dim, seq_len, dim = tensor.shape
        tensor = tensor.reshape(batch_size, seq_len * extra_dim, head_size, dim // head_size)
        tensor = tensor.permute(0, 2, 1, 3)
        if out_dim == 3:
            tensor = tensor.reshape(batch_size * head_size, seq_len * extra_dim, dim // head_size)
        return tensor

    def batch_to_head_dim(self, tensor):
        head_size = self.heads
        batch_size, seq_len, dim = tensor.shape
        tensor = tensor.reshape(batch_size // head_size, head_size, seq_len, dim)
        tensor = tensor.permute(0, 2, 1, 3).reshape(batch_size // head_size, seq_len, dim * head_size)
        return tensor

    def get_attention_scores(self, query, key, attention_mask=None):
        dtype = query.dtype
        if attention_mask is None:
            baddbmm_input = torch.empty(
                query.shape[0], query.shape[1], key.shape[1], dtype=query.dtype, device=query.device
            )
            beta = 0
        else:
            baddbmm_input = attention_mask
            beta = 1
        attention_scores = torch.baddbmm(baddbmm_input, query, key.transpose(-1, -2), beta=beta, alpha=self.scale)
        del baddbmm_input
        attention_probs = attention_scores.softmax(dim=-1)
        del attention_scores
        attention_probs = attention_probs.to(dtype)
        return attention_probs

    def forward(self, hidden_states, encoder_hidden_states):
        query = self.to_q(hidden_states)
        key = self.to_k(encoder_hidden_states)
        value = self.to_v(encoder_hidden_states)
        query = self.head_to_batch_dim(query)
        key = self.head_to_batch_dim(key)
        value = self.head_to_batch_dim(value)
        attention_probs = self.get_attention_scores(query, key, None)
        hidden_states = torch.bmm(attention_probs, value)
        hidden_states = self.batch_to_head_dim(hidden_states)
        hidden_states = self.to_out[0](hidden_states)
        hidden_states = self.to_out[1](hidden_states)
        return hidden_states


batch = 2
latent_tokens = 1024
query_dim = 320
cross_attention_dim = 768
text_tokens = 77
heads = 8
dim_head = 40


def get_inputs():
    return [torch.randn(batch, latent_tokens, query_dim), torch.randn(batch, text_tokens, cross_attention_dim)]


def get_init_inputs():
    return [query_dim, cross_attention_dim, heads, dim_head]
