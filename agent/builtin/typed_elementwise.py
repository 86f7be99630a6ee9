"""One elementwise kernel of our own for float32, float16, bfloat16, int64 and bool tensors with broadcasting:
`kw_elt`. The fusion generator's kernels compute float32 only, so under torch-ops=forbid the
integer and boolean arithmetic of real modules stayed ATen calls and blocked them: the causal
and padding masks that Hugging Face models build from `arange` and comparisons (Llama, Phi,
Falcon, Mistral), T5's relative-position buckets (int64 arithmetic, `where`, `min`), the casts
between int64, bool and float32, `masked_fill`, `fill`, `copy` into a slice, and float products
the fusion generator could not group (a broadcast on both sides: StyleGAN2's modulated weight,
Mamba's state update).

Each node becomes one launch. Operands are read through their own strides, broadcast ones with
stride 0 (worked out in Python from the sizes, no view op), and computed as ATen computes them:
in float32 when the result (or, for a comparison, an operand) is floating, else in int64 (bool
as 0/1); the result is stored in the node's dtype. `arange`, `tril`/`triu` of any dtype use the
element's coordinates. The per-element function is shared by the C++ and CUDA sources.

`kw_scan_t` is the cumulative sum or product of a bool or integer tensor (DETR's and BLOOM's
positions from a mask), with the same loads and stores.
"""

from __future__ import annotations

from typing import Any

from agent.builtin.graph import Graph, Node, Ref, Scalar

# op codes of kw_elt_one (C below); where/clamp/masked_fill take three operands, arange none
_BINARY = {
    "add": 0,
    "sub": 1,
    "mul": 2,
    "div": 3,
    "floor_divide": 4,
    "remainder": 5,
    "minimum": 6,
    "maximum": 7,
    "eq": 8,
    "ne": 9,
    "lt": 10,
    "le": 11,
    "gt": 12,
    "ge": 13,
    "bitwise_and": 14,
    "__and__": 14,
    "logical_and": 14,
    "bitwise_or": 15,
    "__or__": 15,
    "logical_or": 15,
    "bitwise_xor": 16,
    "__xor__": 16,
    "pow": 17,
}
_COMPARES = {8, 9, 10, 11, 12, 13}
_UNARY = {
    "neg": 20,
    "abs": 21,
    "sign": 22,
    "_to_copy": 23,
    "type_as": 23,
    "clone": 23,
    "alias": 23,
    "logical_not": 24,
    "sqrt": 25,
    "log": 26,
    "exp": 27,
    "ceil": 28,
    "floor": 29,
    "trunc": 35,
    "reciprocal": 36,
    "rsqrt": 37,
}
_IR_UNARY = ("neg", "abs", "sqrt", "exp", "log", "rsqrt")  # IR ops of kw_elt's (a 0-d value a group cannot hold)
WHERE, CLAMP, COPY, BITNOT, TRUNC_DIV, ARANGE, TRIL, TRIU = 30, 31, 23, 33, 34, 40, 41, 42
DTYPE_CODES = {"float32": 0, "int64": 1, "bool": 2, "int32": 4, "uint8": 5, "float16": 6, "bfloat16": 7}  # 3: a number
_FLOATS = ("float32", "float16", "bfloat16")  # computed in float32, stored rounded (as ATen's opmath)
_LOGICAL = {"logical_and", "logical_or", "logical_not"}


class _No(Exception):
    pass


