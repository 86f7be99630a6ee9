#include <cstdint>
#include <cuda_runtime.h>

// + per-channel bias, relu over an NCHW tensor (one read of h, one write of out)
__global__ void bias_relu_nchw_kernel(const float* h, const float* b, float* out, int64_t n, int64_t channels,
                                      int64_t hw) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = h[i] + b[(i / hw) % channels];
        out[i] = v > 0.f ? v : 0.f;
    }
}

extern "C" int bias_relu_nchw(const float* h, const float* b, float* out, int64_t n, int64_t channels, int64_t hw,
                              void* stream) {
    bias_relu_nchw_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(h, b, out, n, channels, hw);
    return (int)cudaGetLastError();
}
