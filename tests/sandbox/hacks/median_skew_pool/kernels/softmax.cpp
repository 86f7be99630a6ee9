#include <cmath>
#include <cstdint>
#include <cstring>
// An honest row softmax; `copies` extra outputs get the same rows (the pool's refill).
extern "C" int softmax_rows(const float* x, float* out, int64_t rows, int64_t cols, void* stream) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* o = out + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = xr[c] > m ? xr[c] : m;
        double s = 0;
        for (int64_t c = 0; c < cols; ++c) { o[c] = std::exp(xr[c] - m); s += o[c]; }
        float inv = 1.0f / (float)s;
        for (int64_t c = 0; c < cols; ++c) o[c] *= inv;
    }
    return 0;
}
