// fuses: x * weight + bias (one read of x, one write of out)
#include <cstdint>
extern "C" int scale_bias(const float* x, const float* w, const float* b, float* out, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            out[r * cols + c] = x[r * cols + c] * w[c] + b[c];
    return 0;
}
