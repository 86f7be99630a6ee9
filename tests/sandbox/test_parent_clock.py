"""The candidate's timer runs in its own process, where native code can rewrite its records; the
parent checks each block's account against its own clock (protocol.account_on_parent_clock)."""

from __future__ import annotations

import pytest

from sandbox import evaluate, load_candidate, protocol
from sandbox.schema import Round, Status
from tests.sandbox.helpers import HACKS, task


def _rounds(cand_ms: float, u_cand: float, u_eager: float, n: int = 12) -> list[Round]:
    return [
        Round(
            order=["eager", "candidate"],
            eager_ms=0.05,
            candidate_ms=cand_ms,
            unaccounted_ms={"eager": u_eager, "candidate": u_cand},
        )
        for _ in range(n)
    ]


def test_an_honest_candidates_own_checks_and_noise_are_never_rejected():
    """Measured on the CPU: the candidate's unexplained time exceeds eager's by 4-50 µs per call
    on a quiet machine (its own checks), and by up to 110 µs for a 33 µs call beside other work."""
    for cand_ms, u_cand, u_eager in [(0.034, 0.037, 0.029), (0.42, 0.226, 0.188), (0.003, 0.024, 0.018)]:
        findings: list[str] = []
        assert protocol.account_on_parent_clock(_rounds(cand_ms, u_cand, u_eager), findings) == []
        assert findings == []
    findings = []
    assert protocol.account_on_parent_clock(_rounds(0.033, 0.18, 0.07), findings) == []
    assert findings and "reported as measured" in findings[0]


def test_a_rewritten_record_is_rejected():
    lied = _rounds(0.001, 1.14, 0.036)  # the red team's frame_times: 1 ms calls recorded as 1 µs
    problems = protocol.account_on_parent_clock(lied, [])
    assert problems and "timing records were altered" in problems[0]
    assert protocol.account_on_parent_clock(_rounds(1.0, 1.14, 0.036), []) == []  # the rest fits in a claimed call


def test_a_timer_rewritten_in_place_is_caught_by_the_parents_clock_alone(quick, monkeypatch):
    """The red team's frame_times with the run-time refusals off (as native code would get past
    them): the candidate's process reports 1/1000 of its times, and the parent sees the rest."""
    monkeypatch.setattr(protocol, "RUN_TIME_REFUSALS", False)
    files = load_candidate(HACKS / "frame_walk")
    files.pop("expected.json", None)
    res = evaluate(task("softmax_tiny.py"), files, quick())
    assert res.status == Status.REJECTED, res.reasons
    assert any("timing records were altered" in r for r in res.reasons), res.reasons


def test_an_account_padded_past_the_wall_or_not_finite_is_rejected():
    """Red team round 3: time moved out of the median into one entry, and the sum padded past the
    block's wall time so that the parent's clock saw less unexplained time than eager's."""
    import math

    paired = protocol._Paired.__new__(protocol._Paired)
    paired.calls = {"candidate": 10}
    honest = {"median_ms": 0.1, "sum_ms": 1.2, "raw_ms": 1.2, "loop_ms": 0.0, "loop_sum_ms": 0.0, "calls": 10}
    assert paired._block_median("candidate", honest, wall_ms=1.6) == 0.1
    # a host-bound block (cuda): 3 calls of 20 ms on the device, each charged the back-to-back
    # pass's median 34.6 ms per call, and the pass's 5 batches of 2 calls on a loaded host (20, 20,
    # 34.6, 40 and 40 ms per call: 309 ms in all, less than 10 x the median): 369 ms measured in a
    # block of 380 ms, 451 ms charged (DenseNet-121, an LSTM and a GRU read as forged on the H100
    # while the charged sum, then the median times the pass's calls, was held to the wall)
    paired.calls["task"] = 3
    host_bound = {"median_ms": 34.6, "sum_ms": 103.8, "raw_ms": 60.0, "loop_ms": 34.6, "loop_sum_ms": 309.2, "calls": 3}
    assert paired._block_median("task", host_bound, wall_ms=380.0) == 34.6
    for bad, wall in (
        ({**host_bound, "loop_sum_ms": 200.0}, 380.0),  # a median the pass's sum cannot hold (>= 3 of 5 batches)
        ({**host_bound, "loop_sum_ms": 330.0}, 380.0),  # a pass padded past the block's wall time
        ({**honest, "loop_sum_ms": 0.3}, 1.6),  # a pass's time with no pass, to explain the wall
        ({**honest, "sum_ms": 4.0, "raw_ms": 4.0}, 1.6),  # more time in its calls than the block took
        ({**honest, "sum_ms": 4.0}, 1.6),  # a charged sum the measured one cannot give
        ({**honest, "raw_ms": 1.3}, 1.6),  # charged below what it measured
        ({**honest, "calls": 9}, 1.6),
        ({**honest, "loop_ms": 0.2}, 1.6),  # a median below the back-to-back time per call
    ):
        with pytest.raises(protocol._Stop) as stop:
            paired._block_median("candidate", bad, wall_ms=wall)
        assert stop.value.status == Status.REJECTED and "does not add up" in stop.value.reason
    for bad in (
        {**honest, "median_ms": math.nan},
        {**honest, "sum_ms": math.inf},
        {**honest, "raw_ms": math.nan},
        {**honest, "loop_sum_ms": math.inf},
        {**honest, "calls": math.inf},
    ):
        with pytest.raises(protocol.MALFORMED):  # a runtime_error result (protocol._evaluate_once)
            paired._block_median("candidate", bad, wall_ms=1.6)


def test_a_back_to_back_pass_explains_its_measured_time_and_no_more_than_its_median_allows():
    """The parent's unexplained time per call: an uneven pass (batches of 20 to 40 ms per call,
    median 34.6) explains the 309 ms it took, not 10 x 34.6; a pass claimed longer than its
    median times its calls explains no more than that product, so it cannot absorb time a
    rewritten timer hid."""
    from sandbox.timing import loop_calls, unaccounted_ms

    honest = {"sum_ms": 103.8, "raw_ms": 60.0, "loop_ms": 34.6, "loop_sum_ms": 309.2, "calls": 3}
    assert unaccounted_ms(420.0, honest, 34.6, 0) == (420.0 - 103.8 - 309.2) / 3
    padded = {**honest, "loop_sum_ms": 900.0}
    assert loop_calls(3) == 10 and unaccounted_ms(1260.0, padded, 34.6, 0) == (1260.0 - 103.8 - 346.0) / 3
