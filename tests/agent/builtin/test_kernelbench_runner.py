"""benchmarks.kernelbench without running the policy: size shrinking, the table's counts, and
merging shard files (the H200 script runs shards in parallel processes)."""

from __future__ import annotations

import json

import pytest

from benchmarks.kernelbench import coverage_table, failure_class, format_table, main, shrink_ints


def _row(name, vs, low, label="Fuse the captured graph as it is", correct=True, reward=1):
    return {
        "name": name,
        "capture": "fx",
        "correct": correct,
        "evaluations": 2,
        "speedup_vs_eager": vs,
        "ci_low_vs_eager": low,
        "speedup_vs_compile": None,
        "reward": reward,
        "best_label": label,
    }


def test_sizes_shrink_by_one_power_of_two_and_small_ints_stay():
    src = "batch_size = 4096\ndim = 393216\nkernel_size = 3\nshape = (1024, 7)\nhidden = [32768, 16384]\n"
    out = shrink_ints(src, 32)
    assert "batch_size = 8\n" in out and "dim = 24\n" in out and "kernel_size = 3\n" in out and "(8, 7)" in out
    assert "hidden = [8, 8]" in out


def test_faster_counts_the_interval_low_end_and_names_a_fallback_artefact():
    rows = [
        _row("a", 1.4, 1.2),
        _row("b", 1.3, 0.9),
        _row("c", 9.0, 7.0, "The reference's own computation (x)"),
        _row("d", None, None, correct=False),
    ]
    table = format_table(rows)
    assert "low end above 1.05x: 2/4 (1 of them the reference's own computation: a timing artefact)" in table
    assert "correct 3/4" in table and "| a | fx | yes | 2 | 1.40x (1.20x) |" in table
    searched = format_table(
        [*rows, _row("e", 1.3, 1.2, "The reference's own computation (x) [cuDNN algorithm search]")]
    )
    assert (
        "3/5 (1 of them the reference's own computation: a timing artefact; "
        "1 of them with cuDNN's algorithm search: a setting the user can make too)"
    ) in searched


def test_the_table_says_which_steps_took_the_time():
    rows = [_row("a", 1.4, 1.2), _row("b", 1.3, 0.9)]
    rows[0] |= {"seconds": 100.0, "seconds_in": {"analysis": 10.0, "baseline": 60.0, "timing": 20.0, "rest": 10.0}}
    rows[1] |= {"seconds": 50.0, "seconds_in": {"analysis": 5.0, "baseline": 5.0, "compiling": 38.0, "rest": 2.0}}
    line = format_table(rows).splitlines()[-1]
    assert (
        line
        == "time: 150 s over 2 problems, most in baseline 65 s, compiling 38 s, timing 20 s, analysis 15 s, rest 12 s"
    )


def test_merge_prints_one_table_of_every_shard(tmp_path, capsys):
    for k, rows in enumerate([[_row("a", 1.4, 1.2)], [_row("b", 0.9, 0.8)]]):
        (tmp_path / f"shard{k}.json").write_text(json.dumps({"tasks": rows}))
    assert main(["--merge", str(tmp_path / "shard0.json"), str(tmp_path / "shard1.json")]) == 0
    out = capsys.readouterr().out
    assert "| a |" in out and "| b |" in out and "correct 2/2" in out
    (tmp_path / "rerun.json").write_text(json.dumps({"tasks": [_row("b", None, None, correct=False)]}))
    assert (
        main(["--merge", str(tmp_path / "shard0.json"), str(tmp_path / "shard1.json"), str(tmp_path / "rerun.json")])
        == 0
    )
    assert "correct 1/2" in capsys.readouterr().out


def _cov(name, capture="export", gen=True, correct=True, failure=None, blockers=()):
    return {
        "name": name,
        "capture": capture,
        "correct": correct,
        "generated_correct": gen,
        "ran": capture != "no",
        "first_failure": failure,
        "forbid_blockers": list(blockers),
    }


def test_coverage_table_counts_per_level_and_classes_first_failures():
    rows = [
        _cov("L1/1_a"),
        _cov("L1/2_b", blockers=["v3 (cumsum)"]),
        _cov("L1/3_c", gen=False, failure="candidate incorrect: max abs error 0.5 at output 0"),
        _cov("L1/4_d", gen=False, failure="candidate incorrect: max abs error 0.25 at output 0"),
        _cov("L2/1_e", capture="no", gen=False, correct=False, failure="the reference raises: line 12: boom"),
    ]
    table = coverage_table(rows)
    assert "| L1 | 4 | 4 | 4 | 2 | 1 | 4 |" in table
    assert "| L2 | 1 | 0 | 0 | 0 | 0 | 0 |" in table and "| all | 5 | 4 | 4 | 2 | 1 | 4 |" in table
    assert "    2  candidate incorrect: max abs error N.N at output N" in table
    assert "    1  the reference raises: line N: boom" in table
    assert failure_class("x" * 200, 20) == "x" * 17 + "..."
    rows[0]["first_attempt"] = "candidate incorrect: output 0 is constant (0) but the reference is not"
    assert "  L1/1_a: candidate incorrect: output N is constant (N) but the reference is not" in coverage_table(rows)


