"""CUDA backend: honest candidates and the GPU-only exploit classes. Run on the GPU host with
`python3 -m pytest -m gpu tests/sandbox`; everything here skips without a CUDA device."""

from __future__ import annotations

import json

import pytest
import torch

from sandbox import EvalOptions, compile_candidate, evaluate, load_candidate, profile_candidate
from sandbox.schema import Status
from tests.sandbox.helpers import GPU, task

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

GPU_HACKS = sorted(p.name for p in GPU.iterdir() if (p / "expected.json").exists())


@pytest.fixture
def cuda(cache_dir):
    def make(**kw) -> EvalOptions:
        base = dict(
            backend="cuda", compile_baseline=False, timing_budget_s=0.2, cache_dir=cache_dir, eval_timeout_s=300
        )
        base.update(kw)
        return EvalOptions(**base)

    return make


def test_honest_cuda_softmax(cuda):
    res = evaluate(task("softmax_tiny.py"), load_candidate(GPU / "softmax_cu"), cuda())
    assert res.status == Status.OK, res.reasons
    assert res.timing.clock == "cuda_events" and res.timing.l2_flush
    assert res.device and "NVIDIA" in res.device or res.device
    assert res.audit.custom_kernel_ran
    assert any("softmax_rows_kernel" in k for k in res.audit.kernels), res.audit.kernels
    assert res.roofline and res.roofline.peak_bandwidth_gbs > 100


def test_honest_cuda_gemm_epilogue_with_compile_baseline(cuda):
    res = evaluate(task("matmul_tiny.py"), load_candidate(GPU / "matmul_relu_cu"), cuda(compile_baseline=True))
    assert res.status == Status.OK, res.reasons
    assert res.timing.compile is not None and res.speedup_vs_compile is not None, res.audit.findings


def test_cuda_compile_is_cached(cuda, tmp_path):
    files = load_candidate(GPU / "softmax_cu")
    first = compile_candidate(files, cuda(cache_dir=str(tmp_path)))
    assert first.ok and first.mode == "nvcc"
    second = compile_candidate(files, cuda(cache_dir=str(tmp_path)))
    assert second.cached and second.seconds < 0.1


@pytest.mark.parametrize("name", GPU_HACKS)
def test_gpu_hack_is_caught(name, cuda):
    expected = json.loads((GPU / name / "expected.json").read_text())
    files = load_candidate(GPU / name)
    files.pop("expected.json", None)
    res = evaluate(task(expected["task"]), files, cuda())
    text = "\n".join(res.reasons + [t.message for t in res.trials])
    assert res.reward == -1, text
    assert res.status.value == expected["status"], text
    assert expected["reason"] in text, text


def test_cuda_fault_does_not_poison_the_next_evaluation(cuda):
    files = load_candidate(GPU / "cuda_fault")
    files.pop("expected.json", None)
    assert evaluate(task("softmax_tiny.py"), files, cuda()).status == Status.RUNTIME_ERROR
    res = evaluate(task("softmax_tiny.py"), load_candidate(GPU / "softmax_cu"), cuda())
    assert res.status == Status.OK, res.reasons


def test_profile_has_kernel_rows(cuda):
    res = profile_candidate(task("softmax_tiny.py"), load_candidate(GPU / "softmax_cu"), cuda())
    assert res.status == Status.OK, res.reasons
    assert any("softmax_rows_kernel" in r.name for r in res.profile), [r.name for r in res.profile]
    assert abs(sum(r.share for r in res.profile) - 1.0) < 1e-6


@pytest.mark.slow
def test_load_inline_cuda_candidate(cuda):
    src = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = """
__global__ void relu_k(const float* x, float* y, long n) { long i = blockIdx.x * (long)blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f; }
torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    relu_k<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
cpp_src = "torch::Tensor relu(torch::Tensor x);"
ext = load_inline(name="kw_relu_cuda", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["relu"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
'''
    files = {"model_new.py": src}
    opts = cuda()
    cres = compile_candidate(files, opts)
    assert cres.ok and cres.mode == "load_inline", cres.log[-3000:]
    res = evaluate(task("relu_rand.py"), files, opts)
    assert res.status == Status.OK, res.reasons
    assert res.compile.cached


def _timer_stats(fn, inputs):
    from sandbox.timing import Timer

    stats, _ = Timer("cuda").run(fn, [inputs], budget_s=0.05, min_calls=20, max_calls=200, warmup=3)
    return stats


def test_host_time_hidden_by_the_head_start_is_charged():
    """0.1 ms of host work per call, then a tiny kernel: the head start hides the host work from
    the events (the device time is the kernel's), and the back-to-back pass charges it."""
    from sandbox.timing import HEAD_START_MS, _perf_counter

    def busy(x):
        t0 = _perf_counter()
        while _perf_counter() - t0 < 1e-4:
            pass
        return x + 1

    assert HEAD_START_MS > 0.1
    stats = _timer_stats(busy, [torch.ones(256, device="cuda")])
    assert stats["device_median_ms"] < 0.05, stats
    assert stats["loop_ms"] >= 0.09 and stats["median_ms"] >= 0.09, stats


def test_device_bound_call_is_timed_by_its_device_work():
    x = torch.empty(1 << 26, device="cuda")  # 256 MB copy: far more device time than host time
    stats = _timer_stats(lambda t: t.clone(), [x])
    assert stats["median_ms"] == pytest.approx(stats["device_median_ms"], rel=0.05), stats
    assert stats["host_limited_calls"] == 0 and stats["host_median_ms"] < stats["median_ms"], stats
    assert stats["loop_ms"] is None  # host time far below device time: the back-to-back pass cannot bind, skipped


def test_a_forward_that_synchronises_is_not_charged_the_head_start():
    """Its wait for the head start falls before the start event; the work after it is timed."""
    from sandbox.timing import HEAD_START_MS

    def syncing(x):
        torch.cuda.synchronize()
        return x + 1

    stats = _timer_stats(syncing, [torch.ones(256, device="cuda")])
    assert stats["host_limited_calls"] > 0, stats
    assert stats["median_ms"] < HEAD_START_MS / 2, stats
