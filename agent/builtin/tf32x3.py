"""Float32 GEMMs on tensor cores at float32's accuracy: 3xTF32 (the cuda backend's `gemm="3xtf32"`).

Why: on the H200 a float32 GEMM on the CUDA cores runs at about 51 TFLOP/s and one in TF32 at
about 411 (docs/benchmarks.md), but one TF32 product keeps 11 significant bits of each operand,
so its error is 8 to 130 times float32's (measured, docs/benchmarks.md) and the correctness check
rejects it at large K, rightly.
Split each operand x = hi + lo, hi = x rounded to TF32 and lo = (x - hi) rounded to TF32: then
A.B = Ah.Bh + Ah.Bl + Al.Bh + Al.Bl, and the last term and the split's residue are each below
2^-21 of a product (CUTLASS ships the same scheme as its 3xTF32 "fast accurate" GEMM). The
tensor cores add into their float32 accumulator rounding towards zero, a bias that grows with the
depth: one GEMM of depth 3K over all-positive values of K = 8192 was off by 1.5e-4 of the result
(the H200, 2026-12-03), past the 1e-4 tolerance. So K is cut into chunks of CHUNK: per chunk one
TF32 GEMM over [Al | Ah | Ah] and [Bh ; Bl ; Bh] (the small products first, while the sum is
small), batched over the chunks, and the chunks' results summed in double. The sandbox judges the
result like any other: its error against float64 must stay inside the float32 tolerances
(tests/agent/builtin/test_gpu_tf32x3.py prints it beside cuBLAS's float32 and one TF32 product).

Where it does not pay: a GEMM that is bound by memory (a matrix-vector product, K of a few
dozen), where the split's extra reads and writes cost more than the tensor cores save
(`pays_off`). A weight's split is kept while the weight is the same tensor at the same version.

Convolutions (`CONV_HELPER`): a convolution is a GEMM of depth C_in/groups * prod(kernel), so the
thirds are stacked along the input channels, per group: conv([xl | xh | xh], [wh | wl | wh]) in one
cuDNN convolution with TF32 allowed (torch.cudnn_convolution's own argument: no global flag).
On the H200 its worst error against float64 was 0.04 tolerance units (0.09 on the wide trial)
over 118 convolutions of KernelBench with K up to 8928, unchunked (docs/benchmarks.md,
benchmarks/conv3x_probe.py), and it ran 1.4-8x faster than float32 cuDNN on most of them but
2-20x slower on others (small K, grouped, some transposed 2-d shapes) with no rule on the shape
that separates the two. So the candidate times both on the first call of each shape, as cuDNN's
own benchmark mode times its algorithms, and keeps the faster (`_kw_conv3`).
"""

from __future__ import annotations

import math

from agent.builtin.graph import Graph, Node, Ref

TITLE = "The same kernels with each large GEMM and convolution as 3xTF32 on tensor cores"  # the policy's step
LINE = (
    "3xTF32 GEMM: the .cu's split + one tensor-core GEMM per chunk of K, summed (float32's accuracy); "
    "3xTF32 convolution: the split stacked along the input channels, one cuDNN TF32 convolution, "
    "where it timed faster than float32 on the first call"
)

CHUNK = 1024  # K per chunk: the tensor cores' float32 accumulation restarts from zero each chunk

