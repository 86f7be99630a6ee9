#include <cmath>
#include <cstdint>
#include <sched.h>
#include <unistd.h>
#include <omp.h>
// The window pins the timing thread to one CPU and OMP_NUM_THREADS=1 for every process; this kernel
// takes every CPU the host has anyway.
static void take_all_cpus() {
    cpu_set_t set; CPU_ZERO(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long i = 0; i < n; ++i) CPU_SET(i, &set);
    sched_setaffinity(0, sizeof(set), &set);
}
extern "C" int softmax_rows(const float* x, float* out, int64_t rows, int64_t cols, void* stream) {
    int nt = (int)sysconf(_SC_NPROCESSORS_ONLN);
    #pragma omp parallel num_threads(nt)
    {
        take_all_cpus();
        #pragma omp for
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
    }
    return 0;
}
