"""A GPT-J block as Hugging Face transformers' models/gptj/modeling_gptj.py (v4.5x, 2025, eager attention) writes it,
driven the way GPTJModel.forward drives it without a 2D mask: one ln_1 feeding attention and the MLP in parallel
(`attn_outputs + feed_forward_hidden_states + residual`); GPTJAttention with bias-free q/k/v/out projections,
_split_heads (view, permute only for value), the sinusoidal table kept as a plain tensor attribute (not a buffer)
`embed_positions`, repeated over the batch through the @torch.fx.wrap'd get_embed_positions when traced (else
_get_embed_positions, which reassigns the attribute when the device differs), torch.gather with the position ids,
torch.split into sin/cos, partial rotary (rotary_dim of head_dim) with rotate_every_two (strided slices ::2 / 1::2,
torch.stack, flatten) and repeat_interleave'd sin/cos, q/k upcast to float32, scores divided by a 0-d tensor
attribute scale_attn, the 4D causal mask of _prepare_4d_causal_attention_mask_with_cache_position (target length
seq + 1 when no mask is given, sliced to the key length), softmax, _merge_heads; GPTJMLP with gelu_new; then ln_f.
Changed: GPTJConfig's fields passed as arguments, ACT2FN["gelu_new"] written out as NewGELUActivation,
is_torch_fx_proxy written out, no KV cache, flash-attention and head-mask paths, one block instead of n_layer."""

import math
from typing import Optional

import torch
import torch.fx
from torch import nn


def is_torch_fx_proxy(x):
    return isinstance(x, torch.fx.Proxy)