# the split into chunked thirds, one TF32 GEMM per chunk (batched), the chunks summed in order
CUDA = r"""
// 3xTF32 (agent/builtin/tf32x3.py): x = hi + lo, both exact in TF32. K is cut into chunks of kc;
// chunk t of A is [Al | Ah | Ah] and of B [Bh ; Bl ; Bh] (the small products first), so one TF32
// GEMM of depth 3kc per chunk is Al.Bh + Ah.Bl + Ah.Bh. The tensor cores add into their float32
// accumulator rounding towards zero, a bias that grows with the depth (K = 8192 of all-positive
// values: 1.5e-4 of the result in one GEMM of depth 3K); per chunk it stays at float32's size,
// and the chunks' partial results are summed here in double.
__device__ __forceinline__ float kw_tf32_round(float v) {
    const uint32_t u = __float_as_uint(v);
    if ((u & 0x7f800000u) == 0x7f800000u) return v;  // inf and nan stay
    const float r = __uint_as_float((u + 0x1000u) & 0xffffe000u);  // nearest, ties away from zero
    return isinf(r) ? __uint_as_float(u & 0xffffe000u) : r;  // no rounding up past the largest float
}

// x: batch x [P, Q] contiguous, K along Q (kinner) or P; out: batch x [P, 3 Kp] or [3 Kp, Q] with
// Kp = chunks * kc (zeros past K, written by the caller). Third s of a chunk holds lo where bit s
// of `lo_thirds` is set, else hi.
__global__ void kw_split3_tf32_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n, int64_t P,
                                      int64_t Q, int64_t kc, int64_t kp, int kinner, int lo_thirds) {
    const int64_t pq = P * Q;
    const int64_t rows = kinner ? P : 3 * kp, cols = kinner ? 3 * kp : Q;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float v = x[i];
        const float h = kw_tf32_round(v);
        const float l = isfinite(v) ? kw_tf32_round(v - h) : 0.0f;
        const int64_t b = i / pq, r = (i / Q) % P, c = i % Q;
        const int64_t k = kinner ? c : r;
        const int64_t at = (k / kc) * 3 * kc + k % kc;  // its place along K in the first third of its chunk
        float* o = out + b * rows * cols;
        #pragma unroll
        for (int s = 0; s < 3; ++s) {
            const float w = ((lo_thirds >> s) & 1) ? l : h;
            if (kinner) o[r * cols + at + s * kc] = w; else o[(at + s * kc) * cols + c] = w;
        }
    }
}

extern "C" int kw_split3_tf32(const float* x, float* out, int64_t batch, int64_t P, int64_t Q, int64_t kc, int64_t kp,
                              int64_t kinner, int64_t lo_thirds, void* stream) {
    const int64_t n = batch * P * Q;
    if (n <= 0) return 0;
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads < 131072 ? (n + threads - 1) / threads : 131072;
    kw_split3_tf32_kernel<<<(unsigned)blocks, threads, 0, (cudaStream_t)stream>>>(x, out, n, P, Q, kc, kp, (int)kinner,
                                                                                   (int)lo_thirds);
    return (int)cudaGetLastError();
}

__global__ void kw_sum_chunks_kernel(const float* __restrict__ part, float* __restrict__ out, int64_t n, int64_t chunks) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double acc = 0.0;
        for (int64_t t = 0; t < chunks; ++t) acc += (double)part[t * n + i];
        out[i] = (float)acc;
    }
}

// C[b] (row-major [M, N], contiguous over the batch) = op(A[b]) @ op(B[b]) over the split
// operands (ta/tb: the logical matrix is the stored one transposed; sa/sb: batch strides, 0 to
// broadcast), one TF32 GEMM of depth 3kc per chunk into `part` (chunks x batch x M x N; unused
// for one chunk), then their sum. cuBLAS is column-major: it computes C^T = op(B)^T op(A)^T.
extern "C" int kw_gemm_3xtf32(const float* a, const float* b, float* part, float* c, int64_t M, int64_t N,
                              int64_t kc, int64_t chunks, int64_t ta, int64_t lda, int64_t sa, int64_t tb, int64_t ldb,
                              int64_t sb, int64_t batch, void* stream) {
    cublasHandle_t h = kw_cublas();
    if (h == nullptr) return 1000;
    cublasSetStream(h, (cudaStream_t)stream);
    const float one = 1.0f, zero = 0.0f;
    const int64_t mn = M * N, ca = ta ? 3 * kc * lda : 3 * kc, cb = tb ? 3 * kc : 3 * kc * ldb;
    float* dst = chunks > 1 ? part : c;
    const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (batch == 1) {  // the chunks are the batch
        st = cublasGemmStridedBatchedEx(h, opb, opa, (int)N, (int)M, (int)(3 * kc), &one, b, CUDA_R_32F, (int)ldb,
                                        (long long)cb, a, CUDA_R_32F, (int)lda, (long long)ca, &zero, dst, CUDA_R_32F,
                                        (int)N, (long long)mn, (int)chunks, CUBLAS_COMPUTE_32F_FAST_TF32,
                                        CUBLAS_GEMM_DEFAULT);
    } else {
        for (int64_t t = 0; t < chunks && st == CUBLAS_STATUS_SUCCESS; ++t) {
            st = cublasGemmStridedBatchedEx(h, opb, opa, (int)N, (int)M, (int)(3 * kc), &one, b + t * cb, CUDA_R_32F,
                                            (int)ldb, (long long)sb, a + t * ca, CUDA_R_32F, (int)lda, (long long)sa,
                                            &zero, dst + t * batch * mn, CUDA_R_32F, (int)N, (long long)mn,
                                            (int)batch, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT);
        }
    }
    if (st != CUBLAS_STATUS_SUCCESS) return 1000 + (int)st;
    if (chunks > 1) {
        const int64_t n = batch * mn;
        const int threads = 256;
        const int64_t blocks = (n + threads - 1) / threads < 131072 ? (n + threads - 1) / threads : 131072;
        kw_sum_chunks_kernel<<<(unsigned)blocks, threads, 0, (cudaStream_t)stream>>>(part, c, n, chunks);
    }
    return (int)cudaGetLastError();
}
"""

