"""The cpu backend's own exp, tanh, log, log1p and erf (kernelgen.CPU_PRELUDE's kw_expf, kw_tanhf,
kw_logf, kw_log1pf, kw_erff): about as exact as libm's, right at the edges (denormals, overflow, +-inf,
NaN), and vectorised by g++ in an `omp simd` loop (libm's are calls, which kept generated softmax kernels 9x slower than eager)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from agent.builtin.kernelgen import CPU_PRELUDE

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

# {fn}: the function under test, {ref}: its double-precision reference, {lo} {hi} {step}: the sweep
# (every float32 result of a normal size is compared), {special}: six edge inputs.
PROGRAM = (
    CPU_PRELUDE
    + r"""
#include <cstdio>
extern "C" void apply(const float* __restrict__ a, float* __restrict__ b, int64_t n) {
    #pragma omp simd
    for (int64_t i = 0; i < n; ++i) b[i] = {fn}(a[i]);
}
int main() {
    static float xs[400000], ys[400000];
    int64_t n = 0;
    for (float x = {lo}; x < {hi} && n < 400000; x += {step}) xs[n++] = x;
    apply(xs, ys, n);  // the vectorised path
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
        const double ref = {ref}((double)xs[i]);
        if (std::fabs(ref) > 1.2e-38) { const double rel = std::fabs(ys[i] - ref) / std::fabs(ref); if (rel > worst) worst = rel; }
    }
    float sp[6] = {special}, out[6];
    apply(sp, out, 6);
    printf("%lld %.3e %g %g %g %g %g %g\n", (long long)n, worst, out[0], out[1], out[2], out[3], out[4], out[5]);
}
"""
)

CASES = {
    "kw_expf": dict(
        ref="std::exp",
        lo="-103.9f",
        hi="88.7f",
        step="0.00065f",
        special="{-INFINITY, INFINITY, NAN, 0.0f, -110.0f, 89.0f}",
        expect=["0", "inf", "nan", "1", "0", "inf"],
    ),
    "kw_tanhf": dict(
        ref="std::tanh",
        lo="-12.0f",
        hi="12.0f",
        step="0.00007f",
        special="{-INFINITY, INFINITY, NAN, 0.0f, -1e-20f, 50.0f}",
        expect=["-1", "1", "nan", "0", "-1e-20", "1"],
    ),
    "kw_logf": dict(
        ref="std::log",
        lo="0.001f",
        hi="1000.0f",
        step="0.0025f",
        special="{0.0f, -1.0f, INFINITY, NAN, 1.0f, 1e-45f}",
        expect=["-inf", "nan", "inf", "nan", "0", "-103.279"],
    ),
    "kw_erff": dict(
        ref="std::erf",
        lo="-6.0f",
        hi="6.0f",
        step="0.00004f",
        special="{-INFINITY, INFINITY, NAN, 0.0f, 1e-20f, -0.5f}",
        expect=["-1", "1", "nan", "0", "1.12838e-20", "-0.5205"],
    ),
    "kw_log1pf": dict(
        ref="std::log1p",
        lo="-0.9999f",
        hi="28.0f",
        step="0.00007f",
        special="{-1.0f, -2.0f, INFINITY, NAN, 0.0f, 1e-20f}",
        expect=["-inf", "nan", "inf", "nan", "0", "1e-20"],
    ),
}


@pytest.mark.parametrize("fn", sorted(CASES))
def test_within_two_ulp_right_at_the_edges_and_vectorised(fn, tmp_path):
    case = CASES[fn]
    program = PROGRAM
    for key in ("ref", "lo", "hi", "step", "special"):
        program = program.replace("{" + key + "}", case[key])
    program = program.replace("{fn}", fn)
    src = tmp_path / "t.cpp"
    src.write_text(program)
    build = subprocess.run(
        [
            "g++",
            "-O3",
            "-march=native",
            "-fopenmp",
            "-std=c++17",
            "-fopt-info-vec-optimized",
            str(src),
            "-o",
            str(tmp_path / "t"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert build.returncode == 0, build.stderr
    line_of_loop = program[: program.index(f"b[i] = {fn}(a[i])")].count("\n") + 1
    assert f"t.cpp:{line_of_loop}:" in build.stderr and "loop vectorized" in build.stderr, build.stderr
    n, worst, *special = subprocess.run(
        [str(tmp_path / "t")], capture_output=True, text=True, timeout=60
    ).stdout.split()
    assert int(n) > 290000
    assert float(worst) < 2.4e-7  # 2 ulp
    assert special == case["expect"]
