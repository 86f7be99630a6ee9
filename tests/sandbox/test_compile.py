"""The compile step: content-hash cache, atomic publish under concurrency, error parsing,
load_inline prebuilt once."""

from __future__ import annotations

import shutil
import threading

import pytest

from sandbox import EvalOptions, compile_candidate, evaluate, load_candidate
from sandbox.compile_log import parse_errors
from sandbox.schema import Status
from tests.sandbox.helpers import GPU, candidate


def opts(tmp_path, backend_override: str = "cpu", **kw) -> EvalOptions:
    return EvalOptions(backend=backend_override, cache_dir=str(tmp_path), **kw)


def test_identical_sources_never_rebuild(tmp_path):
    files = candidate("softmax_cpp")
    first = compile_candidate(files, opts(tmp_path))
    assert first.ok and not first.cached and first.mode == "cxx"
    second = compile_candidate(files, opts(tmp_path))
    assert second.ok and second.cached and second.artifact_key == first.artifact_key
    assert second.seconds < 0.5
    # only Python changed: the kernel library is shared
    files["model_new.py"] += "\n# comment\n"
    assert compile_candidate(files, opts(tmp_path)).cached


def test_different_kernels_get_different_entries(tmp_path):
    a = candidate("softmax_cpp")
    b = dict(a)
    b["kernels/softmax.cpp"] = b["kernels/softmax.cpp"].replace("s += o[c];", "s = s + o[c];")
    ka = compile_candidate(a, opts(tmp_path)).artifact_key
    kb = compile_candidate(b, opts(tmp_path)).artifact_key
    assert ka != kb
    assert compile_candidate(a, opts(tmp_path)).cached and compile_candidate(b, opts(tmp_path)).cached


def test_parallel_builds_of_the_same_source_agree(tmp_path):
    files = candidate("scale_bias_cpp")
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(compile_candidate(files, opts(tmp_path)))) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.ok for r in results) and len({r.artifact_key for r in results}) == 1
    assert (tmp_path / "builds" / results[0].artifact_key / "lib.so").exists()
    assert not list((tmp_path / "staging").iterdir())


def test_compile_errors_are_cached_and_parsed(tmp_path):
    files = candidate("softmax_cpp")
    files["kernels/softmax.cpp"] += "\nint broken( { return 0; }\n"
    res = compile_candidate(files, opts(tmp_path))
    assert not res.ok and res.errors
    assert res.errors[0].file == "kernels/softmax.cpp" and res.errors[0].line > 15
    assert "g++" in res.log and "/tmp/" not in "".join(e.file for e in res.errors)
    again = compile_candidate(files, opts(tmp_path))
    assert again.cached and not again.ok and again.errors == res.errors


def test_cu_files_need_the_cuda_backend(tmp_path):
    files = {"model_new.py": "x = 1\n", "kernels/k.cu": "__global__ void k() {}\n"}
    res = compile_candidate(files, opts(tmp_path))
    assert not res.ok and "cuda backend" in res.errors[0].message


def test_paths_must_stay_in_the_workspace(tmp_path):
    res = compile_candidate({"model_new.py": "x = 1\n", "../evil.cpp": ""}, opts(tmp_path))
    assert not res.ok and "inside the workspace" in res.errors[0].message


def test_parse_gcc_and_nvcc_errors():
    log = (
        "/tmp/b/src/kernels/a.cpp:12:5: error: expected ';' before '}' token\n"
        'kernels/b.cu(33): error: identifier "foo" is undefined\n'
        "/usr/bin/ld: a.o: in function `f': undefined reference to `g'\n"
    )
    errs = parse_errors(log, ["/tmp/b/src"])
    got = {(e.file, e.line, e.column) for e in errs}
    assert ("kernels/a.cpp", 12, 5) in got and ("kernels/b.cu", 33, None) in got
    assert any(e.file == "(link)" for e in errs)


INLINE = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = """
#include <torch/extension.h>
torch::Tensor scale2(torch::Tensor x) {
    auto out = torch::empty_like(x);
    auto* a = x.data_ptr<float>();
    auto* b = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) b[i] = 2.0f * a[i];
    return out;
}
"""
ext = load_inline(name="kw_scale2", cpp_sources=src, functions=["scale2"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.scale2(x.contiguous())
'''

DOUBLE_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


n = 1000


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
"""


@pytest.mark.slow
def test_load_inline_builds_once_in_the_compile_step(tmp_path):
    options = EvalOptions(backend="cpu", cache_dir=str(tmp_path), compile_baseline=False, timing_budget_s=0.05)
    files = {"model_new.py": INLINE}
    first = compile_candidate(files, options)
    assert first.ok, first.log[-3000:]
    assert first.mode == "load_inline" and not first.cached
    second = compile_candidate(files, options)
    assert second.cached and second.seconds < 1.0
    res = evaluate(DOUBLE_TASK, files, options)
    assert res.status == Status.OK, res.reasons
    assert res.compile.cached and res.duration_s < first.seconds + 60
    assert res.audit.custom_kernel_ran and any("kw_scale2.scale2" in k for k in res.audit.kernels)
    assert not any("not prebuilt" in f for f in res.audit.findings)


def test_the_static_scan_runs_before_the_build(tmp_path):
    """A load_inline build imports model_new.py in a child: a source the scan rejects is never
    built nor run, by the compile tool or by an evaluation, and the error names its line."""
    files = {
        "model_new.py": INLINE.replace("\nclass ModelNew", "\nimport gc\nseen = gc.get_objects()\n\nclass ModelNew")
    }
    options = EvalOptions(backend="cpu", cache_dir=str(tmp_path), compile_baseline=False, timing_budget_s=0.05)
    res = compile_candidate(files, options)
    assert not res.ok and res.mode == "none" and res.seconds == 0.0
    line = files["model_new.py"].splitlines().index("seen = gc.get_objects()") + 1
    assert [(e.file, e.line) for e in res.errors] == [("model_new.py", line)]
    assert "garbage collector" in res.errors[0].message
    ev = evaluate(DOUBLE_TASK, files, options)
    assert ev.status == Status.REJECTED and ev.compile is None, ev.reasons
    assert not list(tmp_path.rglob("*.so"))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_cuda_fast_path_builds_on_a_cpu_host(tmp_path):
    files = load_candidate(GPU / "softmax_cu")
    res = compile_candidate(files, opts(tmp_path, backend_override="cuda"))
    assert res.ok, res.log
    assert res.mode == "nvcc" and "-arch=sm_90" in res.log
    bad = dict(files)
    bad["kernels/softmax.cu"] = bad["kernels/softmax.cu"].replace("float m = -INFINITY;", "float m = undefined_name;")
    res = compile_candidate(bad, opts(tmp_path, backend_override="cuda"))
    assert not res.ok and res.errors[0].file == "kernels/softmax.cu" and res.errors[0].line == 10
    assert "undefined_name" in res.errors[0].message
