"""Rewrites that keep the function exact up to floating-point reassociation.

Each rewrite looks for one pattern, changes the graph and says in a sentence what it did and
why it is exact; the policy shows each one as its own turn. Parameters are never changed:
where a rewrite needs transformed weights (folded batch norm, summed rows of a weight matrix)
it adds a `derived` node, which the candidate computes from the loaded parameters with a
custom kernel, and recomputes whenever a parameter changes (never cached outputs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.builtin.graph import Graph, Lit, Node, Ref, Scalar
from agent.builtin.layout import channels_last
from agent.builtin.meanfold import fold_means
from agent.builtin.poolfold import fold_pools


@dataclass
class Rewrite:
    name: str
    title: str
    detail: str  # what changed, in an expert's words
    graph: Graph


def _scalar(a: object) -> bool:
    return isinstance(a, Scalar)


def single_use(g: Graph, name: str) -> bool:
    """name is read by one node and is not an output: a rewrite may fold it into that node."""
    return len(g.users(name)) == 1 and name not in g.output.refs()


def _ndim(n: Node) -> int:
    return len(n.shape or [])


def remove_identities(g: Graph) -> Rewrite | None:
    """identity/clone ops, x*1, x+0 (a scalar or a tensor of zeros), x/1, transpose-of-transpose,
    contiguous() of a contiguous value, type_as to the dtype x has: each launches a kernel or a copy
    in eager mode and computes nothing."""
    g = g.copy()
    removed: list[str] = []
    changed = True
    while changed:
        changed = False
        for n in list(g.nodes):
            src = None
            if n.op == "identity":
                src = n.args[0]
            elif (
                n.op in ("mul", "div")
                and isinstance(n.args[1], Scalar)
                and not n.args[1].runtime
                and n.args[1].value == 1.0
            ):
                src = n.args[0]
            elif n.op == "mul" and isinstance(n.args[0], Scalar) and not n.args[0].runtime and n.args[0].value == 1.0:
                src = n.args[1]
            elif (
                n.op in ("add", "sub")
                and isinstance(n.args[1], Scalar)
                and not n.args[1].runtime
                and n.args[1].value == 0.0
            ):
                src = n.args[0]
            elif _same_type(g, n):
                src = n.args[0]
            elif n.op == "add" and (zero := _zeros_operand(g, n)) is not None:
                src = n.args[1 - zero]
            elif n.op == "contiguous" and _is_contiguous(g, n.args[0]):
                src = n.args[0]
            elif n.op in ("transpose", "t") and isinstance(n.args[0], Ref):
                inner = g.node(n.args[0].name)
                if inner.op == n.op and transposed_dims(inner) == transposed_dims(n) and isinstance(inner.args[0], Ref):
                    src = inner.args[0]
            kept = g.node(src.name) if isinstance(src, Ref) else None
            if kept is not None and kept.shape == n.shape and n.dtype in (None, kept.dtype):
                g.replace_uses(n.name, kept.name)
                g.nodes.remove(n)
                removed.append(f"{n.op} ({n.name})")
                changed = True
    if not removed:
        return None
    g.remove_dead()
    return Rewrite(
        "remove_identities",
        "Remove ops that compute nothing",
        "Removed " + ", ".join(removed) + ": each is an identity on the values (an extra launch or copy "
        "in eager PyTorch, no arithmetic).",
        g,
    )


def _same_type(g: Graph, n: Node) -> bool:
    """n is `x.type_as(y)` with x already of y's dtype (T5's float32 softmax cast back to float32)."""
    if n.op != "aten" or n.attrs.get("target") != "aten.type_as.default" or not isinstance(n.args[0], Ref):
        return False
    return n.dtype is not None and g.node(n.args[0].name).dtype == n.dtype


def _zeros_operand(g: Graph, n: Node) -> int | None:
    """Which operand of n (an add) is a tensor of zeros made in the graph (`torch.zeros`, a full of
    0: GPT-NeoX's baddbmm starts from one), or None."""
    for i, a in enumerate(n.args[:2]):
        z = g.node(a.name) if isinstance(a, Ref) else None
        call = (z.attrs.get("call") or {}) if z is not None else {}
        target = z.attrs.get("target") if z is not None else None
        args = call.get("args") or []
        if target == "aten.zeros.default" or (target == "aten.full.default" and len(args) > 1 and args[1] == {"v": 0}):
            return i
    return None


def transposed_dims(n: Node) -> tuple:
    """The two dims a transpose (or .t()) swaps, sorted."""
    if n.op == "t":
        return (-2, -1)
    nd = _ndim(n)
    dims = sorted(d.value % nd if nd else d.value for d in n.args[1:3])
    return tuple(dims)


def _is_contiguous(g: Graph, a: object) -> bool:
    if not isinstance(a, Ref):
        return False
    return g.node(a.name).op not in ("transpose", "permute", "t", "expand")


def canonical_linear(g: Graph) -> Rewrite | None:
    """x @ W.T with W a parameter is nn.Linear without bias: one pattern for the later rewrites
    (and for cuBLAS's transposed operand, so no transpose is ever materialised)."""
    g = g.copy()
    done = []
    for n in list(g.nodes):
        if n.op != "matmul" or not isinstance(n.args[1], Ref):
            continue
        t = g.node(n.args[1].name)
        if t.op not in ("t", "transpose") or _ndim(t) != 2 or not isinstance(t.args[0], Ref):
            continue
        w = g.node(t.args[0].name)
        if w.op != "param" or _ndim(w) != 2:
            continue
        n.op, n.args, n.attrs = "linear", [n.args[0], Ref(w.name), Lit(None)], {}
        done.append(n.name)
    if not done:
        return None
    g.remove_dead()
    return Rewrite(
        "canonical_linear",
        "x @ W.T is a linear layer",
        f"{', '.join(done)}: a product with a transposed weight parameter is a linear layer; cuBLAS reads "
        "W transposed in place, nothing is copied.",
        g,
    )


def diag_to_row_scale(g: Graph) -> Rewrite | None:
    """diag(d) @ X == d[:, None] * X and X @ diag(d) == X * d[None, :]: an O(N^2 M) GEMM over a
    mostly-zero matrix becomes one O(NM) pass that reads X once."""
    g = g.copy()
    for n in list(g.nodes):
        if n.op != "matmul":
            continue
        a, b = (g.node(x.name) if isinstance(x, Ref) else None for x in n.args[:2])
        if a is not None and a.op == "diag" and b is not None and _ndim(b) == 2:
            d = a.args[0]
            col = Node(g.fresh("d_col"), "view", [d, Lit([-1, 1])], {}, [a.dims[0], 1], "float32")
            g.insert_before(n.name, col)
            n.op, n.args = "mul", [Ref(col.name), n.args[1]]
            g.remove_dead()
            return Rewrite(
                "diag_to_row_scale",
                "diag(d) @ X is a row scaling",
                f"{n.name} = diag(d) @ X builds a {a.dims[0]}x{a.dims[1]} matrix that is zero off the "
                f"diagonal and multiplies it in {2 * a.dims[0] * a.dims[1] * b.dims[1] / 1e9:.2f} GFLOP; "
                "(diag(d) @ X)[i, j] = d[i] * X[i, j] exactly (every other product is a zero), so it "
                "becomes one elementwise pass: out = d[:, None] * X.",
                g,
            )
        if b is not None and b.op == "diag" and a is not None and _ndim(a) == 2:
            n.op, n.args = "mul", [n.args[0], b.args[0]]
            g.remove_dead()
            return Rewrite(
                "diag_to_col_scale",
                "X @ diag(d) is a column scaling",
                f"{n.name} = X @ diag(d): (X @ diag(d))[i, j] = X[i, j] * d[j], one elementwise pass.",
                g,
            )
    return None


def scale_through_reduction(g: Graph) -> Rewrite | None:
    """sum(s * x) == s * sum(x) (and mean likewise) for a scalar s: moving the scale after the
    reduction shrinks it from one multiply per element to one per row, and lets a GEMM meet
    the sum directly."""
    g = g.copy()
    for n in list(g.nodes):
        if n.op not in ("sum", "mean") or not isinstance(n.args[0], Ref):
            continue
        m = g.node(n.args[0].name)
        if m.op not in ("mul", "div") or not single_use(g, m.name):
            continue
        if m.op == "mul" and _scalar(m.args[0]):
            s, x = m.args[0], m.args[1]
        elif _scalar(m.args[1]):
            s, x = m.args[1], m.args[0]
        else:
            continue
        red = Node(g.fresh(n.name + "_r"), n.op, [x], dict(n.attrs), n.shape, n.dtype)
        g.insert_before(n.name, red)
        n.op, n.args, n.attrs = m.op, [Ref(red.name), s], {}
        g.remove_dead()
        return Rewrite(
            "scale_through_reduction",
            f"Move the scalar {m.op} after the {red.op}",
            f"{red.op}(x {'*' if m.op == 'mul' else '/'} {_fmt(s)}) = {red.op}(x) {'*' if m.op == 'mul' else '/'} "
            f"{_fmt(s)}: the scaling now happens once per output instead of once per input element.",
            g,
        )
    return None


def _fmt(s: Scalar) -> str:
    return s.expr if s.expr else f"{s.value:g}"


def _as_factor(n: Node) -> tuple[object, Scalar, bool] | None:
    """(x, s, divide) when n is x*s, s*x or x/s with a scalar s."""
    if n.op == "mul" and _scalar(n.args[0]) and isinstance(n.args[1], Ref):
        return n.args[1], n.args[0], False
    if n.op in ("mul", "div") and _scalar(n.args[1]) and isinstance(n.args[0], Ref):
        return n.args[0], n.args[1], n.op == "div"
    return None


def combine_scales(a: Scalar, a_div: bool, b: Scalar, b_div: bool) -> Scalar:
    """The factor of (x (op_a) a) (op_b) b as one multiplier."""
    va = 1.0 / a.value if a_div else a.value
    vb = 1.0 / b.value if b_div else b.value
    ea = a.expr or repr(a.value)
    eb = b.expr or repr(b.value)
    if a.expr is None and b.expr is None:
        return Scalar(va * vb)
    ea = f"(1.0 / {ea})" if a_div else f"({ea})"
    eb = f"(1.0 / {eb})" if b_div else f"({eb})"
    return Scalar(va * vb, f"{ea} * {eb}")


def fold_scalar_chains(g: Graph) -> Rewrite | None:
    """x * a / b * c == x * (a * c / b): one multiply instead of three, the constant computed
    once (at run time from the model's attributes when it comes from them)."""
    g = g.copy()
    folded = []
    changed = True
    while changed:
        changed = False
        for n in list(g.nodes):
            f_out = _as_factor(n)
            if f_out is None or not isinstance(f_out[0], Ref):
                continue
            inner = g.node(f_out[0].name)
            f_in = _as_factor(inner)
            if f_in is None or not single_use(g, inner.name):
                continue
            s = combine_scales(f_in[1], f_in[2], f_out[1], f_out[2])
            n.op, n.args = "mul", [f_in[0], s]
            g.nodes.remove(inner)
            folded.append(f"{inner.name}·{n.name} -> x * {_fmt(s)}")
            changed = True
            break
    if not folded:
        return None
    return Rewrite(
        "fold_scalar_chains",
        "Fold the chain of scalar multiplies and divides",
        "; ".join(folded) + ". Exact up to rounding of the folded constant.",
        g,
    )


def linear_sum_to_matvec(g: Graph) -> Rewrite | None:
    """sum_j (x W^T + b)_j = x . (sum_j W_j) + sum_j b_j: a [M,K]x[K,N] GEMM followed by a sum
    over its N outputs is a matrix-vector product with the column sums of W^T (summed rows of W),
    computed from the weights by a custom kernel whenever they change."""
    g = g.copy()
    for n in list(g.nodes):
        if n.op != "sum" or not isinstance(n.args[0], Ref):
            continue
        lin = g.node(n.args[0].name)
        if lin.op != "linear" or not single_use(g, lin.name):
            continue
        nd = _ndim(lin)
        dims = n.attrs.get("dim")
        if dims is None or sorted(d % nd for d in dims) != [nd - 1]:
            continue
        x, w, b = lin.args
        wn = g.node(w.name)
        wsum = Node(
            g.fresh("w_rowsum"),
            "derived",
            [w],
            {"recipe": "colsum", "of": wn.attrs.get("path", w.name)},
            [wn.dims[1]],
            "float32",
        )
        g.insert_before(lin.name, wsum)
        prod = Node(g.fresh("xw"), "mul", [x, Ref(wsum.name)], {}, g.node(x.name).shape, "float32")
        g.insert_before(n.name, prod)
        red = Node(
            g.fresh("matvec"),
            "sum",
            [Ref(prod.name)],
            {"dim": [-1], "keepdim": n.attrs.get("keepdim", False)},
            n.shape,
            "float32",
        )
        g.insert_before(n.name, red)
        detail = (
            f"{lin.name} is a GEMM [{', '.join(map(str, g.node(x.name).dims))}] x W^T{wn.dims[::-1]} "
            f"whose {wn.dims[0]} outputs are only summed by {n.name}. By linearity, sum_j (x W^T)_j = x . w "
            f"with w = W.sum(0) (length {wn.dims[1]}): a matrix-vector product, {wn.dims[0]}x fewer FLOPs. "
            "w is computed from the loaded weights by a column-sum kernel and recomputed when they change."
        )
        if isinstance(b, Ref):
            bsum = Node(
                g.fresh("b_sum"),
                "derived",
                [b],
                {"recipe": "colsum", "of": g.node(b.name).attrs.get("path")},
                [1],
                "float32",
            )
            g.insert_before(lin.name, bsum)
            n.op, n.args, n.attrs = "add", [Ref(red.name), Ref(bsum.name)], {}
            detail += " The bias sums to one scalar, added after the reduction."
        else:
            g.replace_uses(n.name, red.name)
            g.nodes.remove(n)
        g.remove_dead()
        return Rewrite(
            "linear_sum_to_matvec", "A linear layer summed over its outputs is a matrix-vector product", detail, g
        )
    return None


def fold_batchnorm(g: Graph) -> Rewrite | None:
    """conv/linear followed by eval-mode batch norm: BN is a per-channel affine map
    y = (z - mean) * g / sqrt(var + eps) + b, so it folds into the weights and bias of the
    producer. The folded weights are derived from the loaded parameters by a custom kernel."""
    g = g.copy()
    folded = []
    for n in list(g.nodes):
        if n.op != "batchnorm" or not isinstance(n.args[0], Ref):
            continue
        prod = g.node(n.args[0].name)
        if prod.op not in ("conv2d", "linear") or not single_use(g, prod.name):
            continue
        if prod.op == "linear" and _ndim(prod) != 2:
            continue
        x, w, b = prod.args[:3]
        _, mean, var, gamma, beta, eps = n.args
        wn = g.node(w.name)
        nfold = sum(1 for m in g.nodes if m.op == "derived" and m.attrs.get("part") == "weight")
        common: dict[str, Any] = {
            "recipe": "bn_fold",
            "key": f"fold_{nfold}",
            "bn": n.attrs.get("module"),
            "of": prod.attrs.get("module"),
        }
        fargs = [w, b, mean, var, gamma, beta, eps]
        wf = Node(common["key"] + "_w", "derived", fargs, {**common, "part": "weight"}, wn.shape, "float32")
        bf = Node(common["key"] + "_b", "derived", fargs, {**common, "part": "bias"}, [wn.dims[0]], "float32")
        g.insert_before(prod.name, wf)
        g.insert_before(prod.name, bf)
        prod.args = [x, Ref(wf.name), Ref(bf.name)] + prod.args[3:]
        prod.shape = n.shape
        g.replace_uses(n.name, prod.name)
        g.nodes.remove(n)
        folded.append(f"{n.attrs.get('module') or n.name} into {prod.attrs.get('module') or prod.name}")
    if not folded:
        return None
    g.remove_dead()
    return Rewrite(
        "fold_batchnorm",
        "Fold eval-mode batch norm into the preceding layer",
        "Folded " + ", ".join(folded) + ": W' = W * g / sqrt(var + eps) per output channel, "
        "b' = (b - mean) * g / sqrt(var + eps) + beta. The batch-norm pass over the activations disappears; "
        "W', b' are computed from the loaded parameters by a small custom kernel and recomputed when any "
        "parameter changes (no outputs are cached).",
        g,
    )


def fold_pool_into_conv(g: Graph) -> Rewrite | None:
    """An average pool after a convolution (through ops constant over space) folded into it:
    one convolution of the composed kernel (agent.builtin.poolfold)."""
    r = fold_pools(g)
    if r is None:
        return None
    g2, done = r
    return Rewrite(
        "fold_pool_into_conv",
        "Fold the average pool into the convolution before it",
        "; ".join(done) + ". A convolution and an average pool are both linear and shift-invariant, so their "
        "composition is one convolution whose weight is the original's box-filtered copy (for a 1x1 convolution "
        "the pool simply goes first): the full-resolution intermediate is never written, and the folded "
        "convolution does no more multiply-adds (it is applied only where it does not). Ops constant over space between them (a scale, a per-channel "
        "shift) commute with the pool and now follow the convolution. The folded weight is computed from the "
        "loaded one by a kernel of the candidate's own and recomputed when it changes. Exact up to "
        "floating-point reassociation.",
        g2,
    )


def fold_mean_of_conv(g: Graph) -> Rewrite | None:
    """A mean or sum over space after a convolution from sums of its input (agent.builtin.meanfold)."""
    r = fold_means(g)
    if r is None:
        return None
    g2, done = r
    return Rewrite(
        "fold_mean_of_conv",
        "A mean over space of a convolution, from the input's sums",
        "; ".join(done) + ". The mean over every output position of a convolution is linear in the input: each "
        "input position contributes the sum of the weight's taps that land in the output, all of them away from "
        "the borders. So the candidate sums the input (and its few border rows) and multiplies the sums by "
        "summed weights: one read of the input and small products, instead of the convolution and its output. "
        "Ops constant over space between them are applied to the mean. The summed weights are computed from the "
        "loaded ones by a kernel of the candidate's own and recomputed when they change. Exact up to "
        "floating-point reassociation.",
        g2,
    )


def channels_last_convs(g: Graph) -> Rewrite | None:
    """Convolutions with channels-last weights, their epilogues in NHWC order (agent.builtin.layout).
    Not one of REWRITES: a layout is faster for some shapes only, so the policy measures it as one
    more candidate after the rewrites and tunes the rewritten graph either way."""
    r = channels_last(g)
    if r is None:
        return None
    g2, done, copies = r
    return Rewrite(
        "channels_last",
        "Channels-last convolutions, the epilogue in NHWC order",
        "Gave " + ", ".join(done) + " a channels-last weight, so that the convolution runs in NHWC memory order "
        "(cuDNN/oneDNN pick their channels-last kernels). The output permuted to N...C is contiguous: the bias "
        "add, the elementwise ops and any reduction or softmax over channels read it in place, a channel "
        "reduction as a trailing-dim row reduction fused into the kernel. The result has the reference's shape "
        "and values with channels-last strides (no copy back). Exact: the same products and sums, in another "
        "memory order; whether it is faster depends on the shapes, so it is measured like every candidate."
        + (
            f" {copies} value(s) are read back in NCHW order through a copy (a reader of another kind)."
            if copies
            else ""
        ),
        g2,
    )


def _cat_parts(n: Node) -> tuple[list[str], int] | None:
    """(the names of its inputs, its dim) for an `aten.cat` of a plain list of tensors."""
    if n.op != "aten" or n.attrs.get("target") != "aten.cat.default" or not n.shape:
        return None
    call = n.attrs.get("call") or {}
    args, kwargs = call.get("args") or [], call.get("kwargs") or {}
    if not args or not isinstance(args[0], dict) or "list" not in args[0]:
        return None
    items = args[0]["list"]
    if [it.get("arg") for it in items] != list(range(len(n.args))) or not all(isinstance(a, Ref) for a in n.args):
        return None
    dim_spec = args[1] if len(args) > 1 else kwargs.get("dim", {"v": 0})
    if set(kwargs) - {"dim"} or not isinstance(dim_spec, dict) or not isinstance(dim_spec.get("v"), int):
        return None
    return [a.name for a in n.args], dim_spec["v"] % len(n.shape)


def reuse_cat_prefixes(g: Graph) -> Rewrite | None:
    """cat([a, b, c, d]) where cat([a, b, c]) is already computed is cat([that, d]): the same
    values, one copy of the earlier result instead of one per input (a DenseNet block concatenates
    every earlier feature map at each layer: k copies at layer k, two after this)."""
    g = g.copy()
    done: list[str] = []
    cats: list[tuple[Node, list[str], int]] = []
    for n in g.nodes:
        parts = _cat_parts(n)
        if parts is None:
            continue
        names, dim = parts
        prefixes = [
            (len(pn), p) for p, pn, pd in cats if pd == dim and 1 < len(pn) < len(names) and names[: len(pn)] == pn
        ]
        if prefixes:
            k, p = max(prefixes, key=lambda t: t[0])
            n.args = [Ref(p.name), *n.args[k:]]
            n.attrs["call"] = {
                "args": [{"list": [{"arg": i} for i in range(len(n.args))]}, {"v": dim}],
                "kwargs": {},
            }
            done.append(f"{n.name} reuses {p.name}")
        cats.append((n, names, dim))
    if not done:
        return None
    return Rewrite(
        "reuse_cat_prefixes",
        "A concatenation that extends an earlier one copies it whole",
        f"{'; '.join(done[:6])}{' ...' if len(done) > 6 else ''}: concatenating the earlier concatenation and "
        "the new inputs gives the same tensor; each earlier input is copied once per layer as one block "
        "instead of one copy per input (the same bytes move, in far fewer launches).",
        g,
    )


REWRITES: list[Callable[[Graph], Rewrite | None]] = [
    remove_identities,
    canonical_linear,
    diag_to_row_scale,
    scale_through_reduction,
    fold_scalar_chains,
    linear_sum_to_matvec,
    fold_batchnorm,
    fold_pool_into_conv,
    fold_mean_of_conv,
    reuse_cat_prefixes,
]


def all_rewrites(g: Graph, limit: int = 12) -> list[Rewrite]:
    """Apply the rewrites to a fixed point, one step at a time (each step a turn)."""
    steps: list[Rewrite] = []
    for _ in range(limit):
        for fn in REWRITES:
            r = fn(g)
            if r is not None:
                r.graph.toposort()
                steps.append(r)
                g = r.graph
                break
        else:
            break
    return steps
