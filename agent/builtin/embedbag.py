"""Embedding bags of our own, `kw_embedding_bag`: aten.embedding_bag and _embedding_bag (nn.EmbeddingBag,
F.embedding_bag: DLRM's and other recommenders' sparse features), which torch-ops=forbid otherwise
rejects.

ATen's forward: bag b reduces the weight rows indices[offsets[b]:offsets[b + 1]] (the last bag to
the end of indices, or to offsets' last entry with include_last_offset) by sum, mean or max; an
index equal to padding_idx is left out (and not counted by the mean); an empty bag is zeros;
per_sample_weights (sum only) scales each row. Only the op's first output is computed (the
capture keeps the island only where offset2bag, bag sizes and max indices go unread). An index
outside the table, which ATen refuses, makes its bag NaN here (a wrong answer the checker sees,
never a read outside the table); offsets are clamped to the indices. Sums are float32 in index
order, as ATen's CPU kernel adds. One thread per output element on the GPU."""

from __future__ import annotations

from typing import Any

from agent.builtin.graph import Graph, Node
from agent.builtin.gridsample import tensor_dims

MODES = (0, 1, 2)  # sum, mean, max


def embedding_bag_call(n: Node, g: Graph, arg: Any, kwarg: Any) -> dict[str, Any] | None:
    """kw_embedding_bag(_w) for embedding_bag / _embedding_bag(weight, indices, offsets, scale_grad,
    mode, sparse, per_sample_weights, include_last_offset, padding_idx) with 1-D int64 indices and
    offsets, or None."""
    w, idx, off = arg(0), arg(1), arg(2)
    ws, xs, os = tensor_dims(g, w, "float32"), tensor_dims(g, idx, "int64"), tensor_dims(g, off, "int64")
    mode = kwarg(4, "mode", 0)
    psw = kwarg(6, "per_sample_weights")
    last = int(bool(kwarg(7, "include_last_offset", False)))
    # F.embedding_bag passes a row (a negative one counted from the end), or -1 or None: none
    pad = kwarg(8, "padding_idx", None)
    pad = -1 if pad is None else pad
    if ws is None or xs is None or os is None or len(ws) != 2 or len(xs) != 1 or len(os) != 1:
        return None
    if mode not in MODES or not isinstance(pad, int) or n.dtype != "float32" or list(n.dims) != [os[0] - last, ws[1]]:
        return None
    inputs = [w, idx, off]
    if psw is not None:
        if mode != 0 or tensor_dims(g, psw, "float32") != xs:
            return None
        inputs.append(psw)
    return {
        "kernel": "kw_embedding_bag_w" if psw is not None else "kw_embedding_bag",
        "inputs": inputs,
        "ints": [os[0] - last, ws[1], ws[0], xs[0], os[0], mode, pad],
        "dtype": "float32",
    }


COMMON = r"""
// ---- kw_embedding_bag: nn.EmbeddingBag's forward (agent/builtin/embedbag.py)
KW_HD static inline int64_t kw_bag_clamp(int64_t v, int64_t n) { return v < 0 ? 0 : (v > n ? n : v); }
// element e = (bag, d) of the output
KW_HD static inline float kw_embedding_bag_one(const float* w, const int64_t* idx, const int64_t* off, const float* psw,
                                               int64_t e, int64_t dim, int64_t rows, int64_t n_idx, int64_t n_off,
                                               int64_t mode, int64_t pad) {
    const int64_t b = e / dim, d = e % dim;
    const int64_t lo = kw_bag_clamp(off[b], n_idx), hi = b + 1 < n_off ? kw_bag_clamp(off[b + 1], n_idx) : n_idx;
    float acc = mode == 2 ? -INFINITY : 0.0f;
    int64_t count = 0;
    for (int64_t i = lo; i < hi; ++i) {
        const int64_t r = idx[i];
        if (pad >= 0 && r == pad) continue;  // ATen's -1: no padding index
        if (r < 0 || r >= rows) return NAN;
        const float v = w[r * dim + d];
        if (mode == 2) {
            acc = (v > acc || v != v) ? v : acc;
        } else {
            acc += psw ? v * psw[i] : v;
        }
        ++count;
    }
    if (count == 0) return 0.0f;
    return mode == 1 ? acc / (float)count : acc;
}
"""