def typed_call(n: Node, g: Graph, op: str, arg: Any, kwarg: Any) -> dict[str, Any] | None:
    """The kw_elt call computing node n (an ATen island named op, read through arg(i) and
    kwarg(i, key)), or None where this is not an elementwise form kw_elt computes."""
    if n.dtype not in DTYPE_CODES or n.shape is None or len(n.dims) > 6:
        return None
    try:
        operands, code, extra = _operands(n, g, op, arg, kwarg)
    except (_No, KeyError, IndexError, TypeError, ValueError):
        return None
    for o in operands:
        if isinstance(o, Ref) and (g.node(o.name).dtype not in DTYPE_CODES or g.node(o.name).shape is None):
            return None
        if isinstance(o, Ref) and not _broadcasts(list(g.node(o.name).dims), list(n.dims)):
            return None
        if not isinstance(o, Ref | int | float | bool | Scalar):
            return None
    if op in _LOGICAL and any(isinstance(o, Ref) and g.node(o.name).dtype != "bool" for o in operands):
        return None
    if op in ("type_as", "_to_copy") and _same(g, operands[0], n):  # no cast: the tensor itself, as ATen's `to`
        return {"kernel": "alias", "inputs": operands[:1], "dtype": n.dtype}
    return {
        "kernel": "kw_elt",
        "inputs": [o for o in operands if isinstance(o, Ref)],
        "operands": operands,
        "op": code,
        "compute": _compute_type(n, g, code, operands),
        "extra": extra,
        "dtype": n.dtype,
    }


def ir_call(n: Node, g: Graph) -> dict[str, Any] | None:
    """An IR elementwise node that planning left to torch (a broadcast the fusion generator
    cannot group: OPT's causal mask, a [t, t] `where` read by a [b, 1, t, t] group): the same
    kw_elt call. The IR's `where` takes its condition as float32 (nonzero: true), as kw_elt does."""
    if not n.attrs.get("island") or n.op not in ("add", "sub", "mul", "div", "maximum", "minimum", "where", *_IR_UNARY):
        return None
    return typed_call(n, g, n.op, lambda i, d=None: n.args[i] if i < len(n.args) else d, lambda i, k, d=None: d)


def _operands(n: Node, g: Graph, op: str, arg: Any, kwarg: Any) -> tuple[list[Any], int, tuple[float, float]]:
    """(operands, op code, (a, b) numbers for arange's start/step or tri's diagonal)."""
    if op in ("add", "sub", "rsub") and kwarg(2, "alpha", 1) != 1:
        raise _No
    if op == "rsub":
        return [arg(1), arg(0)], _BINARY["sub"], (0, 0)
    if op == "div" and kwarg(2, "rounding_mode") is not None:
        mode = kwarg(2, "rounding_mode")
        return [arg(0), arg(1)], {"floor": 4, "trunc": TRUNC_DIV}[mode], (0, 0)
    if op in ("min", "max"):  # min.other / max.other: elementwise (a reduction has one operand)
        if not isinstance(arg(1), Ref):
            raise _No
        op = "minimum" if op == "min" else "maximum"
    if op in _BINARY:
        return [arg(0), arg(1)], _BINARY[op], (0, 0)
    if op == "bitwise_not":
        x = arg(0)
        return [x], (24 if g.node(x.name).dtype == "bool" else BITNOT), (0, 0)
    if op in _UNARY:
        if op == "_to_copy" and set(n.attrs["call"]["kwargs"]) - {"dtype", "device", "layout", "memory_format"}:
            raise _No
        return [arg(0)], _UNARY[op], (0, 0)
    if op == "where":
        return [arg(0), arg(1), arg(2)], WHERE, (0, 0)
    if op == "masked_fill":
        return [arg(1), arg(2), arg(0)], WHERE, (0, 0)
    if op == "clamp":
        lo, hi = kwarg(1, "min"), kwarg(2, "max")
        if lo is None and hi is None:
            raise _No
        if hi is None:
            return [arg(0), lo], _BINARY["maximum"], (0, 0)
        if lo is None:
            return [arg(0), hi], _BINARY["minimum"], (0, 0)
        return [arg(0), lo, hi], CLAMP, (0, 0)
    if op == "fill":  # fill.Scalar(x, v) / fill.Tensor(x, t): x's shape, v (or t) everywhere
        return [arg(1)], COPY, (0, 0)
    if op == "copy":  # copy(dst, src): src broadcast to dst's shape, in dst's dtype
        return [arg(1)], COPY, (0, 0)
    if op == "arange":
        return [], ARANGE, _arange(n, arg, kwarg)
    if op in ("tril", "triu"):
        if len(n.dims) < 2:
            raise _No
        return [arg(0)], (TRIL if op == "tril" else TRIU), (float(arg(1, 0)), 0.0)
    raise _No


