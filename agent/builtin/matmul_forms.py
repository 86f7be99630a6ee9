"""torch.einsum and torch.baddbmm as the matrix products they are, for torch.export's
decomposition table.

PyTorch's own decomposition of einsum (sumproduct_pair) unsqueezes both operands to the union of
their letters and permutes those views into a bmm over 5-d shapes with singleton dims. The graph
computes the right thing, but nothing downstream reads it as a matrix product: attention written
as `einsum('b h i d, b h j d -> b h i j')` (lucidrains, Perceiver, many research codebases) is not
recognised as attention, and a batched GEMM turns into copies of permuted views.

A two-operand einsum whose every letter is a batch letter (in both operands and the output), a
contracted letter (in both operands, not in the output) or a free letter (in one operand and the
output) is one `torch.matmul` of the operands permuted to [batch, free, contracted] and
[batch, contracted, free], with letters of one group merged by a reshape where a group has
several, and the result permuted to the output's order. That is what `einsum_as_matmul` writes;
export keeps `aten.matmul`, `aten.transpose` and `aten.permute` as they are. Any other einsum (a
letter summed within one operand, a repeated letter, a single free side, three operands,
broadcast ellipses) goes to PyTorch's decomposition unchanged.

`baddbmm(c, a, b, beta, alpha)` (GPT-NeoX's scores: `c` a zeros tensor, alpha 1/sqrt(d)) is
`(a @ b) * alpha + c * beta`: a matmul, a scale and an add, which the rewrites and the attention
match read (the add of zeros is an identity they remove).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

_ELLIPSIS_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"  # stand-ins for the dims of "..." (torch's letters are a-zA-Z)


@dataclass(frozen=True)
class Groups:
    """The letters of `a, b -> out` by role, each group in the order the matmul reads it."""

    batch: str  # in a, b and out (out's order)
    a_free: str  # in a and out (out's order)
    contracted: str  # in a and b, not in out (a's order)
    b_free: str  # in b and out (out's order)


def parse(equation: str, ranks: Sequence[int]) -> tuple[list[str], str] | None:
    """The operands' letters and the output's, "..." spelled out as letters of its own; None where
    the ellipsis spans a different number of dims in the operands (it would broadcast)."""
    equation = equation.replace(" ", "")
    lhs, arrow, out = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        return None
    spans = {rank - (len(t) - 3) for t, rank in zip(terms, ranks, strict=True) if "..." in t}
    if len(spans) > 1:
        return None
    span = spans.pop() if spans else 0
    free = "".join(c for c in _ELLIPSIS_LETTERS if c not in equation)
    if span > len(free) or span < 0:
        return None
    dots = free[:span]
    terms = [t.replace("...", dots) for t in terms]
    if arrow:
        out = out.replace("...", dots)
    else:  # implicit output: the ellipsis, then the letters used once, sorted
        once = sorted(c for c in set("".join(terms)) if "".join(terms).count(c) == 1 and c not in dots)
        out = dots + "".join(once)
    if any(len(t) != rank for t, rank in zip(terms, ranks, strict=True)):
        return None
    return terms, out


def groups(a: str, b: str, out: str) -> Groups | None:
    """The roles of the letters of a two-operand product, or None where it is not a GEMM with a
    free letter on each side and at least one contracted letter."""
    if len(set(a)) != len(a) or len(set(b)) != len(b) or len(set(out)) != len(out):
        return None  # a repeated letter: a diagonal
    if any(c not in a and c not in b for c in out) or any(c not in b and c not in out for c in a):
        return None  # a letter only in a summed away
    if any(c not in a and c not in out for c in b):
        return None
    batch = "".join(c for c in out if c in a and c in b)
    a_free = "".join(c for c in out if c in a and c not in b)
    b_free = "".join(c for c in out if c in b and c not in a)
    contracted = "".join(c for c in a if c in b and c not in out)
    if not (a_free and b_free and contracted):
        return None
    return Groups(batch, a_free, contracted, b_free)


def _permuted(x: torch.Tensor, have: str, want: str) -> torch.Tensor:
    perm = [have.index(c) for c in want]
    if perm == list(range(len(perm))):
        return x
    n = len(perm)
    if n >= 2 and perm == [*range(n - 2), n - 1, n - 2]:
        return x.transpose(-2, -1)  # what a matmul operand's transpose is read as downstream
    return x.permute(perm)


def _merged(x: torch.Tensor, keep: int, split: Sequence[int]) -> torch.Tensor:
    """x with its dims after the first `keep` merged into groups of the sizes in `split`."""
    sizes = list(x.shape)
    grouped, at = sizes[:keep], keep
    for n in split:
        grouped.append(math.prod(sizes[at : at + n]))
        at += n
    return x if grouped == sizes else x.reshape(grouped)


def as_matmul(a: torch.Tensor, b: torch.Tensor, la: str, lb: str, out: str, g: Groups) -> torch.Tensor:
    """`einsum(la,lb->out)(a, b)` as one matmul, given the letters' roles. Without batch letters,
    a's leading free letters stay dims of their own (matmul reads them as a batch against a 2-d b:
    `x @ W`, as a linear layer is written)."""
    nb = len(g.batch)
    kept = nb if nb else len(g.a_free) - 1  # dims of a left as they are, ahead of the two merged groups
    a_rows = nb + len(g.a_free) - kept  # a's free letters merged into the matmul's rows
    a2 = _merged(_permuted(a, la, g.batch + g.a_free + g.contracted), kept, (a_rows, len(g.contracted)))
    b2 = _merged(_permuted(b, lb, g.batch + g.contracted + g.b_free), nb, (len(g.contracted), len(g.b_free)))
    y = torch.matmul(a2, b2)
    size = dict(zip(la, a.shape, strict=True)) | dict(zip(lb, b.shape, strict=True))
    want = [*y.shape[:nb], *(size[c] for c in g.a_free + g.b_free)]
    if list(y.shape) != want:
        y = y.reshape(want)
    return _permuted(y, g.batch + g.a_free + g.b_free, out)


def einsum_as_matmul(fallback: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A decomposition of aten.einsum: the matmul form where it applies, else `fallback` (PyTorch's)."""

    def decompose(equation: str, operands: Sequence[torch.Tensor], *, path: object = None) -> torch.Tensor:
        parsed = parse(equation, [t.dim() for t in operands]) if len(operands) == 2 else None
        g = groups(parsed[0][0], parsed[0][1], parsed[1]) if parsed is not None else None
        if parsed is None or g is None:
            return fallback(equation, operands, path=path)
        (la, lb), out = parsed
        a, b = operands
        if any(a.shape[la.index(c)] != b.shape[lb.index(c)] for c in g.contracted):
            return fallback(equation, operands, path=path)
        return as_matmul(a, b, la, lb, out, g)

    return decompose


