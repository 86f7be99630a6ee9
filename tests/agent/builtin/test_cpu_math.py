"""The cpu backend's own exp and tanh (kernelgen.CPU_PRELUDE's kw_expf, kw_tanhf): about as
exact as libm's, right at the edges (denormals, overflow, +-inf, NaN), and vectorised by g++ in
an `omp simd` loop (libm's are calls, which kept generated softmax kernels 9x slower than eager)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from agent.builtin.kernelgen import CPU_PRELUDE

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

PROGRAM = CPU_PRELUDE + r"""
#include <cstdio>
extern "C" void apply(const float* __restrict__ a, float* __restrict__ b, int64_t n) {
    #pragma omp simd
    for (int64_t i = 0; i < n; ++i) b[i] = kw_expf(a[i]);
}
int main() {
    static float xs[300000], ys[300000];
    int64_t n = 0;
    for (float x = -103.9f; x < 88.7f && n < 300000; x += 0.00065f) xs[n++] = x;
    apply(xs, ys, n);  // the vectorised path
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
        const double ref = std::exp((double)xs[i]);
        if (ref > 1.2e-38) { const double rel = std::fabs(ys[i] - ref) / ref; if (rel > worst) worst = rel; }
    }
    float sp[6] = {-INFINITY, INFINITY, NAN, 0.0f, -110.0f, 89.0f}, out[6];
    apply(sp, out, 6);
    printf("%lld %.3e %g %g %g %g %g %g\n", (long long)n, worst, out[0], out[1], out[2], out[3], out[4], out[5]);
}
"""


def test_kw_expf_is_exact_to_an_ulp_handles_the_edges_and_vectorises(tmp_path):
    src = tmp_path / "t.cpp"
    src.write_text(PROGRAM)
    build = subprocess.run(["g++", "-O3", "-march=native", "-fopenmp", "-std=c++17", "-fopt-info-vec-optimized", str(src),
                            "-o", str(tmp_path / "t")], capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr
    line_of_loop = PROGRAM[:PROGRAM.index("b[i] = kw_expf(a[i])")].count("\n") + 1
    assert f"t.cpp:{line_of_loop}:" in build.stderr and "loop vectorized" in build.stderr, build.stderr
    n, worst, *special = subprocess.run([str(tmp_path / "t")], capture_output=True, text=True, timeout=60).stdout.split()
    assert int(n) > 290000
    assert float(worst) < 2.4e-7  # 2 ulp; libm's expf is within 1
    assert special == ["0", "inf", "nan", "1", "0", "inf"]


TANH = CPU_PRELUDE + r"""
#include <cstdio>
extern "C" void apply(const float* __restrict__ a, float* __restrict__ b, int64_t n) {
    #pragma omp simd
    for (int64_t i = 0; i < n; ++i) b[i] = kw_tanhf(a[i]);
}
int main() {
    static float xs[400000], ys[400000];
    int64_t n = 0;
    for (float x = -12.0f; x < 12.0f && n < 400000; x += 0.00007f) xs[n++] = x;
    apply(xs, ys, n);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
        const double ref = std::tanh((double)xs[i]);
        if (std::fabs(ref) > 1e-30) { const double rel = std::fabs(ys[i] - ref) / std::fabs(ref); if (rel > worst) worst = rel; }
    }
    float sp[6] = {-INFINITY, INFINITY, NAN, 0.0f, -1e-20f, 50.0f}, out[6];
    apply(sp, out, 6);
    printf("%lld %.3e %g %g %g %g %g %g\n", (long long)n, worst, out[0], out[1], out[2], out[3], out[4], out[5]);
}
"""


def test_kw_tanhf_is_exact_to_two_ulp_handles_the_edges_and_vectorises(tmp_path):
    src = tmp_path / "t.cpp"
    src.write_text(TANH)
    build = subprocess.run(["g++", "-O3", "-march=native", "-fopenmp", "-std=c++17", "-fopt-info-vec-optimized", str(src),
                            "-o", str(tmp_path / "t")], capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr
    line_of_loop = TANH[:TANH.index("b[i] = kw_tanhf(a[i])")].count("\n") + 1
    assert f"t.cpp:{line_of_loop}:" in build.stderr and "loop vectorized" in build.stderr, build.stderr
    n, worst, *special = subprocess.run([str(tmp_path / "t")], capture_output=True, text=True, timeout=60).stdout.split()
    assert int(n) > 340000
    assert float(worst) < 2.4e-7
    assert special == ["-1", "1", "nan", "0", "-1e-20", "1"]