def _arange(n: Node, arg: Any, kwarg: Any) -> tuple[float, float]:
    """start and step of aten.arange.default(end) / .start(start, end) / .start_step(...)."""
    overload = str(n.attrs.get("target", "")).split(".")[-1]
    if overload == "default":
        return 0.0, 1.0
    start, step = arg(0), (arg(2, 1) if overload == "start_step" else 1)
    if not all(isinstance(v, int | float) for v in (start, step)):
        raise _No
    return float(start), float(step)


def _same(g: Graph, x: Any, n: Node) -> bool:
    return isinstance(x, Ref) and g.node(x.name).dtype == n.dtype and list(g.node(x.name).dims) == list(n.dims)


def _broadcasts(src: list[int], out: list[int]) -> bool:
    if len(src) > len(out):
        return False
    return all(s in (1, o) for s, o in zip(src[::-1], out[::-1], strict=False))


def _is_float(g: Graph, o: Any) -> bool:
    if isinstance(o, Ref):
        return g.node(o.name).dtype in _FLOATS
    return isinstance(o, float | Scalar)


def _compute_type(n: Node, g: Graph, code: int, operands: list[Any]) -> int:
    """0: float32 arithmetic, 1: int64 (bool as 0/1), as ATen promotes: a floating result computes
    in float32 (a comparison or cast: where an operand is floating); else int64."""
    data = operands[1:] if code == WHERE else operands
    if code in _COMPARES or code == COPY:
        return 0 if any(_is_float(g, o) for o in data) else 1
    if code == ARANGE:
        return 0 if n.dtype in _FLOATS else 1
    return 0 if n.dtype in _FLOATS or any(_is_float(g, o) for o in data) else 1


def emit(call: dict[str, Any], out: str, shape: list[int], val: Any) -> list[str]:
    """model_new.py's lines: out allocated in the node's dtype, then one kw_elt launch."""
    ops = []
    for o in call["operands"]:
        ops.append(val(o) if isinstance(o, Ref | Scalar) else repr(o))
    a, b = call["extra"]
    return [
        f"{out} = torch.empty({tuple(shape)!r}, device=_dev, dtype=torch.{call['dtype']})",
        f"_kw_elt(lib, {call['op']}, {call['compute']}, {out}, ({''.join(x + ', ' for x in ops)}), {a!r}, {b!r}, _stream)",
    ]


HELPER = '''

_KW_ELT_TYPES = {torch.float32: 0, torch.int64: 1, torch.bool: 2, torch.int32: 4, torch.uint8: 5, torch.float16: 6,
                 torch.bfloat16: 7}


def _kw_elt(lib, op, compute, out, operands, a, b, stream):
    """out = op(operands) by our kw_elt kernel (agent/builtin/typed_elementwise.py): tensors read
    through their strides, a broadcast dim with stride 0, numbers passed by value; a and b are
    arange's start and step or a triangle's diagonal. Dims of size 1 are dropped and neighbours
    that step as one for every operand merged (a same-shape op is one flat dim), at most 6 left."""
    if out.numel() == 0:
        return
    nd = out.dim()
    ptrs, types, fs, ints, cols = [], [], [], [], []
    for x in list(operands) + [0] * (3 - len(operands)):
        if isinstance(x, torch.Tensor):
            pad = nd - x.dim()
            cols.append([0] * pad + [0 if n == 1 else s for n, s in zip(x.shape, x.stride())])
            ptrs.append(ctypes.c_void_p(x.data_ptr()))  # a strided view: kwrt takes contiguous tensors only
            types.append(_KW_ELT_TYPES[x.dtype])
            fs.append(0.0)
            ints.append(0)
        else:
            v = float(x)
            cols.append([0] * nd)
            ptrs.append(None)
            types.append(3)
            fs.append(v)
            ints.append(int(v) if math.isfinite(v) else 0)
    keep_tri = op in (41, 42)  # a triangle reads the last two dims' coordinates
    dims, strides = [], []  # the output is contiguous: neighbours merge where every operand's do
    for k, n in enumerate(out.shape):
        last2 = keep_tri and k >= nd - 2
        if n == 1 and not last2:
            continue
        st = [c[k] for c in cols]
        if dims and not last2 and all(p == s * n for p, s in zip(strides[-1], st)):
            dims[-1] *= n
            strides[-1] = st
        else:
            dims.append(n)
            strides.append(st)
    if len(dims) > 6:
        raise RuntimeError(f"kw_elt: {len(dims)} dims after merging (at most 6)")
    pad = 6 - len(dims)
    sizes = [1] * pad + dims
    per_operand = [[0] * pad + [st[q] for st in strides] for q in range(3)]
    lib.kw_elt(*ptrs, out, op, compute, _KW_ELT_TYPES[out.dtype], *types, *fs, *ints, float(a), float(b),
               out.numel(), *sizes, *per_operand[0], *per_operand[1], *per_operand[2], stream)
'''