def test_a_lower_floor_shrinks_the_sizes_below_64_by_the_same_factor():
    src = "out_channels = 64\ndepth, height, width = 16, 32, 32\nkernel_size = (3, 3, 3)\n"
    assert shrink_ints(src, 32) == "out_channels = 32\ndepth, height, width = 16, 32, 32\nkernel_size = (3, 3, 3)\n"
    assert (
        shrink_ints(src, 32, floor=16)
        == "out_channels = 32\ndepth, height, width = 8, 16, 16\nkernel_size = (3, 3, 3)\n"
    )


def test_batch_size_apart_keeps_the_ratios_of_the_other_sizes():
    src = "batch_size = 32768\nin_features = 1024\nout_features = 4096\nnum_groups = 64\n"
    assert shrink_ints(src, 32) == "batch_size = 32\nin_features = 8\nout_features = 8\nnum_groups = 8\n"
    assert (
        shrink_ints(src, 32, floor=16, batch_apart=True)
        == "batch_size = 8\nin_features = 8\nout_features = 32\nnum_groups = 8\n"
    )


def test_a_stratified_sample_gives_each_family_its_share(tmp_path):
    import random
    from collections import Counter

    from benchmarks.kernelbench import family_of, stratified_sample

    names = [f"{i}_Matmul_x" for i in range(1, 41)] + [f"{i}_Conv2d_y" for i in range(41, 61)]
    names += [f"{i}_LSTM" for i in range(61, 66)] + ["66_MinGPTNewGelu", "67_MinGPTCausalAttention"]
    files = [tmp_path / f"{n}.py" for n in names]
    picked = stratified_sample(files, 10, random.Random(1))
    fam = Counter(family_of(f) for f in picked)
    assert len(picked) == 10 and len(set(picked)) == 10
    # 40 : 20 : 5 : 1 : 1 of 67 -> about 6 : 3 and one each of the small families (the floor of one)
    assert fam["gemm"] >= 4 and fam["conv"] >= 2 and fam["rnn"] == 1 and fam["elementwise"] == 1
    assert fam["attention"] == 1
    assert picked == sorted(picked, key=lambda q: int(q.name.split("_")[0]))
    assert stratified_sample(files, 10, random.Random(1)) == picked  # the seed fixes the list
    assert len(stratified_sample(files, 500, random.Random(1))) == len(files)


def test_only_a_failure_of_device_memory_earns_a_retry():
    from benchmarks.kernelbench import out_of_memory

    base = {"correct": False, "first_failure": None, "capture_error": None, "failures": []}
    oom = "reference failed: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 31.9 GiB"
    assert out_of_memory(base | {"failures": [oom]})
    assert out_of_memory(base | {"capture_error": "RuntimeError: CUDA error: out of memory"})
    assert not out_of_memory(base | {"failures": ["candidate incorrect: max abs error 0.3"]})
    assert not out_of_memory(base | {"correct": True, "failures": [oom]})  # a correct result stays
    row = {"name": "L1/63_conv", "capture": "fx", "correct": True, "evaluations": 2, "reward": 1}
    row |= {"speedup_vs_eager": 1.0, "retried": "out of device memory beside other processes"}
    assert "run again after running out of device memory beside other processes: L1/63_conv" in format_table([row])


SCALE_RELU = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x * 2.0)


def get_inputs():
    return [torch.randn(64, 128)]


def get_init_inputs():
    return []
