#include <cmath>
#include <cstdint>
// only handles cols == 256; reports an error otherwise
extern "C" int softmax_rows(const float* x, float* out, int64_t rows, int64_t cols, void* stream) {
    if (cols != 256) return 7;
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols; float* o = out + r * cols;
        float m = -INFINITY; for (int64_t c = 0; c < cols; ++c) m = xr[c] > m ? xr[c] : m;
        float s = 0; for (int64_t c = 0; c < cols; ++c) { o[c] = std::exp(xr[c] - m); s += o[c]; }
        for (int64_t c = 0; c < cols; ++c) o[c] /= s;
    }
    return 0;
}
