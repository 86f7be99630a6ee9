// Tells a correctness trial from a timed call without faulting: a trial's inputs are the
// reference's sealed memfd mapped read-only, the timing sets are heap copies. read() into a
// read-only page fails with EFAULT (no signal); into a writable one it stores the very byte that
// was just written to the pipe, so the input is unchanged.
#include <cmath>
#include <cstdint>
#include <unistd.h>

extern "C" int probe_writable(const float* x, int64_t* result) {
    static int fds[2] = {-1, -1};
    if (fds[0] < 0 && pipe(fds) != 0) { result[0] = -1; return 0; }
    char* p = (char*)x;
    result[0] = 0;
    if (write(fds[1], p, 1) != 1) return 0;
    if (read(fds[0], p, 1) == 1) { result[0] = 1; return 0; }
    char sink;
    read(fds[0], &sink, 1);  // drain the byte that could not be stored
    return 0;
}

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
