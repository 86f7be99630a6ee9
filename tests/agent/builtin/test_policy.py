"""The built-in policy end to end: the real agent loop, the real sandbox (CPU backend), the
small examples. Each run compiles kernels and evaluates them in the sandbox's child processes."""

from __future__ import annotations

import dataclasses

import pytest

from agent.builtin import BuiltinPolicy
from agent.evaluator import LocalEvaluator
from agent.events import FileEdit, Finished, ModelMessage, ToolCall
from agent.loop import Budgets, run
from agent.task import task_from_source

from .conftest import SMALL, task_source

FAST = {"compile_baseline": False, "timing_budget_s": 0.2, "min_timed_calls": 5}


def _run(name: str, **policy_kw):
    task = task_from_source(task_source(name, **SMALL[name]), name, "cpu", dict(FAST))
    pol = BuiltinPolicy(profile_best=policy_kw.pop("profile_best", False), **{"max_variants": 1, **policy_kw})
    return run(task, pol, LocalEvaluator(), Budgets(max_turns=20))


@pytest.mark.slow
def test_softmax_run_reads_like_an_expert_and_ends_on_a_verified_kernel():
    res = _run("row_softmax_small", max_variants=2, profile_best=True)
    traj = res.trajectory
    assert res.reason == "model_finished" and res.verified
    messages = [e.content for e in traj.of_type(ModelMessage)]
    assert "Captured the forward with torch.fx" in messages[0] and "Eager per-op breakdown" in messages[0]
    assert "Speed of light" in messages[0]
    tools = [e.name for e in traj.of_type(ToolCall)]
    assert tools[0] == "read_file" and tools[-1] == "finish"
    assert tools.count("evaluate") == 2 and "compile" in tools and "profile" in tools
    edited = {e.path for e in traj.of_type(FileEdit)}
    assert edited == {"model_new.py", "kernels/fused.cpp"}
    assert "Summary of the candidates" in messages[-1]
    fin = traj.finished()
    assert fin.best_reward is not None and fin.best_reward >= 1
    assert "vs eager" in fin.summary


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rmsnorm_swish", "diag_scale_matmul", "linear_gelu_residual"])
def test_policy_produces_correct_kernels_on_the_examples(name):
    res = _run(name, try_unrewritten=False)
    assert res.verified, res.trajectory.finished().summary
    best = res.best.files
    assert "kernels/fused.cpp" in best and "class ModelNew" in best["model_new.py"]
    if name == "diag_scale_matmul":
        turns = [e.content for e in res.trajectory.of_type(ModelMessage)]
        assert any("diag(d) @ X is a row scaling" in t for t in turns)
        assert "torch.matmul" not in best["model_new.py"]


@pytest.mark.slow
def test_batch_norm_folding_passes_the_sandbox_with_reinit_and_shape_trials():
    res = _run("basic_residual_block", try_unrewritten=False)
    assert res.verified, res.trajectory.finished().summary
    assert "lib.bn_fold" in res.best.files["model_new.py"]


def test_an_uncapturable_task_finishes_with_a_plain_explanation():
    src = task_source("row_softmax_small", rows=8, cols=16).replace(
        "return torch.softmax(x, dim=1)", "return x if x.sum() > 0 else -x"
    )
    task = task_from_source(src, "control_flow", "cpu", dict(FAST))
    res = run(task, BuiltinPolicy(), LocalEvaluator(), Budgets(max_turns=5))
    assert res.reason == "model_finished" and res.best is None
    fin = res.trajectory.finished()
    assert isinstance(fin, Finished) and "could not be captured" in fin.summary
    assert "data-dependent control flow" in fin.summary


@pytest.mark.slow  # moved out of the fast tier: CI near its 20 minutes (2026-12-06)
def test_on_cuda_a_task_with_a_gemm_also_tries_the_aten_gemm(monkeypatch):
    """Planning only (no GPU needed): the capture runs on the CPU, the steps are those of cuda."""
    import agent.builtin.policy as policy_mod
    from agent.policy import TaskInfo

    real = policy_mod.analyze_source
    monkeypatch.setattr(policy_mod, "analyze_source", lambda src, device, **kw: real(src, device="cpu", **kw))
    steps = {}
    for name in ("linear_gelu_residual", "rmsnorm_swish"):
        pol = BuiltinPolicy(max_variants=1)
        pol.reset(TaskInfo(name, task_source(name, **SMALL[name]), "cuda"), [], [])
        steps[name] = [(s.kind, s.gemm) for s in pol.steps]
    assert ("candidate", "aten") in steps["linear_gelu_residual"]
    assert steps["linear_gelu_residual"].index(("candidate", "aten")) < steps["linear_gelu_residual"].index(
        ("restore", "cublas")
    )
    assert all(g == "cublas" for _, g in steps["rmsnorm_swish"])  # no GEMM, no such step