"""


@pytest.mark.slow  # 10-20 s on 2 cores: the slow tier (./kw test -m slow)
def test_a_row_lists_what_every_candidate_measured(tmp_path, capsys):
    """The best alone hides which candidates lost and by how much (the channels-last candidate on
    the GPU, 2026-12-01): every evaluated candidate is in the row, the best among the correct ones.
    This one runs the policy and the sandbox (the rest of this file does not)."""
    from benchmarks.kernelbench import run_one

    path = tmp_path / "1_Scale_ReLU.py"
    path.write_text(SCALE_RELU)
    row = run_one(path, "cpu", {"torch_ops": "allow"}, cap=0, max_turns=6, max_variants=1, confirmations=0)
    cands = row["candidates"]
    assert row["correct"] and 1 <= len(cands) <= row["evaluations"], row  # (the loop may evaluate the best again)
    # the log says where a problem was as it goes (a shard cut off by its timeout writes no row)
    log = capsys.readouterr().out.splitlines()
    assert log[0] == "block/1_Scale_ReLU: started", log[:3]
    evaluated = [ln for ln in log if " evaluation " in ln]
    assert len(evaluated) == row["evaluations"] and all(" evaluation ok" in ln for ln in evaluated), log
    assert any(" compile_result ok=True " in ln for ln in log) and log[-1].split()[-1] == "finished", log
    steps = [ln.split(" sandbox: ")[1] for ln in log if " sandbox: " in ln]  # and which sandbox step it is in
    assert {"reference", "correctness", "timing", "done"} <= set(steps), steps
    assert all(c["label"] and isinstance(c["correct"], bool) for c in cands), cands
    assert row["best_label"] in [c["label"] for c in cands if c["correct"]], (row["best_label"], cands)
    assert all(c["vs_eager"] and c["vs_eager"] > 0 for c in cands if c["correct"]), cands
    assert all(c["memory"] == "" for c in cands), cands  # the cpu backend holds no share of a device's memory
    # the reward each earned, and the noisy-window line that explains a faster one's reward of 1
    assert all(c["reward"] >= 1 if c["correct"] else c["reward"] == -1 for c in cands), cands
    assert all(isinstance(c["noisy"], str) for c in cands), cands
    # The budget ends on the turn that evaluated the first candidate: the policy never read its
    # result, and the row still names the candidate the loop kept.
    short = run_one(path, "cpu", {"torch_ops": "allow"}, cap=0, max_turns=2, max_variants=1, confirmations=0)
    assert short["correct"] and short["candidates"] == [], short
    assert short["best_label"] == cands[0]["label"], (short["best_label"], cands)
    spent = short["seconds_in"]  # where the time went: the analysis, the sandbox's steps, the rest
    assert spent["analysis"] > 0 and spent["timing"] > 0 and spent["rest"] >= -0.5, spent
    assert abs(sum(spent.values()) - short["seconds"]) < 0.5, (spent, short["seconds"])
    # --deadline: past its wall time a problem takes no further turn and still writes its row (a
    # shard killed by its timeout mid-problem wrote none: DenseNet-121 and two Swins, 2026-12-07)
    capsys.readouterr()
    cut = run_one(path, "cpu", {"torch_ops": "allow"}, cap=0, max_turns=6, max_variants=1, confirmations=0, wall_s=0.5)
    assert cut["turns"] <= 1 and cut["evaluations"] == 0 and not cut["correct"], cut
    assert any("budget reached: max_wall_time" in ln for ln in capsys.readouterr().out.splitlines())


def test_a_fallback_best_after_correct_generated_candidates_says_they_were_slower():
    from types import SimpleNamespace

    from agent.builtin.graph import Graph
    from agent.builtin.policy import _Tried
    from benchmarks.kernelbench import _first_failure

    lost = _Tried("Fuse the captured graph as it is", {"model_new.py": ""}, "ok", 1, 0.2, 0.91, graph=Graph([]))
    assert _first_failure(SimpleNamespace(failures=[], tried=[lost])) == (
        "generated candidates correct but slower than the reference's own computation (best 0.91x vs eager)"
    )
    assert _first_failure(SimpleNamespace(failures=["not captured: x"], tried=[lost])) == "not captured: x"
    assert _first_failure(SimpleNamespace(failures=[], tried=[])) == "no candidate tried"


def test_a_failed_evaluation_s_log_line_says_why(capsys):
    """A shard's log is all that comes back from a cut-off device call: a rejected evaluation's
    line carries its first reason (four DenseNet121 evaluations read only "rejected", 2026-12-07)."""
    from agent.events import EvaluationEvent
    from benchmarks.kernelbench import _trace

    reason = "timing: the timed calls' outputs\n  differ from the trials' " + "x" * 400
    _trace("L3/15", 0.0, EvaluationEvent(turn=2, version=1, result={"status": "rejected", "reasons": [reason]}))
    _trace("L3/15", 0.0, EvaluationEvent(turn=3, version=1, result={"status": "ok", "reasons": ["note"]}))
    rejected, ok = capsys.readouterr().out.splitlines()
    said = rejected.split(" evaluation rejected: ")[1]
    assert said == " ".join(reason.split())[:200] and said.startswith("timing: the timed calls' outputs differ"), (
        rejected
    )
    assert ok.endswith("turn 3 evaluation ok"), ok
