"""BEiT's attention with its own relative position bias as Hugging Face transformers' models/beit/modeling_beit.py
writes it (v4.3x, 2023: before the bias table was interpolated to arbitrary window sizes), configured as
microsoft/beit-base-patch16-224 (use_relative_position_bias=True, so every layer's BeitSelfAttention gets a window
size): BeitAttention = BeitSelfAttention (query and value Linears with bias, key Linear with bias=False,
transpose_for_scores's view + permute(0, 2, 1, 3), `torch.matmul(query, key.transpose(-1, -2))` divided by
math.sqrt(head_size), plus `self.relative_position_bias().unsqueeze(0)`, nn.functional.softmax, dropout, matmul with
the values, permute + contiguous + view back) and BeitSelfOutput (dense + dropout). BeitRelativePositionBias holds
relative_position_bias_table ((2*Wh-1)*(2*Ww-1) + 3 rows: the last three for cls-to-token, token-to-cls and cls-to-cls)
and the relative_position_index buffer built at init (torch.stack of meshgrid(indexing="ij"), flatten, the pairwise
difference, permute, in-place `+=` / `*=` on its channels, written into rows/cols 1: of a zeros((Wh*Ww+1,) * 2) with
row 0, col 0 and [0, 0] set to the three extra rows), gathered by `table[index.view(-1)].view(N, N, -1)` and permuted
to heads first. Sizes smaller than beit-base's (768 wide, 12 heads, 14x14 patches): 128 wide in 4 heads over the CLS
token and a 7x7 patch grid at batch 2. Changed: BeitConfig's fields passed as arguments, pytorch_utils.meshgrid
written out as torch.meshgrid, head pruning dropped, BeitAttention returns its output only (no head mask, no shared
relative position bias, no attention probabilities), relative_position_bias_table drawn from N(0, 0.5) as a stand-in
for a trained table (transformers starts it at zero)."""

import math
from typing import Optional, Tuple, Union  # noqa: UP035

import torch
from torch import nn


class BeitRelativePositionBias(nn.Module):
    def __init__(self, num_attention_heads, window_size: tuple) -> None:
        super().__init__()
        self.window_size = window_size
        self.num_relative_distance = (2 * window_size[0] - 1) * (2 * window_size[1] - 1) + 3
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros(self.num_relative_distance, num_attention_heads)
        )  # 2*Wh-1 * 2*Ww-1, nH
        # cls to token & token 2 cls & cls to cls

        # get pair-wise relative position index for each token inside the window
        coords_h = torch.arange(window_size[0])
        coords_w = torch.arange(window_size[1])
        coords = torch.stack(torch.meshgrid([coords_h, coords_w], indexing="ij"))  # 2, Wh, Ww
        coords_flatten = torch.flatten(coords, 1)  # 2, Wh*Ww
        relative_coords = coords_flatten[:, :, None] - coords_flatten[:, None, :]  # 2, Wh*Ww, Wh*Ww
        relative_coords = relative_coords.permute(1, 2, 0).contiguous()  # Wh*Ww, Wh*Ww, 2
        relative_coords[:, :, 0] += window_size[0] - 1  # shift to start from 0
        relative_coords[:, :, 1] += window_size[1] - 1
        relative_coords[:, :, 0] *= 2 * window_size[1] - 1
        relative_position_index = torch.zeros(
            size=(window_size[0] * window_size[1] + 1,) * 2, dtype=relative_coords.dtype
        )
        relative_position_index[1:, 1:] = relative_coords.sum(-1)  # Wh*Ww, Wh*Ww
        relative_position_index[0, 0:] = self.num_relative_distance - 3
        relative_position_index[0:, 0] = self.num_relative_distance - 2
        relative_position_index[0, 0] = self.num_relative_distance - 1

        self.register_buffer("relative_position_index", relative_position_index, persistent=False)

    def forward(self) -> torch.Tensor:
        relative_position_bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(
            self.window_size[0] * self.window_size[1] + 1, self.window_size[0] * self.window_size[1] + 1, -1
        )  # Wh*Ww,Wh*Ww,nH

        return relative_position_bias.permute(2, 0, 1).contiguous()  # nH, Wh*Ww, Wh*Ww