def test_a_cuda_graph_is_tried_only_where_launches_dominate():
    """The graph turn's decision, from the best candidate's measured host and device time per
    call and the number of launches its forward makes."""
    from agent.builtin.policy import _graph_skip_reason, _Tried

    def best(host, device):
        return _Tried("b", {"model_new.py": ""}, "ok", 3, 0.05, host_ms=host, device_ms=device)

    assert _graph_skip_reason(best(0.08, 0.04), 3) == ""
    assert "One launch per call" in _graph_skip_reason(best(0.08, 0.04), 1)
    assert "does not dominate" in _graph_skip_reason(best(0.03, 0.04), 3)
    assert "No host and device times" in _graph_skip_reason(best(None, 0.04), 3)


def test_the_cpu_plan_has_no_graph_turn():
    pol = BuiltinPolicy()
    pol.reset(task_from_source(task_source("rmsnorm_swish", **SMALL["rmsnorm_swish"]), "rmsnorm_swish", "cpu"), [], [])
    assert "graph" not in [s.kind for s in pol.steps] and pol.steps[-2].kind == "restore"


def _evaluated(reward: int, median_ms: float, vs_eager: float):
    from agent.policy import Observation

    res = {
        "status": "ok",
        "reward": reward,
        "speedup_vs_eager": vs_eager,
        "timing": {"candidate": {"median_ms": median_ms}, "eager": {"median_ms": median_ms * vs_eager}},
    }
    return [Observation("x", "evaluate", "evaluated", data={"evaluation": res})]


def _drive(pol, evaluations):
    """The policy's actions with each evaluate answered from `evaluations` in turn (no sandbox)."""
    actions, obs = [], []
    for _ in range(12):
        act = pol.next_action(obs)
        actions.append(act)
        names = [c.name for c in act.tool_calls]
        if "finish" in names:
            return actions
        obs = evaluations.pop(0) if "evaluate" in names else []
    raise AssertionError("the policy did not finish")


@pytest.mark.parametrize("generated, fallback_runs", [((1, 0.2, 0.6), True), ((2, 0.05, 2.4), False)])
def test_under_allow_the_reference_is_timed_too_unless_a_generated_candidate_beats_eager(generated, fallback_runs):
    """A correct generated candidate that is slower than eager loses to the reference's own
    computation (the loop keeps the best verified one); a faster one makes the fallback moot."""
    from agent.policy import TaskInfo

    pol = BuiltinPolicy(max_variants=1, profile_best=False, try_unrewritten=False)
    src = task_source("row_softmax_small", rows=8, cols=16)
    pol.reset(TaskInfo("softmax", src, "cpu", options={"torch_ops": "allow"}), [], [])
    actions = _drive(pol, [_evaluated(*generated), _evaluated(1, 0.12, 1.0)])
    written = [c.arguments["content"] for a in actions for c in a.tool_calls if c.name == "write_file"]
    took_fallback = any("the reference's own computation" in w and "lib.fused" not in w for w in written)
    assert took_fallback == fallback_runs
    summary = actions[-1].tool_calls[-1].arguments["summary"]
    if fallback_runs:
        assert "slower than the reference's own computation" in summary and "0.60x" in summary
        fallback = {
            c.arguments["path"]: c.arguments["content"]
            for a in actions
            for c in a.tool_calls
            if c.name == "write_file" and "the reference's own computation" in c.arguments["content"]
        }
        assert pol.label_of(fallback).startswith("The reference's own computation")
    else:
        assert "2.40x vs eager" in summary and "Not optimised" not in summary


