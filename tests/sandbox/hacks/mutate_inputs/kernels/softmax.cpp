#include <cmath>
#include <cstdint>
// computes softmax in place in x (saves a buffer), then copies to out
extern "C" int softmax_inplace_copy(float* x, float* out, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) {
        float* xr = x + r * cols;
        float m = -INFINITY; for (int64_t c = 0; c < cols; ++c) m = xr[c] > m ? xr[c] : m;
        double s = 0; for (int64_t c = 0; c < cols; ++c) { xr[c] = std::exp(xr[c] - m); s += xr[c]; }
        for (int64_t c = 0; c < cols; ++c) { xr[c] = (float)(xr[c] / s); out[r * cols + c] = xr[c]; }
    }
    return 0;
}
