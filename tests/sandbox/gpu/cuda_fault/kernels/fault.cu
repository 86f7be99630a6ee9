#include <cstdint>
#include <cuda_runtime.h>

__global__ void wild_write(float* p) { p[threadIdx.x + (1LL << 40)] = 1.f; }

extern "C" int softmax_rows(const float* x, float* out, int64_t rows, int64_t cols, void* stream) {
    wild_write<<<1, 32, 0, (cudaStream_t)stream>>>(out);
    return (int)cudaGetLastError();
}
