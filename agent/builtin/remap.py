"""One copy kernel of our own whose source coordinate is a function of the output's, dim by dim:
`kw_remap`. It computes the ATen ops that move data without arithmetic and that torch-ops=forbid
otherwise rejects: padding (constant, circular, replicate, reflect: U-Net's `F.pad` before a cat,
Swin's window padding), `roll` (Swin's shifted windows), `repeat` (DeBERTa's position tables,
wav2vec2's masks), nearest upsampling (feature pyramids, YOLO's neck, DETR's mask) and slice
assignment (`y[:, 1::2] = x`, functionalised to slice_scatter: Swin's attention mask), and
`torch.gather` along a dim (DeBERTa's relative positions), `repeat_interleave` by a number
along a dim (GPT-J's rotary sin/cos).

Per output dim k the source index is `floor(c * scale)` clipped to the input (nearest
upsampling, scale as ATen computes it) or `c + off`, then wrapped (circular, repeat), clamped
(replicate) or mirrored (reflect); outside the input the element is the fill value. Elements of
4, 8 or 1 bytes (float32, int64, bool) are copied as they are."""

from __future__ import annotations

import struct
from typing import Any

from agent.builtin.graph import Graph, Node, Ref
from agent.builtin.typed_elementwise import entry_points

BOUNDS, WRAP, CLAMP, REFLECT, SLICE, TAKE, DIVIDE = 0, 1, 2, 3, 4, 5, 6
_BYTES = {"float32": 4, "int64": 8, "bool": 1}
_PAD_MODES = {"constant": BOUNDS, "circular": WRAP, "replicate": CLAMP, "reflect": REFLECT}


class _No(Exception):
    pass


def remap_call(n: Node, g: Graph, op: str, arg: Any, kwarg: Any) -> dict[str, Any] | None:
    """The kw_remap call computing island n (ATen op `op`, read through arg(i)/kwarg(i, key)), or None."""
    if n.dtype not in _BYTES or n.shape is None or len(n.dims) > 6:
        return None
    try:
        x = arg(0)
        if not isinstance(x, Ref) or g.node(x.name).dtype != n.dtype or g.node(x.name).shape is None:
            return None
        ins = list(g.node(x.name).dims)
        out = list(n.dims)
        if op in ("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d"):
            k = len(ins) - 2
            if str(n.attrs.get("target", "")).endswith(".vec"):  # (x, output_size, scale_factors)
                scales = kwarg(2, "scale_factors") or [None] * k
            else:  # (x, output_size, scales_d, scales_h, scales_w): one per dim
                scales = [arg(2 + j, None) for j in range(k)]
            dims = _nearest(ins, out, list(scales))
        elif op in ("constant_pad_nd", "pad"):
            mode = BOUNDS if op == "constant_pad_nd" else _PAD_MODES[kwarg(2, "mode", "constant")]
            fill = kwarg(2, "value", 0) if op == "constant_pad_nd" else kwarg(3, "value", None)
            dims = _padded(ins, out, list(arg(1)), mode)
            return _call(x, n, dims, float(fill or 0))
        elif op == "roll":
            dims = _rolled(ins, list(arg(1)), list(arg(2, [])))
        elif op == "repeat":
            ins = [1] * (len(out) - len(ins)) + ins
            dims = [(i, 0, WRAP, 0.0) for i in ins]
        elif op == "repeat_interleave":  # .self_int(x, repeats, dim): out[c] = x[c // repeats] along dim
            r, d = arg(1), arg(2, None)
            if not isinstance(r, int) or r < 1 or d is None or len(ins) != len(out):
                return None
            dims = [(i, 0, BOUNDS, 0.0) for i in ins]
            dims[int(d) % len(ins)] = (ins[int(d) % len(ins)], r, DIVIDE, 0.0)
        elif op == "gather":  # (x, dim, index): out[c] = x[c with c[dim] = index[c]]
            return _gather(n, g, arg)
        elif op == "slice_scatter":  # (base, src, dim, start, end, step): src where the slice is, else base
            return _slice_scatter(n, g, arg, kwarg)
        else:
            return None
    except (_No, KeyError, IndexError, TypeError, ValueError):
        return None
    return _call(x, n, dims, 0.0)


def _call(
    x: Ref, n: Node, dims: list[tuple[int, int, int, float]], fill: float, base: Ref | None = None, step: int = 1
) -> dict[str, Any]:
    """dims: per output dim (input size, offset, mode, scale); the input has as many dims. With
    base, an element outside the input is base's (of the output's shape) instead of fill."""
    inputs = [x] if base is None else [x, base]
    return {"kernel": "kw_remap", "inputs": inputs, "dims": dims, "fill": fill, "dtype": n.dtype, "step": step}