# model_new.py's side: layouts, the split (a weight's kept by modelgen.KEPT_HELPER's _kw_kept),
# the GEMM; anything it cannot read in place (4-d operands, broadcast batches, strided slices)
# goes to torch.matmul
HELPER = """

_KW_CHUNK = @CHUNK@


def _kw_trans(x):
    \"\"\"0 if the last two dims of x are row-major, 1 if they are the transpose of row-major
    memory, None otherwise; a batch (3-d) must be dense too.\"\"\"
    r, c = x.shape[-2], x.shape[-1]
    if x.dim() == 3 and x.shape[0] > 1 and x.stride(0) != r * c:
        return None
    if x.stride(-1) == 1 and (x.stride(-2) == c or r == 1):
        return 0
    if x.stride(-2) == 1 and (x.stride(-1) == r or c == 1):
        return 1
    return None


def _kw_chunks(k):
    \"\"\"(chunk length, chunks) covering k.\"\"\"
    n = -(-k // _KW_CHUNK)
    return -(-k // n), n


def _kw_split3(lib, x, trans, is_b, stream):
    \"\"\"x's chunked TF32 thirds along K: A's chunks [lo | hi | hi], B's [hi ; lo ; hi].\"\"\"
    batch = x.shape[0] if x.dim() == 3 else 1
    p, q = (x.shape[-1], x.shape[-2]) if trans else (x.shape[-2], x.shape[-1])
    kinner = int(trans == 1) if is_b else int(trans == 0)
    k = q if kinner else p
    kc, n = _kw_chunks(k)
    shape = (batch, p, 3 * kc * n) if kinner else (batch, 3 * kc * n, q)
    out = (torch.zeros if kc * n != k else torch.empty)(shape, device=x.device, dtype=torch.float32)
    lib.kw_split3_tf32(ctypes.c_void_p(x.data_ptr()), out, batch, p, q, kc, kc * n, kinner, 0b010 if is_b else 0b001,
                       stream)
    return out


def _kw_mm3(lib, a, b, stream, module=None, key=None):
    \"\"\"a @ b in 3xTF32 (a: [M, K] or [B, M, K]; b: [K, N] or [B, K, N]; float32); b's split is
    kept in `module` under `key` when b is a weight.\"\"\"
    if a.dim() == 3 and b.dim() == 2 and a.is_contiguous():
        return _kw_mm3(lib, a.reshape(-1, a.shape[-1]), b, stream, module, key).view(*a.shape[:-1], b.shape[-1])
    ta, tb = _kw_trans(a), _kw_trans(b)
    same = a.dim() == 2 or b.dim() == 2 or a.shape[0] == b.shape[0]
    if (ta is None or tb is None or a.dim() not in (2, 3) or b.dim() not in (2, 3) or not same
            or a.dtype != torch.float32 or b.dtype != torch.float32 or a.shape[-1] != b.shape[-2]):
        return torch.matmul(a, b)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    kc, chunks = _kw_chunks(k)
    batch = max(a.shape[0] if a.dim() == 3 else 1, b.shape[0] if b.dim() == 3 else 1)
    a3 = _kw_split3(lib, a, ta, False, stream)
    split_b = lambda w: _kw_split3(lib, w, tb, True, stream)
    b3 = _kw_kept(module, "_kw_tf32", key, b, split_b) if module is not None else split_b(b)
    out = torch.empty((batch, m, n) if max(a.dim(), b.dim()) == 3 else (m, n), device=a.device, dtype=torch.float32)
    part = torch.empty((chunks, batch * m * n), device=a.device, dtype=torch.float32) if chunks > 1 else out
    lib.kw_gemm_3xtf32(a3, b3, part, out, m, n, kc, chunks, ta, m if ta else 3 * kc * chunks,
                       a3[0].numel() if a.dim() == 3 else 0, tb, 3 * kc * chunks if tb else n,
                       b3[0].numel() if b.dim() == 3 else 0, batch, stream)
    return out
""".replace("@CHUNK@", str(CHUNK))


