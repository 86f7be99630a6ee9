"""Kernels of our own for ATen ops that the fusion generator does not express: pooling, scans,
arg-reductions, concatenation, flips, cross-entropy and KL divergence, triangular masks, vector
norms, rows picked by an index tensor (embeddings, index_select, `x[idx]`), comparisons with a
number and bool masks as float32 (a causal mask's `mask == 0`), and the reductions and softmaxes over a dim other than the last (which the row kernels
of the fusion generator do not do).

torch.export keeps these as single ATen ops (`aten.max_pool2d`, `aten.cumsum`, `aten.cat`,
`aten.cross_entropy_loss`, ...), which the capture stores as `aten` island nodes. Where the
node's arguments are ones a kernel below handles (float32 data, the options listed per op),
model_new.py calls our kernel instead of the ATen op, so under torch-ops=forbid the candidate
computes with its own code; any other form stays the ATen call (an island, a named blocker
under forbid). Each kernel views its tensor as outer x length x inner around the reduced or
scanned dim (contiguous memory), so one kernel serves every rank and dim. The sizes are the
captured ones (an exported graph is specialised), read from the node's shapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from agent.builtin import bilinear, embedbag, gridsample, remap
from agent.builtin import typed_elementwise as typed
from agent.builtin.graph import Graph, Node, Ref

_POOL = {
    "max_pool1d": (1, 0),
    "max_pool2d": (2, 0),
    "max_pool3d": (3, 0),
    "avg_pool1d": (1, 1),
    "avg_pool2d": (2, 1),
    "avg_pool3d": (3, 1),
    "adaptive_avg_pool1d": (1, 2),
    "adaptive_avg_pool2d": (2, 2),
    "adaptive_avg_pool3d": (3, 2),
    "_adaptive_avg_pool2d": (2, 2),
    "_adaptive_avg_pool3d": (3, 2),
    "adaptive_max_pool1d": (1, 3),
}
_REDUCTION = {0: "none", 1: "mean", 2: "sum"}


def _name(n: Node) -> str:
    return str(n.attrs.get("target", "")).split(".")[1] if n.op == "aten" else ""


def op_label(n: Node) -> str:
    """The op's name for the plan and the comments: the ATen op of an island, else the IR op."""
    return _name(n) or n.op


def _arg(n: Node, i: int, default: Any = None) -> Any:
    """The i-th positional argument of the island's call: a Ref for a tensor, else its value."""
    args = n.attrs["call"]["args"]
    return _dec(n, args[i]) if i < len(args) else default


def _kwarg(n: Node, i: int, key: str, default: Any = None) -> Any:
    kw = n.attrs["call"]["kwargs"]
    return _dec(n, kw[key]) if key in kw else _arg(n, i, default)


def _dec(n: Node, v: dict[str, Any]) -> Any:
    if "arg" in v:
        return n.args[v["arg"]]
    if "list" in v:
        return [_dec(n, x) for x in v["list"]]
    if v.get("expr") or set(v) - {"v"}:
        raise _Unsupported
    return v["v"]


class _Unsupported(Exception):
    pass


def _shape(g: Graph, a: Any) -> list[int]:
    if not isinstance(a, Ref):
        raise _Unsupported
    s = g.node(a.name).shape
    if s is None:
        raise _Unsupported
    return list(s)


def _float(g: Graph, a: Any) -> bool:
    return isinstance(a, Ref) and g.node(a.name).dtype == "float32"


_REDUCE_OPS = {"sum": 0, "mean": 1, "amax": 2, "amin": 3, "logsumexp": 6}
_COMPARE = {"eq": 0, "ne": 1, "lt": 2, "le": 3, "gt": 4, "ge": 5}  # with a number: kw_compare's op codes


def _name_overload(n: Node) -> str:
    """The overload of an island's ATen op (`aten.eq.Scalar`: Scalar)."""
    parts = str(n.attrs.get("target", "")).split(".")
    return parts[2] if len(parts) > 2 else ""


def own_call(n: Node, g: Graph, torch_ops: str = "forbid") -> dict[str, Any] | None:
    """How our kernel computes island n ({"kernel": ..., "inputs": [...], ...} for model_new.py), or
    None where no kernel of ours handles this form of the op (it stays the ATen or torch call).
    The general elementwise, remap and bilinear kernels (_typed) only stand in for ATen under
    torch-ops=forbid, where the alternative is a rejected candidate: under allow ATen's kernels
    for these ops are as fast or faster (their index arithmetic is per element), and measured so."""
    if n.shape is None:
        return None
    general = torch_ops != "allow"
    aten = n.op == "aten" and not n.attrs.get("tuple")
    try:
        if aten:
            return _plan(n, g, _name(n)) or (_typed(n, g) if general else None)
        if n.attrs.get("island") and n.op in (*_REDUCE_OPS, "softmax", "log_softmax"):
            return _ir_island(n, g)
    except (_Unsupported, KeyError, IndexError, TypeError, ValueError):
        return _typed(n, g) if aten and general else None
    return typed.ir_call(n, g) if general else None


def _typed(n: Node, g: Graph) -> dict[str, Any] | None:
    """An elementwise ATen op over float32/int64/bool tensors (typed_elementwise.kw_elt), a scan of
    a bool or integer tensor (typed_elementwise.kw_scan_t), a copy whose source coordinates are a
    per-dim map (remap.kw_remap: pad, roll, repeat, nearest upsampling), bilinear upsampling,
    grid sampling and affine grids (gridsample), or embedding bags (embedbag)."""

    def arg(i: int, d: Any = None) -> Any:
        return _arg(n, i, d)

    def kwarg(i: int, key: str, d: Any = None) -> Any:
        return _kwarg(n, i, key, d)

    if _name(n) == "upsample_bilinear2d":
        return bilinear.bilinear_call(n, g, arg, kwarg)
    if _name(n) in ("grid_sampler", "grid_sampler_2d"):
        return gridsample.grid_sample_call(n, g, arg)
    if _name(n) == "affine_grid_generator":
        return gridsample.affine_grid_call(n, g, arg)
    if _name(n) in ("embedding_bag", "_embedding_bag", "_embedding_bag_forward_only"):
        return embedbag.embedding_bag_call(n, g, arg, kwarg)
    if _name(n) in ("cumsum", "cumprod"):
        return typed.scan_call(n, g, arg(0), _around(_shape(g, arg(0)), arg(1)), _name(n))
    return typed.typed_call(n, g, _name(n), arg, kwarg) or remap.remap_call(n, g, _name(n), arg, kwarg)


def _ir_island(n: Node, g: Graph) -> dict[str, Any] | None:
    """A reduction or softmax of the IR that planning left to torch (over dims other than the last).
    An fx graph keeps its sizes symbolic, so these take theirs from the input at run time
    (`_kw_around`): only the dims are fixed."""
    x = n.args[0]
    if not _float(g, x) or n.dtype != "float32":
        return None
    nd = len(_shape(g, x))
    if n.op in ("softmax", "log_softmax"):
        d = int(n.attrs["dim"]) % max(1, nd)
        return {
            "kernel": "kw_softmax_mid",
            "inputs": [x],
            "runtime": (d, d + 1, None),
            "ints": [int(n.op == "log_softmax")],
            "dtype": "float32",
        }
    block = _dims(nd, n.attrs.get("dim"))
    return (
        None
        if block is None
        else {
            "kernel": "kw_reduce",
            "inputs": [x],
            "ints": [_REDUCE_OPS[n.op]],
            "runtime": (*block, bool(n.attrs.get("keepdim"))),
            "dtype": "float32",
        }
    )


def _dims(nd: int, dims: Any) -> tuple[int, int] | None:
    """[d0, d1) of a reduction over dims that are adjacent (None: all of them), else None."""
    ds = sorted({int(d) % max(1, nd) for d in dims}) if dims not in (None, []) else list(range(nd))
    if not ds:
        return 0, 0
    return (ds[0], ds[-1] + 1) if ds == list(range(ds[0], ds[-1] + 1)) else None


def _dim_block(shape: list[int], dims: Any) -> tuple[int, int, int] | None:
    """outer, length, inner of a reduction over dims that are adjacent (None: all of them)."""
    block = _dims(len(shape), dims)
    if block is None:
        return None
    a, b = block
    return math.prod(shape[:a]), math.prod(shape[a:b]), math.prod(shape[b:])


