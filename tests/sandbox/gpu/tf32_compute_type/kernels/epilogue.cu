#include <cstdint>
#include <cuda_runtime.h>

// fuses: + bias, relu (one read of h, one write of out)
__global__ void bias_relu_kernel(const float* h, const float* b, float* out, int64_t rows, int64_t cols) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < rows * cols) {
        float v = h[i] + b[i % cols];
        out[i] = v > 0.f ? v : 0.f;
    }
}

extern "C" int bias_relu(const float* h, const float* b, float* out, int64_t rows, int64_t cols, void* stream) {
    int64_t n = rows * cols;
    bias_relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(h, b, out, rows, cols);
    return (int)cudaGetLastError();
}
