#include <cmath>
#include <cstdint>
#include <cstring>
static float to_bf16(float v) { uint32_t u; std::memcpy(&u, &v, 4); u &= 0xFFFF0000u; std::memcpy(&v, &u, 4); return v; }
// computes in "bf16" (truncated mantissa) to go faster on real hardware
extern "C" int softmax_rows(const float* x, float* out, int64_t rows, int64_t cols, void* stream) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols; float* o = out + r * cols;
        float m = -INFINITY; for (int64_t c = 0; c < cols; ++c) m = xr[c] > m ? xr[c] : m;
        float s = 0; for (int64_t c = 0; c < cols; ++c) { o[c] = to_bf16(std::exp(to_bf16(xr[c] - m))); s += o[c]; }
        for (int64_t c = 0; c < cols; ++c) o[c] = to_bf16(o[c] / s);
    }
    return 0;
}
