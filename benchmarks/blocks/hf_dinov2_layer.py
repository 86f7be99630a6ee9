"""A DINOv2 encoder layer as Hugging Face transformers' models/dinov2/modeling_dinov2.py writes it (v4.4x, 2024, eager
attention): Dinov2Layer = norm1 (LayerNorm, eps 1e-6) before Dinov2Attention (Dinov2SelfAttention: query / key / value
Linears with bias, transpose_for_scores's view + permute(0, 2, 1, 3), `torch.matmul(query, key.transpose(-1, -2))`
divided by math.sqrt(head_size), nn.functional.softmax, dropout, matmul with the values, permute + contiguous + view
back; Dinov2SelfOutput's dense + dropout), Dinov2LayerScale (`hidden_state * self.lambda1`), Dinov2DropPath (drop_path
copied from BEiT: the identity in eval) and the first residual, then norm2, Dinov2MLP (fc1, GELU, fc2), layer_scale2,
drop path and the second residual. Configured as facebook/dinov2-small (head_dim 64, mlp_ratio 4, hidden_act "gelu",
qkv_bias, layer_norm_eps 1e-6, use_swiglu_ffn False), smaller: width 128 in 2 heads over the CLS token and a 7x7 patch
grid, a drop_path_rate of 0.1 as a deeper layer's share so that Dinov2DropPath (not nn.Identity) is built. Changed:
Dinov2Config's fields passed as arguments, ACT2FN["gelu"] written out as GELUActivation, head pruning
(find_pruneable_heads_and_indices / prune_linear_layer) and the SwiGLU FFN variant dropped, the layer returns its
hidden states only (no head mask, no attention probabilities), lambda1 drawn from U(0.05, 1) as a stand-in for trained
layer scales (layerscale_value fills it with 1.0)."""

import math
from typing import Optional, Tuple, Union  # noqa: UP035

import torch
from torch import Tensor, nn


class GELUActivation(nn.Module):
    """
    Original Implementation of the GELU activation function in Google BERT repo when initially created. For
    information: OpenAI GPT's GELU is slightly different (and gives slightly different results): 0.5 * x * (1 +
    torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3)))) This is now written in C in nn.functional
    Also see the Gaussian Error Linear Units paper: https://arxiv.org/abs/1606.08415
    """

    def __init__(self, use_gelu_python: bool = False):
        super().__init__()
        if use_gelu_python:
            self.act = self._gelu_python
        else:
            self.act = nn.functional.gelu

    def _gelu_python(self, input: Tensor) -> Tensor:
        return input * 0.5 * (1.0 + torch.erf(input / math.sqrt(2.0)))

    def forward(self, input: Tensor) -> Tensor:
        return self.act(input)


class Dinov2SelfAttention(nn.Module):
    def __init__(self, hidden_size, num_attention_heads, qkv_bias=True, attention_probs_dropout_prob=0.0) -> None:
        super().__init__()
        if hidden_size % num_attention_heads != 0:
            raise ValueError(
                f"The hidden size {(hidden_size,)} is not a multiple of the number of attention "
                f"heads {num_attention_heads}."
            )

        self.num_attention_heads = num_attention_heads
        self.attention_head_size = int(hidden_size / num_attention_heads)
        self.all_head_size = self.num_attention_heads * self.attention_head_size

        self.query = nn.Linear(hidden_size, self.all_head_size, bias=qkv_bias)
        self.key = nn.Linear(hidden_size, self.all_head_size, bias=qkv_bias)
        self.value = nn.Linear(hidden_size, self.all_head_size, bias=qkv_bias)

        self.dropout = nn.Dropout(attention_probs_dropout_prob)

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(
        self,
        hidden_states,
        head_mask: Optional[torch.Tensor] = None,  # noqa: UP045
        output_attentions: bool = False,
    ) -> Union[Tuple[torch.Tensor, torch.Tensor], Tuple[torch.Tensor]]:  # noqa: UP006, UP007
        mixed_query_layer = self.query(hidden_states)

        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        query_layer = self.transpose_for_scores(mixed_query_layer)

        # Take the dot product between "query" and "key" to get the raw attention scores.
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))

        attention_scores = attention_scores / math.sqrt(self.attention_head_size)

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
        context_layer = context_layer.view(new_context_layer_shape)

        outputs = (context_layer, attention_probs) if output_attentions else (context_layer,)

        return outputs


class Dinov2SelfOutput(nn.Module):
    """
    The residual connection is defined in Dinov2Layer instead of here (as is the case with other models), due to the
    layernorm applied before each block.
    """

    def __init__(self, hidden_size, hidden_dropout_prob=0.0) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)

        return hidden_states


class Dinov2Attention(nn.Module):
    def __init__(self, hidden_size, num_attention_heads, qkv_bias=True) -> None:
        super().__init__()
        self.attention = Dinov2SelfAttention(hidden_size, num_attention_heads, qkv_bias)
        self.output = Dinov2SelfOutput(hidden_size)
        self.pruned_heads = set()

    def forward(
        self,
        hidden_states: torch.Tensor,
        head_mask: Optional[torch.Tensor] = None,  # noqa: UP045
        output_attentions: bool = False,
    ) -> Union[Tuple[torch.Tensor, torch.Tensor], Tuple[torch.Tensor]]:  # noqa: UP006, UP007
        self_outputs = self.attention(hidden_states, head_mask, output_attentions)

        attention_output = self.output(self_outputs[0], hidden_states)

        outputs = (attention_output,) + self_outputs[1:]  # add attentions if we output them
        return outputs


class Dinov2LayerScale(nn.Module):
    def __init__(self, hidden_size, layerscale_value=1.0) -> None:
        super().__init__()
        self.lambda1 = nn.Parameter(layerscale_value * torch.ones(hidden_size))

    def forward(self, hidden_state: torch.Tensor) -> torch.Tensor:
        return hidden_state * self.lambda1


