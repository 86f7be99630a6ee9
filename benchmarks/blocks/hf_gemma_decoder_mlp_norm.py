"""The post-attention half of a Gemma decoder layer as Hugging Face transformers' models/gemma/modeling_gemma.py writes
it (v4.4x-4.5x, 2024-2025): GemmaRMSNorm (the input cast to float32, `x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)
+ eps)`, scaled by `(1.0 + self.weight.float())` before the cast back with type_as: Gemma's `(x * w).to(dtype)`, not
Llama's `x.to(dtype) * w`) as post_attention_layernorm, then GemmaMLP (bias-free gate_proj / up_proj / down_proj,
`down_proj(act_fn(gate_proj(x)) * up_proj(x))` with hidden_activation "gelu_pytorch_tanh", i.e. ACT2FN's
PytorchGELUTanh: F.gelu(approximate="tanh")), added to the residual the way GemmaDecoderLayer.forward does
(`residual = hidden_states; ...; hidden_states = residual + hidden_states`). Configured as google/gemma-2b
(rms_norm_eps 1e-6, intermediate_size 8x hidden_size), smaller. Changed: GemmaConfig's fields passed as arguments,
ACT2FN["gelu_pytorch_tanh"] written out as PytorchGELUTanh (its torch-version check dropped), the attention half of
the layer left out (its output is the input here), the norm's weight drawn from N(0, 0.1) as a stand-in for a trained
one (GemmaRMSNorm starts it at zero, which makes the `1 +` scale the identity)."""

import torch
from torch import Tensor, nn


class PytorchGELUTanh(nn.Module):
    """
    A fast C implementation of the tanh approximation of the GeLU activation function. See
    https://arxiv.org/abs/1606.08415.

    This implementation is equivalent to NewGELU and FastGELU but much faster. However, it is not an exact numerical
    match due to rounding errors.
    """

    def forward(self, input: Tensor) -> Tensor:
        return nn.functional.gelu(input, approximate="tanh")


class GemmaRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        # Llama does x.to(float16) * w whilst Gemma is (x * w).to(float16)
        # See https://github.com/huggingface/transformers/pull/29402
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)

    def extra_repr(self):
        return f"{tuple(self.weight.shape)}, eps={self.eps}"


class GemmaMLP(nn.Module):
    def __init__(self, hidden_size, intermediate_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)
        self.act_fn = PytorchGELUTanh()

    def forward(self, x):
        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return down_proj


class Model(nn.Module):
    """GemmaDecoderLayer's "Fully Connected" half: post_attention_layernorm, mlp, residual add."""

    def __init__(self, hidden_size, intermediate_size, rms_norm_eps=1e-6):
        super().__init__()
        self.hidden_size = hidden_size
        self.mlp = GemmaMLP(hidden_size, intermediate_size)
        self.post_attention_layernorm = GemmaRMSNorm(hidden_size, eps=rms_norm_eps)
        with torch.no_grad():
            self.post_attention_layernorm.weight.normal_(0.0, 0.1)  # stand-in for a trained weight

    def forward(self, hidden_states):
        # Fully Connected
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


batch_size = 2
seq_len = 64
hidden_size = 128
intermediate_size = 1024  # gemma-2b: 2048 -> 16384
rms_norm_eps = 1e-6


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size, intermediate_size, rms_norm_eps]
