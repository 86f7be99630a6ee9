"""Attention written with einsum and einops-style reshapes done by hand, as in lucidrains'
repositories (e.g. vit-pytorch's Attention): qkv by one Linear and chunk, heads split with
reshape + permute, scores by `einsum('b h i d, b h j d -> b h i j')`, softmax, `einsum('b h i j,
b h j d -> b h i d')`, heads merged, output Linear; a pre-LayerNorm and a residual."""

import torch
import torch.nn as nn


class Attention(nn.Module):
    def __init__(self, dim, heads=8, dim_head=64):
        super().__init__()
        inner_dim = dim_head * heads
        self.heads = heads
        self.scale = dim_head**-0.5
        self.norm = nn.LayerNorm(dim)
        self.attend = nn.Softmax(dim=-1)
        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias=False)
        self.to_out = nn.Sequential(nn.Linear(inner_dim, dim), nn.Dropout(0.0))

    def forward(self, x):
        x = self.norm(x)
        b, n, _ = x.shape
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, n, self.heads, -1).permute(0, 2, 1, 3) for t in (q, k, v))
        dots = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
        attn = self.attend(dots)
        out = torch.einsum("bhij,bhjd->bhid", attn, v)
        out = out.permute(0, 2, 1, 3).reshape(b, n, -1)
        return self.to_out(out)


class Model(nn.Module):
    def __init__(self, dim, heads, dim_head):
        super().__init__()
        self.attn = Attention(dim, heads, dim_head)

    def forward(self, x):
        return x + self.attn(x)


def get_inputs():
    return [torch.randn(8, 65, 512)]


def get_init_inputs():
    return [512, 8, 64]
