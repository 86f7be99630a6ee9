"""Written-out attention becomes one SDPA call (agent.builtin.attention), and stays the function.

The modules are written as people write them (minGPT's registered causal buffer, BERT's additive
mask with a division by sqrt(d)); the cases that must not match are the near misses: a score
matrix read twice, a mask added before the scale, a ReLU in place of the softmax, and a fill that
is not -inf. Each match is run with eager ops (agent.builtin.interp) against the module itself.
"""

from __future__ import annotations

import pytest
import torch

from agent.builtin.attention import SDPA, attention_to_sdpa
from agent.builtin.graph import analyze_source
from agent.builtin.interp import run_graph
from agent.builtin.rewrites import all_rewrites

from .conftest import REPO, load_module

HEAD = """
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
"""

CAUSAL = (
    HEAD
    + """
class Model(nn.Module):
    def __init__(self, d, h, n):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.h, self.d = h, d
        self.register_buffer("mask", torch.tril(torch.ones(n, n)).view(1, 1, n, n))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(self.d, dim=2)
        q = q.view(B, T, self.h, C // self.h).transpose(1, 2)
        k = k.view(B, T, self.h, C // self.h).transpose(1, 2)
        v = v.view(B, T, self.h, C // self.h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)

def get_inputs():
    return [torch.randn(2, 12, 32)]

def get_init_inputs():
    return [32, 4, 16]
"""
)

ADDITIVE = (
    HEAD
    + """
class Model(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.h, self.hd = h, d // h

    def split(self, x):
        return x.view(x.size(0), x.size(1), self.h, self.hd).permute(0, 2, 1, 3)

    def forward(self, x, mask):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.hd)
        scores = scores + mask
        probs = nn.functional.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return ctx.view(x.size(0), x.size(1), -1)

def get_inputs():
    keep = torch.rand(3, 1, 1, 10) > 0.3
    return [torch.randn(3, 10, 24), (~keep).float() * -10000.0]

def get_init_inputs():
    return [24, 3]
"""
)


def _near_miss(scores: str, probs: str = "F.softmax(s, dim=-1)", extra: str = "") -> str:
    return (
        HEAD
        + f"""
class Model(nn.Module):
    def forward(self, q, k, v, m):
        s = {scores}
        p = {probs}
        return p @ v{extra}

def get_inputs():
    return [torch.randn(2, 3, 8, 4), torch.randn(2, 3, 8, 4), torch.randn(2, 3, 8, 5), torch.randn(1, 1, 8, 8)]

def get_init_inputs():
    return []
"""
    )


NEAR_MISSES = {
    "scores read twice": _near_miss("q @ k.transpose(-2, -1) * 0.5", extra=", s"),
    "mask added before the scale": _near_miss("(q @ k.transpose(-2, -1) + m) * 0.5"),
    "relu in place of softmax": _near_miss("q @ k.transpose(-2, -1) * 0.5", probs="torch.relu(s)"),
    "fill that is not -inf": _near_miss("(q @ k.transpose(-2, -1)).masked_fill(m > 0, -100.0)"),
    "softmax over another dim": _near_miss("q @ k.transpose(-2, -1)", probs="F.softmax(s, dim=-2)"),
    "K scaled by a negative constant": _near_miss("(q * 0.5) @ (k.transpose(-2, -1) * -0.5)"),
    "K^T scaled and read again": _near_miss("(q * 0.5) @ (kt := k.transpose(-2, -1) * 0.5)", extra=" + kt.sum()"),
    "two added tensors": _near_miss("q @ k.transpose(-2, -1) * 0.5 + m + m.transpose(-2, -1)"),
    "a fill, then a tensor added before the scale": _near_miss(
        "((q @ k.transpose(-2, -1) + m) * 0.5).masked_fill(m > 0, float('-inf'))"
    ),
}


def _rewritten(src: str, rewrites_first: bool = True):
    an = analyze_source(src, profile=False)
    assert an.ok, an.error
    steps = all_rewrites(an.graph) if rewrites_first else []
    return attention_to_sdpa(steps[-1].graph if steps else an.graph)


