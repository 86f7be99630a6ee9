"""Benchmark workloads in KernelBench format, with honest candidates for them: the sandbox bench
(`python -m sandbox bench`) and the pool bench (`python -m benchmarks.pool_bench`) measure the same
code.

- row softmax (memory-bound, one fused kernel per backend; `variant` changes only a comment, so
  each variant is a distinct build; `correct=False` drops the final scale, a wrong result);
- linear + ReLU (the library GEMM plus one fused bias + ReLU kernel), the ~1 ms size of the
  sandbox's throughput and repeatability targets on the H200.
"""

from __future__ import annotations

SOFTMAX_MODEL_NEW = """\
import torch
import torch.nn as nn
import kwrt

lib = kwrt.load()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        rows, cols = x.shape
        out = torch.empty_like(x)
        lib.softmax_rows(x, out, rows, cols, kwrt.stream())
        return out
"""

# Fuses max, exp, sum and scale of each row (torch.softmax(x, 1)); reads x once for the max and
# twice more, writes out once. `correct=False` drops the final scale: a wrong result the sandbox
# must reject, so a test can tell results apart by verdict as well as by candidate hash.
SOFTMAX_CPU = """\
// row softmax, variant {variant}
#include <cmath>
#include <cstdint>
extern "C" int softmax_rows(const float* x, float* out, int64_t rows, int64_t cols, void* stream) {{
    #pragma omp parallel for
    for (int64_t r = 0; r < rows; ++r) {{
        const float* xr = x + r * cols;
        float* o = out + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = xr[c] > m ? xr[c] : m;
        double s = 0;
        for (int64_t c = 0; c < cols; ++c) {{ o[c] = std::exp(xr[c] - m); s += o[c]; }}
        const float inv = {scale};
        for (int64_t c = 0; c < cols; ++c) o[c] *= inv;
    }}
    return 0;
}}
"""

# One block per row; max and sum reduced in shared memory. Same fusion and bytes as the CPU kernel.
SOFTMAX_CUDA = """\
// row softmax, variant {variant}
#include <cmath>
#include <cstdint>
#include <cuda_runtime.h>

constexpr int kThreads = 256;

__global__ void softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t cols) {{
    __shared__ float red[kThreads];
    const float* xr = x + (int64_t)blockIdx.x * cols;
    float* o = out + (int64_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    red[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {{
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }}
    m = red[0];
    __syncthreads();
    float sum = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(xr[c] - m);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {{
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }}
    const float s = red[0];
    const float inv = {scale};
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) o[c] = expf(xr[c] - m) * inv;
}}

extern "C" int softmax_rows(const float* x, float* out, int64_t rows, int64_t cols, void* stream) {{
    if (rows <= 0) return 0;
    softmax_rows_kernel<<<(unsigned)rows, kThreads, 0, (cudaStream_t)stream>>>(x, out, cols);
    return (int)cudaGetLastError();
}}
"""


def softmax_candidate(variant: int, backend: str = "cpu", correct: bool = True) -> dict[str, str]:
    """A candidate workspace for a row-softmax task; each variant has its own content hash (its own build)."""
    if backend == "cuda":
        kernel = SOFTMAX_CUDA.format(variant=variant, scale="1.0f / s" if correct else "1.0f + 0.0f * s")
        return {"model_new.py": SOFTMAX_MODEL_NEW, "kernels/softmax.cu": kernel}
    kernel = SOFTMAX_CPU.format(variant=variant, scale="1.0f / (float)s" if correct else "1.0f")
    return {"model_new.py": SOFTMAX_MODEL_NEW, "kernels/softmax.cpp": kernel}


SOFTMAX_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)


rows = %d
cols = %d


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
"""


# A ~1 ms task on the H200 (2048x4096 @ 4096x4096 fp32, TF32 off: 69 GFLOP at ~51 TFLOP/s):
# the size the throughput and repeatability targets are stated for. The candidate is
# what an agent writes for it: the library GEMM plus one fused bias + ReLU kernel.
LINEAR_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, fin, fout):
        super().__init__()
        self.proj = nn.Linear(fin, fout)

    def forward(self, x):
        return torch.relu(self.proj(x))


batch = %d
fin = %d
fout = %d


def get_inputs():
    return [torch.randn(batch, fin)]


def get_init_inputs():
    return [fin, fout]
"""

LINEAR_MODEL_NEW = """import torch
import torch.nn as nn

import kwrt

lib = kwrt.load()


class ModelNew(nn.Module):
    def __init__(self, fin, fout):
        super().__init__()
        self.proj = nn.Linear(fin, fout)

    def forward(self, x):
        h = torch.mm(x, self.proj.weight.t())  # library GEMM (cuBLAS), allowed under torch-ops=forbid
        out = torch.empty_like(h)
        lib.bias_relu(h, self.proj.bias, out, h.shape[0], h.shape[1], kwrt.stream())
        return out
"""

LINEAR_CUDA = """#include <cstdint>
#include <cuda_runtime.h>
// fuses: + bias, relu
__global__ void bias_relu_kernel(const float* h, const float* b, float* out, int64_t rows, int64_t cols) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < rows * cols) { float v = h[i] + b[i % cols]; out[i] = v > 0.f ? v : 0.f; }
}
extern "C" int bias_relu(const float* h, const float* b, float* out, int64_t rows, int64_t cols, void* stream) {
    int64_t n = rows * cols;
    bias_relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(h, b, out, rows, cols);
    return (int)cudaGetLastError();
}
"""

LINEAR_CPU = """#include <cstdint>
extern "C" int bias_relu(const float* h, const float* b, float* out, int64_t rows, int64_t cols, void* stream) {
    #pragma omp parallel for
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) { float v = h[r * cols + c] + b[c]; out[r * cols + c] = v > 0.f ? v : 0.f; }
    return 0;
}
"""


def linear_relu_candidate(backend: str) -> dict[str, str]:
    """The agent-style candidate for linear_relu_task: library GEMM + one fused kernel."""
    ext = "cu" if backend == "cuda" else "cpp"
    return {
        "model_new.py": LINEAR_MODEL_NEW,
        f"kernels/bias_relu.{ext}": LINEAR_CUDA if backend == "cuda" else LINEAR_CPU,
    }


def softmax_task(rows: int, cols: int) -> str:
    return SOFTMAX_TASK % (rows, cols)


def linear_relu_task(batch: int, fin: int, fout: int) -> str:
    return LINEAR_TASK % (batch, fin, fout)