def _gather(n: Node, g: Graph, arg: Any) -> dict[str, Any] | None:
    """torch.gather: the index (int64, the output's shape) names the source along dim; the other
    dims read the same coordinate (an index no larger than x there, as ATen requires)."""
    x, d, idx = arg(0), arg(1), arg(2)
    if not isinstance(idx, Ref) or g.node(idx.name).dtype != "int64" or list(g.node(idx.name).dims) != list(n.dims):
        return None
    ins = list(g.node(x.name).dims)
    d = int(d) % len(ins)
    if len(ins) != len(n.dims) or any(o > i for k, (i, o) in enumerate(zip(ins, n.dims, strict=True)) if k != d):
        return None
    dims = [(i, 0, BOUNDS, 0.0) for i in ins]
    dims[d] = (ins[d], 0, TAKE, 0.0)
    return _call(x, n, dims, 0.0, base=idx)  # an index out of range reads 0 (ATen raises)


def _slice_scatter(n: Node, g: Graph, arg: Any, kwarg: Any) -> dict[str, Any] | None:
    """base with src written into base[..., start::step, ...] along dim (a slice assignment)."""
    base, src = arg(0), arg(1)
    if not isinstance(base, Ref) or g.node(base.name).dtype != n.dtype or list(g.node(base.name).dims) != list(n.dims):
        return None
    out, ins = list(n.dims), list(g.node(src.name).dims)
    d = int(kwarg(2, "dim", 0)) % len(out)
    start, step = kwarg(3, "start", None) or 0, kwarg(5, "step", 1) or 1
    start = start + out[d] if start < 0 else start
    if len(ins) != len(out) or step < 1 or any(i != o for k, (i, o) in enumerate(zip(ins, out, strict=True)) if k != d):
        return None
    dims = [(i, 0, BOUNDS, 0.0) for i in ins]
    dims[d] = (ins[d], start, SLICE, 0.0)
    return _call(src, n, dims, 0.0, base=base, step=int(step))


def _nearest(ins: list[int], out: list[int], scales: list[Any]) -> list[tuple[int, int, int, float]]:
    """ATen's nearest: src = min(floor(dst * scale), in - 1), scale = 1 / scale_factor where one was
    given, else in / out (float32 either way, as upsample's compute_scales_value)."""
    k = len(ins) - 2
    if len(out) != len(ins) or k < 1 or out[:2] != ins[:2] or len(scales) != k:
        raise _No
    spatial = [
        (i, 0, BOUNDS, f32(1.0 / s) if s is not None and s > 0 else f32(i / o))
        for s, i, o in zip(scales, ins[2:], out[2:], strict=True)
    ]
    return [(ins[0], 0, BOUNDS, 0.0), (ins[1], 0, BOUNDS, 0.0), *spatial]


def f32(v: float) -> float:
    """v rounded to float32, as ATen computes the scale."""
    return float(struct.unpack("f", struct.pack("f", v))[0])