# Copied from transformers.models.beit.modeling_beit.drop_path
def drop_path(input: torch.Tensor, drop_prob: float = 0.0, training: bool = False) -> torch.Tensor:
    """
    Drop paths (Stochastic Depth) per sample (when applied in main path of residual blocks).

    Comment by Ross Wightman: This is the same as the DropConnect impl I created for EfficientNet, etc networks,
    however, the original name is misleading as 'Drop Connect' is a different form of dropout in a separate paper...
    See discussion: https://github.com/tensorflow/tpu/issues/494#issuecomment-532968956 ... I've opted for changing the
    layer and argument names to 'drop path' rather than mix DropConnect as a layer name and use 'survival rate' as the
    argument.
    """
    if drop_prob == 0.0 or not training:
        return input
    keep_prob = 1 - drop_prob
    shape = (input.shape[0],) + (1,) * (input.ndim - 1)  # work with diff dim tensors, not just 2D ConvNets
    random_tensor = keep_prob + torch.rand(shape, dtype=input.dtype, device=input.device)
    random_tensor.floor_()  # binarize
    output = input.div(keep_prob) * random_tensor
    return output


# Copied from transformers.models.beit.modeling_beit.BeitDropPath
class Dinov2DropPath(nn.Module):
    """Drop paths (Stochastic Depth) per sample (when applied in main path of residual blocks)."""

    def __init__(self, drop_prob: Optional[float] = None) -> None:  # noqa: UP045
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return drop_path(hidden_states, self.drop_prob, self.training)

    def extra_repr(self) -> str:
        return f"p={self.drop_prob}"


class Dinov2MLP(nn.Module):
    def __init__(self, hidden_size, mlp_ratio=4) -> None:
        super().__init__()
        in_features = out_features = hidden_size
        hidden_features = int(hidden_size * mlp_ratio)
        self.fc1 = nn.Linear(in_features, hidden_features, bias=True)
        self.activation = GELUActivation()
        self.fc2 = nn.Linear(hidden_features, out_features, bias=True)

    def forward(self, hidden_state: torch.Tensor) -> torch.Tensor:
        hidden_state = self.fc1(hidden_state)
        hidden_state = self.activation(hidden_state)
        hidden_state = self.fc2(hidden_state)
        return hidden_state


class Dinov2Layer(nn.Module):
    """This corresponds to the Block class in the original implementation."""

    def __init__(self, hidden_size, num_attention_heads, mlp_ratio=4, layer_norm_eps=1e-6, layerscale_value=1.0,
                 drop_path_rate=0.0, qkv_bias=True) -> None:  # fmt: skip
        super().__init__()

        self.norm1 = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.attention = Dinov2Attention(hidden_size, num_attention_heads, qkv_bias)
        self.layer_scale1 = Dinov2LayerScale(hidden_size, layerscale_value)
        self.drop_path = Dinov2DropPath(drop_path_rate) if drop_path_rate > 0.0 else nn.Identity()

        self.norm2 = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.mlp = Dinov2MLP(hidden_size, mlp_ratio)
        self.layer_scale2 = Dinov2LayerScale(hidden_size, layerscale_value)

    def forward(
        self,
        hidden_states: torch.Tensor,
        head_mask: Optional[torch.Tensor] = None,  # noqa: UP045
        output_attentions: bool = False,
    ) -> Union[Tuple[torch.Tensor, torch.Tensor], Tuple[torch.Tensor]]:  # noqa: UP006, UP007
        self_attention_outputs = self.attention(
            self.norm1(hidden_states),  # in Dinov2, layernorm is applied before self-attention
            head_mask,
            output_attentions=output_attentions,
        )
        attention_output = self_attention_outputs[0]

        attention_output = self.layer_scale1(attention_output)
        outputs = self_attention_outputs[1:]  # add self attentions if we output attention weights

        # first residual connection
        hidden_states = self.drop_path(attention_output) + hidden_states

        # in Dinov2, layernorm is also applied after self-attention
        layer_output = self.norm2(hidden_states)
        layer_output = self.mlp(layer_output)
        layer_output = self.layer_scale2(layer_output)

        # second residual connection
        layer_output = self.drop_path(layer_output) + hidden_states

        outputs = (layer_output,) + outputs

        return outputs


class Model(nn.Module):
    """One Dinov2Layer as Dinov2Encoder calls it (no head mask, no attentions out); its hidden states returned."""

    def __init__(self, hidden_size, num_attention_heads, mlp_ratio, layer_norm_eps, drop_path_rate):
        super().__init__()
        self.layer = Dinov2Layer(
            hidden_size, num_attention_heads, mlp_ratio, layer_norm_eps, drop_path_rate=drop_path_rate
        )
        with torch.no_grad():  # stand-ins for trained layer scales
            self.layer.layer_scale1.lambda1.uniform_(0.05, 1.0)
            self.layer.layer_scale2.lambda1.uniform_(0.05, 1.0)

    def forward(self, hidden_states):
        layer_outputs = self.layer(hidden_states, None, False)
        return layer_outputs[0]


batch_size = 2
num_tokens = 1 + 7 * 7  # the CLS token and a 7x7 grid of 14x14 patches (a 98x98 image)
hidden_size = 128
num_attention_heads = 2
mlp_ratio = 4
layer_norm_eps = 1e-6
drop_path_rate = 0.1


def get_inputs():
    return [torch.randn(batch_size, num_tokens, hidden_size)]


def get_init_inputs():
    return [hidden_size, num_attention_heads, mlp_ratio, layer_norm_eps, drop_path_rate]
