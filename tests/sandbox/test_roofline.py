"""The speed-of-light floor: max(FLOPs / peak, bytes / bandwidth) of the task as written, except
that a candidate faster than the FLOP floor (an algebraic rewrite that does less arithmetic) is
measured against the memory floor, with a note, instead of being shown at 100%."""

from __future__ import annotations

import pytest

from sandbox.protocol import roofline_of

# diag(d) @ X at 2048 x 1024: 8.6 GFLOP as written, 16.8 MB that any algorithm must move
FLOPS, BYTES, BW_GBS, TFLOPS = 8.59e9, 1.68e7, 4200.0, 51.0


def test_compute_bound_task_done_as_written():
    r = roofline_of("dev", FLOPS, BYTES, BW_GBS, TFLOPS, cand_ms=0.25)
    assert r.bound == "compute" and r.floor_ms == pytest.approx(FLOPS / 51e12 * 1e3)
    assert r.fraction_of_sol == pytest.approx(r.floor_ms / 0.25) and r.note == ""


def test_candidate_below_the_flop_floor_is_measured_against_the_memory_floor():
    r = roofline_of("dev", FLOPS, BYTES, BW_GBS, TFLOPS, cand_ms=0.010)
    mem = BYTES / 4200e9 * 1e3
    assert r.bound == "memory" and r.floor_ms == pytest.approx(mem)
    assert r.fraction_of_sol == pytest.approx(mem / 0.010) and r.fraction_of_sol < 0.5
    assert "fewer FLOPs" in r.note


def test_candidate_below_every_floor_is_capped_and_explained():
    r = roofline_of("dev", 1e6, BYTES, BW_GBS, TFLOPS, cand_ms=0.001)
    assert r.bound == "memory" and r.fraction_of_sol == 1.0 and "fewer bytes" in r.note
