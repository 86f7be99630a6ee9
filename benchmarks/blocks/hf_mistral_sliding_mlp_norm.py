"""MistralRMSNorm and MistralMLP as Hugging Face transformers' modeling_mistral.py writes them, in a decoder layer whose
plain multi-head attention (no rotary, no kv grouping) is masked by a sliding-window causal mask built in forward."""

import torch
import torch.nn as nn


class MistralRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        """
        MistralRMSNorm is equivalent to T5LayerNorm
        """
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)

    def extra_repr(self):
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


class MistralMLP(nn.Module):
    def __init__(self, hidden_size, intermediate_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return down_proj


def sliding_window_causal_mask(sequence_length, sliding_window, device):
    """True where query i may attend key j: j <= i and i - j < sliding_window."""
    causal = torch.ones(sequence_length, sequence_length, dtype=torch.bool, device=device).tril()
    too_far = torch.ones(sequence_length, sequence_length, dtype=torch.bool, device=device).tril(-sliding_window)
    mask = causal & ~too_far
    return mask[None, None, :, :]


class MistralAttention(nn.Module):
    def __init__(self, hidden_size, num_attention_heads, attention_dropout=0.0):
        super().__init__()
        self.head_dim = hidden_size // num_attention_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = attention_dropout
        self.is_causal = True
        self.q_proj = nn.Linear(hidden_size, num_attention_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_attention_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_attention_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(num_attention_heads * self.head_dim, hidden_size, bias=False)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.scaling
        min_dtype = torch.finfo(attn_weights.dtype).min
        attn_weights = torch.where(attention_mask, attn_weights, min_dtype)

        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        dropout = 0.0 if not self.training else self.attention_dropout
        attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=self.training)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()

        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output


class Model(nn.Module):
    def __init__(
        self,
        hidden_size,
        num_attention_heads,
        intermediate_size,
        sliding_window,
        rms_norm_eps=1e-6,
        attention_dropout=0.0,
    ):
        super().__init__()
        self.sliding_window = sliding_window
        self.self_attn = MistralAttention(hidden_size, num_attention_heads, attention_dropout)
        self.mlp = MistralMLP(hidden_size, intermediate_size)
        self.input_layernorm = MistralRMSNorm(hidden_size, eps=rms_norm_eps)
        self.post_attention_layernorm = MistralRMSNorm(hidden_size, eps=rms_norm_eps)

    def forward(self, hidden_states):
        attention_mask = sliding_window_causal_mask(hidden_states.shape[1], self.sliding_window, hidden_states.device)

        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, attention_mask)
        hidden_states = residual + hidden_states

        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


batch_size = 2
seq_len = 128
hidden_size = 256
num_attention_heads = 8
intermediate_size = 896
sliding_window = 32
rms_norm_eps = 1e-6


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size, num_attention_heads, intermediate_size, sliding_window, rms_norm_eps]