def _plan(n: Node, g: Graph, op: str) -> dict[str, Any] | None:
    if op in _POOL:
        return _pool(n, g, *_POOL[op])
    if op in ("cumsum", "cumprod"):
        x = _arg(n, 0)
        if not _float(g, x) or n.dtype != "float32":  # a dtype= kwarg is then float32 (DETR's cumsum)
            return None
        o, L, i = _around(_shape(g, x), _arg(n, 1))
        return {"kernel": "kw_scan", "inputs": [x], "ints": [o, L, i, int(op == "cumprod")], "dtype": "float32"}
    if op in ("argmax", "argmin"):
        x = _arg(n, 0)
        dim = _kwarg(n, 1, "dim")
        if not _float(g, x):
            return None
        shape = _shape(g, x)
        o, L, i = (1, math.prod(shape), 1) if dim is None else _around(shape, dim)
        return {"kernel": "kw_argreduce", "inputs": [x], "ints": [o, L, i, int(op == "argmin")], "dtype": "int64"}
    if op == "flip":  # any dtype kw_gather copies (wav2vec2 flips an int64 mask), any number of dims
        x = _arg(n, 0)
        dtype = g.node(x.name).dtype if isinstance(x, Ref) else None
        if dtype not in GATHER_KERNELS:
            return None
        nd = len(_shape(g, x))
        return {"kernel": "kw_flip", "inputs": [x], "dims": sorted(d % nd for d in _arg(n, 1)), "dtype": dtype}
    if op == "mul" and n.dtype == "float32":  # a float tensor times a bool mask of its shape (masked cumsum)
        x, m = _arg(n, 0), _arg(n, 1)
        if _float(g, m):
            x, m = m, x
        if not (
            _float(g, x)
            and isinstance(m, Ref)
            and g.node(m.name).dtype == "bool"
            and _shape(g, x) == _shape(g, m) == list(n.dims)
        ):
            return None
        return {"kernel": "kw_mask_mul", "inputs": [x, m], "ints": [math.prod(n.dims)], "dtype": "float32"}
    if op in ("cat", "stack"):
        return _cat(n, g, stack=op == "stack")
    if op in ("tril", "triu"):
        x = _arg(n, 0)
        shape = _shape(g, x)
        if not _float(g, x) or len(shape) < 2:
            return None
        return {
            "kernel": "kw_tri",
            "inputs": [x],
            "ints": [math.prod(shape[:-2]), shape[-2], shape[-1], int(_arg(n, 1, 0)), int(op == "triu")],
            "dtype": "float32",
        }
    if op in ("linalg_vector_norm", "norm"):  # norm.ScalarOpt_dim(x, p, dim, keepdim): the same positions
        x, ord_ = _arg(n, 0), _kwarg(n, 1, "ord", 2) if op != "norm" else _kwarg(n, 1, "p", 2)
        block = _dim_block(_shape(g, x), _kwarg(n, 2, "dim"))
        if not _float(g, x) or ord_ not in (1, 2, 1.0, 2.0) or block is None or n.attrs["call"]["kwargs"].get("dtype"):
            return None
        return {"kernel": "kw_reduce", "inputs": [x], "ints": [*block, 4 if ord_ == 2 else 5], "dtype": "float32"}
    if op == "cross_entropy_loss":
        return _cross_entropy(n, g)
    if op in ("embedding", "index_select", "index"):
        return _index_rows(n, g, op)
    if op in _COMPARE and _name_overload(n) == "Scalar":
        x, scalar = _arg(n, 0), _arg(n, 1)
        if not _float(g, x) or not isinstance(scalar, int | float) or not math.isfinite(scalar):
            return None
        return {
            "kernel": "kw_compare",
            "inputs": [x],
            "ints": [math.prod(n.dims), _COMPARE[op], float(scalar)],
            "dtype": "bool",
        }
    if op == "_to_copy":  # a bool mask as float32 (a causal mask's `mask == 0` read by a masked fill)
        x = _arg(n, 0)
        kwargs = n.attrs["call"]["kwargs"]
        if set(kwargs) != {"dtype"} or n.dtype != "float32" or not isinstance(x, Ref) or g.node(x.name).dtype != "bool":
            return None
        return {"kernel": "kw_bool_to_float", "inputs": [x], "ints": [math.prod(n.dims)], "dtype": "float32"}
    if op == "kl_div":
        x, t = _arg(n, 0), _arg(n, 1)
        red, log_target = _kwarg(n, 2, "reduction", 1), _kwarg(n, 3, "log_target", False)
        if not (_float(g, x) and _float(g, t)) or _shape(g, x) != _shape(g, t) or red not in _REDUCTION:
            return None
        return {
            "kernel": "kw_kl_div",
            "inputs": [x, t],
            "ints": [math.prod(_shape(g, x)), red, int(bool(log_target))],
            "dtype": "float32",
        }
    return None


def _around(shape: list[int], dim: int) -> tuple[int, int, int]:
    """outer, length, inner of a contiguous tensor around dim."""
    d = int(dim) % max(1, len(shape))
    return math.prod(shape[:d]), (shape[d] if shape else 1), math.prod(shape[d + 1 :])


def _pool(n: Node, g: Graph, k: int, mode: int) -> dict[str, Any] | None:
    """Max (mode 0), average (1), adaptive average (2) or adaptive max without indices (3) pooling
    over the last k dims; the window geometry as ATen defines it (padding, dilation, ceil_mode through
    the captured output size, count_include_pad, divisor_override)."""
    x = _arg(n, 0)
    if not _float(g, x) or n.dtype != "float32":
        return None
    ins, outs = _shape(g, x), list(n.dims)
    if len(ins) < k + 1 or len(outs) != len(ins):
        return None

    def trip(v: Any, fill: int) -> list[int]:
        v = [fill] * k if v is None or v == [] else ([int(v)] * k if isinstance(v, int) else [int(e) for e in v])
        v = v * k if len(v) == 1 else v
        return [fill] * (3 - k) + v

    kern = stride = pad = dil = [1, 1, 1]
    cip, div = 1, 0
    if mode in (0, 1):
        kern = trip(_arg(n, 1), 1)
        stride = trip(_arg(n, 2) or _arg(n, 1), 1)
        pad = trip(_arg(n, 3, 0), 0)
    if mode == 0:
        dil = trip(_arg(n, 4, 1), 1)
    if mode == 1:
        cip = int(bool(_kwarg(n, 5, "count_include_pad", True)))
        div = int(_kwarg(n, 6, "divisor_override", None) or 0)
    if mode == 3 and n.attrs.get("tuple"):
        return None
    pad3 = lambda s: [1] * (3 - k) + s[len(s) - k :]  # noqa: E731
    ints = [math.prod(ins[: len(ins) - k]), *pad3(ins), *pad3(outs), *kern, *stride, *pad, *dil, mode, cip, div]
    return {"kernel": "kw_pool", "inputs": [x], "ints": ints, "dtype": "float32"}


def _cat(n: Node, g: Graph, stack: bool = False) -> dict[str, Any] | None:
    """cat, or stack (a cat of the inputs with a dim of 1 inserted at dim): one copy per input."""
    xs = _arg(n, 0)
    if not isinstance(xs, list) or not xs or not all(_float(g, x) for x in xs):
        return None
    shapes = [_shape(g, x) for x in xs]
    nd = len(n.dims)
    d = int(_arg(n, 1, 0)) % nd
    if stack:
        shapes = [s[:d] + [1] + s[d:] for s in shapes]
    pieces = [x for x, s in zip(xs, shapes, strict=True) if len(s) == nd]  # legacy 1-d empties skip
    if len(pieces) != len(xs) and any(math.prod(s) for s in shapes):
        return None
    return {"kernel": "kw_cat", "inputs": pieces, "dim": d, "stack": stack, "dtype": "float32"}