COMMON = r"""
// ---- kw_elt: one elementwise op over float32 / int64 / bool tensors (agent/builtin/typed_elementwise.py)
struct kw_elt_geo {
    const void* p[3];
    void* y;
    int64_t t[3], ty, op, ct, n;
    float f[3];
    int64_t i[3];
    float a, b;
    int64_t d[6], s[3][6];
};

// float16 and bfloat16 by their bits (one source for the C++ and CUDA builds), rounded to nearest even
union kw_fbits { float f; uint32_t u; };
KW_HD static inline float kw_h2f(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    kw_fbits v;
    if (e == 0) {  // zero or subnormal: m * 2^-24
        const float f = (float)m * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    v.u = e == 31 ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e + 112u) << 23) | (m << 13));
    return v.f;
}
KW_HD static inline uint16_t kw_f2h(float f) {
    kw_fbits v;
    v.f = f;
    const uint32_t x = v.u, sign = (x >> 16) & 0x8000u, fe = (x >> 23) & 0xffu;
    uint32_t m = x & 0x7fffffu;
    if (fe == 0xff) return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0u));  // inf, nan
    const int32_t e = (int32_t)fe - 112;  // the half's biased exponent
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {  // subnormal half (or zero)
        if (e < -10) return (uint16_t)sign;
        m |= 0x800000u;
        const uint32_t shift = (uint32_t)(14 - e), q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
        return (uint16_t)(sign | (q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u)));
    }
    const uint32_t h = sign | ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fffu;
    return (uint16_t)(h + ((rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ? 1u : 0u));  // a carry may reach inf
}
KW_HD static inline float kw_bf2f(uint16_t b) {
    kw_fbits v;
    v.u = (uint32_t)b << 16;
    return v.f;
}
KW_HD static inline uint16_t kw_f2bf(float f) {
    kw_fbits v;
    v.f = f;
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40u);  // nan stays nan
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}

// operand k at offset off, as int64 or as float (type 3: the number passed by value); types as
// DTYPE_CODES: 0 float32, 1 int64, 2 bool, 4 int32, 5 uint8, 6 float16, 7 bfloat16
KW_HD static inline float kw_load_f16(const void* p, int64_t t, int64_t off) {
    const uint16_t b = ((const uint16_t*)p)[off];
    return t == 6 ? kw_h2f(b) : kw_bf2f(b);
}
KW_HD static inline int64_t kw_load_i(const void* p, int64_t t, int64_t off) {
    switch (t) {
    case 0: return (int64_t)((const float*)p)[off];
    case 1: return ((const int64_t*)p)[off];
    case 2: return (int64_t)((const bool*)p)[off];
    case 4: return (int64_t)((const int32_t*)p)[off];
    case 6: case 7: return (int64_t)kw_load_f16(p, t, off);
    default: return (int64_t)((const uint8_t*)p)[off];
    }
}
KW_HD static inline void kw_store_f(void* p, int64_t t, int64_t off, float v) {
    if (t == 0) ((float*)p)[off] = v;
    else ((uint16_t*)p)[off] = t == 6 ? kw_f2h(v) : kw_f2bf(v);
}
KW_HD static inline void kw_store_i(void* p, int64_t t, int64_t off, int64_t v) {
    if (t == 1) ((int64_t*)p)[off] = v;
    else if (t == 2) ((bool*)p)[off] = v != 0;
    else if (t == 4) ((int32_t*)p)[off] = (int32_t)v;
    else if (t == 0 || t == 6 || t == 7) kw_store_f(p, t, off, (float)v);
    else ((uint8_t*)p)[off] = (uint8_t)v;
}
KW_HD static inline int64_t kw_ldi(const kw_elt_geo& g, int k, int64_t off) {
    return g.t[k] == 3 ? g.i[k] : kw_load_i(g.p[k], g.t[k], off);
}
KW_HD static inline float kw_ldf(const kw_elt_geo& g, int k, int64_t off) {
    const int64_t t = g.t[k];
    return t == 0 ? ((const float*)g.p[k])[off] : t == 3 ? g.f[k] : (t == 6 || t == 7) ? kw_load_f16(g.p[k], t, off)
                                                                                    : (float)kw_ldi(g, k, off);
}

KW_HD static inline float kw_elt_f(int64_t op, float a, float b, float c) {
    switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    case 4: return floorf(a / b);
    case 5: { float m = fmodf(a, b); if (m != 0.0f && ((m < 0.0f) != (b < 0.0f))) m += b; return m; }
    case 6: return (a != a || b != b) ? NAN : (a < b ? a : b);
    case 7: return (a != a || b != b) ? NAN : (a > b ? a : b);
    case 8: return a == b; case 9: return a != b; case 10: return a < b;
    case 11: return a <= b; case 12: return a > b; case 13: return a >= b;
    case 14: return (a != 0.0f) && (b != 0.0f);
    case 15: return (a != 0.0f) || (b != 0.0f);
    case 16: return (a != 0.0f) != (b != 0.0f);
    case 17: return powf(a, b);
    case 20: return -a;
    case 21: return fabsf(a);
    case 22: return (float)((a > 0.0f) - (a < 0.0f));
    case 23: return a;
    case 24: return a == 0.0f;
    case 25: return sqrtf(a);
    case 26: return logf(a);
    case 27: return expf(a);
    case 28: return ceilf(a);
    case 29: return floorf(a);
    case 30: return a != 0.0f ? b : c;
    case 31: return (a != a) ? a : (a < b ? b : (a > c ? c : a));
    case 34: return truncf(a / b);
    case 35: return truncf(a);
    case 36: return 1.0f / a;
    case 37: return 1.0f / sqrtf(a);
    default: return NAN;
    }
}

KW_HD static inline int64_t kw_elt_i(int64_t op, int64_t a, int64_t b, int64_t c) {
    switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 4: { if (b == 0) return 0; int64_t q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) --q; return q; }
    case 5: { if (b == 0) return 0; int64_t m = a % b; if (m != 0 && ((m < 0) != (b < 0))) m += b; return m; }
    case 6: return a < b ? a : b;
    case 7: return a > b ? a : b;
    case 8: return a == b; case 9: return a != b; case 10: return a < b;
    case 11: return a <= b; case 12: return a > b; case 13: return a >= b;
    case 14: return a & b;
    case 15: return a | b;
    case 16: return a ^ b;
    case 17: { int64_t r = 1; for (int64_t k = 0; k < b; ++k) r *= a; return r; }
    case 20: return -a;
    case 21: return a < 0 ? -a : a;
    case 22: return (a > 0) - (a < 0);
    case 23: case 28: case 29: case 35: return a;
    case 24: return a == 0;
    case 30: return a != 0 ? b : c;
    case 31: return a < b ? b : (a > c ? c : a);
    case 33: return ~a;
    case 34: return b == 0 ? 0 : a / b;
    default: return 0;
    }
}

// output element e: its coordinates over d[6], each operand's offset through its strides
KW_HD static inline void kw_elt_one(const kw_elt_geo& g, int64_t e) {
    int64_t c[6], r = e;
    for (int k = 5; k >= 0; --k) {
        if (g.d[k] == 1) { c[k] = 0; continue; }
        c[k] = r % g.d[k]; r /= g.d[k];
    }
    int64_t off[3] = {0, 0, 0};
    for (int q = 0; q < 3; ++q)
        for (int k = 0; k < 6; ++k) off[q] += c[k] * g.s[q][k];
    float vf = 0.0f;
    int64_t vi = 0;
    const bool as_float = g.ct == 0;
    if (g.op == 40) {  // arange: start + e * step
        const double v = (double)g.a + (double)e * (double)g.b;
        if (as_float) vf = (float)v; else vi = (int64_t)v;
    } else if (g.op == 41 || g.op == 42) {  // tril / triu: keep where col - row is within the diagonal
        const int64_t d = c[5] - c[4], diag = (int64_t)g.a;
        const bool keep = g.op == 41 ? d <= diag : d >= diag;
        if (as_float) vf = keep ? kw_ldf(g, 0, off[0]) : 0.0f; else vi = keep ? kw_ldi(g, 0, off[0]) : 0;
    } else if (as_float) {
        const float a = kw_ldf(g, 0, off[0]);
        vf = kw_elt_f(g.op, a, kw_ldf(g, 1, off[1]), kw_ldf(g, 2, off[2]));  // absent operands: type 3, 0
    } else {
        const int64_t a = kw_ldi(g, 0, off[0]);
        vi = kw_elt_i(g.op, a, kw_ldi(g, 1, off[1]), kw_ldi(g, 2, off[2]));
    }
    if (g.ty == 0 || g.ty == 6 || g.ty == 7) { kw_store_f(g.y, g.ty, e, as_float ? vf : (float)vi); return; }
    if (g.ty == 2) { ((bool*)g.y)[e] = as_float ? vf != 0.0f : vi != 0; return; }
    kw_store_i(g.y, g.ty, e, as_float ? (int64_t)vf : vi);
}

// kw_scan_t: cumsum (op 0) / cumprod (op 1) of one line of a contiguous [outer, len, inner] of any
// element type tx into ty (DTYPE_CODES): in int64 into an integer result (ATen's cumsum of a bool or
// int64 mask), in double into float32 (`mask.cumsum(1, dtype=torch.float32)`, DETR's positions)
KW_HD static inline void kw_scan_t_line(const void* x, void* y, int64_t q, int64_t len, int64_t inner, int64_t op,
                                        int64_t tx, int64_t ty) {
    const int64_t base = (q / inner) * len * inner + q % inner;
    double af = op == 0 ? 0.0 : 1.0;
    int64_t ai = op == 0 ? 0 : 1;
    for (int64_t l = 0; l < len; ++l) {
        const int64_t at = base + l * inner;
        if (ty == 0) {
            const double v = tx == 0 ? (double)((const float*)x)[at] : (double)kw_load_i(x, tx, at);
            af = op == 0 ? af + v : af * v;
            ((float*)y)[at] = (float)af;
        } else {
            const int64_t v = kw_load_i(x, tx, at);
            ai = op == 0 ? ai + v : ai * v;
            kw_store_i(y, ty, at, ai);
        }
    }
}

static inline kw_elt_geo kw_elt_pack(const void* a, const void* b, const void* c, void* y, int64_t op, int64_t ct,
                                     int64_t ty, int64_t ta, int64_t tb, int64_t tc, float fa, float fb, float fc,
                                     int64_t ia, int64_t ib, int64_t ic, float s0, float s1, int64_t n,
                                     const int64_t* d, const int64_t* s) {
    kw_elt_geo g;
    g.p[0] = a; g.p[1] = b; g.p[2] = c; g.y = y;
    g.t[0] = ta; g.t[1] = tb; g.t[2] = tc; g.ty = ty; g.op = op; g.ct = ct; g.n = n;
    g.f[0] = fa; g.f[1] = fb; g.f[2] = fc; g.i[0] = ia; g.i[1] = ib; g.i[2] = ic; g.a = s0; g.b = s1;
    for (int k = 0; k < 6; ++k) {
        g.d[k] = d[k];
        for (int q = 0; q < 3; ++q) g.s[q][k] = s[q * 6 + k];
    }
    return g;
}

#define KW_ELT_ARGS const void* a, const void* b, const void* c, void* y, int64_t op, int64_t ct, int64_t ty, \
    int64_t ta, int64_t tb, int64_t tc, float fa, float fb, float fc, int64_t ia, int64_t ib, int64_t ic, \
    float s0, float s1, int64_t n, int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t d4, int64_t d5, \
    int64_t a0, int64_t a1, int64_t a2, int64_t a3, int64_t a4, int64_t a5, \
    int64_t b0, int64_t b1, int64_t b2, int64_t b3, int64_t b4, int64_t b5, \
    int64_t c0, int64_t c1, int64_t c2, int64_t c3, int64_t c4, int64_t c5, void* stream
#define KW_ELT_PACK() \
    const int64_t d[6] = {d0, d1, d2, d3, d4, d5}; \
    const int64_t s[18] = {a0, a1, a2, a3, a4, a5, b0, b1, b2, b3, b4, b5, c0, c1, c2, c3, c4, c5}; \
    const kw_elt_geo g = kw_elt_pack(a, b, c, y, op, ct, ty, ta, tb, tc, fa, fb, fc, ia, ib, ic, s0, s1, n, d, s)
"""


