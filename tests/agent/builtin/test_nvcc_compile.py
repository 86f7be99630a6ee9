"""The CUDA the built-in policy writes, compiled by nvcc on a machine without a GPU.

Compiling needs no GPU: scripts/cuda_toolchain.sh unpacks nvcc, the CUDA headers and cuBLAS from
NVIDIA's wheels into .cuda/, and these tests build candidates through the sandbox's own build
step (sandbox.build.build: the nvcc command and containment a GPU host uses). They skip where no
nvcc is found, unless KW_REQUIRE_NVCC is set (CI sets it: there a missing compiler fails).
Correctness and speed of the same kernels are the `gpu` tests' work on the device."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from agent.builtin import BuiltinPolicy
from agent.builtin.graph import analyze_source
from agent.builtin.pipeline import build_candidate, own_parts
from agent.policy import TaskInfo
from benchmarks.kernelbench import BLOCKS_DIR
from sandbox import EvalOptions
from sandbox.build import build

from .test_own_kernels import CASES

pytestmark = pytest.mark.nvcc
ROOT = Path(__file__).resolve().parents[3]


def _toolchains() -> list[Path]:
    """nvcc's folders, ours first: a system CUDA may lack cuBLAS's headers, which candidates include."""
    system = shutil.which("nvcc")
    return [ROOT / ".cuda/bin", *([Path(system).resolve().parent] if system else [])]


@pytest.fixture(scope="module")
def nvcc_path() -> str:
    """The folder of an nvcc with cuBLAS's headers beside it, put first on PATH for the tests."""
    for bin_dir in _toolchains():
        top = bin_dir.parent
        if (bin_dir / "nvcc").exists() and any(top.glob("include/cublas_v2.h")) | any(
            top.glob("targets/*/include/cublas_v2.h")
        ):
            return str(bin_dir)
    why = "no nvcc with cuBLAS's headers: bash scripts/cuda_toolchain.sh puts one in .cuda/ (no GPU needed)"
    if os.environ.get("KW_REQUIRE_NVCC"):
        pytest.fail(f"KW_REQUIRE_NVCC is set and there is {why}")
    pytest.skip(why)


@pytest.fixture
def cuda_build(nvcc_path, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{nvcc_path}{os.pathsep}{os.environ.get('PATH', '')}")

    def run(files: dict[str, str], torch_ops: str = "forbid"):
        res, _ = build(files, EvalOptions(backend="cuda", torch_ops=torch_ops, cache_dir=str(tmp_path)))
        return res

    return run


# the families of the thirtieth session's kernels in the fast tier, the rest in the slow one
NEW_FAMILIES = {"gathers", "masks"}


@pytest.mark.parametrize(
    "name", [n if n in NEW_FAMILIES else pytest.param(n, marks=pytest.mark.slow) for n in sorted(CASES)]
)
def test_own_kernels_compile_for_the_gpu(name, cuda_build):
    """Every family of our own kernels (pooling, scans, reductions, gathers, masks, ...): the
    candidate the CPU tests check for correctness, generated for cuda and built by nvcc."""
    src, kernels = CASES[name]
    an = analyze_source(src, profile=False)
    assert an.ok, an.error
    cand = build_candidate(an.graph, an.data, "cuda", torch_ops="forbid")
    assert kernels <= {k for _, k in own_parts(cand.plan)}
    assert "kernels/fused.cu" in cand.files
    res = cuda_build(cand.files)
    assert res.ok and res.mode == "nvcc", res.log[-3000:]


# blocks users upload, one per kind of generated code: attention with masks and gathers,
# convolution with folded batch norm and layouts, norms and GEMM epilogues, embeddings
SLOW = pytest.mark.slow
BLOCKS = [
    pytest.param("hf_gpt2_eager_attention", "forbid", marks=SLOW),  # the fast tier builds its generalised form
    pytest.param("hf_gpt2_eager_attention", "allow", marks=SLOW),
    *(
        pytest.param(b, ops, marks=SLOW)
        for b in ("resnet_bottleneck", "convnext_block", "hf_bert_embeddings")
        for ops in ("forbid", "allow")
    ),
]


@pytest.mark.parametrize(("block", "torch_ops"), BLOCKS)
def test_every_candidate_the_policy_plans_compiles(block, torch_ops, cuda_build):
    """Each distinct kernel file of the policy's plan for the cuda backend (every rewrite, GEMM
    form and launch variant) builds."""
    pol = BuiltinPolicy(profile_reference=False)
    source = (BLOCKS_DIR / f"{block}.py").read_text()
    pol.reset(TaskInfo(block, source, "cuda", {"torch_ops": torch_ops, "preset": "kernelbench"}), [], [])
    assert pol.analysis is not None and pol.analysis.ok, pol.analysis and pol.analysis.error
    kernel_sets: dict[tuple, tuple[str, dict[str, str]]] = {}
    for title, files in pol.planned_candidates():
        kernels = tuple(sorted((p, t) for p, t in files.items() if p.startswith("kernels/")))
        if kernels:
            kernel_sets.setdefault(kernels, (title, files))
    assert kernel_sets, "the plan wrote no kernel file"
    for title, files in kernel_sets.values():
        res = cuda_build(files, torch_ops)
        assert res.ok, f"{title}: {res.log[-3000:]}"


def test_an_nvcc_error_names_the_file_and_line(cuda_build):
    """What a model writing CUDA sees from a broken kernel: nvcc's error with file and line."""
    files = {
        "model_new.py": "class ModelNew:\n    pass\n",
        "kernels/k.cu": (
            "#include <cuda_runtime.h>\n"
            "__global__ void scale(float* x, int n) {\n"
            "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "    if (i < n) x[i] = undefined_name * 2.0f;\n"
            "}\n"
        ),
    }
    res = cuda_build(files)
    assert not res.ok
    hit = next(e for e in res.errors if e.file == "kernels/k.cu")
    assert hit.line == 4 and "undefined_name" in hit.message, res.errors


@pytest.mark.slow  # the fast tier builds two own-kernel families; test_generalise checks this candidate on the CPU
def test_a_candidate_whose_sizes_follow_its_inputs_compiles(cuda_build):
    """An exported graph made general (agent.builtin.generalise): the fused softmax takes its
    1/sqrt(head size) scale as a run-time argument, and the file still builds."""
    from .test_export_capture import GPT2

    pol = BuiltinPolicy(profile_reference=False)
    pol.reset(TaskInfo("gpt2", GPT2, "cuda", {"torch_ops": "forbid"}), [], [])
    step = next(st for st in pol.steps if st.kind == "candidate" and st.graph is not None)
    cand = pol._build(step.graph, gemm=step.gemm)
    assert pol._generalised(step, cand).startswith("Sizes follow the inputs"), pol.general_note
    assert "float s0, void* stream" in cand.files["kernels/fused.cu"]
    res = cuda_build(cand.files)
    assert res.ok, res.log[-3000:]
