// The red team's a5 (a load_inline module calling at::_ops::_softmax::redispatch with the CPU key,
// below the Python key where the dispatch recorder sits), written for the fast path so that the test
// builds in a second: the ATen types are declared here instead of coming from torch's headers, and
// the entry is weak so that kwrt's loader, which does not see libtorch's symbols, loads the library
// (tests/sandbox/test_audit.py builds the real load_inline module).
#include <cmath>
#include <cstdint>
namespace c10 { struct DispatchKeySet { uint64_t repr_; }; }
namespace at {
struct Tensor { void* impl_; };
namespace _ops { struct _softmax { __attribute__((weak)) static Tensor redispatch(c10::DispatchKeySet, const Tensor&, int64_t, bool); }; }
}

extern "C" int softmax_rows(const float* x, float* out, int64_t rows, int64_t cols, void* stream) {
    if (stream == (void*)1 && &at::_ops::_softmax::redispatch) {  // never taken: the entry only has to be linked
        at::Tensor t{(void*)x};
        at::_ops::_softmax::redispatch(c10::DispatchKeySet{2}, t, 1, false);
    }
    #pragma omp parallel for
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