@pytest.mark.parametrize("first, reference_second", [((1, 0.2, 0.6), True), ((2, 0.05, 2.4), False)])
def test_the_reference_is_timed_right_after_a_first_candidate_that_does_not_beat_eager(first, reference_second):
    """A run whose turns or wall time end early still has the reference's speed to fall back on:
    the reference's own computation follows the first evaluation that leaves no candidate faster
    than eager, the rest of the plan runs after it (the launch variants tune the best generated
    candidate, not the reference), and a resumed run replays the same order."""
    from agent.builtin.policy import FALLBACK_TITLE
    from agent.events import EvaluationEvent, TurnStarted
    from agent.policy import TaskInfo

    def fresh():
        pol = BuiltinPolicy(max_variants=3, profile_best=False)
        task = TaskInfo("dsm", task_source("diag_scale_matmul", **SMALL["diag_scale_matmul"]), "cpu")
        pol.reset(dataclasses.replace(task, options={"torch_ops": "allow"}), [], [])
        return pol

    pol = fresh()
    planned = [s.title for s in pol.steps if s.kind == "candidate"]
    assert len(planned) == 2, "the task plans two generated candidates (the test needs a step to move past)"
    second = (1, 0.12, 1.0) if reference_second else (2, 0.04, 2.6)  # the reference; the rewrite
    later = [second, (1, 0.15, 0.8), (1, 0.14, 0.85), (1, 0.16, 0.75)]
    actions = _drive(pol, [_evaluated(*first), *[_evaluated(*e) for e in later]])
    labels = [t.label for t in pol.tried]
    assert labels[:2] == ([planned[0], FALLBACK_TITLE] if reference_second else planned)
    assert planned[1] in labels
    variants = [lab for lab in labels if "[configuration" in lab]
    assert variants and all(not lab.startswith(FALLBACK_TITLE) for lab in variants)
    assert (FALLBACK_TITLE in labels) == reference_second
    summary = actions[-1].tool_calls[-1].arguments["summary"]
    assert ("Not optimised" in summary) == reference_second  # the reference (1.00x) beat every generated one

    history = [TurnStarted(turn=k) for k in range(1, 3)]  # the analysis, then the first candidate
    history.insert(2, EvaluationEvent(turn=2, version=1, result={"status": "ok", "reward": first[0]}))
    resumed = BuiltinPolicy(max_variants=3, profile_best=False)
    resumed.reset(dataclasses.replace(pol.task, options={"torch_ops": "allow"}), [], history)
    nxt = resumed.steps[resumed.pos]
    assert (nxt.kind == "fallback") == reference_second and resumed.steps[1].title == planned[0]


def test_the_reference_s_cuda_graph_follows_it_when_it_moves_forward():
    """On cuda the reference's CUDA graph (a recurrent layer's winner: L3/40 GRUHidden ended at its
    deadline with the reference alone, 2026-12-07) moves with the reference, right after it."""
    from agent.builtin.policy import _Step, _Tried

    pol = BuiltinPolicy()
    kinds = ["analyse", "candidate", "candidate", "variant", "graph", "fallback", "refgraph", "search", "finish"]
    pol.steps = [_Step(k, k) for k in kinds]
    pol.pos, pol.pending = 2, None
    pol.tried = [_Tried("first", {"model_new.py": ""}, "ok", 1, 1.0, 0.8)]
    pol._reference_next()
    assert [s.kind for s in pol.steps] == [
        *["analyse", "candidate", "fallback", "refgraph", "candidate"],
        *["variant", "graph", "search", "finish"],
    ]
    pol.pos = 3  # the reference evaluated: nothing moves again
    before = [s.kind for s in pol.steps]
    pol._reference_next()
    assert [s.kind for s in pol.steps] == before


def test_a_task_whose_forward_raises_says_so_in_one_line():
    """Issue 19: a module that fails at run time reads as its own error (the shape mismatch, where),
    not torch.fx's ShapeProp dump, and no advice that another policy could still try."""
    from agent.policy import TaskInfo

    src = task_source("row_softmax_small", rows=8, cols=16).replace(
        "return torch.softmax(x, dim=1)", "return torch.softmax(x @ torch.ones(3, 3), dim=1)"
    )
    pol = BuiltinPolicy()
    pol.reset(TaskInfo("broken", src, "cpu", options={"torch_ops": "allow"}), [], [])
    assert [s.kind for s in pol.steps] == ["analyse", "finish"]
    first = pol.next_action([])
    summary = pol.next_action([]).tool_calls[-1].arguments["summary"]
    for text in (first.message, summary):
        assert "the task's own forward fails" in text and "cannot be multiplied" in text and "line " in text
        assert "ShapeProp" not in text and "model-driven" not in text
    assert "\n" not in summary


