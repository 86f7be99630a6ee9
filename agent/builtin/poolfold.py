"""An average pool after a convolution, folded into the convolution (an algebraic rewrite).

A convolution and an average pool are both linear and shift-invariant, so their composition is
one convolution; computing it directly skips the full-resolution intermediate (written once and
read once by the pool) and, for the shapes where the rewrite is applied, does fewer
multiply-adds. Per spatial dim, with the convolution's stride S, padding p, kernel K (dilation
1) and a pool of window k and stride s (no padding, floor mode):

- convolution: one convolution of kernel K + S(k - 1), stride S s, padding p, whose weight is
  the box-filtered original, W'[o, i, u] = sum_j W[o, i, u - S j] / k^d. The output sizes agree
  because floor(floor(a / S) / s) = floor(a / (S s)).
- 1x1 convolution (stride 1, no padding): the pool moves before it (a per-channel spatial map and
  a per-position channel mix commute): the convolution runs at the pooled resolution.
- transposed convolution with s = S: a stride-1 transposed convolution at the input's
  resolution, V[t] = sum_j W[S (t + dmin) + j + p] / k^d for dmin <= t + dmin <= dmax, where
  dmin = ceil((-p - k + 1) / S) and dmax = floor((K - 1 - p) / S); padding balanced on both
  sides by zero taps, so the output is the pool's window for window.

Elementwise ops between the two that are constant over space (a scalar or per-channel factor, a
per-channel shift: the convolution's bias among them) commute with the pool, which averages
over space only, and move after the folded convolution. The folded weight is a `derived` node
(recipe "tapfold"): the candidate computes it from the loaded weight with a kernel of its own
and recomputes it whenever the weight changes. Applied only where the folded convolution does
no more multiply-adds than the original (the intermediate's write and the pool's pass are saved on top).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.builtin.graph import Graph, Node, Ref, Scalar

# each convolution's call: (transposed, positions of stride, padding, dilation, output_padding
# (None: none), groups; the call's length with every argument given)
_Spec = tuple[bool, int, int, int, "int | None", int, int]
_CONV_CALLS: dict[str, _Spec] = {
    **{f"aten.conv{d}d.default": (False, 3, 4, 5, None, 6, 7) for d in (1, 2, 3)},
    **{f"aten.conv_transpose{d}d.{o}": (True, 3, 4, 7, 5, 6, 8) for d in (1, 2, 3) for o in ("input", "default")},
    "aten.convolution.default": (False, 3, 4, 5, 7, 8, 9),  # transposed: argument 6
}
_POOLS = {f"aten.avg_pool{d}d.default": d for d in (1, 2, 3)}
_AFFINE = {"mul", "div", "add", "sub"}


@dataclass
class Conv:
    node: Node
    transposed: bool
    stride: list[int]
    padding: list[int]
    weight: Ref
    groups: int = 1
    spec: _Spec | None = None  # an ATen call's layout; None for the IR's conv2d

    @property
    def d(self) -> int:
        return len(self.stride)


def plain(v: dict[str, Any]) -> Any:
    """A call argument's value when it is a literal (an int, a list of ints), else None."""
    if set(v) == {"v"}:
        return v["v"]
    if set(v) == {"list"} and all(set(x) == {"v"} for x in v["list"]):
        return [x["v"] for x in v["list"]]
    return None


def _ints(v: Any, d: int) -> list[int] | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return [v] * d
    if isinstance(v, list) and all(isinstance(x, int) for x in v):
        return list(v) * d if len(v) == 1 else (list(v) if len(v) == d else None)
    return None


def _call_ints(n: Node, i: int, default: int, d: int) -> list[int] | None:
    args = n.attrs["call"]["args"]
    return [default] * d if i >= len(args) else _ints(plain(args[i]), d)


def conv_of(n: Node) -> Conv | None:
    """n as a convolution this rewrite can fold (groups any, dilation 1, batched), or None."""
    if len(n.shape or []) < 3 or n.attrs.get("island") or n.attrs.get("channels_last"):
        return None
    d = len(n.dims) - 2
    if n.op == "conv2d":
        if n.attrs.get("dilation", [1, 1]) != [1, 1] or not isinstance(n.args[1], Ref):
            return None
        return Conv(
            n, False, list(n.attrs["stride"]), list(n.attrs["padding"]), n.args[1], int(n.attrs.get("groups", 1))
        )
    spec = _CONV_CALLS.get(str(n.attrs.get("target"))) if n.op == "aten" else None
    if spec is None or n.attrs["call"]["kwargs"]:
        return None
    transposed, si, pi, di, oi, gi, _ = spec
    args = n.attrs["call"]["args"]
    if n.attrs["target"] == "aten.convolution.default":
        flag = plain(args[6]) if len(args) > 6 else None
        if not isinstance(flag, bool):
            return None
        transposed, spec = flag, (flag, *spec[1:])
    w = n.args[args[1]["arg"]] if "arg" in args[1] else None
    stride, padding = _call_ints(n, si, 1, d), _call_ints(n, pi, 0, d)
    if not isinstance(w, Ref) or stride is None or padding is None or _call_ints(n, di, 1, d) != [1] * d:
        return None
    groups = plain(args[gi]) if gi < len(args) else 1
    if oi is not None and _call_ints(n, oi, 0, d) is None or not isinstance(groups, int):
        return None
    return Conv(n, transposed, stride, padding, w, groups, spec)