class BeitSelfAttention(nn.Module):
    def __init__(self, hidden_size, num_attention_heads, attention_probs_dropout_prob=0.0,
                 window_size: Optional[tuple] = None) -> None:  # noqa: UP045  # fmt: skip
        super().__init__()
        if hidden_size % num_attention_heads != 0:
            raise ValueError(
                f"The hidden size {(hidden_size,)} is not a multiple of the number of attention "
                f"heads {num_attention_heads}."
            )

        self.num_attention_heads = num_attention_heads
        self.attention_head_size = int(hidden_size / num_attention_heads)
        self.all_head_size = self.num_attention_heads * self.attention_head_size

        self.query = nn.Linear(hidden_size, self.all_head_size)
        self.key = nn.Linear(hidden_size, self.all_head_size, bias=False)
        self.value = nn.Linear(hidden_size, self.all_head_size)

        self.dropout = nn.Dropout(attention_probs_dropout_prob)

        if window_size:
            self.relative_position_bias = BeitRelativePositionBias(num_attention_heads, window_size=window_size)
        else:
            self.relative_position_bias = None

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(*new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(
        self,
        hidden_states: torch.Tensor,
        head_mask: Optional[torch.Tensor] = None,  # noqa: UP045
        output_attentions: bool = False,
        relative_position_bias: Optional["BeitRelativePositionBias"] = None,
    ) -> Union[Tuple[torch.Tensor], Tuple[torch.Tensor, torch.Tensor]]:  # noqa: UP006, UP007
        mixed_query_layer = self.query(hidden_states)

        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        query_layer = self.transpose_for_scores(mixed_query_layer)

        # Take the dot product between "query" and "key" to get the raw attention scores.
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))

        attention_scores = attention_scores / math.sqrt(self.attention_head_size)

        # Add relative position bias if present.
        if self.relative_position_bias is not None:
            attention_scores = attention_scores + self.relative_position_bias().unsqueeze(0)

        # Add shared relative position bias if provided.
        if relative_position_bias is not None:
            attention_scores = attention_scores + relative_position_bias

        # Normalize the attention scores to probabilities.
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)

        # This is actually dropping out entire tokens to attend to, which might
        # seem a bit unusual, but is taken from the original Transformer paper.
        attention_probs = self.dropout(attention_probs)

        # Mask heads if we want to
        if head_mask is not None:
            attention_probs = attention_probs * head_mask

        context_layer = torch.matmul(attention_probs, value_layer)

        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        context_layer = context_layer.view(*new_context_layer_shape)

        outputs = (context_layer, attention_probs) if output_attentions else (context_layer,)

        return outputs


class BeitSelfOutput(nn.Module):
    """
    The residual connection is defined in BeitLayer instead of here (as is the case with other models), due to the
    layernorm applied before each block.
    """

    def __init__(self, hidden_size, hidden_dropout_prob=0.0) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor, gamma=None) -> torch.Tensor:
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)

        return hidden_states


class BeitAttention(nn.Module):
    def __init__(self, hidden_size, num_attention_heads, window_size: Optional[tuple] = None) -> None:  # noqa: UP045
        super().__init__()
        self.attention = BeitSelfAttention(hidden_size, num_attention_heads, window_size=window_size)
        self.output = BeitSelfOutput(hidden_size)
        self.pruned_heads = set()

    def forward(
        self,
        hidden_states: torch.Tensor,
        head_mask: Optional[torch.Tensor] = None,  # noqa: UP045
        output_attentions: bool = False,
        relative_position_bias: Optional["BeitRelativePositionBias"] = None,
    ) -> Union[Tuple[torch.Tensor], Tuple[torch.Tensor, torch.Tensor]]:  # noqa: UP006, UP007
        self_outputs = self.attention(hidden_states, head_mask, output_attentions, relative_position_bias)

        attention_output = self.output(self_outputs[0], hidden_states)

        outputs = (attention_output,) + self_outputs[1:]  # add attentions if we output them
        return outputs


class Model(nn.Module):
    """BeitLayer's attention as BeitLayer calls it on layernorm_before's output (no head mask, no shared bias)."""

    def __init__(self, hidden_size, num_attention_heads, image_size, patch_size):
        super().__init__()
        # BeitPatchEmbeddings.patch_shape
        window_size = (image_size // patch_size, image_size // patch_size)
        self.attention = BeitAttention(hidden_size, num_attention_heads, window_size=window_size)
        with torch.no_grad():  # stand-in for a trained table
            self.attention.attention.relative_position_bias.relative_position_bias_table.normal_(0.0, 0.5)

    def forward(self, hidden_states):
        self_attention_outputs = self.attention(hidden_states, None, output_attentions=False)
        return self_attention_outputs[0]


batch_size = 2
image_size = 112
patch_size = 16
num_tokens = 1 + (image_size // patch_size) ** 2  # the CLS token and a 7x7 patch grid
hidden_size = 128
num_attention_heads = 4


def get_inputs():
    return [torch.randn(batch_size, num_tokens, hidden_size)]


def get_init_inputs():
    return [hidden_size, num_attention_heads, image_size, patch_size]