def _index_rows(n: Node, g: Graph, op: str) -> dict[str, Any] | None:
    """Rows picked by an int64 index tensor: embedding(weight, idx), index_select(x, dim, idx) and
    x[..., idx] with one index tensor (index.Tensor: an embedding lookup, a relative-position
    bias table read through its index buffer). x viewed [outer, rows, inner] around the indexed
    dim, the output [outer, idx.numel(), inner]: ATen's shape for a single (so adjacent) index."""
    x = _arg(n, 0)
    if op == "embedding":
        d, idx = 0, _arg(n, 1)  # padding_idx, scale_grad_by_freq and sparse change only the gradient
    elif op == "index_select":
        d, idx = int(_arg(n, 1)), _arg(n, 2)
    else:
        at = [k for k, v in enumerate(_arg(n, 1)) if v is not None]
        if len(at) == 2 and at[1] == at[0] + 1:
            return _index_pair(n, g, x, at[0], *_arg(n, 1)[at[0] : at[1] + 1])
        if len(at) != 1:
            return None
        d, idx = at[0], _arg(n, 1)[at[0]]
    if not _float(g, x) or n.dtype != "float32" or not isinstance(idx, Ref) or g.node(idx.name).dtype != "int64":
        return None
    shape = _shape(g, x)
    outer, rows, inner = _around(shape, d)
    picked = math.prod(_shape(g, idx))
    if math.prod(n.dims) != outer * picked * inner:
        return None
    return {"kernel": "kw_index_rows", "inputs": [x, idx], "ints": [outer, rows, inner, picked], "dtype": "float32"}


def _index_pair(n: Node, g: Graph, x: Any, d: int, i: Any, j: Any) -> dict[str, Any] | None:
    """x[..., i, j, ...] with two index tensors of one shape in adjacent dims (DLRM's `Z[:, li, lj]`,
    the strictly lower triangle of its interactions): x viewed [outer, d1, d2, inner], the output
    [outer, i.numel(), inner]."""
    if not _float(g, x) or n.dtype != "float32" or not isinstance(i, Ref) or not isinstance(j, Ref):
        return None
    if any(g.node(r.name).dtype != "int64" for r in (i, j)) or _shape(g, i) != _shape(g, j):
        return None
    shape = _shape(g, x)
    outer, inner, picked = math.prod(shape[:d]), math.prod(shape[d + 2 :]), math.prod(_shape(g, i))
    if math.prod(n.dims) != outer * picked * inner:
        return None
    return {
        "kernel": "kw_index_pair",
        "inputs": [x, i, j],
        "ints": [outer, shape[d], shape[d + 1], inner, picked],
        "dtype": "float32",
    }


def _cross_entropy(n: Node, g: Graph) -> dict[str, Any] | None:
    """cross_entropy_loss(x [N, C], target int64 [N]) without class weights or label smoothing."""
    x, t = _arg(n, 0), _arg(n, 1)
    weight = _kwarg(n, 2, "weight")
    red = _kwarg(n, 3, "reduction", 1)
    ignore = _kwarg(n, 4, "ignore_index", -100)
    smoothing = _kwarg(n, 5, "label_smoothing", 0.0)
    if not _float(g, x) or weight is not None or smoothing or red not in _REDUCTION:
        return None
    xs, ts = _shape(g, x), _shape(g, t)
    if len(xs) != 2 or ts != xs[:1] or g.node(t.name).dtype != "int64":
        return None
    return {
        "kernel": "kw_cross_entropy",
        "inputs": [x, t],
        "ints": [xs[0], xs[1], red, int(ignore)],
        "dtype": "float32",
    }


def emit_lines(call: dict[str, Any], out: str, shape: list[int], val: Callable[[Any], str]) -> list[str]:
    """model_new.py lines computing `out` (of the node's shape) with our kernel; `val` maps a Ref to
    its variable. Operands are made contiguous first (the kernels read raw pointers)."""
    if call["kernel"] == "alias":  # a cast to the dtype it has
        return [f"{out} = {val(call['inputs'][0])}"]
    if call["kernel"] == "kw_elt":  # these two read their operands through their strides
        return typed.emit(call, out, shape, val)
    if call["kernel"] == "kw_remap":
        return remap.emit(call, out, shape, val)
    ins = [val(x) for x in call["inputs"]]
    k = call["kernel"]
    if k == "kw_cat":  # sizes from the operands: a cat of several inputs' sizes is their sum, no product
        return [f"{out} = _kw_cat(lib, ({', '.join(ins)},), {call['dim']}, {call['stack']}, _stream)"]
    lines = [f"{x} = {x} if {x}.is_contiguous() else _kw_dense(lib, {x}, _stream)" for x in dict.fromkeys(ins)]
    if "runtime" in call:  # sizes from the input at run time (an fx graph's are symbolic)
        a, b, keep = call["runtime"]
        x = ins[0]
        out_shape = f"{x}.shape" if keep is None else f"_kw_reduced({x}.shape, {a}, {b}, {keep})"
        return lines + [
            f"{out} = torch.empty({out_shape}, device=_dev, dtype=torch.{call['dtype']})",
            f"lib.{k}({x}, {out}, *_kw_around({x}.shape, {a}, {b}), "
            f"{', '.join(str(i) for i in call['ints'])}, _stream)",
        ]
    lines.append(f"{out} = torch.empty({tuple(shape)!r}, device=_dev, dtype=torch.{call['dtype']})")
    if k == "kw_flip":
        lines.append(f"_kw_flip(lib, {ins[0]}, {out}, {tuple(call['dims'])!r}, _stream)")
    else:
        lines.append(f"lib.{k}({', '.join(ins)}, {out}, {', '.join(str(i) for i in call['ints'])}, _stream)")
    return lines


# The strided-copy kernel (agent/builtin/kernelgen.py) for each element type it copies: float32,
# int64 indices, one-byte masks. Other dtypes are copied by torch (a compute op under forbid).
GATHER_KERNELS = {
    "float32": "kw_gather",
    "int64": "kw_gather64",
    "bool": "kw_gather8",
    "uint8": "kw_gather8",
    "int8": "kw_gather8",
}
GATHER_DTYPES = tuple(GATHER_KERNELS)

GATHER_HELPER = '''

def _kw_gather_raw(lib, ptr, shape, strides, out, stream):
    """out (contiguous, `shape`) = the elements at address ptr (a dtype of _KW_GATHER) read through
    shape and strides (in elements; negative ones read a dim backwards) by the kw_gather kernel, which takes 6 dims: size-1 dims are dropped and neighbours that step as one dim merged first; a view still
    wider (Mamba2's 7-d chunked views) is copied one leading index at a time."""
    if out.numel() == 0:
        return
    dims = []
    for n, s in zip(shape, strides):
        if n == 1:
            continue
        if dims and dims[-1][1] == s * n:
            dims[-1] = (dims[-1][0] * n, s)
        else:
            dims.append((n, s))
    if len(dims) > 6:
        (n0, s0), rest = dims[0], dims[1:]
        rows = out.view(n0, -1)
        for i in range(n0):
            at = ptr + out.element_size() * i * s0
            _kw_gather_raw(lib, at, [n for n, _ in rest], [s for _, s in rest], rows[i], stream)
        return
    pad = 6 - len(dims)
    gather = getattr(lib, _KW_GATHER[out.dtype])
    gather(ctypes.c_void_p(ptr), out, out.numel(), *([1] * pad + [n for n, _ in dims]),
           *([0] * pad + [s for _, s in dims]), stream)


def _kw_gather_into(lib, x, out, stream):
    """out (contiguous, x's shape) = x (a dtype of _KW_GATHER) read through its sizes and strides."""
    _kw_gather_raw(lib, x.data_ptr(), x.shape, x.stride(), out, stream)
''' + (
    "\n\n# the kw_gather kernel for each element type it copies (agent/builtin/ownkernels.py GATHER_KERNELS)\n"
    + "_KW_GATHER = {"
    + ", ".join(f"torch.{k}: {v!r}" for k, v in GATHER_KERNELS.items())
    + "}\n"
)