def conv_bias(conv: Node) -> Any:
    """The bias argument of a convolution node (a Ref, or None / a literal when it has none)."""
    if conv.op == "conv2d":
        return conv.args[2] if len(conv.args) > 2 else None
    args = conv.attrs["call"]["args"]
    return conv.args[args[2]["arg"]] if len(args) > 2 and "arg" in args[2] else None


def _pool_of(n: Node) -> tuple[list[int], list[int]] | None:
    """(window, stride) of an average pool without padding, ceil mode or divisor override."""
    d = _POOLS.get(str(n.attrs.get("target"))) if n.op == "aten" else None
    if d is None or n.attrs["call"]["kwargs"] or len(n.dims) != d + 2:
        return None
    args = [plain(a) for a in n.attrs["call"]["args"]] + [None] * 7
    # x, kernel_size, stride ([]: the kernel), padding, ceil_mode, count_include_pad, divisor_override
    k = _ints(args[1], d)
    s = k if args[2] in (None, []) else _ints(args[2], d)
    no_pad = args[3] is None or _ints(args[3], d) == [0] * d
    if k is None or s is None or not no_pad or args[4] not in (None, False) or args[6] is not None:
        return None
    return k, s


def _spatially_constant(g: Graph, a: Any, d: int) -> bool:
    if isinstance(a, Scalar):
        return True
    if not isinstance(a, Ref):
        return False
    shape = g.node(a.name).shape
    return shape is not None and all(x == 1 for x in shape[-d:])


def chain_to(g: Graph, conv: Node, d: int, end: Callable[[Node], bool]) -> tuple[list[Node], Node] | None:
    """The affine ops (constant over space) from conv, each its only reader, to a node `end`
    accepts (an average pool, a mean over space), and that node."""
    chain: list[Node] = []
    cur = conv
    while True:
        users = g.users(cur.name)
        if len(users) != 1 or cur.name in g.output.refs():
            return None
        u = users[0]
        if end(u):
            return chain, u
        mine = [i for i, a in enumerate(u.args) if isinstance(a, Ref) and a.name == cur.name]
        if u.op not in _AFFINE or len(u.args) != 2 or len(mine) != 1 or (u.op == "div" and mine != [0]):
            return None
        if not _spatially_constant(g, u.args[1 - mine[0]], d) or u.dims != cur.dims:
            return None
        chain.append(u)
        cur = u


@dataclass
class _Fold:
    """Per spatial dim: the folded kernel's taps, and for the tapfold kernel the source index of
    tap t and window offset j, alpha * t + beta * j + gamma; the new stride and padding."""

    taps: list[int]
    alpha: list[int]
    beta: list[int]
    gamma: list[int]
    stride: list[int]
    padding: list[int]


