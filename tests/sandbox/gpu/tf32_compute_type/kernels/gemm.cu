#include <cstdint>
#include <cuda_runtime.h>
#include <cublas_v2.h>

// out[M, N] = x[M, K] @ w[N, K]^T with TF32 compute: no math mode set, only a compute type
extern "C" int gemm_tf32(const float* x, const float* w, float* out, int64_t M, int64_t N, int64_t K, void* stream) {
    static cublasHandle_t h = nullptr;
    if (h == nullptr && cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 1000;
    cublasSetStream(h, (cudaStream_t)stream);
    const float one = 1.0f, zero = 0.0f;
    const cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, w, CUDA_R_32F,
                                           (int)K, x, CUDA_R_32F, (int)K, &zero, out, CUDA_R_32F, (int)N,
                                           CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? (int)cudaGetLastError() : 1000 + (int)st;
}
