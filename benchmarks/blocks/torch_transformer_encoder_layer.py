"""torch.nn.TransformerEncoderLayer as people instantiate it (batch_first, GELU, norm_first): in
eval mode PyTorch's own fast path (`torch._transformer_encoder_layer_fwd`) may run it."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(
            d_model, nhead, dim_feedforward, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )

    def forward(self, src):
        return self.layer(src)


batch = 4
seq = 64
d_model = 128
nhead = 4
dim_feedforward = 512


def get_inputs():
    return [torch.randn(batch, seq, d_model)]


def get_init_inputs():
    return [d_model, nhead, dim_feedforward]