def _fold_transposed(
    K: list[int], c: Conv, k: list[int], s: list[int], sizes: list[int], out: list[int]
) -> _Fold | None:
    """The stride-1 transposed convolution of a transposed one followed by a pool of stride S; None
    where the pool's stride differs or the output would need taps beyond the weight's reach."""
    if s != c.stride:
        return None
    f = _Fold([], [], [1] * c.d, [], [1] * c.d, [])
    for i in range(c.d):
        S, p = c.stride[i], c.padding[i]
        dmin, dmax = -((p + k[i] - 1) // S), (K[i] - 1 - p) // S
        width = dmax - dmin + 1
        left, right = -dmin, sizes[i] + width - 1 + dmin - out[i]  # cropped from the full output
        if left < 0 or right < 0:
            return None
        lead, trail = max(right - left, 0), max(left - right, 0)  # zero taps that balance the padding
        f.taps.append(width + lead + trail)
        f.alpha.append(S)
        f.gamma.append(S * (dmin - lead) + p)
        f.padding.append(max(left, right))
    return f


def _foldplain(K: list[int], c: Conv, k: list[int], s: list[int]) -> _Fold:
    return _Fold(
        [K[i] + c.stride[i] * (k[i] - 1) for i in range(c.d)],
        [1] * c.d,
        [-x for x in c.stride],
        [0] * c.d,
        [c.stride[i] * s[i] for i in range(c.d)],
        list(c.padding),
    )


def _pool_first(g: Graph, conv: Node, chain: list[Node], pool: Node) -> None:
    """conv(x) -> chain -> pool becomes pool(x) -> conv -> chain (a 1x1 convolution)."""
    tail = chain[-1] if chain else conv
    out = list(pool.dims)
    g.replace_uses(pool.name, tail.name)
    x = conv.args[0]
    pool.args = [x, *pool.args[1:]]
    pool.shape = [*g.node(x.name).dims[:2], *out[2:]]
    conv.args = [Ref(pool.name), *conv.args[1:]]
    for n in [conv, *chain]:
        n.shape = list(out)
    g.toposort()


def _defaults(spec: _Spec, d: int) -> list[dict[str, Any]]:
    """Every argument of the call at its default (x and the weight are always given)."""
    _, si, pi, di, oi, gi, n = spec
    out: list[dict[str, Any]] = [{}, {}, {"v": None}] + [{}] * (n - 3)
    for i, v in ((si, 1), (pi, 0), (di, 1), (oi, 0)):
        if i is not None:
            out[i] = {"list": [{"v": v}] * d}
    out[gi] = {"v": 1}
    if n == 9:  # aten.convolution: `transposed` has no default, and is always given
        out[6] = {"v": False}
    return out


def _fold_into(g: Graph, c: Conv, wn: Node, fold: _Fold, k: list[int], chain: list[Node], pool: Node) -> None:
    conv = c.node
    der = Node(
        g.fresh("w_pooled"),
        "derived",
        [c.weight],
        {
            "recipe": "tapfold",
            "of": wn.attrs.get("path"),
            "taps": fold.taps,
            "window": list(k),
            "alpha": fold.alpha,
            "beta": fold.beta,
            "gamma": fold.gamma,
            "scale": 1.0 / math.prod(k),
        },
        [*wn.dims[:2], *fold.taps],
        "float32",
    )
    g.insert_before(conv.name, der)
    ints = lambda v: {"list": [{"v": x} for x in v]}  # noqa: E731
    if conv.op == "conv2d":
        conv.args = [conv.args[0], Ref(der.name), *conv.args[2:]]
        conv.attrs = {**conv.attrs, "stride": fold.stride, "padding": fold.padding}
    else:
        assert c.spec is not None, "an ATen convolution has its call's layout"
        _, si, pi, _, oi, _, _ = c.spec
        call = conv.attrs["call"]
        args = list(call["args"]) + _defaults(c.spec, c.d)[len(call["args"]) :]
        conv.args = [Ref(der.name) if i == args[1]["arg"] else a for i, a in enumerate(conv.args)]
        args[si], args[pi] = ints(fold.stride), ints(fold.padding)
        if oi is not None:
            args[oi] = ints([0] * c.d)
        conv.attrs = {**conv.attrs, "call": {**call, "args": args}}
    out = list(pool.dims)
    tail = chain[-1] if chain else conv
    g.replace_uses(pool.name, tail.name)
    g.nodes.remove(pool)
    for n in [conv, *chain]:
        n.shape = list(out)


def fold_pools(g: Graph) -> tuple[Graph, list[str]] | None:
    """g with every average pool after a convolution folded into it (where the folded convolution
    does no more multiply-adds); the descriptions of what was folded, or None when nothing was."""
    return fold_each(g, _fold_one)


def fold_each(g: Graph, fold: Callable[[Graph, Node], str | None]) -> tuple[Graph, list[str]] | None:
    """A copy of g with `fold` applied at every node (it changes the copy in place and says what it
    did, or returns None), dead nodes removed; None when no fold applied."""
    g = g.copy()
    done = [d for d in (fold(g, n) for n in list(g.nodes)) if d is not None]
    if not done:
        return None
    g.remove_dead()
    return g, done


def _fold_one(g: Graph, n: Node) -> str | None:
    """Fold the pool after n into it (g changed in place); what was done, or None."""
    c = conv_of(n)
    found = chain_to(g, n, c.d, lambda u: _pool_of(u) is not None) if c is not None else None
    if c is None or found is None or not isinstance(n.args[0], Ref):
        return None
    chain, pool = found
    k, s = _pool_of(pool) or ([], [])
    wn, x = g.node(c.weight.name), g.node(n.args[0].name)
    if wn.op != "param" or not wn.attrs.get("path") or x.shape is None:
        return None
    K = wn.dims[2:]
    label, size = n.attrs.get("module") or n.name, "x".join(map(str, k))
    if not c.transposed and K == [1] * c.d and c.stride == [1] * c.d and c.padding == [0] * c.d:
        _pool_first(g, n, chain, pool)
        return f"{label}: the {size} average pool moved before the 1x1 convolution"
    if c.transposed:  # its padding balances the captured sizes: export's guard keeps them
        if g.meta.get("capture") != "export":
            return None
        fold = _fold_transposed(K, c, k, s, x.dims[2:], pool.dims[2:])
        if fold is None or math.prod(fold.taps) > math.prod(K):  # multiply-adds per input position
            return None
    else:
        fold = _foldplain(K, c, k, s)
        if math.prod(fold.taps) > math.prod(s) * math.prod(K):  # per pooled output
            return None
    _fold_into(g, c, wn, fold, k, chain, pool)
    kind = "transposed convolution" if c.transposed else "convolution"
    return (
        f"{label}: the {size} average pool folded into the {kind} (kernel {'x'.join(map(str, K))} -> "
        f"{'x'.join(map(str, fold.taps))}, stride {'x'.join(map(str, fold.stride))})"
    )