DENSE_HELPER = '''

def _kw_dense(lib, x, stream):
    """x copied to contiguous memory by our kw_gather kernel (the dtypes of _KW_GATHER: an expanded
    index, a loss's sliced targets, a sliced mask; _kw_gather_into), else by .contiguous() (a torch
    copy, which torch-ops=forbid rejects)."""
    if x.dtype not in _KW_GATHER:
        return x.contiguous()
    out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    _kw_gather_into(lib, x, out, stream)
    return out


def _kw_around(shape, a, b):
    """outer, length, inner of a contiguous tensor of this shape around its dims [a, b)."""
    return math.prod(shape[:a]), math.prod(shape[a:b]), math.prod(shape[b:])


def _kw_reduced(shape, a, b, keepdim):
    """The shape of a reduction over dims [a, b)."""
    return tuple(shape[:a]) + ((1,) * (b - a) if keepdim else ()) + tuple(shape[b:])


def _kw_cat(lib, xs, dim, stack, stream):
    """torch.cat(xs, dim) (stack: torch.stack) of float32 tensors by kw_copy_block, its sizes read
    from the operands: one line per cat in model_new.py (a line per operand made DenseNet-201's
    forward 540 KB, over the workspace's limit per file), and the cat's size along dim, a sum of
    the operands' (RetinaNet's anchors over five levels), follows the inputs with no literal."""
    ref = xs[0].shape
    shape = list(ref)
    if stack:
        shape.insert(dim, len(xs))
    else:
        shape[dim] = sum(x.shape[dim] for x in xs)
    out = torch.empty(shape, device=xs[0].device, dtype=torch.float32)
    outer, total = math.prod(shape[:dim]), math.prod(shape[dim:])
    lo, hi = ref[:dim], ref[dim + (0 if stack else 1) :]
    off = 0
    for x in xs:
        s = x.shape  # as torch.cat checks: a mismatched operand would be copied out of place
        if len(s) != len(ref) or s[:dim] != lo or s[dim + (0 if stack else 1) :] != hi:
            raise RuntimeError(f"_kw_cat: operand of shape {tuple(s)} does not match {tuple(ref)} (dim {dim})")
        x = x if x.is_contiguous() else _kw_dense(lib, x, stream)
        size = x.numel() // outer if outer else 0
        lib.kw_copy_block(x, out, outer, size, total, off, stream)
        off += size
    return out


def _kw_flip(lib, x, out, dims, stream):
    """out = x.flip(dims) by kw_gather: the flipped dims read from their last element backwards."""
    strides = [-s if d in dims else s for d, s in enumerate(x.stride())]
    start = x.data_ptr() + x.element_size() * sum((x.shape[d] - 1) * x.stride(d) for d in dims if x.shape[d] > 0)
    _kw_gather_raw(lib, start, x.shape, strides, out, stream)
'''


_COMMON = r"""
// ---- kernels of our own for ops the fusion generator does not express (agent/builtin/ownkernels.py)
// The per-element work is one function for both backends (KW_HD: host code on the CPU, device
// code in the .cu); the CPU entry points loop over it with OpenMP, the CUDA ones launch a thread each.

// One output element e of a pooling over the last three dims of [nc, id, ih, iw] (1-d and 2-d pad
// with size 1); mode 0 max (NaN propagates), 1 average (count_include_pad, divisor_override as
// ATen), 2 adaptive average, 3 adaptive max.
KW_HD static inline float kw_pool_one(const float* x, int64_t e, const int64_t* g) {
    const int64_t id = g[0], ih = g[1], iw = g[2], od = g[3], oh = g[4], ow = g[5], kd = g[6], kh = g[7], kw = g[8];
    const int64_t sd = g[9], sh = g[10], sw = g[11], pd = g[12], ph = g[13], pw = g[14], mode = g[18];
    int64_t r = e;
    const int64_t xo = r % ow; r /= ow;
    const int64_t yo = r % oh; r /= oh;
    const int64_t zo = r % od; r /= od;
    const float* src = x + r * id * ih * iw;
    int64_t z0, z1, y0, y1, x0, x1, zs = 1, ys = 1, xs = 1;
    if (mode >= 2) {
        z0 = zo * id / od; z1 = ((zo + 1) * id + od - 1) / od;
        y0 = yo * ih / oh; y1 = ((yo + 1) * ih + oh - 1) / oh;
        x0 = xo * iw / ow; x1 = ((xo + 1) * iw + ow - 1) / ow;
    } else {
        z0 = zo * sd - pd; y0 = yo * sh - ph; x0 = xo * sw - pw;
        zs = g[15]; ys = g[16]; xs = g[17];
        z1 = z0 + (kd - 1) * zs + 1; y1 = y0 + (kh - 1) * ys + 1; x1 = x0 + (kw - 1) * xs + 1;
    }
    if (mode == 0 || mode == 3) {
        float m = -INFINITY;
        for (int64_t z = z0; z < z1; z += zs) {
            if (z < 0 || z >= id) continue;
            for (int64_t yy = y0; yy < y1; yy += ys) {
                if (yy < 0 || yy >= ih) continue;
                for (int64_t xx = x0; xx < x1; xx += xs) {
                    if (xx < 0 || xx >= iw) continue;
                    const float v = src[(z * ih + yy) * iw + xx];
                    if (v > m || v != v) m = v;
                }
            }
        }
        return m;
    }
    int64_t count;
    if (mode == 1) {
        const int64_t ze = z0 + kd < id + pd ? z0 + kd : id + pd, ye = y0 + kh < ih + ph ? y0 + kh : ih + ph,
                      xe = x0 + kw < iw + pw ? x0 + kw : iw + pw;
        count = (ze - z0) * (ye - y0) * (xe - x0);
        z1 = ze < id ? ze : id; y1 = ye < ih ? ye : ih; x1 = xe < iw ? xe : iw;
        z0 = z0 > 0 ? z0 : 0; y0 = y0 > 0 ? y0 : 0; x0 = x0 > 0 ? x0 : 0;
        if (!g[19]) count = (z1 - z0) * (y1 - y0) * (x1 - x0);
        if (g[20]) count = g[20];
    } else {
        count = (z1 - z0) * (y1 - y0) * (x1 - x0);
    }
    double s = 0.0;
    for (int64_t z = z0; z < z1; ++z)
        for (int64_t yy = y0; yy < y1; ++yy)
            for (int64_t xx = x0; xx < x1; ++xx) s += src[(z * ih + yy) * iw + xx];
    return (float)(s / (double)count);
}

// x op s for kw_compare's op codes (0 eq, 1 ne, 2 lt, 3 le, 4 gt, 5 ge); NaN compares as in ATen
// (false, and true for ne).
KW_HD static inline bool kw_compare_one(float x, float s, int64_t op) {
    return op == 0 ? x == s : op == 1 ? x != s : op == 2 ? x < s : op == 3 ? x <= s : op == 4 ? x > s : x >= s;
}

// The row an index picks out of `rows` (negative ones from the end), or -1 when out of range.
KW_HD static inline int64_t kw_row_of(int64_t i, int64_t rows) {
    const int64_t r = i < 0 ? i + rows : i;
    return r >= 0 && r < rows ? r : -1;
}
KW_HD static inline int64_t kw_pair_row(int64_t i, int64_t j, int64_t d1, int64_t d2) {
    const int64_t a = kw_row_of(i, d1), b = kw_row_of(j, d2);
    return a >= 0 && b >= 0 ? a * d2 + b : -1;
}

// One line q = (o, i) of [outer, len, inner]: inclusive cumulative sum (op 0, in double) or product (op 1).
KW_HD static inline void kw_scan_line(const float* x, float* y, int64_t q, int64_t len, int64_t inner, int64_t op) {
    const int64_t base = (q / inner) * len * inner + q % inner;
    double acc = op == 0 ? 0.0 : 1.0;
    for (int64_t l = 0; l < len; ++l) {
        acc = op == 0 ? acc + x[base + l * inner] : acc * x[base + l * inner];
        y[base + l * inner] = (float)acc;
    }
}

// One line of [outer, len, inner]: the index of the first maximum (op 0) or minimum (op 1), NaN
// counting as the extreme (as ATen's argmax/argmin).
KW_HD static inline int64_t kw_arg_line(const float* x, int64_t q, int64_t len, int64_t inner, int64_t op) {
    const float* a = x + (q / inner) * len * inner + q % inner;
    float best = a[0];
    int64_t at = 0;
    for (int64_t l = 1; l < len && best == best; ++l) {
        const float v = a[l * inner];
        if (v != v || (op == 0 ? v > best : v < best)) { best = v; at = l; }
    }
    return at;
}

// -log_softmax(row)[k]: the row's max, then the sum of exp in double.
KW_HD static inline double kw_ce_row(const float* row, int64_t c, int64_t k) {
    float m = row[0];
    for (int64_t j = 1; j < c; ++j) m = row[j] > m ? row[j] : m;
    double s = 0.0;
    for (int64_t j = 0; j < c; ++j) s += exp((double)row[j] - m);
    return log(s) + m - row[k];
}

// One line of [outer, len, inner] reduced: op 0 sum, 1 mean (both in double), 2 max, 3 min (NaN
// propagates), 4 Euclidean norm, 5 sum of absolute values, 6 logsumexp (max, then the sum of exp).
KW_HD static inline float kw_reduce_line(const float* x, int64_t q, int64_t len, int64_t inner, int64_t op) {
    const float* a = x + (q / inner) * len * inner + q % inner;
    if (op == 6) {
        float m = -INFINITY;
        for (int64_t l = 0; l < len; ++l) m = a[l * inner] > m ? a[l * inner] : m;
        if (m == INFINITY || m == -INFINITY) return m;
        double s = 0.0;
        for (int64_t l = 0; l < len; ++l) s += exp((double)a[l * inner] - m);
        return (float)(log(s) + m);
    }
    if (op == 2 || op == 3) {
        float m = a[0];
        for (int64_t l = 1; l < len; ++l) {
            const float v = a[l * inner];
            if ((op == 2 ? v > m : v < m) || v != v) m = v;
        }
        return m;
    }
    double s = 0.0;
    for (int64_t l = 0; l < len; ++l) {
        const double v = a[l * inner];
        s += op == 4 ? v * v : (op == 5 ? fabs(v) : v);
    }
    return (float)(op == 1 ? s / (double)len : (op == 4 ? sqrt(s) : s));
}

// One line of [outer, len, inner]: softmax (or log-softmax) along the middle dim, three passes.
KW_HD static inline void kw_softmax_line(const float* x, float* y, int64_t q, int64_t len, int64_t inner, int64_t lg) {
    const int64_t base = (q / inner) * len * inner + q % inner;
    float m = -INFINITY;
    for (int64_t l = 0; l < len; ++l) m = x[base + l * inner] > m ? x[base + l * inner] : m;
    double s = 0.0;
    for (int64_t l = 0; l < len; ++l) s += exp((double)x[base + l * inner] - m);
    const double ls = log(s);
    for (int64_t l = 0; l < len; ++l) {
        const double v = (double)x[base + l * inner] - m;
        y[base + l * inner] = (float)(lg ? v - ls : exp(v) / s);
    }
}

// KL divergence of one element: target * (log(target) - input), 0 where target is 0 (xlogy); with
// log_target, exp(target) * (target - input).
KW_HD static inline double kw_kl_one(float x, float t, int64_t log_target) {
    const double tv = t;
    return log_target ? exp(tv) * (tv - x) : (tv == 0.0 ? 0.0 : tv * log(tv)) - tv * x;
}
"""