def test_the_cuda_graph_candidate_builds(monkeypatch):
    """Planning and generation only (no GPU): the graph turn builds the best's graph with graph=True
    (a keyword that once collided with _build's own parameter and ended runs on the H200 with a
    TypeError before the fallback turn)."""
    import agent.builtin.policy as policy_mod
    from agent.policy import TaskInfo

    real = policy_mod.analyze_source
    monkeypatch.setattr(policy_mod, "analyze_source", lambda src, device, **kw: real(src, device="cpu", **kw))
    pol = BuiltinPolicy(max_variants=1)
    pol.reset(TaskInfo("rmsnorm_swish", task_source("rmsnorm_swish", **SMALL["rmsnorm_swish"]), "cuda"), [], [])
    step = next(s for s in pol.steps if s.kind == "candidate" and s.graph is not None)
    cand = pol._build(step.graph, gemm=step.gemm, graph=True, note="graph")
    assert cand.files and cand.kernel_path in cand.files


def test_a_step_that_fails_inside_the_policy_moves_on_instead_of_ending_the_run(monkeypatch):
    pol = BuiltinPolicy()
    pol.reset(task_from_source(task_source("rmsnorm_swish", **SMALL["rmsnorm_swish"]), "rmsnorm_swish", "cpu"), [], [])
    pol.pos = next(i for i, s in enumerate(pol.steps) if s.kind == "candidate")

    def broken(step):
        raise TypeError("a generator bug")

    monkeypatch.setattr(pol, "_candidate_action", broken)
    action = pol.next_action([])
    assert "Step candidate failed inside the built-in policy (TypeError: a generator bug)" in action.message
    assert pol.pos > next(
        i for i, st in enumerate(pol.steps) if st.kind == "candidate"
    )  # the run went on past the step


def test_a_speedup_from_noisy_windows_is_reported_as_no_speed_claim():
    """The sandbox withholds the speed milestone on a noisy machine (reward 1 at 3x): the summary
    says so and why, instead of "nothing beat eager", which would contradict the 3x beside it."""
    from agent.policy import TaskInfo

    pol = BuiltinPolicy(max_variants=1, profile_best=False, try_unrewritten=False)
    src = task_source("row_softmax_small", rows=8, cols=16)
    pol.reset(TaskInfo("softmax", src, "cpu", options={"torch_ops": "allow"}), [], [])
    noisy = _evaluated(1, 0.04, 3.0)
    line = "speed milestone withheld: the machine was noisy (the eager baseline's round medians spread 40%, limit 10%)"
    noisy[0].data["evaluation"]["speed"] = {"noisy": True, "milestone": line}
    actions = _drive(pol, [noisy, _evaluated(1, 0.12, 1.0)])
    summary = actions[-1].tool_calls[-1].arguments["summary"]
    assert "3.00x vs eager" in summary and "No speed claim: " + line in summary
    assert "Nothing beat the eager baseline" not in summary


def _cuda_plan(monkeypatch, name: str, **kw) -> BuiltinPolicy:
    """A policy planned for cuda with the capture run on the CPU (planning only, no GPU)."""
    import agent.builtin.policy as policy_mod
    from agent.policy import TaskInfo

    real = policy_mod.analyze_source
    monkeypatch.setattr(policy_mod, "analyze_source", lambda src, device, **k: real(src, device="cpu", **k))
    pol = BuiltinPolicy(max_variants=1, profile_best=False, **kw)
    pol.reset(TaskInfo(name, task_source(name, **SMALL[name]), "cuda", options={"torch_ops": "allow"}), [], [])
    return pol


@pytest.mark.slow  # moved out of the fast tier: CI near its 20 minutes (2026-12-06)
def test_on_cuda_a_forward_that_convolves_tries_cudnns_algorithm_search_last(monkeypatch):
    kinds = [s.kind for s in _cuda_plan(monkeypatch, "basic_residual_block").steps]
    assert "search" in kinds and kinds.index("search") == kinds.index("restore") - 1, kinds
    assert "search" not in [s.kind for s in _cuda_plan(monkeypatch, "rmsnorm_swish").steps]  # no convolution
    pol = BuiltinPolicy()
    pol.reset(
        task_from_source(task_source("basic_residual_block", **SMALL["basic_residual_block"]), "b", "cpu"), [], []
    )
    assert "search" not in [s.kind for s in pol.steps]  # the CPU has no cuDNN