class NewGELUActivation(nn.Module):
    """
    Implementation of the GELU activation function currently in Google BERT repo (identical to OpenAI GPT). Also see
    the Gaussian Error Linear Units paper: https://arxiv.org/abs/1606.08415
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))


def create_sinusoidal_positions(num_pos: int, dim: int) -> torch.Tensor:
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64) / dim))
    sinusoid_inp = torch.einsum("i , j -> i j", torch.arange(num_pos, dtype=torch.int64).float(), inv_freq).float()
    return torch.cat((torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)), dim=1)


@torch.fx.wrap
def get_embed_positions(embed_positions, position_ids):
    return embed_positions.to(position_ids.device).repeat(position_ids.shape[0], 1, 1)


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)  # in einsum notation: rearrange(x, '... d j -> ... (d j)')


def apply_rotary_pos_emb(tensor: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
    return (tensor * cos) + (rotate_every_two(tensor) * sin)


class GPTJAttention(nn.Module):
    def __init__(self, hidden_size, num_attention_heads, rotary_dim, max_position_embeddings, attn_pdrop=0.0,
                 resid_pdrop=0.0, layer_idx=None):  # fmt: skip
        super().__init__()
        max_positions = max_position_embeddings

        self.attn_dropout = nn.Dropout(attn_pdrop)
        self.resid_dropout = nn.Dropout(resid_pdrop)

        self.is_causal = True
        self.layer_idx = layer_idx

        self.embed_dim = hidden_size
        self.num_attention_heads = num_attention_heads
        self.head_dim = self.embed_dim // self.num_attention_heads
        if self.head_dim * self.num_attention_heads != self.embed_dim:
            raise ValueError(
                f"embed_dim must be divisible by num_attention_heads (got `embed_dim`: {self.embed_dim} and"
                f" `num_attention_heads`: {self.num_attention_heads})."
            )
        self.scale_attn = torch.sqrt(torch.tensor(self.head_dim, dtype=torch.float32)).to(torch.get_default_dtype())

        self.k_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=False)
        self.v_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=False)
        self.q_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=False)
        self.out_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=False)
        self.rotary_dim = rotary_dim
        pos_embd_dim = self.rotary_dim or self.embed_dim
        self.embed_positions = create_sinusoidal_positions(max_positions, pos_embd_dim)

    def _split_heads(self, tensor, num_attention_heads, attn_head_size, rotary):
        """
        Splits hidden dim into attn_head_size and num_attention_heads
        """
        new_shape = tensor.size()[:-1] + (num_attention_heads, attn_head_size)
        tensor = tensor.view(new_shape)
        if rotary:
            return tensor
        if len(tensor.shape) == 5:
            return tensor.permute(0, 1, 3, 2, 4)  # (batch, blocks, head, block_length, head_features)
        elif len(tensor.shape) == 4:
            return tensor.permute(0, 2, 1, 3)  # (batch, head, seq_length, head_features)
        else:
            raise ValueError(f"Input tensor rank should be one of [4, 5], but is: {len(tensor.shape)}")

    def _merge_heads(self, tensor, num_attention_heads, attn_head_size):
        """
        Merges attn_head_size dim and num_attn_heads dim into hidden dim
        """
        if len(tensor.shape) == 5:
            tensor = tensor.permute(0, 1, 3, 2, 4).contiguous()
        elif len(tensor.shape) == 4:
            tensor = tensor.permute(0, 2, 1, 3).contiguous()
        else:
            raise ValueError(f"Input tensor rank should be one of [4, 5], but is: {len(tensor.shape)}")
        new_shape = tensor.size()[:-2] + (num_attention_heads * attn_head_size,)
        return tensor.view(new_shape)

    def _attn(
        self,
        query,
        key,
        value,
        attention_mask=None,
        head_mask=None,
    ):
        # Keep the attention weights computation in fp32 to avoid overflow issues
        query = query.to(torch.float32)
        key = key.to(torch.float32)

        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / self.scale_attn

        if attention_mask is not None:  # no matter the length, we just slice it
            causal_mask = attention_mask[:, :, :, : key.shape[-2]]
            attn_weights = attn_weights + causal_mask

        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = attn_weights.to(value.dtype)
        attn_weights = self.attn_dropout(attn_weights)

        # Mask heads if we want to
        if head_mask is not None:
            attn_weights = attn_weights * head_mask

        attn_output = torch.matmul(attn_weights, value)

        return attn_output, attn_weights

    def _get_embed_positions(self, position_ids):
        embed_positions = self.embed_positions
        if embed_positions.device != position_ids.device:
            embed_positions = embed_positions.to(position_ids.device)
            self.embed_positions = embed_positions
        return embed_positions.repeat(position_ids.shape[0], 1, 1)

    def forward(
        self,
        hidden_states: torch.FloatTensor,
        layer_past=None,
        attention_mask: Optional[torch.FloatTensor] = None,  # noqa: UP045
        position_ids: Optional[torch.LongTensor] = None,  # noqa: UP045
        head_mask: Optional[torch.FloatTensor] = None,  # noqa: UP045
        use_cache: Optional[bool] = False,  # noqa: UP045
        output_attentions: Optional[bool] = False,  # noqa: UP045
        cache_position: Optional[torch.LongTensor] = None,  # noqa: UP045
    ):
        query = self.q_proj(hidden_states)
        key = self.k_proj(hidden_states)
        value = self.v_proj(hidden_states)

        query = self._split_heads(query, self.num_attention_heads, self.head_dim, True)
        key = self._split_heads(key, self.num_attention_heads, self.head_dim, True)
        value = self._split_heads(value, self.num_attention_heads, self.head_dim, False)

        if is_torch_fx_proxy(position_ids) or torch.jit.is_tracing():
            # The logic to conditionally copy to GPU could not be traced, so we do this
            # every time in the torch.fx case
            embed_positions = get_embed_positions(self.embed_positions, position_ids)
        else:
            embed_positions = self._get_embed_positions(position_ids)

        repeated_position_ids = position_ids.unsqueeze(-1).repeat(1, 1, embed_positions.shape[-1])
        sincos = torch.gather(embed_positions, 1, repeated_position_ids)
        sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)

        if self.rotary_dim is not None:
            k_rot = key[:, :, :, : self.rotary_dim]
            k_pass = key[:, :, :, self.rotary_dim :]

            q_rot = query[:, :, :, : self.rotary_dim]
            q_pass = query[:, :, :, self.rotary_dim :]

            k_rot = apply_rotary_pos_emb(k_rot, sin, cos)
            q_rot = apply_rotary_pos_emb(q_rot, sin, cos)

            key = torch.cat([k_rot, k_pass], dim=-1)
            query = torch.cat([q_rot, q_pass], dim=-1)
        else:
            key = apply_rotary_pos_emb(key, sin, cos)
            query = apply_rotary_pos_emb(query, sin, cos)

        key = key.permute(0, 2, 1, 3)
        query = query.permute(0, 2, 1, 3)

        # compute self-attention: V x Softmax(QK^T)
        attn_output, attn_weights = self._attn(query, key, value, attention_mask, head_mask)

        attn_output = self._merge_heads(attn_output, self.num_attention_heads, self.head_dim)
        attn_output = self.out_proj(attn_output)
        attn_output = self.resid_dropout(attn_output)

        return attn_output, attn_weights


class GPTJMLP(nn.Module):
    def __init__(self, intermediate_size, embed_dim, resid_pdrop=0.0):  # in MLP: intermediate_size= 4 * embed_dim
        super().__init__()

        self.fc_in = nn.Linear(embed_dim, intermediate_size)
        self.fc_out = nn.Linear(intermediate_size, embed_dim)

        self.act = NewGELUActivation()
        self.dropout = nn.Dropout(resid_pdrop)

    def forward(self, hidden_states: Optional[torch.FloatTensor]) -> torch.FloatTensor:  # noqa: UP045
        hidden_states = self.fc_in(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.fc_out(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return hidden_states


class GPTJBlock(nn.Module):
    def __init__(self, n_embd, n_head, rotary_dim, n_positions, n_inner=None, layer_norm_epsilon=1e-5, layer_idx=None):
        super().__init__()
        inner_dim = n_inner if n_inner is not None else 4 * n_embd
        self.ln_1 = nn.LayerNorm(n_embd, eps=layer_norm_epsilon)
        self.attn = GPTJAttention(n_embd, n_head, rotary_dim, n_positions, layer_idx=layer_idx)
        self.mlp = GPTJMLP(inner_dim, n_embd)

    def forward(
        self,
        hidden_states: Optional[torch.FloatTensor],  # noqa: UP045
        layer_past=None,
        attention_mask: Optional[torch.FloatTensor] = None,  # noqa: UP045
        position_ids: Optional[torch.LongTensor] = None,  # noqa: UP045
        head_mask: Optional[torch.FloatTensor] = None,  # noqa: UP045
        use_cache: Optional[bool] = False,  # noqa: UP045
        output_attentions: Optional[bool] = False,  # noqa: UP045
        cache_position: Optional[torch.LongTensor] = None,  # noqa: UP045
    ):
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        attn_outputs, attn_weights = self.attn(
            hidden_states=hidden_states,
            layer_past=layer_past,
            attention_mask=attention_mask,
            position_ids=position_ids,
            head_mask=head_mask,
            use_cache=use_cache,
            output_attentions=output_attentions,
            cache_position=cache_position,
        )
        feed_forward_hidden_states = self.mlp(hidden_states)
        hidden_states = attn_outputs + feed_forward_hidden_states + residual

        return hidden_states, attn_weights


def _prepare_4d_causal_attention_mask_with_cache_position(
    attention_mask: torch.Tensor,
    sequence_length: int,
    target_length: int,
    dtype: torch.dtype,
    cache_position: torch.Tensor,
    batch_size: int,
    **kwargs,
):
    if attention_mask is not None and attention_mask.dim() == 4:
        # In this case we assume that the mask comes already in inverted form and requires no inversion or slicing.
        causal_mask = attention_mask
    else:
        min_dtype = torch.finfo(dtype).min
        causal_mask = torch.full(
            (sequence_length, target_length), fill_value=min_dtype, dtype=dtype, device=cache_position.device
        )
        if sequence_length != 1:
            causal_mask = torch.triu(causal_mask, diagonal=1)
        causal_mask *= torch.arange(target_length, device=cache_position.device) > cache_position.reshape(-1, 1)
        causal_mask = causal_mask[None, None, :, :].expand(batch_size, 1, -1, -1)
        if attention_mask is not None:
            causal_mask = causal_mask.clone()  # copy to contiguous memory for in-place edit
            mask_length = attention_mask.shape[-1]
            padding_mask = causal_mask[:, :, :, :mask_length] + attention_mask[:, None, None, :].to(causal_mask.device)
            padding_mask = padding_mask == 0
            causal_mask[:, :, :, :mask_length] = causal_mask[:, :, :, :mask_length].masked_fill(padding_mask, min_dtype)

    return causal_mask


class Model(nn.Module):
    """One GPTJBlock and ln_f driven the way GPTJModel.forward drives them (inputs_embeds in, no cache, no 2D mask:
    _update_causal_mask's eager path with target_length = past_seen_tokens + sequence_length + 1)."""

    def __init__(self, n_embd, n_head, rotary_dim, n_positions, layer_norm_epsilon=1e-5, embd_pdrop=0.0):
        super().__init__()
        self.drop = nn.Dropout(embd_pdrop)
        self.h = nn.ModuleList([GPTJBlock(n_embd, n_head, rotary_dim, n_positions, layer_idx=0)])
        self.ln_f = nn.LayerNorm(n_embd, eps=layer_norm_epsilon)

    def forward(self, inputs_embeds):
        seq_length = inputs_embeds.shape[1]
        past_key_values_length = 0
        cache_position = torch.arange(
            past_key_values_length, past_key_values_length + seq_length, device=inputs_embeds.device
        )
        position_ids = cache_position.unsqueeze(0)

        # GPTJModel._update_causal_mask (eager, attention_mask None)
        attention_mask = None
        past_seen_tokens = 0
        dtype = inputs_embeds.dtype
        sequence_length = inputs_embeds.shape[1]
        target_length = (
            attention_mask.shape[-1]
            if isinstance(attention_mask, torch.Tensor)
            else past_seen_tokens + sequence_length + 1
        )
        causal_mask = _prepare_4d_causal_attention_mask_with_cache_position(
            attention_mask,
            sequence_length=sequence_length,
            target_length=target_length,
            dtype=dtype,
            cache_position=cache_position,
            batch_size=inputs_embeds.shape[0],
        )

        hidden_states = inputs_embeds
        hidden_states = self.drop(hidden_states)
        output_shape = (-1, seq_length, hidden_states.size(-1))
        for block in self.h:
            outputs = block(
                hidden_states,
                layer_past=None,
                attention_mask=causal_mask,
                position_ids=position_ids,
                head_mask=None,
                use_cache=False,
                output_attentions=False,
                cache_position=cache_position,
            )
            hidden_states = outputs[0]

        hidden_states = self.ln_f(hidden_states)
        hidden_states = hidden_states.view(output_shape)
        return hidden_states


batch_size = 2
seq_len = 128
n_embd = 256
n_head = 4
rotary_dim = 32
n_positions = 512


def get_inputs():
    return [torch.randn(batch_size, seq_len, n_embd)]


def get_init_inputs():
    return [n_embd, n_head, rotary_dim, n_positions]