CPU_SOURCE = (
    "\n#define KW_HD\n"
    + _COMMON
    + r"""
// kw_pool: every output element of a pooling (geometry as kw_pool_one reads it).
extern "C" int kw_pool(const float* x, float* y, int64_t nc, int64_t id, int64_t ih, int64_t iw, int64_t od,
                       int64_t oh, int64_t ow, int64_t kd, int64_t kh, int64_t kw, int64_t sd, int64_t sh, int64_t sw,
                       int64_t pd, int64_t ph, int64_t pw, int64_t dd, int64_t dh, int64_t dw, int64_t mode,
                       int64_t cip, int64_t divisor, void* stream) {
    (void)stream;
    const int64_t g[21] = {id, ih, iw, od, oh, ow, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, mode, cip, divisor};
    const int64_t total = nc * od * oh * ow;
    #pragma omp parallel for if (total > (1 << 14))
    for (int64_t e = 0; e < total; ++e) y[e] = kw_pool_one(x, e, g);
    return 0;
}

// kw_scan: cumsum (op 0) / cumprod (op 1) along the middle dim of [outer, len, inner].
extern "C" int kw_scan(const float* x, float* y, int64_t outer, int64_t len, int64_t inner, int64_t op, void* stream) {
    (void)stream;
    #pragma omp parallel for if (outer * len * inner > (1 << 16))
    for (int64_t q = 0; q < outer * inner; ++q) kw_scan_line(x, y, q, len, inner, op);
    return 0;
}

// kw_argreduce: argmax (op 0) / argmin (op 1) along the middle dim of [outer, len, inner]; int64 output.
extern "C" int kw_argreduce(const float* x, int64_t* y, int64_t outer, int64_t len, int64_t inner, int64_t op,
                            void* stream) {
    (void)stream;
    #pragma omp parallel for if (outer * len * inner > (1 << 16))
    for (int64_t q = 0; q < outer * inner; ++q) y[q] = kw_arg_line(x, q, len, inner, op);
    return 0;
}

// kw_reduce: the middle dim of [outer, len, inner] reduced (op as kw_reduce_line).
extern "C" int kw_reduce(const float* x, float* y, int64_t outer, int64_t len, int64_t inner, int64_t op, void* stream) {
    (void)stream;
    #pragma omp parallel for if (outer * len * inner > (1 << 16))
    for (int64_t q = 0; q < outer * inner; ++q) y[q] = kw_reduce_line(x, q, len, inner, op);
    return 0;
}

// kw_softmax_mid: softmax (lg 0) or log-softmax (lg 1) along the middle dim of [outer, len, inner].
extern "C" int kw_softmax_mid(const float* x, float* y, int64_t outer, int64_t len, int64_t inner, int64_t lg,
                              void* stream) {
    (void)stream;
    #pragma omp parallel for if (outer * len * inner > (1 << 16))
    for (int64_t q = 0; q < outer * inner; ++q) kw_softmax_line(x, y, q, len, inner, lg);
    return 0;
}

// kw_tri: tril (upper 0: keep j - i <= diagonal) or triu (upper 1: keep j - i >= diagonal) of [batch, rows, cols].
extern "C" int kw_tri(const float* x, float* y, int64_t batch, int64_t rows, int64_t cols, int64_t diagonal,
                      int64_t upper, void* stream) {
    (void)stream;
    #pragma omp parallel for if (batch * rows * cols > (1 << 16))
    for (int64_t r = 0; r < batch * rows; ++r)
        for (int64_t j = 0; j < cols; ++j) {
            const int64_t d = j - r % rows;
            y[r * cols + j] = (upper ? d >= diagonal : d <= diagonal) ? x[r * cols + j] : 0.0f;
        }
    return 0;
}

// kw_mask_mul: y = x * m for a bool mask m of x's shape (x * 0.0f where false, so NaN and inf stay as ATen's).
extern "C" int kw_mask_mul(const float* x, const bool* m, float* y, int64_t n, void* stream) {
    (void)stream;
    #pragma omp parallel for simd if (parallel: n > (1 << 16))
    for (int64_t e = 0; e < n; ++e) y[e] = x[e] * (m[e] ? 1.0f : 0.0f);
    return 0;
}

// kw_index_rows: y[o, i, k] = x[o, idx[i], k] for x [outer, rows, inner] (a negative index counts
// from the end, as ATen's; one out of range reads nothing and gives NaN where ATen raises).
extern "C" int kw_index_rows(const float* x, const int64_t* idx, float* y, int64_t outer, int64_t rows, int64_t inner,
                             int64_t n, void* stream) {
    (void)stream;
    #pragma omp parallel for if (outer * n * inner > (1 << 16))
    for (int64_t p = 0; p < outer * n; ++p) {
        const int64_t r = kw_row_of(idx[p % n], rows);
        for (int64_t k = 0; k < inner; ++k) y[p * inner + k] = r >= 0 ? x[((p / n) * rows + r) * inner + k] : NAN;
    }
    return 0;
}

// kw_index_pair: y[o, p, k] = x[o, i[p], j[p], k] for x [outer, d1, d2, inner] (negative indices count
// from the end; one outside its dim makes NaN)
extern "C" int kw_index_pair(const float* x, const int64_t* i, const int64_t* j, float* y, int64_t outer, int64_t d1,
                             int64_t d2, int64_t inner, int64_t n, void* stream) {
    (void)stream;
    #pragma omp parallel for if (outer * n * inner > (1 << 16))
    for (int64_t p = 0; p < outer * n; ++p) {
        const int64_t r = kw_pair_row(i[p % n], j[p % n], d1, d2);
        for (int64_t k = 0; k < inner; ++k) y[p * inner + k] = r >= 0 ? x[((p / n) * d1 * d2 + r) * inner + k] : NAN;
    }
    return 0;
}

// kw_compare: y = x op s, a float32 tensor against a number (bool out); kw_bool_to_float: a bool mask as float32.
extern "C" int kw_compare(const float* x, bool* y, int64_t n, int64_t op, float s, void* stream) {
    (void)stream;
    #pragma omp parallel for if (n > (1 << 16))
    for (int64_t e = 0; e < n; ++e) y[e] = kw_compare_one(x[e], s, op);
    return 0;
}

extern "C" int kw_bool_to_float(const bool* x, float* y, int64_t n, void* stream) {
    (void)stream;
    #pragma omp parallel for if (n > (1 << 16))
    for (int64_t e = 0; e < n; ++e) y[e] = x[e] ? 1.0f : 0.0f;
    return 0;
}

// kw_copy_block: dst[o, off + j] = src[o, j] for [outer, n_src] into [outer, n_dst] (one input of a cat).
extern "C" int kw_copy_block(const float* src, float* dst, int64_t outer, int64_t n_src, int64_t n_dst, int64_t off,
                             void* stream) {
    (void)stream;
    #pragma omp parallel for if (outer * n_src > (1 << 16))
    for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < n_src; ++j) dst[o * n_dst + off + j] = src[o * n_src + j];
    return 0;
}

// kw_cross_entropy: x [N, C], targets t [N]; reduction 0 none ([N]), 1 mean over the rows whose
// target is not ignore_index, 2 sum.
extern "C" int kw_cross_entropy(const float* x, const int64_t* t, float* y, int64_t n, int64_t c, int64_t reduction,
                                int64_t ignore, void* stream) {
    (void)stream;
    double total = 0.0;
    int64_t counted = 0;
    for (int64_t r = 0; r < n; ++r) {
        const double loss = t[r] != ignore ? kw_ce_row(x + r * c, c, t[r]) : 0.0;
        total += loss;
        counted += t[r] != ignore;
        if (reduction == 0) y[r] = (float)loss;
    }
    if (reduction == 1) y[0] = (float)(total / (double)counted);
    if (reduction == 2) y[0] = (float)total;
    return 0;
}

// kw_kl_div: reduction 0 none, 1 mean, 2 sum (batchmean: the sum, then a division in the graph).
extern "C" int kw_kl_div(const float* x, const float* t, float* y, int64_t n, int64_t reduction, int64_t log_target,
                         void* stream) {
    (void)stream;
    double s = 0.0;
    for (int64_t e = 0; e < n; ++e) {
        const double v = kw_kl_one(x[e], t[e], log_target);
        if (reduction == 0) y[e] = (float)v; else s += v;
    }
    if (reduction == 1) y[0] = (float)(s / (double)n);
    if (reduction == 2) y[0] = (float)s;
    return 0;
}
"""
    + typed.COMMON
    + typed.CPU_SOURCE
    + remap.COMMON
    + remap.CPU_SOURCE
    + bilinear.COMMON
    + bilinear.CPU_SOURCE
    + gridsample.COMMON
    + gridsample.CPU_SOURCE
    + embedbag.COMMON
    + embedbag.CPU_SOURCE
)


