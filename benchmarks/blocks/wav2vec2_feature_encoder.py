"""wav2vec 2.0's feature encoder as transformers' modeling_wav2vec2.py writes it (feat_extract_norm
"group"): a Conv1d stack over the raw waveform, group norm (one group per channel) on the first
layer only, GELU; the input is a [batch, samples] waveform given a channel dim in forward."""

import torch
import torch.nn as nn


class Wav2Vec2GroupNormConvLayer(nn.Module):
    def __init__(self, in_dim, out_dim, kernel, stride):
        super().__init__()
        self.conv = nn.Conv1d(in_dim, out_dim, kernel_size=kernel, stride=stride, bias=False)
        self.activation = nn.GELU()
        self.layer_norm = nn.GroupNorm(num_groups=out_dim, num_channels=out_dim, affine=True)

    def forward(self, hidden_states):
        hidden_states = self.conv(hidden_states)
        hidden_states = self.layer_norm(hidden_states)
        hidden_states = self.activation(hidden_states)
        return hidden_states


class Wav2Vec2NoLayerNormConvLayer(nn.Module):
    def __init__(self, in_dim, out_dim, kernel, stride):
        super().__init__()
        self.conv = nn.Conv1d(in_dim, out_dim, kernel_size=kernel, stride=stride, bias=False)
        self.activation = nn.GELU()

    def forward(self, hidden_states):
        hidden_states = self.conv(hidden_states)
        hidden_states = self.activation(hidden_states)
        return hidden_states


class Model(nn.Module):
    def __init__(self, conv_dim):
        super().__init__()
        kernels = (10, 3, 3, 3, 3, 2, 2)
        strides = (5, 2, 2, 2, 2, 2, 2)
        layers = [Wav2Vec2GroupNormConvLayer(1, conv_dim, kernels[0], strides[0])]
        for k, s in zip(kernels[1:], strides[1:], strict=True):
            layers.append(Wav2Vec2NoLayerNormConvLayer(conv_dim, conv_dim, k, s))
        self.conv_layers = nn.ModuleList(layers)

    def forward(self, input_values):
        hidden_states = input_values[:, None]
        for conv_layer in self.conv_layers:
            hidden_states = conv_layer(hidden_states)
        return hidden_states


batch = 2
samples = 16000
conv_dim = 128


def get_inputs():
    return [torch.randn(batch, samples)]


def get_init_inputs():
    return [conv_dim]
