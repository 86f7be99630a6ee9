"""Perceiver-style cross-attention as lucidrains' perceiver-pytorch writes it: latents attend to
a longer input sequence; to_q from the latents, to_kv chunked in two, einsum scores, softmax, a
PreNorm with a separate context norm, and a GEGLU feed-forward."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class GEGLU(nn.Module):
    def forward(self, x):
        x, gates = x.chunk(2, dim=-1)
        return x * F.gelu(gates)


class Model(nn.Module):
    def __init__(self, latent_dim, input_dim, heads, dim_head):
        super().__init__()
        inner_dim = dim_head * heads
        self.scale = dim_head**-0.5
        self.heads = heads
        self.norm = nn.LayerNorm(latent_dim)
        self.norm_context = nn.LayerNorm(input_dim)
        self.to_q = nn.Linear(latent_dim, inner_dim, bias=False)
        self.to_kv = nn.Linear(input_dim, inner_dim * 2, bias=False)
        self.to_out = nn.Linear(inner_dim, latent_dim)
        self.ff_norm = nn.LayerNorm(latent_dim)
        self.ff = nn.Sequential(
            nn.Linear(latent_dim, latent_dim * 4 * 2), GEGLU(), nn.Linear(latent_dim * 4, latent_dim)
        )

    def attend(self, x, context):
        h = self.heads
        q = self.to_q(x)
        k, v = self.to_kv(context).chunk(2, dim=-1)
        b, n, _ = q.shape
        q, k, v = (t.reshape(b, -1, h, t.shape[-1] // h).permute(0, 2, 1, 3) for t in (q, k, v))
        sim = torch.einsum("b h i d, b h j d -> b h i j", q, k) * self.scale
        attn = sim.softmax(dim=-1)
        out = torch.einsum("b h i j, b h j d -> b h i d", attn, v)
        out = out.permute(0, 2, 1, 3).reshape(b, n, -1)
        return self.to_out(out)

    def forward(self, latents, data):
        x = self.attend(self.norm(latents), self.norm_context(data)) + latents
        return self.ff(self.ff_norm(x)) + x


batch = 4
num_latents = 64
seq = 512
latent_dim = 128
input_dim = 64
heads = 4
dim_head = 32


def get_inputs():
    return [torch.randn(batch, num_latents, latent_dim), torch.randn(batch, seq, input_dim)]


def get_init_inputs():
    return [latent_dim, input_dim, heads, dim_head]
