"""Grid sampling of our own: `kw_affine_grid` (aten.affine_grid_generator, `F.affine_grid`) and
`kw_grid_sample` (aten.grid_sampler / grid_sampler_2d, `F.grid_sample`), which a spatial
transformer, an optical-flow warp or a deformable sampler calls and torch-ops=forbid otherwise
rejects.

The arithmetic is ATen's (aten/src/ATen/native/GridSampler.h): a grid coordinate in [-1, 1] is
unnormalised to a pixel position (with align_corners, (c + 1) / 2 * (size - 1); without,
((c + 1) * size - 1) / 2), then clipped (border) or reflected and clipped (reflection); a position
that is not finite becomes -100 (outside, as ATen's safe_downgrade_to_int_range). Bilinear weighs
the four neighbours, a neighbour outside the input counting 0; nearest rounds half to even
(nearbyint). Bicubic stays the ATen call. The affine grid is ATen's base grid (linspace over
[-1, 1], scaled by (n - 1) / n without align_corners) times theta transposed, three products per
coordinate in float32. Inputs are read contiguous: x [N, C, IH, IW], grid [N, OH, OW, 2]; one
thread per output pixel on the GPU, looping over the channels (the source position is computed
once per pixel)."""

from __future__ import annotations

from typing import Any

from agent.builtin.graph import Graph, Node, Ref

INTERPOLATIONS = (0, 1)  # bilinear, nearest (ATen's GridSamplerInterpolation; 2, bicubic, is not ours)
PADDINGS = (0, 1, 2)  # zeros, border, reflection


def tensor_dims(g: Graph, a: Any, dtype: str = "float32") -> list[int] | None:
    """The dims of a tensor argument of that dtype, else None."""
    if not isinstance(a, Ref) or g.node(a.name).dtype != dtype:
        return None
    return list(g.node(a.name).dims)


def grid_sample_call(n: Node, g: Graph, arg: Any) -> dict[str, Any] | None:
    """kw_grid_sample for aten.grid_sampler(_2d)(x, grid, interpolation, padding, align_corners) of a
    float32 4-D input, bilinear or nearest, or None."""
    x, grid = arg(0), arg(1)
    xs, gs = tensor_dims(g, x), tensor_dims(g, grid)
    mode, pad, align = arg(2, 0), arg(3, 0), bool(arg(4, False))
    if n.dtype != "float32" or xs is None or gs is None or len(xs) != 4 or len(gs) != 4 or gs[3] != 2:
        return None
    if mode not in INTERPOLATIONS or pad not in PADDINGS or gs[0] != xs[0] or list(n.dims) != [*xs[:2], *gs[1:3]]:
        return None
    return {
        "kernel": "kw_grid_sample",
        "inputs": [x, grid],
        "ints": [*xs, gs[1], gs[2], mode, pad, int(align)],
        "dtype": "float32",
    }


def affine_grid_call(n: Node, g: Graph, arg: Any) -> dict[str, Any] | None:
    """kw_affine_grid for aten.affine_grid_generator(theta [N, 2, 3], [N, C, H, W], align_corners), or None."""
    theta, size, align = arg(0), arg(1), bool(arg(2, False))
    ts = tensor_dims(g, theta)
    if n.dtype != "float32" or ts is None or len(ts) != 3 or ts[1:] != [2, 3] or not isinstance(size, list):
        return None
    if len(size) != 4 or list(n.dims) != [ts[0], size[2], size[3], 2]:
        return None
    return {
        "kernel": "kw_affine_grid",
        "inputs": [theta],
        "ints": [ts[0], size[2], size[3], int(align)],
        "dtype": "float32",
    }


