"""A mean (or sum) over space after a convolution, computed without the convolution's output.

The mean over all output positions of a convolution is linear in the input, and each input
position n contributes sum_{t valid at n} W[o, i, t] of the weight, where a tap t is valid when it
lands inside the output. Away from the borders every tap is valid, so per spatial dim the taps
that miss, D(n) = [0, K) minus the valid range, are empty except at a few border positions B.
Expanding the product over dims of (all taps - D(n_d)):

    sum_out y[o] = sum_{S subset of dims} (-1)^|S| sum_{b in B^S} sum_i m_{S,b}[i] * W_{S,b}[o, i]

where m_{S,b} sums the input over the dims outside S, with the dims in S fixed at b (S empty:
the whole input), and W_{S,b} sums the weight over every tap in the dims outside S and over the
missed taps D(b_d) in the dims of S. So the forward reads the input once, plus its border rows,
and does one small [N, I] x [I, O] product per term, instead of a convolution of K^d
multiply-adds per output position whose output is written and read again. Applied to transposed
convolutions (any stride, padding and output padding) and stride-1 convolutions, groups 1,
dilation 1, where the valid taps of a position form one range per dim; and only while the terms
stay few (a padded 3x3 convolution in 2-d has 9, an unpadded one 25: left as it is). The terms
depend on the sizes, so only graphs from torch.export, whose candidate runs the folded forward at
the captured shapes alone (the guard), are folded; an fx graph keeps its sizes symbolic.

Ops between the two that are constant over space (a scale, a per-channel shift) commute with
the mean and are applied to it; a sum is the mean times the number of output positions. The
weights W_{S,b} are `derived` nodes (recipe "tapbox": signed box sums of the weight, by the
kw_tapbox kernel), recomputed whenever the weight changes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

from agent.builtin.graph import Graph, Lit, Node, Ref, Scalar
from agent.builtin.poolfold import Conv, chain_to, conv_bias, conv_of, fold_each

MAX_TERMS = 16
_ADAPTIVE = {f"aten.{p}adaptive_avg_pool{d}d.default" for d in (1, 2, 3) for p in ("", "_")}


def _over_space(n: Node, d: int) -> str | None:
    """ "mean" or "sum" when n reduces exactly the d spatial dims of an [N, C, ...] value (an
    adaptive average pool to size 1 is a mean), else None."""
    if n.op in ("mean", "sum") and n.attrs.get("dim") is not None:
        nd = d + 2
        if sorted(x % nd for x in n.attrs["dim"]) == list(range(2, nd)):
            return n.op
    if n.op == "aten" and n.attrs.get("target") in _ADAPTIVE and n.shape is not None and n.dims[2:] == [1] * d:
        return "mean"
    return None


def _valid(transposed: bool, n: int, K: int, stride: int, pad: int, out: int) -> tuple[int, int]:
    """The range [lo, hi) of taps of input position n that land inside the output."""
    if transposed:  # output m = stride * n + t - pad
        lo, hi = pad - stride * n, out + pad - stride * n
    else:  # stride 1: output m = n + pad - t
        lo, hi = n + pad - out + 1, n + pad + 1
    return max(lo, 0), min(hi, K)


def _missed(rng: tuple[int, int], K: int) -> list[tuple[int, int]]:
    lo, hi = rng
    return [r for r in ((0, lo), (hi, K)) if r[0] < r[1]]


def _terms(c: Conv, K: list[int], sizes: list[int], out: list[int]) -> list[tuple[dict[int, int], int, list]] | None:
    """Per term: the fixed border positions {dim: b}, its sign, and the weight boxes (a list of
    per-dim (lo, hi) ranges) whose sums make W_{S,b}; None when the terms are too many."""
    border: list[list[tuple[int, list[tuple[int, int]]]]] = []
    for i in range(len(K)):
        rows = []
        for n in range(sizes[i]):
            miss = _missed(_valid(c.transposed, n, K[i], c.stride[i], c.padding[i], out[i]), K[i])
            if miss:
                rows.append((n, miss))
        border.append(rows)
    if math.prod(1 + len(b) for b in border) > MAX_TERMS:
        return None
    terms = []
    for dims in itertools.product(*[[None, *b] for b in border]):
        fixed = {i: x[0] for i, x in enumerate(dims) if x is not None}
        per_dim = [[(0, K[i])] if x is None else x[1] for i, x in enumerate(dims)]
        terms.append((fixed, (-1) ** len(fixed), [list(box) for box in itertools.product(*per_dim)]))
    return terms


def fold_means(g: Graph) -> tuple[Graph, list[str]] | None:
    """g with every mean or sum over space after a convolution replaced by the terms above; the
    descriptions, or None when there was none to replace."""
    if g.meta.get("capture") != "export":  # the terms are those of the captured sizes: export's guard keeps them
        return None
    return fold_each(g, _fold_one)


def _fold_one(g: Graph, n: Node) -> str | None:
    c = conv_of(n)
    if c is None or c.groups != 1 or (not c.transposed and c.stride != [1] * c.d):
        return None
    found = chain_to(g, n, c.d, lambda u: _over_space(u, c.d) is not None)
    wn = g.node(c.weight.name)
    if found is None or wn.op != "param" or not wn.attrs.get("path") or not isinstance(n.args[0], Ref):
        return None
    chain, red = found
    x = g.node(n.args[0].name)
    terms = _terms(c, wn.dims[2:], x.dims[2:], n.dims[2:])
    if terms is None:
        return None
    _replace(g, c, wn, x, terms, chain, red)
    label = n.attrs.get("module") or n.name
    kind = "transposed convolution" if c.transposed else "convolution"
    return (
        f"{label}: the {_over_space(red, c.d) or 'mean'} over space of the {kind} from the input's sums "
        f"({len(terms)} product(s) of [{x.dims[0]}, {x.dims[1]}] x [{x.dims[1]}, {n.dims[1]}])"
    )


def _replace(g: Graph, c: Conv, wn: Node, x: Node, terms: list, chain: list[Node], red: Node) -> None:
    """The reduction `red` of conv -> chain becomes the sum of the terms' products (g in place)."""
    conv, d = c.node, c.d
    batch, cout = x.dims[0], conv.dims[1]
    positions = math.prod(conv.dims[2:])

    def add(op: str, args: list[Any], shape: list[int], attrs: dict[str, Any] | None = None, prefix: str = "mf") -> str:
        name = g.fresh(prefix)
        g.insert_before(red.name, Node(name, op, args, attrs or {}, shape, "float32"))
        return name

    total = _sum_of_terms(g, c, wn, x, terms, add)
    v = add("mul", [Ref(total), Scalar(1.0 / positions)], [batch, cout])
    bias = conv_bias(conv)
    if isinstance(bias, Ref):
        v = add("add", [Ref(v), bias], [batch, cout])
    keep = [batch, cout, *[1] * d]
    v = add("view", [Ref(v), Lit(keep)], keep)
    for op in chain:  # constant over space: applied to the mean as they were to every position
        op.args = [
            Ref(v) if isinstance(a, Ref) and a.name in (conv.name, *(o.name for o in chain)) else a for a in op.args
        ]
        op.shape = list(keep)
        v = op.name
    g.toposort()
    if _over_space(red, d) == "sum":
        v = add("mul", [Ref(v), Scalar(float(positions))], keep)
    if red.dims != keep:
        v = add("view", [Ref(v), Lit(list(red.dims))], list(red.dims))
    g.replace_uses(red.name, v)
    g.nodes.remove(red)


