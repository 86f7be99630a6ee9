"""Bilinear upsampling of our own, `kw_bilinear`: `upsample_bilinear2d` (U-Net's up blocks,
segmentation heads, `F.interpolate(..., mode="bilinear")`), which torch-ops=forbid otherwise
rejects. The source position of an output pixel is ATen's (area_pixel_compute_source_index):
with align_corners, dst * (in - 1) / (out - 1); without, (dst + 0.5) * scale - 0.5 clamped at 0,
scale = 1 / scale_factor where one was given, else in / out (float32, as ATen computes it).
The input is read contiguous [N*C, H, W]; one thread per output pixel on the GPU."""

from __future__ import annotations

from typing import Any

from agent.builtin.graph import Graph, Node, Ref
from agent.builtin.remap import f32


def bilinear_call(n: Node, g: Graph, arg: Any, kwarg: Any) -> dict[str, Any] | None:
    """The kw_bilinear call for aten.upsample_bilinear2d(.vec) of a float32 NCHW tensor, or None."""
    x = arg(0)
    if n.dtype != "float32" or not isinstance(x, Ref) or g.node(x.name).dtype != "float32":
        return None
    ins, out = list(g.node(x.name).dims), list(n.dims)
    if len(ins) != 4 or len(out) != 4 or ins[:2] != out[:2]:
        return None
    align = bool(arg(2, False))
    if str(n.attrs.get("target", "")).endswith(".vec"):  # (x, output_size, align_corners, scale_factors)
        scales = kwarg(3, "scale_factors") or [None, None]
    else:  # (x, output_size, align_corners, scales_h, scales_w)
        scales = [arg(3, None), arg(4, None)]
    hw = [_scale(i, o, s, align) for i, o, s in zip(ins[2:], out[2:], scales, strict=True)]
    return {
        "kernel": "kw_bilinear",
        "inputs": [x],
        "ints": [ins[0] * ins[1], ins[2], ins[3], out[2], out[3], int(align), *hw],
        "dtype": "float32",
    }


def _scale(i: int, o: int, s: Any, align: bool) -> float:
    if align:
        return f32((i - 1) / (o - 1)) if o > 1 else 0.0
    return f32(1.0 / s) if s is not None and s > 0 else f32(i / o)


COMMON = r"""
// ---- kw_bilinear: bilinear upsampling of [planes, ih, iw] to [planes, oh, ow] (agent/builtin/bilinear.py)
KW_HD static inline float kw_bilinear_one(const float* x, int64_t e, int64_t ih, int64_t iw, int64_t oh, int64_t ow,
                                          int64_t align, float sh, float sw) {
    const int64_t ox = e % ow, oy = (e / ow) % oh, p = e / (ow * oh);
    float fy = align ? sh * (float)oy : sh * ((float)oy + 0.5f) - 0.5f;
    float fx = align ? sw * (float)ox : sw * ((float)ox + 0.5f) - 0.5f;
    fy = fy < 0.0f ? 0.0f : fy;
    fx = fx < 0.0f ? 0.0f : fx;
    const int64_t y0 = (int64_t)fy, x0 = (int64_t)fx;
    const int64_t y1 = y0 + (y0 < ih - 1 ? 1 : 0), x1 = x0 + (x0 < iw - 1 ? 1 : 0);
    const float ly = fy - (float)y0, lx = fx - (float)x0;
    const float* s = x + p * ih * iw;
    return (1.0f - ly) * ((1.0f - lx) * s[y0 * iw + x0] + lx * s[y0 * iw + x1])
         + ly * ((1.0f - lx) * s[y1 * iw + x0] + lx * s[y1 * iw + x1]);
}
"""

CPU_SOURCE = r"""
extern "C" int kw_bilinear(const float* x, float* y, int64_t planes, int64_t ih, int64_t iw, int64_t oh, int64_t ow,
                           int64_t align, float sh, float sw, void* stream) {
    (void)stream;
    const int64_t n = planes * oh * ow;
    #pragma omp parallel for if (n > (1 << 16))
    for (int64_t e = 0; e < n; ++e) y[e] = kw_bilinear_one(x, e, ih, iw, oh, ow, align, sh, sw);
    return 0;
}
"""

CUDA_SOURCE = r"""
__global__ void kw_bilinear_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, int64_t ih,
                                   int64_t iw, int64_t oh, int64_t ow, int64_t align, float sh, float sw) {
    KW_GRID(n) y[q] = kw_bilinear_one(x, q, ih, iw, oh, ow, align, sh, sw);
}

extern "C" int kw_bilinear(const float* x, float* y, int64_t planes, int64_t ih, int64_t iw, int64_t oh, int64_t ow,
                           int64_t align, float sh, float sw, void* stream) {
    const int64_t n = planes * oh * ow;
    kw_bilinear_kernel<<<kw_blocks(n), 256, 0, (cudaStream_t)stream>>>(x, y, n, ih, iw, oh, ow, align, sh, sw);
    return (int)cudaGetLastError();
}
"""
