"""agent.builtin.convsearch: the search candidate is a generated candidate whose model_new.py asks
kwrt for cuDNN's algorithm search. Built from a real generated candidate and evaluated by the
real sandbox (CPU): the static scan accepts it, it imports, computes the same, and the result
records the setting."""

from __future__ import annotations

import pytest

from agent.builtin import BuiltinPolicy
from agent.builtin.convsearch import has_convolutions, with_search
from agent.task import task_from_source
from sandbox import EvalOptions, evaluate
from tests.agent.builtin.conftest import SMALL, task_source


@pytest.mark.slow  # moved out of the fast tier: CI near its 20 minutes (2026-12-06)
def test_a_generated_candidate_with_the_search_passes_the_sandbox_and_is_recorded(tmp_path):
    src = task_source("basic_residual_block", **SMALL["basic_residual_block"])
    task = task_from_source(src, "basic_residual_block", "cpu", {"torch_ops": "allow"})
    pol = BuiltinPolicy(max_variants=1)
    pol.reset(task, [], [])
    step = next(s for s in pol.steps if s.kind == "candidate" and s.graph is not None)
    files = dict(pol._build(step.graph).files)
    files["model_new.py"] = with_search(files["model_new.py"])
    opts = EvalOptions(
        backend="cpu", compile_baseline=False, timing_budget_s=0.05, min_timed_calls=20, cache_dir=str(tmp_path)
    )
    res = evaluate(src, files, opts)
    assert res.status.value == "ok", res.reasons
    assert any(f.startswith("setting: cuDNN searched") for f in res.audit.findings), res.audit.findings


def test_convolutions_are_found_in_the_graph_or_else_in_the_source():
    src = task_source("basic_residual_block", **SMALL["basic_residual_block"])
    assert has_convolutions(None, src)
    assert not has_convolutions(None, task_source("rmsnorm_swish", **SMALL["rmsnorm_swish"]))
    head = '"""A docstring."""\nfrom __future__ import annotations\n\nimport torch\n'
    out = with_search(head)
    assert out.index("from __future__") < out.index("search_conv_algorithms()") < out.index("import torch")


def test_the_search_rewrites_every_file_of_the_best_so_a_later_candidates_kernel_is_not_mixed_in():
    """The workspace keeps what the last candidate wrote: when the best is an earlier candidate,
    the search must write all of its files again, else its model_new.py runs a later candidate's
    kernel and the kept result carries no label of this policy's (L2/11 on the H200, 2026-12-03)."""
    from agent.builtin.convsearch import TAG
    from agent.builtin.policy import _Tried

    src = task_source("basic_residual_block", **SMALL["basic_residual_block"])
    task = task_from_source(src, "basic_residual_block", "cpu", {"torch_ops": "allow"})
    pol = BuiltinPolicy(max_variants=1)
    pol.reset(task, [], [])
    first = _Tried("Fuse", {"model_new.py": "import kernels\n", "kernels.cu": "// A\n"}, status="ok", reward=1)
    first.speedup_vs_eager = 1.05
    later = _Tried("3xTF32", {"model_new.py": "import kernels\n#3x\n", "kernels.cu": "// B\n"}, status="ok", reward=1)
    later.speedup_vs_eager = 1.04
    pol.tried = [first, later]
    workspace = {**first.files, **later.files}
    action = pol._search_action(head="")
    for call in action.tool_calls:
        if call.name == "write_file":
            workspace[call.arguments["path"]] = call.arguments["content"]
    assert workspace["kernels.cu"] == "// A\n"
    assert "search_conv_algorithms()" in workspace["model_new.py"]
    assert pol.label_of(workspace) == f"Fuse {TAG}"