def _sum_of_terms(g: Graph, c: Conv, wn: Node, x: Node, terms: list, add: Callable[..., str]) -> str:
    """sum over terms of m_{S,b} @ W_{S,b}^T: [N, O], the sum over the convolution's output positions
    without its bias."""
    d, batch, cin, cout = c.d, x.dims[0], x.dims[1], c.node.dims[1]
    total = None
    for fixed, sign, boxes in terms:
        src = x.name
        for dim, b in fixed.items():
            shape = [*g.node(src).dims]
            shape[2 + dim] = 1
            src = add("slice", [Ref(src)], shape, {"dim": 2 + dim, "start": b, "end": b + 1, "step": 1}, "mf_row")
        sums = {"dim": list(range(2, 2 + d)), "keepdim": False, "tuple": False}
        m = add("sum", [Ref(src)], [batch, cin], sums, "mf_sum")
        w = Node(
            g.fresh("w_taps"),
            "derived",
            [c.weight],
            {"recipe": "tapbox", "of": wn.attrs.get("path"), "boxes": boxes, "sign": sign, "transposed": c.transposed},
            [cout, cin],
            "float32",
        )
        g.insert_before(c.node.name, w)
        term = add("linear", [Ref(m), Ref(w.name), Lit(None)], [batch, cout], prefix="mf_term")
        total = term if total is None else add("add", [Ref(total), Ref(term)], [batch, cout])
    assert total is not None, "a fold has at least the whole input's term"
    return total