COMMON = r"""
// ---- kw_grid_sample, kw_affine_grid: F.grid_sample and F.affine_grid (agent/builtin/gridsample.py)
KW_HD static inline float kw_gs_clip(float c, int64_t size) {
    const float hi = (float)(size - 1);
    return c < 0.0f ? 0.0f : (c > hi ? hi : c);
}
KW_HD static inline float kw_gs_reflect(float c, int64_t twice_low, int64_t twice_high) {
    if (twice_low == twice_high) return 0.0f;
    const float lo = (float)twice_low / 2.0f, span = (float)(twice_high - twice_low) / 2.0f;
    c = fabsf(c - lo);
    const float extra = fmodf(c, span);
    const int flips = (int)floorf(c / span);
    return (flips % 2 == 0) ? extra + lo : span - extra + lo;
}
// ATen's grid_sampler_compute_source_index
KW_HD static inline float kw_gs_source(float c, int64_t size, int64_t pad, int64_t align) {
    c = align ? ((c + 1.0f) / 2.0f) * (float)(size - 1) : ((c + 1.0f) * (float)size - 1.0f) / 2.0f;
    if (pad == 1) {
        c = kw_gs_clip(c, size);
    } else if (pad == 2) {
        c = align ? kw_gs_reflect(c, 0, 2 * (size - 1)) : kw_gs_reflect(c, -1, 2 * size - 1);
        c = kw_gs_clip(c, size);
    }
    if (!(c >= -2147483648.0f && c <= 2147483646.0f)) c = -100.0f;  // NaN and infinities too
    return c;
}
KW_HD static inline float kw_gs_at(const float* p, int64_t y, int64_t x, int64_t ih, int64_t iw) {
    return (y >= 0 && y < ih && x >= 0 && x < iw) ? p[y * iw + x] : 0.0f;
}
// one output pixel q = (n, oy, ox) over every channel
KW_HD static inline void kw_grid_sample_one(const float* x, const float* grid, float* y, int64_t q, int64_t c,
                                            int64_t ih, int64_t iw, int64_t oh, int64_t ow, int64_t mode,
                                            int64_t pad, int64_t align) {
    const int64_t n = q / (oh * ow), pix = q % (oh * ow);
    const float ix = kw_gs_source(grid[2 * q], iw, pad, align), iy = kw_gs_source(grid[2 * q + 1], ih, pad, align);
    const float* src = x + n * c * ih * iw;
    float* dst = y + n * c * oh * ow + pix;
    if (mode == 1) {
        const int64_t xn = (int64_t)nearbyintf(ix), yn = (int64_t)nearbyintf(iy);
        for (int64_t k = 0; k < c; ++k) dst[k * oh * ow] = kw_gs_at(src + k * ih * iw, yn, xn, ih, iw);
        return;
    }
    const float fx = floorf(ix), fy = floorf(iy);
    const int64_t x0 = (int64_t)fx, y0 = (int64_t)fy;
    const float wx1 = ix - fx, wy1 = iy - fy, wx0 = (fx + 1.0f) - ix, wy0 = (fy + 1.0f) - iy;
    const float nw = wx0 * wy0, ne = wx1 * wy0, sw = wx0 * wy1, se = wx1 * wy1;
    for (int64_t k = 0; k < c; ++k) {
        const float* p = src + k * ih * iw;
        dst[k * oh * ow] = kw_gs_at(p, y0, x0, ih, iw) * nw + kw_gs_at(p, y0, x0 + 1, ih, iw) * ne
                         + kw_gs_at(p, y0 + 1, x0, ih, iw) * sw + kw_gs_at(p, y0 + 1, x0 + 1, ih, iw) * se;
    }
}
// ATen's linspace_from_neg_one: linspace(-1, 1, n) (its two halves stepped from either end),
// scaled by (n - 1) / n without align_corners
KW_HD static inline float kw_gs_base(int64_t i, int64_t n, int64_t align) {
    if (n <= 1) return 0.0f;
    const float step = 2.0f / (float)(n - 1);
    float v = i < n / 2 ? -1.0f + step * (float)i : 1.0f - step * (float)(n - 1 - i);
    return align ? v : v * (float)(n - 1) / (float)n;
}
KW_HD static inline void kw_affine_grid_one(const float* t, float* g, int64_t q, int64_t h, int64_t w, int64_t align) {
    const int64_t n = q / (h * w), i = (q / w) % h, j = q % w;
    const float bx = kw_gs_base(j, w, align), by = kw_gs_base(i, h, align);
    const float* r = t + 6 * n;
    g[2 * q] = bx * r[0] + by * r[1] + r[2];
    g[2 * q + 1] = bx * r[3] + by * r[4] + r[5];
}
"""

CPU_SOURCE = r"""
extern "C" int kw_grid_sample(const float* x, const float* grid, float* y, int64_t n, int64_t c, int64_t ih,
                              int64_t iw, int64_t oh, int64_t ow, int64_t mode, int64_t pad, int64_t align,
                              void* stream) {
    (void)stream;
    const int64_t m = n * oh * ow;
    #pragma omp parallel for if (m * c > (1 << 16))
    for (int64_t q = 0; q < m; ++q) kw_grid_sample_one(x, grid, y, q, c, ih, iw, oh, ow, mode, pad, align);
    return 0;
}

extern "C" int kw_affine_grid(const float* theta, float* grid, int64_t n, int64_t h, int64_t w, int64_t align,
                              void* stream) {
    (void)stream;
    for (int64_t q = 0; q < n * h * w; ++q) kw_affine_grid_one(theta, grid, q, h, w, align);
    return 0;
}
"""

CUDA_SOURCE = r"""
__global__ void kw_grid_sample_kernel(const float* __restrict__ x, const float* __restrict__ grid,
                                      float* __restrict__ y, int64_t m, int64_t c, int64_t ih, int64_t iw,
                                      int64_t oh, int64_t ow, int64_t mode, int64_t pad, int64_t align) {
    KW_GRID(m) kw_grid_sample_one(x, grid, y, q, c, ih, iw, oh, ow, mode, pad, align);
}

extern "C" int kw_grid_sample(const float* x, const float* grid, float* y, int64_t n, int64_t c, int64_t ih,
                              int64_t iw, int64_t oh, int64_t ow, int64_t mode, int64_t pad, int64_t align,
                              void* stream) {
    const int64_t m = n * oh * ow;
    kw_grid_sample_kernel<<<kw_blocks(m), 256, 0, (cudaStream_t)stream>>>(x, grid, y, m, c, ih, iw, oh, ow, mode,
                                                                          pad, align);
    return (int)cudaGetLastError();
}

__global__ void kw_affine_grid_kernel(const float* __restrict__ theta, float* __restrict__ grid, int64_t m,
                                      int64_t h, int64_t w, int64_t align) {
    KW_GRID(m) kw_affine_grid_one(theta, grid, q, h, w, align);
}

extern "C" int kw_affine_grid(const float* theta, float* grid, int64_t n, int64_t h, int64_t w, int64_t align,
                              void* stream) {
    const int64_t m = n * h * w;
    kw_affine_grid_kernel<<<kw_blocks(m), 256, 0, (cudaStream_t)stream>>>(theta, grid, m, h, w, align);
    return (int)cudaGetLastError();
}
"""