CUDA_SOURCE = (
    "\n#define KW_HD __host__ __device__\n"
    + _COMMON
    + r"""
#define KW_GRID(n) for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < (n); q += (int64_t)gridDim.x * blockDim.x)

static unsigned kw_blocks(int64_t n) { int64_t b = (n + 255) / 256; return (unsigned)(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8); }

struct kw_pool_geom { int64_t g[21]; };

__global__ void kw_pool_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t total, kw_pool_geom geom) {
    KW_GRID(total) y[q] = kw_pool_one(x, q, geom.g);
}

extern "C" int kw_pool(const float* x, float* y, int64_t nc, int64_t id, int64_t ih, int64_t iw, int64_t od,
                       int64_t oh, int64_t ow, int64_t kd, int64_t kh, int64_t kw, int64_t sd, int64_t sh, int64_t sw,
                       int64_t pd, int64_t ph, int64_t pw, int64_t dd, int64_t dh, int64_t dw, int64_t mode,
                       int64_t cip, int64_t divisor, void* stream) {
    const kw_pool_geom geom = {{id, ih, iw, od, oh, ow, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, mode, cip, divisor}};
    const int64_t total = nc * od * oh * ow;
    kw_pool_kernel<<<kw_blocks(total), 256, 0, (cudaStream_t)stream>>>(x, y, total, geom);
    return (int)cudaGetLastError();
}

__global__ void kw_scan_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t lines, int64_t len,
                               int64_t inner, int64_t op) {
    KW_GRID(lines) kw_scan_line(x, y, q, len, inner, op);
}

// A contiguous line (inner == 1) per block: each thread scans KW_SCAN_V consecutive elements, the
// warps scan their threads' totals by shuffles, the block its warps' totals, and a carry runs from
// tile to tile (in double, as the line kernel). One thread per line would read its line alone, so a
// warp's loads fall on 32 lines at once; here a warp reads 32 x KW_SCAN_V consecutive floats.
#define KW_SCAN_T 512
#define KW_SCAN_V 4
__device__ __forceinline__ double kw_scan_op(double a, double b, int64_t op) { return op == 0 ? a + b : a * b; }

__global__ void kw_scan_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t len, int64_t op) {
    __shared__ double warp_total[KW_SCAN_T / 32];
    const double id = op == 0 ? 0.0 : 1.0;
    const float* xr = x + (int64_t)blockIdx.x * len;
    float* yr = y + (int64_t)blockIdx.x * len;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double carry = id;
    for (int64_t t0 = 0; t0 < len; t0 += (int64_t)KW_SCAN_T * KW_SCAN_V) {
        const int64_t i = t0 + (int64_t)threadIdx.x * KW_SCAN_V;
        double v[KW_SCAN_V];
#pragma unroll
        for (int k = 0; k < KW_SCAN_V; ++k) {
            v[k] = i + k < len ? (double)xr[i + k] : id;
            if (k > 0) v[k] = kw_scan_op(v[k - 1], v[k], op);
        }
        double s = v[KW_SCAN_V - 1];  // inclusive over the warp's threads
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const double n = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s = kw_scan_op(n, s, op);
        }
        if (lane == 31) warp_total[warp] = s;
        __syncthreads();
        if (warp == 0) {
            double w = lane < KW_SCAN_T / 32 ? warp_total[lane] : id;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const double n = __shfl_up_sync(0xffffffffu, w, o);
                if (lane >= o) w = kw_scan_op(n, w, op);
            }
            if (lane < KW_SCAN_T / 32) warp_total[lane] = w;  // now inclusive over the warps
        }
        __syncthreads();
        double before = __shfl_up_sync(0xffffffffu, s, 1);  // the threads before this one in its warp
        if (lane == 0) before = id;
        double prefix = kw_scan_op(carry, warp > 0 ? warp_total[warp - 1] : id, op);
        prefix = kw_scan_op(prefix, before, op);
#pragma unroll
        for (int k = 0; k < KW_SCAN_V; ++k)
            if (i + k < len) yr[i + k] = (float)kw_scan_op(prefix, v[k], op);
        carry = kw_scan_op(carry, warp_total[KW_SCAN_T / 32 - 1], op);
        __syncthreads();  // warp_total is rewritten by the next tile
    }
}

extern "C" int kw_scan(const float* x, float* y, int64_t outer, int64_t len, int64_t inner, int64_t op, void* stream) {
    if (inner == 1 && len >= KW_SCAN_T && outer < 2147483647)
        kw_scan_rows_kernel<<<(unsigned)outer, KW_SCAN_T, 0, (cudaStream_t)stream>>>(x, y, len, op);
    else
        kw_scan_kernel<<<kw_blocks(outer * inner), 256, 0, (cudaStream_t)stream>>>(x, y, outer * inner, len, inner, op);
    return (int)cudaGetLastError();
}

__global__ void kw_argreduce_kernel(const float* __restrict__ x, int64_t* __restrict__ y, int64_t lines, int64_t len,
                                    int64_t inner, int64_t op) {
    KW_GRID(lines) y[q] = kw_arg_line(x, q, len, inner, op);
}

__global__ void kw_reduce_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t lines, int64_t len,
                                 int64_t inner, int64_t op) {
    KW_GRID(lines) y[q] = kw_reduce_line(x, q, len, inner, op);
}

// Long lines split over the threads of a block. One thread per line leaves a thread with one load
// in flight at a time (a line's sum is a chain), far too few to fill HBM: KernelBench L1/48, a mean
// over the middle dim of [128, 4096, 4095], ran at 0.80x of eager on the H200. Two layouts:
// - columns (inner >= 32): a 32 x 8 block takes 32 neighbouring lines of one outer index; x walks
//   them (coalesced), y takes every 8th element of the line; partials meet in shared memory;
// - lines (inner < 32): a block of 256 takes one line, thread t every 256th element from t.
// The partial state: a double sum (ops 0, 1, 4, 5), a float extreme (2, 3: NaN wins), or a value
// and its index (argmax / argmin: NaN, then the lowest index, wins, as ATen's).
#define KW_RX 32
#define KW_RY 8
#define KW_RL 256
struct kw_part { double s; float v; int64_t at; };

__device__ __forceinline__ kw_part kw_part_init(int64_t op) { return {0.0, op == 2 ? -INFINITY : INFINITY, -1}; }

__device__ __forceinline__ void kw_part_add(kw_part& p, float v, int64_t l, int64_t op, bool arg) {
    if (arg) {  // op 0 argmax, 1 argmin
        if (p.at < 0 || (p.v == p.v && (v != v || (op == 0 ? v > p.v : v < p.v)))) { p.v = v; p.at = l; }
    } else if (op == 2 || op == 3) {
        if (p.v == p.v && (v != v || (op == 2 ? v > p.v : v < p.v))) p.v = v;
    } else {
        const double d = v;
        p.s += op == 4 ? d * d : (op == 5 ? fabs(d) : d);
    }
}

__device__ __forceinline__ void kw_part_join(kw_part& a, const kw_part& b, int64_t op, bool arg) {
    if (arg) {
        if (b.at < 0) return;
        const bool better = a.at < 0 || (a.v != a.v ? (b.v != b.v && b.at < a.at)
                                       : (b.v != b.v || (op == 0 ? b.v > a.v : b.v < a.v) || (b.v == a.v && b.at < a.at)));
        if (better) a = b;
    } else if (op == 2 || op == 3) {
        if (a.v == a.v && (b.v != b.v || (op == 2 ? b.v > a.v : b.v < a.v))) a.v = b.v;
    } else {
        a.s += b.s;
    }
}

__device__ __forceinline__ float kw_part_value(const kw_part& p, int64_t len, int64_t op) {
    if (op == 2 || op == 3) return p.v;
    return (float)(op == 1 ? p.s / (double)len : (op == 4 ? sqrt(p.s) : p.s));
}

template <bool ARG>
__global__ void kw_reduce_cols_kernel(const float* __restrict__ x, void* __restrict__ y, int64_t outer, int64_t len,
                                      int64_t inner, int64_t op) {
    __shared__ kw_part parts[KW_RY][KW_RX];
    const int64_t tiles = (inner + KW_RX - 1) / KW_RX;
    const int64_t o = blockIdx.x / tiles, i = (blockIdx.x % tiles) * KW_RX + threadIdx.x;
    kw_part p = kw_part_init(op);
    if (i < inner) {
        const float* a = x + o * len * inner + i;
#pragma unroll 4
        for (int64_t l = threadIdx.y; l < len; l += KW_RY) kw_part_add(p, a[l * inner], l, op, ARG);
    }
    parts[threadIdx.y][threadIdx.x] = p;
    __syncthreads();
    if (threadIdx.y == 0 && i < inner) {
        for (int r = 1; r < KW_RY; ++r) kw_part_join(p, parts[r][threadIdx.x], op, ARG);
        if (ARG) static_cast<int64_t*>(y)[o * inner + i] = p.at;
        else static_cast<float*>(y)[o * inner + i] = kw_part_value(p, len, op);
    }
}

template <bool ARG>
__global__ void kw_reduce_lines_kernel(const float* __restrict__ x, void* __restrict__ y, int64_t len, int64_t inner,
                                       int64_t op) {
    __shared__ kw_part parts[KW_RL];
    const int64_t q = blockIdx.x;
    const float* a = x + (q / inner) * len * inner + q % inner;
    kw_part p = kw_part_init(op);
#pragma unroll 4
    for (int64_t l = threadIdx.x; l < len; l += KW_RL) kw_part_add(p, a[l * inner], l, op, ARG);
    parts[threadIdx.x] = p;
    __syncthreads();
    for (int half = KW_RL / 2; half > 0; half >>= 1) {
        if ((int)threadIdx.x < half) kw_part_join(parts[threadIdx.x], parts[threadIdx.x + half], op, ARG);
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if (ARG) static_cast<int64_t*>(y)[q] = parts[0].at;
        else static_cast<float*>(y)[q] = kw_part_value(parts[0], len, op);
    }
}

// Whether the split kernels took the reduction (they do not do logsumexp, op 6, nor short lines).
template <bool ARG>
static bool kw_reduce_split(const float* x, void* y, int64_t outer, int64_t len, int64_t inner, int64_t op,
                            cudaStream_t stream) {
    const int64_t tiles = (inner + KW_RX - 1) / KW_RX;
    if ((!ARG && op == 6) || len < 64) return false;
    if (inner >= KW_RX && outer * tiles < 2147483647) {
        kw_reduce_cols_kernel<ARG><<<(unsigned)(outer * tiles), dim3(KW_RX, KW_RY), 0, stream>>>(x, y, outer, len, inner, op);
        return true;
    }
    if (inner < KW_RX && len >= KW_RL && outer * inner < 2147483647) {
        kw_reduce_lines_kernel<ARG><<<(unsigned)(outer * inner), KW_RL, 0, stream>>>(x, y, len, inner, op);
        return true;
    }
    return false;
}

extern "C" int kw_argreduce(const float* x, int64_t* y, int64_t outer, int64_t len, int64_t inner, int64_t op,
                            void* stream) {
    if (!kw_reduce_split<true>(x, y, outer, len, inner, op, (cudaStream_t)stream))
        kw_argreduce_kernel<<<kw_blocks(outer * inner), 256, 0, (cudaStream_t)stream>>>(x, y, outer * inner, len, inner, op);
    return (int)cudaGetLastError();
}

extern "C" int kw_reduce(const float* x, float* y, int64_t outer, int64_t len, int64_t inner, int64_t op, void* stream) {
    if (!kw_reduce_split<false>(x, y, outer, len, inner, op, (cudaStream_t)stream))
        kw_reduce_kernel<<<kw_blocks(outer * inner), 256, 0, (cudaStream_t)stream>>>(x, y, outer * inner, len, inner, op);
    return (int)cudaGetLastError();
}

__global__ void kw_softmax_mid_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t lines, int64_t len,
                                      int64_t inner, int64_t lg) {
    KW_GRID(lines) kw_softmax_line(x, y, q, len, inner, lg);
}

extern "C" int kw_softmax_mid(const float* x, float* y, int64_t outer, int64_t len, int64_t inner, int64_t lg,
                              void* stream) {
    kw_softmax_mid_kernel<<<kw_blocks(outer * inner), 256, 0, (cudaStream_t)stream>>>(x, y, outer * inner, len, inner, lg);
    return (int)cudaGetLastError();
}

__global__ void kw_tri_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, int64_t rows, int64_t cols,
                              int64_t diagonal, int64_t upper) {
    KW_GRID(n) {
        const int64_t d = q % cols - (q / cols) % rows;
        y[q] = (upper ? d >= diagonal : d <= diagonal) ? x[q] : 0.0f;
    }
}

extern "C" int kw_tri(const float* x, float* y, int64_t batch, int64_t rows, int64_t cols, int64_t diagonal,
                      int64_t upper, void* stream) {
    kw_tri_kernel<<<kw_blocks(batch * rows * cols), 256, 0, (cudaStream_t)stream>>>(x, y, batch * rows * cols, rows,
                                                                                      cols, diagonal, upper);
    return (int)cudaGetLastError();
}

__global__ void kw_mask_mul_kernel(const float* __restrict__ x, const bool* __restrict__ m, float* __restrict__ y,
                                   int64_t n) {
    KW_GRID(n) y[q] = x[q] * (m[q] ? 1.0f : 0.0f);
}

extern "C" int kw_mask_mul(const float* x, const bool* m, float* y, int64_t n, void* stream) {
    kw_mask_mul_kernel<<<kw_blocks(n), 256, 0, (cudaStream_t)stream>>>(x, m, y, n);
    return (int)cudaGetLastError();
}

__global__ void kw_compare_kernel(const float* __restrict__ x, bool* __restrict__ y, int64_t n, int64_t op, float s) {
    KW_GRID(n) y[q] = kw_compare_one(x[q], s, op);
}

extern "C" int kw_compare(const float* x, bool* y, int64_t n, int64_t op, float s, void* stream) {
    kw_compare_kernel<<<kw_blocks(n), 256, 0, (cudaStream_t)stream>>>(x, y, n, op, s);
    return (int)cudaGetLastError();
}

__global__ void kw_bool_to_float_kernel(const bool* __restrict__ x, float* __restrict__ y, int64_t n) {
    KW_GRID(n) y[q] = x[q] ? 1.0f : 0.0f;
}

extern "C" int kw_bool_to_float(const bool* x, float* y, int64_t n, void* stream) {
    kw_bool_to_float_kernel<<<kw_blocks(n), 256, 0, (cudaStream_t)stream>>>(x, y, n);
    return (int)cudaGetLastError();
}

__global__ void kw_index_pair_kernel(const float* __restrict__ x, const int64_t* __restrict__ i,
                                     const int64_t* __restrict__ j, float* __restrict__ y, int64_t total, int64_t d1,
                                     int64_t d2, int64_t inner, int64_t n) {
    KW_GRID(total) {
        const int64_t p = q / inner, r = kw_pair_row(i[p % n], j[p % n], d1, d2);
        y[q] = r >= 0 ? x[((p / n) * d1 * d2 + r) * inner + q % inner] : NAN;
    }
}

extern "C" int kw_index_pair(const float* x, const int64_t* i, const int64_t* j, float* y, int64_t outer, int64_t d1,
                             int64_t d2, int64_t inner, int64_t n, void* stream) {
    kw_index_pair_kernel<<<kw_blocks(outer * n * inner), 256, 0, (cudaStream_t)stream>>>(x, i, j, y, outer * n * inner,
                                                                                          d1, d2, inner, n);
    return (int)cudaGetLastError();
}

__global__ void kw_index_rows_kernel(const float* __restrict__ x, const int64_t* __restrict__ idx, float* __restrict__ y,
                                     int64_t total, int64_t rows, int64_t inner, int64_t n) {
    KW_GRID(total) {
        const int64_t p = q / inner, r = kw_row_of(idx[p % n], rows);
        y[q] = r >= 0 ? x[((p / n) * rows + r) * inner + q % inner] : NAN;
    }
}

extern "C" int kw_index_rows(const float* x, const int64_t* idx, float* y, int64_t outer, int64_t rows, int64_t inner,
                             int64_t n, void* stream) {
    kw_index_rows_kernel<<<kw_blocks(outer * n * inner), 256, 0, (cudaStream_t)stream>>>(x, idx, y, outer * n * inner,
                                                                                          rows, inner, n);
    return (int)cudaGetLastError();
}

__global__ void kw_copy_block_kernel(const float* __restrict__ src, float* __restrict__ dst, int64_t outer,
                                     int64_t n_src, int64_t n_dst, int64_t off) {
    KW_GRID(outer * n_src) dst[(q / n_src) * n_dst + off + q % n_src] = src[q];
}

extern "C" int kw_copy_block(const float* src, float* dst, int64_t outer, int64_t n_src, int64_t n_dst, int64_t off,
                             void* stream) {
    kw_copy_block_kernel<<<kw_blocks(outer * n_src), 256, 0, (cudaStream_t)stream>>>(src, dst, outer, n_src, n_dst, off);
    return (int)cudaGetLastError();
}

// one block of 256 threads: a row per thread at a time, the sums and counts through shared memory
__global__ void kw_cross_entropy_kernel(const float* __restrict__ x, const int64_t* __restrict__ t, float* y, int64_t n,
                                        int64_t c, int64_t reduction, int64_t ignore) {
    __shared__ double part[256];
    __shared__ long long cnt[256];
    double total = 0.0;
    long long counted = 0;
    for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
        const double loss = t[r] != ignore ? kw_ce_row(x + r * c, c, t[r]) : 0.0;
        total += loss;
        counted += t[r] != ignore;
        if (reduction == 0) y[r] = (float)loss;
    }
    part[threadIdx.x] = total;
    cnt[threadIdx.x] = counted;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if (threadIdx.x < w) { part[threadIdx.x] += part[threadIdx.x + w]; cnt[threadIdx.x] += cnt[threadIdx.x + w]; }
        __syncthreads();
    }
    if (threadIdx.x == 0 && reduction == 1) y[0] = (float)(part[0] / (double)cnt[0]);
    if (threadIdx.x == 0 && reduction == 2) y[0] = (float)part[0];
}

extern "C" int kw_cross_entropy(const float* x, const int64_t* t, float* y, int64_t n, int64_t c, int64_t reduction,
                                int64_t ignore, void* stream) {
    kw_cross_entropy_kernel<<<1, 256, 0, (cudaStream_t)stream>>>(x, t, y, n, c, reduction, ignore);
    return (int)cudaGetLastError();
}

// blocks of 256 threads reduce in shared memory, then one double atomicAdd per block
__global__ void kw_kl_div_kernel(const float* __restrict__ x, const float* __restrict__ t, float* y, double* acc,
                                 int64_t n, int64_t reduction, int64_t log_target) {
    __shared__ double part[256];
    double s = 0.0;
    KW_GRID(n) {
        const double v = kw_kl_one(x[q], t[q], log_target);
        if (reduction == 0) y[q] = (float)v; else s += v;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0 && reduction != 0) atomicAdd(acc, part[0]);
}

__global__ void kw_kl_div_finish(const double* acc, float* y, int64_t n, int64_t reduction) {
    y[0] = (float)(reduction == 1 ? acc[0] / (double)n : acc[0]);
}

extern "C" int kw_kl_div(const float* x, const float* t, float* y, int64_t n, int64_t reduction, int64_t log_target,
                         void* stream) {
    static double* acc = nullptr;  // one double of scratch, allocated once
    if (acc == nullptr && cudaMalloc(&acc, sizeof(double)) != cudaSuccess) return (int)cudaGetLastError();
    cudaMemsetAsync(acc, 0, sizeof(double), (cudaStream_t)stream);
    const unsigned blocks = kw_blocks(n) < 1024 ? kw_blocks(n) : 1024;
    kw_kl_div_kernel<<<blocks, 256, 0, (cudaStream_t)stream>>>(x, t, y, acc, n, reduction, log_target);
    if (reduction != 0) kw_kl_div_finish<<<1, 1, 0, (cudaStream_t)stream>>>(acc, y, n, reduction);
    return (int)cudaGetLastError();
}
"""
    + typed.COMMON
    + typed.CUDA_SOURCE
    + remap.COMMON
    + remap.CUDA_SOURCE
    + bilinear.COMMON
    + bilinear.CUDA_SOURCE
    + gridsample.COMMON
    + gridsample.CUDA_SOURCE
    + embedbag.COMMON
    + embedbag.CUDA_SOURCE
)