def _check(src: str, rewrites_first: bool = True) -> None:
    r = _rewritten(src, rewrites_first)
    assert r is not None, "written-out attention was not recognised"
    assert SDPA in [n.attrs.get("target") for n in r.graph.nodes]
    assert not any(n.op == "softmax" for n in r.graph.nodes), "the softmax is still in the graph"
    mod = load_module("task", src)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs()).eval()
    for seed in (1, 2):
        torch.manual_seed(seed)
        inputs = mod.get_inputs()
        torch.testing.assert_close(run_graph(r.graph, model, inputs), model(*inputs), rtol=1e-5, atol=1e-5)


def test_causal_attention_with_a_registered_mask_is_one_sdpa_call():
    _check(CAUSAL)


@pytest.mark.slow
def test_two_layers_are_two_sdpa_calls():
    """Each layer's attention is matched after the one before it was rewritten (its ops removed)."""
    two = (
        CAUSAL.replace("class Model(nn.Module):", "class Layer(nn.Module):", 1)
        + """

class Model(nn.Module):
    def __init__(self, d, h, n):
        super().__init__()
        self.a, self.b = Layer(d, h, n), Layer(d, h, n)

    def forward(self, x):
        return self.b(self.a(x))
"""
    )
    _check(two)
    r = _rewritten(two)
    assert sum(n.attrs.get("target") == SDPA for n in r.graph.nodes) == 2


def test_additive_mask_divided_scores_is_one_sdpa_call():
    _check(ADDITIVE)


def test_transformers_eager_attention_is_one_sdpa_call():
    """transformers' eager_attention_forward: softmax in float32 is an ATen island with a dtype, and
    `.to(query.dtype)` leaves a metadata assertion that reads the probabilities."""
    src = (REPO / "benchmarks" / "blocks" / "hf_siglip_attention.py").read_text()
    small = src.replace("num_patches = 196", "num_patches = 24").replace("embed_dim = 768", "embed_dim = 48")
    small = small.replace("num_heads = 12", "num_heads = 4").replace("batch_size = 8", "batch_size = 2")
    _check(small)
    _check(small, rewrites_first=False)  # the assertion still in the graph (no rewrite removed it as dead)


def test_transformers_gpt2_where_with_the_minimum_is_one_sdpa_call():
    """GPT-2's torch.where(causal_mask, scores, finfo.min) keeps where the mask is true (the other
    branch from masked_fill), divides by a 0-d torch.full tensor and fills with one."""
    src = (REPO / "benchmarks" / "blocks" / "hf_gpt2_eager_attention.py").read_text()
    sizes = {"seq_len = 256": "seq_len = 24", "n_embd = 768": "n_embd = 48", "n_head = 12": "n_head = 4"}
    for old, new in {**sizes, "batch_size = 4": "batch_size = 2", "n_positions = 1024": "n_positions = 32"}.items():
        src = src.replace(old, new)
    _check(src)


@pytest.mark.slow
def test_clip_scores_viewed_to_heads_for_the_mask_are_one_sdpa_call():
    """CLIP before transformers 4.48: bmm over [B*H, L, E], the scores viewed to [B, H, L, S] for the
    causal mask's add and back; SDPA runs over [B, H] (q, k, v reshaped) and its result is viewed back."""
    src = (REPO / "benchmarks" / "blocks" / "hf_clip_encoder_layer.py").read_text()
    for old, new in {"seq_len = 77": "seq_len = 13", "hidden_size = 256": "hidden_size = 32"}.items():
        src = src.replace(old, new)
    _check(src.replace("intermediate_size = 1024", "intermediate_size = 64"))
    sdpa = next(n for n in _rewritten(src).graph.nodes if n.attrs.get("target") == SDPA)
    assert sdpa.dims == [4, 4, 13, 8], sdpa.dims


@pytest.mark.parametrize("name", sorted(NEAR_MISSES))
def test_near_misses_stay_written_out(name):
    assert _rewritten(NEAR_MISSES[name]) is None