CPU_SOURCE = r"""
static int kw_embedding_bag_cpu(const float* w, const int64_t* idx, const int64_t* off, const float* psw, float* y,
                                int64_t bags, int64_t dim, int64_t rows, int64_t n_idx, int64_t n_off, int64_t mode,
                                int64_t pad) {
    #pragma omp parallel for if (bags * dim > (1 << 16))
    for (int64_t e = 0; e < bags * dim; ++e)
        y[e] = kw_embedding_bag_one(w, idx, off, psw, e, dim, rows, n_idx, n_off, mode, pad);
    return 0;
}

extern "C" int kw_embedding_bag(const float* w, const int64_t* idx, const int64_t* off, float* y, int64_t bags,
                                int64_t dim, int64_t rows, int64_t n_idx, int64_t n_off, int64_t mode, int64_t pad,
                                void* stream) {
    (void)stream;
    return kw_embedding_bag_cpu(w, idx, off, nullptr, y, bags, dim, rows, n_idx, n_off, mode, pad);
}

extern "C" int kw_embedding_bag_w(const float* w, const int64_t* idx, const int64_t* off, const float* psw, float* y,
                                  int64_t bags, int64_t dim, int64_t rows, int64_t n_idx, int64_t n_off, int64_t mode,
                                  int64_t pad, void* stream) {
    (void)stream;
    return kw_embedding_bag_cpu(w, idx, off, psw, y, bags, dim, rows, n_idx, n_off, mode, pad);
}
"""

CUDA_SOURCE = r"""
__global__ void kw_embedding_bag_kernel(const float* __restrict__ w, const int64_t* __restrict__ idx,
                                        const int64_t* __restrict__ off, const float* __restrict__ psw,
                                        float* __restrict__ y, int64_t m, int64_t dim, int64_t rows, int64_t n_idx,
                                        int64_t n_off, int64_t mode, int64_t pad) {
    KW_GRID(m) y[q] = kw_embedding_bag_one(w, idx, off, psw, q, dim, rows, n_idx, n_off, mode, pad);
}

static int kw_embedding_bag_cuda(const float* w, const int64_t* idx, const int64_t* off, const float* psw, float* y,
                                 int64_t bags, int64_t dim, int64_t rows, int64_t n_idx, int64_t n_off, int64_t mode,
                                 int64_t pad, void* stream) {
    const int64_t m = bags * dim;
    kw_embedding_bag_kernel<<<kw_blocks(m), 256, 0, (cudaStream_t)stream>>>(w, idx, off, psw, y, m, dim, rows, n_idx,
                                                                            n_off, mode, pad);
    return (int)cudaGetLastError();
}

extern "C" int kw_embedding_bag(const float* w, const int64_t* idx, const int64_t* off, float* y, int64_t bags,
                                int64_t dim, int64_t rows, int64_t n_idx, int64_t n_off, int64_t mode, int64_t pad,
                                void* stream) {
    return kw_embedding_bag_cuda(w, idx, off, nullptr, y, bags, dim, rows, n_idx, n_off, mode, pad, stream);
}

extern "C" int kw_embedding_bag_w(const float* w, const int64_t* idx, const int64_t* off, const float* psw, float* y,
                                  int64_t bags, int64_t dim, int64_t rows, int64_t n_idx, int64_t n_off, int64_t mode,
                                  int64_t pad, void* stream) {
    return kw_embedding_bag_cuda(w, idx, off, psw, y, bags, dim, rows, n_idx, n_off, mode, pad, stream);
}
"""