# model_new.py's side for convolutions (after KEPT_HELPER): ATen's convolution ops take these
# arguments in this order; the rest of a call goes to the op itself
CONV_HELPER = """

_KW_CONV_ARGS = {
    "conv": ("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
    "conv_transpose": ("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"),
    "convolution": ("input", "weight", "bias", "stride", "padding", "dilation", "transposed", "output_padding",
                    "groups"),
}
_KW_CONV_PICKS = {}  # (node, input shape, weight shape) -> whether 3xTF32 timed faster on its first call


def _kw_split3_rows(lib, x, outer, lo_thirds, stream):
    \"\"\"x's rows ([outer, rest]) as TF32 thirds, [outer, 3, rest]: lo where bit s of lo_thirds is set.\"\"\"
    x = x if x.is_contiguous() else x.contiguous()
    out = torch.empty((outer, 3, x.numel() // outer), device=x.device, dtype=torch.float32)
    inner = x.numel() // outer  # kw_split3_tf32 with one chunk of K = inner per row is exactly this layout
    lib.kw_split3_tf32(ctypes.c_void_p(x.data_ptr()), out, 1, outer, inner, inner, inner, 1, lo_thirds, stream)
    return out


def _kw_weight3(lib, w, groups, transposed, stream):
    \"\"\"[wh | wl | wh] along the input channels of each group: [Cout, 3 Cin/g, k...] for a
    convolution, [3 Cin, Cout/g, k...] for a transposed one (its weight is [Cin, Cout/g, k...]).\"\"\"
    shape = list(w.shape)
    shape[0 if transposed else 1] *= 3
    return _kw_split3_rows(lib, w, groups if transposed else w.shape[0], 0b010, stream).view(shape)


def _kw_cudnn(x, w, transposed, stride, padding, dilation, output_padding, groups):
    \"\"\"cuDNN's convolution with TF32 allowed for this call alone (its benchmark mode as set).\"\"\"
    bench = torch.backends.cudnn.benchmark
    if transposed:
        return torch.cudnn_convolution_transpose(x, w, padding, output_padding, stride, dilation, groups, bench,
                                                 False, True)
    return torch.cudnn_convolution(x, w, padding, stride, dilation, groups, bench, False, True)


def _kw_faster(fast, slow, reps=3):
    \"\"\"Whether fast() takes less than 0.95 of slow()'s device time (each warmed once, then reps
    calls between two events).\"\"\"
    times = []
    for fn in (fast, slow):
        fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times[0] < 0.95 * times[1]


def _kw_conv3(lib, op, kind, stream, module, key, *args, **kwargs):
    \"\"\"op(*args, **kwargs), an ATen convolution of `kind`, as one TF32 convolution over the
    operands' thirds where that timed faster on the first call of these shapes; float32 otherwise
    (and for what it cannot stack: other dtypes, string padding).\"\"\"
    a = dict(zip(_KW_CONV_ARGS[kind], args), **kwargs)
    x, w, bias = a["input"], a["weight"], a.get("bias")
    picked = (key, tuple(x.shape), tuple(w.shape))
    pick = _KW_CONV_PICKS.get(picked)
    if pick is False:  # timed slower: float32 as written, nothing else per call
        return op(*args, **kwargs)
    nd = w.dim() - 2
    if x.dtype != torch.float32 or w.dtype != torch.float32 or isinstance(a.get("padding"), str) or x.dim() != nd + 2:
        return op(*args, **kwargs)

    def geo(name, default):
        v = a.get(name)
        v = default if v is None else v
        return [int(v)] * nd if isinstance(v, int) else [int(t) for t in v]

    transposed = kind == "conv_transpose" or (kind == "convolution" and bool(a.get("transposed")))
    groups = int(a.get("groups") or 1)
    geometry = (geo("stride", 1), geo("padding", 0), geo("dilation", 1), geo("output_padding", 0), groups)

    def three():
        x3 = _kw_split3_rows(lib, x, x.shape[0] * groups, 0b001, stream).view(x.shape[0], 3 * x.shape[1], *x.shape[2:])
        w3 = _kw_kept(module, "_kw_tf32", key, w, lambda w: _kw_weight3(lib, w, groups, transposed, stream))
        y = _kw_cudnn(x3, w3, transposed, *geometry)
        return y if bias is None else y.add_(bias.view(1, -1, *[1] * nd))

    if pick is None:
        if x.is_cuda and torch.cuda.is_current_stream_capturing():  # no timing inside a CUDA graph's capture
            return op(*args, **kwargs)
        pick = _kw_faster(three, lambda: op(*args, **kwargs))
        _KW_CONV_PICKS[picked] = pick
    return three() if pick else op(*args, **kwargs)
"""