def _small_block(name: str, init: list[int], inputs: str) -> str:
    """A block of benchmarks/blocks at test sizes (its get_inputs and get_init_inputs replaced)."""
    src = (REPO / "benchmarks" / "blocks" / f"{name}.py").read_text()
    head = src[: src.index("def get_inputs():")]
    return head + f"def get_inputs():\n    return {inputs}\n\n\ndef get_init_inputs():\n    return {init}\n"


@pytest.mark.slow
def test_scales_on_q_and_on_a_permuted_k_are_one_sdpa_call():
    """Whisper scales Q and K^T by head_dim ** -0.25 each and makes K^T with one permute of the heads'
    split, (0, 2, 3, 1): SDPA gets the product of the scales and K as a permute of its own."""
    src = _small_block("whisper_encoder_stem", [8, 12, 32, 4], "[torch.randn(2, 8, 24)]")
    _check(src)
    sdpa = next(n for n in _rewritten(src).graph.nodes if n.attrs.get("target") == SDPA)
    assert abs(sdpa.attrs["call"]["kwargs"]["scale"]["v"] - 8**-0.5) < 1e-9, sdpa.attrs["call"]["kwargs"]


@pytest.mark.parametrize(
    "name, init, inputs",
    [
        ("timm_vit_attention", [32, 4], "[torch.randn(2, 9, 32)]"),
        ("hf_bart_attention", [32, 4], "[torch.randn(2, 10, 32), torch.zeros(2, 1, 1, 10)]"),
    ],
)
def test_q_scaled_before_the_product_is_one_sdpa_call(name, init, inputs):
    """timm (q * scale after unbind) and BART (the projection scaled before the heads' split)."""
    _check(_small_block(name, init, inputs))


@pytest.mark.parametrize(
    "name, init, inputs",
    [
        ("einsum_attention", [32, 4, 8], "[torch.randn(2, 9, 32)]"),
        ("perceiver_cross_attention", [32, 16, 2, 8], "[torch.randn(2, 6, 32), torch.randn(2, 20, 16)]"),
    ],
)
def test_attention_written_with_einsum_is_one_sdpa_call(name, init, inputs):
    """`einsum('b h i d, b h j d -> b h i j')` and `einsum('b h i j, b h j d -> b h i d')` (lucidrains'
    attention, Perceiver's cross-attention over a longer context) are captured as Q @ K^T and P @ V."""
    _check(_small_block(name, init, inputs))


@pytest.mark.slow
def test_gpt_neox_baddbmm_scores_over_merged_heads_are_one_sdpa_call():
    """GPT-NeoX: scores by `baddbmm(zeros, q, k^T, alpha=1/norm)` over [B*H], viewed to [B, H] for
    the causal `where` with a lifted `torch.tensor(finfo.min)`, probabilities times V over [B, H]."""
    src = _small_block("hf_gpt_neox_attention", [32, 4, 16, 0.25, 10000.0], "[torch.randn(2, 12, 32)]")
    _check(src)
    sdpa = next(n for n in _rewritten(src).graph.nodes if n.attrs.get("target") == SDPA)
    assert sdpa.dims == [2, 4, 12, 8], sdpa.dims


@pytest.mark.parametrize(
    "name, init, inputs",
    [
        ("diffusers_cross_attention_baddbmm", [16, 24, 2, 8], "[torch.randn(2, 10, 16), torch.randn(2, 7, 24)]"),
        ("hf_t5_relative_attention", [32, 8, 4, 32, 128], "[torch.randn(2, 12, 32)]"),
    ],
)
def test_baddbmm_of_an_empty_tensor_and_unscaled_biased_scores_are_one_sdpa_call(name, init, inputs):
    """diffusers' classic AttnProcessor: `baddbmm(torch.empty(...), q, k^T, beta=0, alpha=scale)` over
    [B*H]. T5: unscaled scores plus a position bias from bucketed distances, softmax of `.float()`
    cast back by `type_as(scores)`, an identity on float32 that read the scores a second time."""
    _check(_small_block(name, init, inputs))