def baddbmm_as_matmul(
    c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: float = 1.0, alpha: float = 1.0
) -> torch.Tensor:
    """A decomposition of aten.baddbmm: beta * c + alpha * (a @ b), terms of one skipped where they
    are 0 or 1 (beta 0 ignores c, NaN included, as baddbmm does)."""
    y = torch.matmul(a, b)
    if alpha != 1:
        y = y * alpha
    if beta == 0:
        return y
    return y + (c if beta == 1 else c * beta)


def sdpa_written_out(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """A decomposition of aten.scaled_dot_product_attention into its math: two GEMMs (library
    calls, allowed under torch-ops=forbid) around a masked, scaled softmax (a fused kernel of
    ours); the causal mask -inf above the diagonal (our kw_tri), added. Used only
    under forbid, where the one SDPA call is an ATen op the candidate may not run."""
    if enable_gqa and k.size(-3) != q.size(-3):
        k = k.repeat_interleave(q.size(-3) // k.size(-3), dim=-3)
        v = v.repeat_interleave(q.size(-3) // v.size(-3), dim=-3)
    s = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    attn = torch.matmul(q, k.transpose(-2, -1)) * s
    if is_causal:  # -inf above the diagonal, added: a fill and our kw_tri, computed once
        above = torch.full((q.size(-2), k.size(-2)), float("-inf"), dtype=attn.dtype, device=q.device)
        attn = attn + torch.triu(above, diagonal=1)
    if attn_mask is not None:
        attn = (
            attn.masked_fill(attn_mask.logical_not(), float("-inf"))
            if attn_mask.dtype == torch.bool
            else attn + attn_mask
        )
    attn = torch.softmax(attn, dim=-1)
    if dropout_p > 0.0:
        attn = torch.dropout(attn, dropout_p, True)
    return torch.matmul(attn, v)
