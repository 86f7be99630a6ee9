"""Lower compound ops to the primitives the kernel generator fuses.

linear -> matmul_nt (+ bias add), conv2d -> conv2d without bias (+ per-channel bias add),
softmax / log_softmax / layer norm / RMS norm / eval batch norm -> row reductions and
elementwise ops. After lowering, every non-library compute node is an elementwise op or a
reduction over trailing dims, which is exactly what one fused kernel per group can express.
"""

from __future__ import annotations

from typing import Any

from agent.builtin.graph import ELEMENTWISE, REDUCTIONS, Graph, Lit, Node, Ref


class LoweringError(Exception):
    """`node`: the graph node that cannot be lowered (the policy keeps it as a library/ATen call)."""

    def __init__(self, msg: str, node: str | None = None):
        super().__init__(msg)
        self.node = node


def norm_dims(dims: list[int] | None, nd: int) -> list[int]:
    if dims is None:
        return list(range(nd))
    return sorted(d % nd for d in dims)


def _trailing(dims: list[int], nd: int) -> bool:
    return dims == list(range(nd - len(dims), nd))


def lower(g: Graph) -> Graph:
    """The lowered graph; its meta["origin"] maps every node it emits to the node of g it comes
    from (a fusion error on a lowered node names the node to keep as a library call). Nodes
    marked `island` (attrs) are kept whole: model_new.py calls them as torch ops."""
    g = g.copy()
    out: list[Node] = []
    names = {n.name for n in g.nodes}
    origin: dict[str, str] = {}
    current = [""]

    def fresh(prefix: str) -> str:
        i = 0
        while f"{prefix}_{i}" in names:
            i += 1
        names.add(f"{prefix}_{i}")
        return f"{prefix}_{i}"

    def emit(op: str, args: list, shape: list[int] | None, attrs: dict | None = None, name: str | None = None) -> Ref:
        n = Node(name or fresh(op), op, args, attrs or {}, list(shape) if shape is not None else None, "float32")
        out.append(n)
        origin[n.name] = current[0]
        return Ref(n.name)

    def red(op: str, x: Ref, shape: list[int], dims: list[int], keep: bool = True, name: str | None = None) -> Ref:
        oshape = (
            [1 if i in dims else s for i, s in enumerate(shape)]
            if keep
            else [s for i, s in enumerate(shape) if i not in dims]
        )
        return emit(op, [x], oshape, {"dim": dims, "keepdim": keep}, name)

    for n in g.nodes:
        shape = n.shape if n.shape is not None else []  # [] only for a Python int, whose branch reads no shape
        nd = len(shape)
        current[0] = n.name
        origin[n.name] = n.name
        if n.attrs.get("island"):
            out.append(n)
        elif n.op == "linear":
            x, w, b = n.args
            if isinstance(b, Ref):
                mm = emit("matmul_nt", [x, w], shape)
                emit("add", [mm, b], shape, name=n.name)
            else:
                emit("matmul_nt", [x, w], shape, name=n.name)
        elif n.op == "conv2d":
            x, w, b = n.args[:3]
            if isinstance(b, Ref):
                c = emit("conv2d", [x, w, Lit(None)], shape, dict(n.attrs))
                bv = emit("view", [b, Lit([-1, 1, 1])], [shape[1], 1, 1])
                emit("add", [c, bv], shape, name=n.name)
            else:
                emit("conv2d", [x, w, Lit(None)], shape, dict(n.attrs), name=n.name)
        elif n.op in ("softmax", "log_softmax"):
            d = n.attrs["dim"] % nd
            if d != nd - 1:
                raise LoweringError(
                    f"{n.name}: {n.op} over dim {d} of a {nd}-d tensor; the generator handles the last dim only", n.name
                )
            x = n.args[0]
            m = red("amax", x, shape, [d])
            z = emit("sub", [x, m], shape)
            e = emit("exp", [z], shape)
            s = red("sum", e, shape, [d])
            if n.op == "softmax":
                emit("div", [e, s], shape, name=n.name)
            else:
                emit("sub", [z, emit("log", [s], s_shape(shape, [d]))], shape, name=n.name)
        elif n.op in ("layernorm", "rmsnorm"):
            k = n.attrs.get("ndim", 1)
            dims = list(range(nd - k, nd))
            x = n.args[0]
            w = n.args[1]
            b = n.args[2] if n.op == "layernorm" else Lit(None)
            eps = n.args[-1]
            rs = s_shape(shape, dims)
            if n.op == "layernorm":
                mu = red("mean", x, shape, dims)
                x = emit("sub", [x, mu], shape)
            var = red("mean", emit("square", [x], shape), shape, dims)
            inv = emit("rsqrt", [emit("add", [var, eps], rs)], rs)
            y = emit("mul", [x, inv], shape, name=None if isinstance(w, Ref) or isinstance(b, Ref) else n.name)
            if isinstance(w, Ref):
                y = emit("mul", [y, w], shape, name=None if isinstance(b, Ref) else n.name)
            if isinstance(b, Ref):
                emit("add", [y, b], shape, name=n.name)
        elif n.op == "batchnorm":
            x, mean, var, gamma, beta, eps = n.args
            view = [-1] + [1] * (nd - 2)
            cshape = [shape[1]] + [1] * (nd - 2)

            def cv(p: Ref, view: list[int] = view, cshape: list[int] = cshape, nd: int = nd) -> Ref:
                return emit("view", [p, Lit(view)], cshape) if nd > 2 else p

            y = emit("sub", [x, cv(mean)], shape)
            inv = emit("rsqrt", [emit("add", [cv(var), eps], cshape)], cshape)
            last = not isinstance(gamma, Ref) and not isinstance(beta, Ref)
            y = emit("mul", [y, inv], shape, name=n.name if last else None)
            if isinstance(gamma, Ref):
                y = emit("mul", [y, cv(gamma)], shape, name=n.name if not isinstance(beta, Ref) else None)
            if isinstance(beta, Ref):
                emit("add", [y, cv(beta)], shape, name=n.name)
        elif n.op == "logsumexp":
            x = n.args[0]
            ishape = g.node(x.name).dims
            dims = norm_dims(n.attrs.get("dim"), len(ishape))
            if not _trailing(dims, len(ishape)):
                raise LoweringError(
                    f"{n.name}: logsumexp over dims {dims} of a {len(ishape)}-d tensor; the generator "
                    "reduces trailing dims only",
                    n.name,
                )
            rs = s_shape(ishape, dims)
            m = red("amax", x, ishape, dims)
            e = emit("exp", [emit("sub", [x, m], ishape)], ishape)
            s = red("sum", e, ishape, dims)
            keep = bool(n.attrs.get("keepdim"))
            y = emit("add", [emit("log", [s], rs), m], rs, name=n.name if keep else None)
            if not keep:
                emit("view", [y, Lit(list(shape))], shape, name=n.name)
        elif n.op == "groupnorm":
            # (N, C, *S) -> (N, G, C/G * prod(S)): a row normalisation, then the per-channel affine
            x, w, b, eps = n.args
            G = int(n.attrs["groups"])
            N, C = shape[0], shape[1]
            rest = 1
            for d in shape[2:]:
                rest *= d
            # (N, G, C/G, prod(S)): the statistics reduce the two trailing dims, and the per-channel
            # affine is a [1, G, C/G, 1] operand of the same group, so one kernel normalises and scales
            # (over (N, G, C/G * prod(S)) the affine needed a second pass over the whole tensor)
            rows = [N, G, C // G, rest]
            xv = emit("view", [x, Lit(rows)], rows)
            mu = red("mean", xv, rows, [2, 3])
            xc = emit("sub", [xv, mu], rows)
            var = red("mean", emit("square", [xc], rows), rows, [2, 3])
            inv = emit("rsqrt", [emit("add", [var, eps], [N, G, 1, 1])], [N, G, 1, 1])
            y = emit("mul", [xc, inv], rows)
            cshape = [1, G, C // G, 1]
            if isinstance(w, Ref):
                y = emit("mul", [y, emit("view", [w, Lit(cshape)], cshape)], rows)
            if isinstance(b, Ref):
                y = emit("add", [y, emit("view", [b, Lit(cshape)], cshape)], rows)
            emit("view", [y, Lit(list(shape))], shape, {"grouped": rows}, name=n.name)
        elif n.op == "identity":
            out.append(Node(n.name, "view", [n.args[0], Lit(list(shape))], {}, shape, n.dtype))
        elif n.op == "diag":
            raise LoweringError(
                f"{n.name}: torch.diag builds a dense matrix; only its use in a product (a row or "
                "column scaling) is supported",
                n.name,
            )
        elif n.op in REDUCTIONS:
            dims = norm_dims(n.attrs.get("dim"), len(g.node(n.args[0].name).dims))
            ishape = g.node(n.args[0].name).dims
            if not _trailing(dims, len(ishape)):
                raise LoweringError(
                    f"{n.name}: {n.op} over dims {dims} of a {len(ishape)}-d tensor; the generator "
                    "reduces trailing dims only",
                    n.name,
                )
            n.attrs = {"dim": dims, "keepdim": bool(n.attrs.get("keepdim"))} | (
                {"alone": True} if n.attrs.get("alone") else {}
            )
            out.append(n)
        elif n.op in ELEMENTWISE and any(isinstance(a, Ref) for a in n.args):
            out.append(n)
        elif n.op in ELEMENTWISE:
            raise LoweringError(f"{n.name}: {n.op} of constants only", n.name)
        else:
            out.append(n)
    g.nodes = out
    g.meta = dict(g.meta, origin=origin)
    for v in [n for n in g.nodes if n.attrs.get("grouped")]:
        _sink_elementwise(g, v, origin)
    return g


def _sink_elementwise(g: Graph, view: Node, origin: dict[str, str]) -> None:
    """The elementwise ops that read a group norm's output, computed in the norm's (N, G, C/G,
    prod S) space (before its view back to (N, C, *S)) wherever their other operands are scalars or
    per-channel (a bias [C, 1, 1] becomes [1, G, C/G, 1]): they join the normalisation's kernel
    instead of a second pass over the whole tensor (GELU, Swish or a scale after a group norm, as
    in KernelBench level 2). A reader that is not such an op gets the value viewed back."""
    rows, nd = view.attrs["grouped"], len(view.dims)
    channels = rows[1] * rows[2]
    inside = {view.name: view.args[0].name}  # an (N, C, *S) value -> the same value in rows
    backs: dict[str, str] = {}  # a value of rows -> its view back to (N, C, *S)

    def operand(a: Any, before: str) -> Any:
        if not isinstance(a, Ref):
            return a
        if a.name in inside:
            return Ref(inside[a.name])
        sh = list(g.node(a.name).shape or [])
        sh = [1] * (nd - len(sh)) + sh
        if len(sh) != nd or any(d != 1 for i, d in enumerate(sh) if i != 1) or sh[1] not in (1, channels):
            return None
        if sh[1] == 1:
            return a
        cv = Node(g.fresh("gn_operand"), "view", [a, Lit([1, rows[1], rows[2], 1])], {}, [1, *rows[1:3], 1], "float32")
        g.insert_before(before, cv)
        origin[cv.name] = origin.get(before, before)
        return Ref(cv.name)

    def back(name: str, reader: str) -> str:
        # placed just before its first reader, so that the ops moved after it still join the group
        if name not in backs:
            if name == view.args[0].name:  # the norm's own view back, moved down to its reader
                g.nodes.remove(view)
                v = view
            else:
                v = Node(g.fresh("gn_back"), "view", [Ref(name), Lit(list(view.dims))], {}, list(view.dims), "float32")
            g.insert_before(reader, v)
            origin[v.name] = origin.get(name, name)
            backs[name] = v.name
        return backs[name]

    start = next(k for k, n in enumerate(g.nodes) if n.name == view.name) + 1
    for n in list(g.nodes[start:]):
        if not any(r in inside for r in n.refs()):
            continue
        if n.op in ELEMENTWISE and n.shape == view.dims and not n.attrs.get("island"):
            args = [operand(a, n.name) for a in n.args]
            if all(a is not None for a in args):
                n.args, n.shape = args, list(rows)
                inside[n.name] = n.name
                continue
        n.args = [Ref(back(inside[a.name], n.name)) if isinstance(a, Ref) and a.name in inside else a for a in n.args]
    g.remove_dead()


def s_shape(shape: list[int], dims: list[int]) -> list[int]:
    return [1 if i in dims else s for i, s in enumerate(shape)]