def entry_points(name: str, macro: str) -> tuple[str, str]:
    """The C++ and CUDA entry points of a kernel of one element per thread: `name(<macro>_ARGS)`
    packs its arguments (<macro>_PACK() defines g) and runs `name_one(g, e)` for every element
    (OpenMP on the CPU, a grid-stride launch on the GPU). kw_elt and kw_remap share it."""
    cpu = f"""
extern "C" int {name}({macro}_ARGS) {{
    (void)stream;
    {macro}_PACK();
    #pragma omp parallel for if (n > (1 << 16))
    for (int64_t e = 0; e < n; ++e) {name}_one(g, e);
    return 0;
}}
"""
    cuda = f"""
__global__ void {name}_kernel({name}_geo g) {{
    KW_GRID(g.n) {name}_one(g, q);
}}

extern "C" int {name}({macro}_ARGS) {{
    {macro}_PACK();
    {name}_kernel<<<kw_blocks(n), 256, 0, (cudaStream_t)stream>>>(g);
    return (int)cudaGetLastError();
}}
"""
    return cpu, cuda


_CPU_ELT, _CUDA_ELT = entry_points("kw_elt", "KW_ELT")
_SCAN_ARGS = "const void* x, void* y, int64_t outer, int64_t len, int64_t inner, int64_t op, int64_t tx, int64_t ty"
CPU_SOURCE = (
    _CPU_ELT
    + f"""
extern "C" int kw_scan_t({_SCAN_ARGS}, void* stream) {{
    (void)stream;
    #pragma omp parallel for if (outer * len * inner > (1 << 16))
    for (int64_t q = 0; q < outer * inner; ++q) kw_scan_t_line(x, y, q, len, inner, op, tx, ty);
    return 0;
}}
"""
)
CUDA_SOURCE = (
    _CUDA_ELT
    + f"""
__global__ void kw_scan_t_kernel({_SCAN_ARGS}) {{
    KW_GRID(outer * inner) kw_scan_t_line(x, y, q, len, inner, op, tx, ty);
}}

extern "C" int kw_scan_t({_SCAN_ARGS}, void* stream) {{
    kw_scan_t_kernel<<<kw_blocks(outer * inner), 256, 0, (cudaStream_t)stream>>>(x, y, outer, len, inner, op, tx, ty);
    return (int)cudaGetLastError();
}}
"""
)


def scan_call(n: Node, g: Graph, x: Any, around: tuple[int, int, int], op: str) -> dict[str, Any] | None:
    """kw_scan_t for a cumsum/cumprod over `around` (outer, len, inner) that kw_scan (float32 into
    float32) does not take: a bool or integer input, into int64 or (a dtype= argument) float32."""
    tx = g.node(x.name).dtype if isinstance(x, Ref) else None
    if tx not in DTYPE_CODES or n.dtype not in DTYPE_CODES or n.dtype == "bool":
        return None
    if tx == "float32" and n.dtype != "float32":
        return None
    ints = [*around, int(op == "cumprod"), DTYPE_CODES[tx], DTYPE_CODES[n.dtype]]
    return {"kernel": "kw_scan_t", "inputs": [x], "ints": ints, "dtype": n.dtype}