def test_the_search_candidate_is_the_best_one_asking_for_the_search_and_the_summary_says_so(monkeypatch):
    """The search step writes the best candidate's files again with only model_new.py changed; when it
    wins, the summary says the speed includes a setting the user can make for eager too."""
    from agent.builtin.convsearch import TAG

    pol = _cuda_plan(monkeypatch, "basic_residual_block", try_unrewritten=False)
    actions, obs = [], []
    for _ in range(20):
        act = pol.next_action(obs)
        actions.append(act)
        if "finish" in [c.name for c in act.tool_calls]:
            break
        asks = any("search_conv_algorithms()" in str(c.arguments.get("content")) for c in act.tool_calls)
        evaluates = "evaluate" in [c.name for c in act.tool_calls]
        obs = (_evaluated(2, 0.08, 1.25) if asks else _evaluated(1, 0.10, 1.0)) if evaluates else []
    search = [
        a for a in actions if any("search_conv_algorithms()" in str(c.arguments.get("content")) for c in a.tool_calls)
    ]
    assert len(search) == 1, [a.message[:80] for a in actions]
    written = {c.arguments["path"]: c.arguments["content"] for c in search[0].tool_calls if c.name == "write_file"}
    won = pol._best()
    assert won is not None and TAG in won.label
    best = next(t for t in pol.tried if t.label == won.label.replace(f" {TAG}", ""))  # the best before the search
    assert set(written) == set(best.files), list(written)  # all of the best's files: its kernels, unchanged
    assert all(written[p] == best.files[p] for p in written if p != "model_new.py")
    summary = actions[-1].tool_calls[-1].arguments["summary"]
    assert TAG in summary and "set it in your own code and eager gains that part too" in summary, summary


def test_a_launch_configuration_of_a_3xtf32_best_keeps_its_split_kernel(monkeypatch):
    """A variant takes the best's model_new.py, so its kernel file must be built with the best's GEMM:
    one built with the default lacked kw_split3_tf32 and every configuration of a 3xTF32 best raised
    (KernelBench L2/34 on the H200, 2026-12-04)."""
    import agent.builtin.policy as policy_mod
    from agent.builtin.policy import _Tried
    from agent.policy import TaskInfo

    real = policy_mod.analyze_source
    monkeypatch.setattr(policy_mod, "analyze_source", lambda src, device, **k: real(src, device="cpu", **k))
    pol = BuiltinPolicy(max_variants=3, profile_best=False)
    name = "linear_gelu_residual"
    pol.reset(TaskInfo(name, task_source(name), "cuda", options={"torch_ops": "allow"}), [], [])
    best = pol._build(pol.final_graph, gemm="3xtf32")
    assert "kw_split3_tf32(" in best.files["model_new.py"]
    pol.tried = [_Tried("3xTF32", best.files, status="ok", reward=1, graph=pol.final_graph, gemm="3xtf32")]
    step = next(s for s in pol.steps if s.kind == "variant")
    action = pol._variant_action(step)
    written = {c.arguments["path"]: c.arguments["content"] for c in action.tool_calls if c.name == "write_file"}
    assert written["model_new.py"] == best.files["model_new.py"]
    assert all("kw_split3_tf32" in text for path, text in written.items() if path.endswith(".cu")), list(written)
    assert pol.pending is not None and pol.pending.gemm == "3xtf32"


NESTED_ARGUMENTS = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, feats, batch, mask=None):
        h = self.fc(feats[0] + feats[1]) + batch["bias"]
        return h if mask is None else h * mask


def get_inputs():
    return [[torch.randn(4, 8), torch.randn(4, 8)], {"bias": torch.randn(8)}, None]


def get_init_inputs():
    return [8]
"""


def test_tensors_in_a_list_or_dict_argument_get_the_reference_and_a_plain_reason():
    """A feature pyramid's list of maps, a batch dict: the generator works on flat tensor arguments,
    so the analysis says which argument is not one (it used to crash writing its JSON), and under
    allow the reference's own computation is the verified candidate."""
    options = {**FAST, "torch_ops": "allow"}
    task = task_from_source(NESTED_ARGUMENTS, "nested", "cpu", options)
    res = run(task, BuiltinPolicy(), LocalEvaluator(), Budgets(max_turns=6))
    fin = res.trajectory.finished()
    assert res.verified, fin.summary
    assert "argument 0 is a list" in fin.summary, fin.summary
    assert "JSON" not in fin.summary and "json.dumps" not in fin.summary


def test_importing_the_policy_does_not_import_torch():
    """The policy runs in the agent process, where torch is a second of import and hundreds of MB;
    only its analysis child and the sandbox import torch (docs/builtin-policy.md)."""
    import subprocess
    import sys

    code = "import sys, agent.builtin.policy; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False", out.stdout + out.stderr