def _padded(ins: list[int], out: list[int], pad: list[int], mode: int) -> list[tuple[int, int, int, float]]:
    """pad lists (low, high) pairs from the last dim backwards; a negative one crops."""
    if len(pad) % 2 or len(pad) // 2 > len(ins) or len(out) != len(ins):
        raise _No
    dims = [(i, 0, mode, 0.0) for i in ins]
    for j in range(len(pad) // 2):
        d = len(ins) - 1 - j
        lo, hi = pad[2 * j], pad[2 * j + 1]
        if ins[d] + lo + hi != out[d] or (mode == REFLECT and max(lo, hi) >= ins[d]):
            raise _No
        dims[d] = (ins[d], -lo, mode, 0.0)
    return dims


def _rolled(ins: list[int], shifts: list[int], axes: list[int]) -> list[tuple[int, int, int, float]]:
    if not axes or len(axes) != len(shifts):  # a roll of the flattened tensor: not a per-dim map
        raise _No
    dims = [(i, 0, BOUNDS, 0.0) for i in ins]
    for s, a in zip(shifts, axes, strict=True):
        d = a % len(ins)
        dims[d] = (ins[d], -int(s), WRAP, 0.0)
    return dims


def emit(call: dict[str, Any], out: str, shape: list[int], val: Any) -> list[str]:
    x = val(call["inputs"][0])
    base = val(call["inputs"][1]) if len(call["inputs"]) > 1 else None
    return [
        f"{out} = torch.empty({tuple(shape)!r}, device=_dev, dtype=torch.{call['dtype']})",
        f"_kw_remap(lib, {x}, {out}, {call['dims']!r}, {call['fill']!r}, _stream, {base}, {call.get('step', 1)})",
    ]


HELPER = '''

def _kw_remap(lib, x, out, dims, fill, stream, base=None, step=1):
    """out[c] = x[src(c)] by our kw_remap kernel (agent/builtin/remap.py): dims gives, per dim,
    (input size, offset, mode, scale) of the source coordinate; x read through its strides.
    Outside x, base[c] where a base is given (a slice assignment), else fill."""
    if out.numel() == 0:
        return
    pad = 6 - out.dim()
    sizes = [1] * pad + list(out.shape)
    ins = [1] * pad + [d[0] for d in dims]
    strides = [0] * (6 - x.dim()) + list(x.stride())  # repeat: x has fewer dims (sizes of 1 in front)
    offs = [0] * pad + [d[1] for d in dims]
    modes = [0] * pad + [d[2] for d in dims]
    scales = [0.0] * pad + [float(d[3]) for d in dims]
    based = [0] * (6 - out.dim()) + list(base.stride()) if base is not None else [0] * 6
    lib.kw_remap(ctypes.c_void_p(x.data_ptr()), None if base is None else ctypes.c_void_p(base.data_ptr()), out,
                 out.element_size(), out.numel(), float(fill), int(step), *sizes, *ins, *strides, *offs, *modes,
                 *scales, *based, stream)
'''


COMMON = r"""
// ---- kw_remap: out[c] = x[src(c)], the source coordinate per dim (agent/builtin/remap.py)
struct kw_remap_geo {
    const void* x;
    const void* base;  // a slice assignment's base, or (take) gather's int64 index, read through bst
    void* y;
    int64_t bytes, n, step, take;
    float fill;
    int64_t d[6], in[6], st[6], off[6], mode[6], bst[6];
    float scale[6];
};

KW_HD static inline void kw_remap_one(const kw_remap_geo& g, int64_t e) {
    int64_t c[6], r = e, at = 0, src = 0;  // e's coordinates; base's element there (read through bst)
    for (int k = 5; k >= 0; --k) { c[k] = r % g.d[k]; r /= g.d[k]; at += c[k] * g.bst[k]; }
    bool inside = true;
    for (int k = 0; k < 6; ++k) {
        const int64_t size = g.in[k];
        int64_t i;
        if (g.scale[k] > 0.0f) {  // nearest upsampling
            i = (int64_t)floorf((float)c[k] * g.scale[k]);
            if (i > size - 1) i = size - 1;
        } else if (g.mode[k] == 5) {  // gather: the index tensor (in base's place) names the source
            i = ((const int64_t*)g.base)[at];
            if (i < 0) i += size;
        } else if (g.mode[k] == 6) {  // repeat_interleave: each source element off times
            i = c[k] / g.off[k];
        } else if (g.mode[k] == 4) {  // the slice start::step of the output (off: start)
            i = c[k] - g.off[k];
            if (i < 0 || i % g.step != 0) inside = false;
            i /= g.step;
        } else {
            i = c[k] + g.off[k];
        }
        if (g.mode[k] == 1) i = ((i % size) + size) % size;
        else if (g.mode[k] == 2) i = i < 0 ? 0 : (i >= size ? size - 1 : i);
        else if (g.mode[k] == 3 && size > 1) {
            const int64_t p = 2 * (size - 1);
            i = ((i % p) + p) % p;
            if (i >= size) i = p - i;
        }
        if (i < 0 || i >= size) inside = false;
        src += i * g.st[k];
    }
    const bool based = g.base && !g.take;  // outside a slice assignment's slice: the base
    if (g.bytes == 4)
        ((float*)g.y)[e] = inside ? ((const float*)g.x)[src] : based ? ((const float*)g.base)[at] : g.fill;
    else if (g.bytes == 8)
        ((int64_t*)g.y)[e] = inside ? ((const int64_t*)g.x)[src] : based ? ((const int64_t*)g.base)[at] : (int64_t)g.fill;
    else
        ((bool*)g.y)[e] = inside ? ((const bool*)g.x)[src] : based ? ((const bool*)g.base)[at] : g.fill != 0.0f;
}

#define KW_REMAP_ARGS const void* x, const void* base, void* y, int64_t bytes, int64_t n, float fill, int64_t step, \
    int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t d4, int64_t d5, \
    int64_t i0, int64_t i1, int64_t i2, int64_t i3, int64_t i4, int64_t i5, \
    int64_t s0, int64_t s1, int64_t s2, int64_t s3, int64_t s4, int64_t s5, \
    int64_t o0, int64_t o1, int64_t o2, int64_t o3, int64_t o4, int64_t o5, \
    int64_t m0, int64_t m1, int64_t m2, int64_t m3, int64_t m4, int64_t m5, \
    float c0, float c1, float c2, float c3, float c4, float c5, \
    int64_t b0, int64_t b1, int64_t b2, int64_t b3, int64_t b4, int64_t b5, void* stream
#define KW_REMAP_PACK() \
    kw_remap_geo g; \
    g.x = x; g.base = base; g.y = y; g.bytes = bytes; g.n = n; g.fill = fill; g.step = step; g.take = 0; \
    { const int64_t d[6] = {d0, d1, d2, d3, d4, d5}, in[6] = {i0, i1, i2, i3, i4, i5}, \
                    st[6] = {s0, s1, s2, s3, s4, s5}, off[6] = {o0, o1, o2, o3, o4, o5}, \
                    mode[6] = {m0, m1, m2, m3, m4, m5}, bst[6] = {b0, b1, b2, b3, b4, b5}; \
      const float sc[6] = {c0, c1, c2, c3, c4, c5}; \
      for (int k = 0; k < 6; ++k) { g.d[k] = d[k]; g.in[k] = in[k]; g.st[k] = st[k]; g.off[k] = off[k]; \
                                    g.mode[k] = mode[k]; g.scale[k] = sc[k]; g.bst[k] = bst[k]; \
                                    g.take |= mode[k] == 5; } }
"""

CPU_SOURCE, CUDA_SOURCE = entry_points("kw_remap", "KW_REMAP")