def test_attention_written_with_einops_rearrange_is_one_sdpa_call():
    """lucidrains' vit-pytorch Attention as published: heads split and merged by einops' rearrange
    (an import the sandbox's environment provides), which export traces to reshapes and permutes."""
    _check(_small_block("lucidrains_vit_attention", [32, 4, 8], "[torch.randn(2, 9, 32)]"))


def test_bloom_alibi_and_causal_fill_are_one_float_mask_of_one_sdpa_call():
    """BLOOM: `alibi.baddbmm(q, k^T)` adds ALiBi over [B*H] after the scale, the scores viewed to
    [B, H] are filled with float32's minimum where causal, the probabilities viewed back for a bmm
    with V, and K^T is a permute's copy viewed to [B*H, E, S]: one SDPA call whose float mask is
    ALiBi where kept and the minimum elsewhere."""
    src = _small_block("hf_bloom_attention", [32, 4], "[torch.randn(2, 12, 32)]")
    _check(src)
    nodes = _rewritten(src).graph.nodes
    sdpa = next(n for n in nodes if n.attrs.get("target") == SDPA)
    assert sdpa.dims == [2, 4, 12, 8], sdpa.dims
    assert any(n.attrs.get("target") == "aten.where.ScalarOther" for n in nodes)


@pytest.mark.slow
def test_decomposed_relative_positions_over_split_scores_are_one_sdpa_call():
    """Segment Anything (and ViTDet, MViTv2): the scores viewed to [B*H, qh, qw, kh, kw] get one
    relative-position term per axis, each broadcast over the other, and are viewed back for the
    softmax. SDPA's float mask is the terms' sum viewed as the scores; every new node has its own name."""
    src = _small_block("sam_rel_pos_attention", [32, 2, (4, 4)], "[torch.randn(2, 4, 4, 32)]")
    _check(src)
    nodes = _rewritten(src).graph.nodes
    names = [n.name for n in nodes]
    assert len(names) == len(set(names)), names
    sdpa = next(n for n in nodes if n.attrs.get("target") == SDPA)
    assert sdpa.dims == [4, 16, 16], sdpa.dims


ONE_AXIS = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rel = nn.Parameter(torch.randn(4, 4))

    def forward(self, q, k, v):
        s = (q @ k.transpose(-2, -1)).view(3, 4, 4, 4, 4) + self.rel[None, :, None, :, None]
        return s.view(3, 16, 16).softmax(-1) @ v

def get_inputs():
    return [torch.randn(3, 16, 8), torch.randn(3, 16, 8), torch.randn(3, 16, 8)]

def get_init_inputs():
    return []
"""


@pytest.mark.slow
def test_one_term_over_split_scores_is_expanded_into_the_mask():
    """One added term that does not cover the split shape: the mask is its expansion, viewed as the scores."""
    _check(ONE_AXIS)
    targets = [n.attrs.get("target") for n in _rewritten(ONE_AXIS).graph.nodes]
    assert "aten.expand.default" in targets and "aten.reshape.default" in targets


def test_a_term_multiplied_over_split_scores_stays_written_out():
    assert _rewritten(ONE_AXIS.replace(") + self.rel[", ") * self.rel[")) is None


def test_scores_added_to_a_computed_mask_are_still_seen_as_the_scores():
    """`mask_sum + scores`, the mask itself an add of two tensors: the scores are the operand that
    reaches Q @ K^T, tried before an add, so the match stands whichever side the mask is on."""
    src = ONE_AXIS.replace(
        "        s = (q @ k.transpose(-2, -1)).view(3, 4, 4, 4, 4) + self.rel[None, :, None, :, None]\n"
        "        return s.view(3, 16, 16).softmax(-1) @ v",
        "        bias = self.rel.reshape(16)[None, None, :] * 0.5 + self.full\n"
        "        return (bias + q @ k.transpose(-2, -1)).softmax(-1) @ v",
    ).replace(
        "self.rel = nn.Parameter(torch.randn(4, 4))",
        "self.rel = nn.Parameter(torch.randn(4, 4))\n        self.full = nn.Parameter(torch.randn(3, 16, 16))",
    )
    assert "bias + q @ k" in src
    _check(src)
