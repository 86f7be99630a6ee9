// fuses: + bias, relu
#include <cstdint>
extern "C" int bias_relu(const float* h, const float* b, float* out, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            float v = h[r * cols + c] + b[c];
            out[r * cols + c] = v > 0.f ? v : 0.f;
        }
    return 0;
}