CONV_TARGETS = {  # ATen convolution -> its argument order in CONV_HELPER's _KW_CONV_ARGS
    **{f"aten.conv{d}d.default": "conv" for d in (1, 2, 3)},
    **{f"aten.conv_transpose{d}d.input": "conv_transpose" for d in (1, 2, 3)},
    "aten.convolution.default": "convolution",
}
CONV_MIN_K = 32  # input channels per group x kernel taps: a depthwise convolution is bound by memory


# the H200 as measured (docs/benchmarks.md): float32 GEMM on the CUDA cores, TF32 on the tensor
# cores as cuBLAS reaches them at these sizes, memory bandwidth as a copy sees it
FP32_FLOPS, TF32_FLOPS, BANDWIDTH = 51e12, 400e12, 3.5e12
GAIN = 1.25  # the estimate must promise at least this much: the model is rough
MIN_FLOP = 2e8  # smaller GEMMs take microseconds; the split's launches would be most of them


def estimate_s(batch: int, m: int, n: int, k: int, weight: bool) -> tuple[float, float]:
    """(float32, 3xTF32) seconds of one GEMM: the float32 one bound by the CUDA cores; 3xTF32 by
    three times the tensor-core FLOPs plus its memory traffic: each operand read once and written
    three times by the split (a weight's split is kept: none for it), the chunks' partial results
    written and read once more when there are several."""
    flop = 2.0 * batch * m * n * k
    chunks = -(-k // CHUNK)
    split = 16.0 * batch * m * k + (0.0 if weight else 16.0 * batch * k * n)
    partial = 8.0 * batch * m * n * chunks if chunks > 1 else 0.0
    return flop / FP32_FLOPS, 3 * flop / TF32_FLOPS + (split + partial) / BANDWIDTH


def node_pays(g: Graph, node: Node) -> bool:
    """Whether 3xTF32 is estimated GAIN times faster than float32 for this GEMM node."""
    shape = gemm_shape(g, node) if node.op in ("matmul", "matmul_nt", "linear") else None
    if shape is None or 2.0 * shape[0] * shape[1] * shape[2] * shape[3] < MIN_FLOP:
        return False
    fp32, tf32 = estimate_s(*shape, weight=node.op in ("linear", "matmul_nt"))  # the kept splits
    return fp32 >= GAIN * tf32


def gemm_shape(g: Graph, node: Node) -> tuple[int, int, int, int] | None:
    """(batch, M, N, K) of a GEMM node (matmul, or linear / matmul_nt: x @ W^T) from its operands'
    shapes, or None. A 2-d right operand folds the left one's batch into M (one GEMM)."""
    refs = node.refs()
    if len(refs) < 2:
        return None
    a, b = g.node(refs[0]).shape, g.node(refs[1]).shape
    if not a or not b or len(a) < 2 or len(b) < 2:
        return None
    a, b = [int(d) for d in a], [int(d) for d in b]
    nt = node.op in ("linear", "matmul_nt")
    if nt or len(b) == 2:
        n = b[0] if nt else b[-1]
        return 1, math.prod(a[:-1]), n, a[-1]
    return max(math.prod(a[:-2]), math.prod(b[:-2])), a[-2], b[-1], a[-1]


def conv_kind(node: Node) -> str | None:
    """The argument order (CONV_HELPER's _KW_CONV_ARGS) of a convolution node, or None."""
    if node.op == "conv2d":
        return "conv"
    return CONV_TARGETS.get(str(node.attrs.get("target", ""))) if node.op == "aten" else None


def conv_worth_timing(g: Graph, node: Node) -> bool:
    """Whether a convolution is large enough for the candidate to time 3xTF32 against float32 on
    it (`_kw_conv3`): at least MIN_FLOP and CONV_MIN_K, float32, a weight that is no channels-last
    copy. The timing decides; no estimate here separates the wins from the losses."""
    if conv_kind(node) is None or len(node.refs()) < 2 or not node.shape:
        return False
    x, w = g.node(node.refs()[0]), g.node(node.refs()[1])
    if not x.shape or not w.shape or len(w.shape) < 3 or w.op == "channels_last" or (w.dtype or "float32") != "float32":
        return False
    # w.shape[1]: input channels per group, or a transposed convolution's outputs per group (each
    # input element reaches that many per tap): either way what the GEMM's depth or width scales with
    taps = math.prod(int(d) for d in w.shape[2:]) * int(w.shape[1])
    transposed = conv_kind(node) == "conv_transpose" or (conv_kind(node) == "convolution" and _call_arg(node, 6))
    flop = 2.0 * math.prod(int(d) for d in (x.shape if transposed else node.shape)) * taps
    return flop >= MIN_FLOP and taps >= CONV_MIN_K


def _call_arg(node: Node, i: int) -> object:
    """The literal value of an ATen node's i-th positional argument, or None."""
    args = node.attrs.get("call", {}).get("args", [])
    return args[i].get("v") if i < len(args) and isinstance(args[i], dict) else None


def conv_bias(node: Node) -> bool:
    """Whether a convolution node adds a bias inside the call: an ATen one with a bias argument, or
    a conv2d node that keeps its bias (lowering splits it off, but pipeline.LONE_BIAS puts it back
    into the library call where the add would be a kernel of its own: a conv feeding a cat or
    another conv, as in GoogleNet's Inception branches)."""
    if node.op == "conv2d":
        return conv2d_bias(node) is not None
    if node.op != "aten":
        return False
    call = node.attrs.get("call", {})
    args, kwargs = call.get("args", []), call.get("kwargs", {})
    b = args[2] if len(args) > 2 else kwargs.get("bias")
    return isinstance(b, dict) and ("arg" in b or b.get("v") is not None)


def conv2d_bias(node: Node) -> Ref | None:
    """The bias a conv2d node adds inside its call (its third argument), or None."""
    b = node.args[2] if node.op == "conv2d" and len(node.args) > 2 else None
    return b if isinstance(b, Ref) else None


def pays_off(g: Graph | None) -> bool:
    """Whether some GEMM of g is estimated to gain from 3xTF32 (`node_pays`), or some convolution
    is worth timing in it (`conv_worth_timing`)."""
    return g is not None and any(node_pays(g, node) or conv_worth_timing(g, node) for node in g.nodes)
