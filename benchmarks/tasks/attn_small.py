"""Small scaled-dot-product attention written out: QK^T, scale, softmax, PV (bmm through matmul)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.scale = head_dim**-0.5

    def forward(self, q, k, v):
        s = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        p = torch.softmax(s, dim=-1)
        return torch.matmul(p, v)


batch = 8
heads = 16
seq = 512
head_dim = 64


def get_inputs():
    return [torch.randn(batch, heads, seq, head_dim) for _ in range(3)]


def get_init_inputs():
    return [head_dim]
