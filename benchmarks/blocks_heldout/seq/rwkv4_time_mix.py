"""An RWKV-4 block's time-mixing half as BlinkDL/RWKV-LM (RWKV-v4/src/model.py) writes it: the "fancy init" of
time_decay / time_first / time_mix_* parameters, token shift by nn.ZeroPad2d((0, 0, 1, -1)), the k/v/r mixes,
sigmoid receptance, and the WKV recurrence. Upstream calls a CUDA kernel for WKV; here it is the numerically
stable per-step CPU loop from RWKV's reference (max-shifted exponentials), as in the repo's RNN-mode code.
Wrapped as Block.forward does it: x + att(ln1(x))."""

import math

import torch
import torch.nn as nn


def wkv_cpu(B, T, C, w, u, k, v):
    # w: time_decay (C,), u: time_first (C,), k/v: (B, T, C)
    w = -torch.exp(w.contiguous())
    aa = torch.zeros(B, C, dtype=k.dtype, device=k.device)
    bb = torch.zeros(B, C, dtype=k.dtype, device=k.device)
    pp = torch.full((B, C), -1e38, dtype=k.dtype, device=k.device)
    out = []
    for t in range(T):
        kk = k[:, t]
        vv = v[:, t]
        ww = u + kk
        p = torch.maximum(pp, ww)
        e1 = torch.exp(pp - p)
        e2 = torch.exp(ww - p)
        out.append((e1 * aa + e2 * vv) / (e1 * bb + e2))
        ww = w + pp
        p = torch.maximum(ww, kk)
        e1 = torch.exp(ww - p)
        e2 = torch.exp(kk - p)
        aa = e1 * aa + e2 * vv
        bb = e1 * bb + e2
        pp = p
    return torch.stack(out, dim=1)


class RWKV_TimeMix(nn.Module):
    def __init__(self, n_embd, n_layer, layer_id, ctx_len):
        super().__init__()
        self.layer_id = layer_id
        self.ctx_len = ctx_len
        self.n_embd = n_embd

        attn_sz = n_embd

        with torch.no_grad():  # fancy init
            ratio_0_to_1 = layer_id / (n_layer - 1)  # 0 to 1
            ratio_1_to_almost0 = 1.0 - (layer_id / n_layer)  # 1 to ~0

            # fancy time_decay
            decay_speed = torch.ones(attn_sz)
            for h in range(attn_sz):
                decay_speed[h] = -5 + 8 * (h / (attn_sz - 1)) ** (0.7 + 1.3 * ratio_0_to_1)
            self.time_decay = nn.Parameter(decay_speed)
            # print(layer_id, self.time_decay.flatten()[:3].cpu().numpy(), '...', self.time_decay.flatten()[-3:].cpu().numpy())

            # fancy time_first
            zigzag = torch.tensor([(i + 1) % 3 - 1 for i in range(attn_sz)]) * 0.5
            self.time_first = nn.Parameter(torch.ones(attn_sz) * math.log(0.3) + zigzag)

            # fancy time_mix
            x = torch.ones(1, 1, n_embd)
            for i in range(n_embd):
                x[0, 0, i] = i / n_embd
            self.time_mix_k = nn.Parameter(torch.pow(x, ratio_1_to_almost0))
            self.time_mix_v = nn.Parameter(torch.pow(x, ratio_1_to_almost0) + 0.3 * ratio_0_to_1)
            self.time_mix_r = nn.Parameter(torch.pow(x, 0.5 * ratio_1_to_almost0))

        self.time_shift = nn.ZeroPad2d((0, 0, 1, -1))

        self.key = nn.Linear(n_embd, attn_sz, bias=False)
        self.value = nn.Linear(n_embd, attn_sz, bias=False)
        self.receptance = nn.Linear(n_embd, attn_sz, bias=False)

        self.output = nn.Linear(attn_sz, n_embd, bias=False)

        self.key.scale_init = 0
        self.receptance.scale_init = 0
        self.output.scale_init = 0

    def jit_func(self, x):
        # Mix x with the previous timestep to produce xk, xv, xr
        xx = self.time_shift(x)
        xk = x * self.time_mix_k + xx * (1 - self.time_mix_k)
        xv = x * self.time_mix_v + xx * (1 - self.time_mix_v)
        xr = x * self.time_mix_r + xx * (1 - self.time_mix_r)

        # Use xk, xv, xr to produce k, v, r
        k = self.key(xk)
        v = self.value(xv)
        r = self.receptance(xr)
        sr = torch.sigmoid(r)

        return sr, k, v

    def forward(self, x):
        B, T, C = x.size()  # x = (Batch,Time,Channel)

        sr, k, v = self.jit_func(x)

        rwkv = sr * wkv_cpu(B, T, C, self.time_decay, self.time_first, k, v)
        rwkv = self.output(rwkv)
        return rwkv


class Model(nn.Module):
    def __init__(self, n_embd, n_layer, layer_id, ctx_len):
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.att = RWKV_TimeMix(n_embd, n_layer, layer_id, ctx_len)

    def forward(self, x):
        x = x + self.att(self.ln1(x))
        return x


batch_size = 4
seq_len = 32
n_embd = 128
n_layer = 6
layer_id = 2
ctx_len = 128


def get_inputs():
    return [torch.randn(batch_size, seq_len, n_embd)]


def get_init_inputs():
    return [n_embd, n_layer, layer_id, ctx_len]
