"""Resources the host shares: the hostile code takes no more host memory through its private
/tmp and /dev/shm than their size, no more host disk through its own folder than the folder's
bound (many files, or a file unlinked while open), and no more CPUs than the evaluation gave it
(red team a9, a9b and a4; docs/security.md, "Resources"). Limits are shrunk through their
environment variables so that each attempt stays quick where nothing stops it."""

from __future__ import annotations

import os

import pytest

from sandbox import evaluate
from sandbox.schema import Status
from tests.sandbox.test_isolation import assert_next_evaluation_works

from . import hostile
from .support import SIDES, evaluate_hostile, hostile_pair, report_of

TMPFS_MB = 64
WORK_MB = 128


@pytest.fixture
def small_limits(monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_TMPFS_MB", str(TMPFS_MB))
    monkeypatch.setenv("KERNELWRIGHT_WORK_MB", str(WORK_MB))


@pytest.mark.parametrize("side", SIDES)
def test_private_tmp_and_shm_are_sized(quick, cfg, small_limits, side):
    cfg["cap_mb"] = 4 * TMPFS_MB
    res, rep = evaluate_hostile(quick, side, "fill_tmpfs", cfg)
    for folder, got in rep.items():
        assert got["wrote_mb"] <= TMPFS_MB, f"{folder} took {got['wrote_mb']} MB of host memory: {rep}"
        assert "No space left" in got.get("err", ""), rep
        assert got["size_mb"] <= TMPFS_MB, f"{folder} is a tmpfs of {got['size_mb']} MB: {rep}"
    assert_next_evaluation_works(quick)


@pytest.mark.parametrize("zygote", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["zygote", "bubblewrap"])
@pytest.mark.parametrize("mode", ["files", "unlinked"])
def test_own_folder_is_bounded_in_total(quick, cfg, small_limits, mode, zygote):
    """Files of 48 MB each (under the 64 MB file-size limit) until 6x the bound: the child is
    killed on the way, the reason says why. Both ways a child starts: forked by the zygote, or
    started by bubblewrap itself (zygote off)."""
    cfg |= {"cap_mb": 6 * WORK_MB, "mode": mode}
    src, files = hostile_pair("candidate", "fill_work", cfg)
    res = evaluate(src, files, quick(torch_ops="allow", zygote=zygote))
    rep = hostile.find_report(*res.reasons)
    assert rep is None, f"the candidate wrote {rep['wrote_mb']} MB into its folder, unstopped: {rep}"
    assert res.status == Status.RUNTIME_ERROR, (res.status, res.reasons)
    assert "its folder held more than" in "\n".join(res.reasons), res.reasons
    assert_next_evaluation_works(quick)


def _one(cpus: str) -> bool:
    return "," not in cpus and "-" not in cpus


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one CPU: nothing to widen to")
@pytest.mark.parametrize("side", SIDES)
def test_cannot_take_more_cpus_than_the_evaluation_gave(quick, cfg, side):
    """cpu_threads=1: the child runs on the one CPU its timed loops are pinned to, and neither it,
    nor a thread it starts, nor a thread that asks for every CPU, gets another; the calls that
    would move it or change its scheduling fail."""
    src, files = hostile_pair(side, "affinity", cfg)
    res = evaluate(src, files, quick(torch_ops="allow", cpu_threads=1))
    rep = report_of(res)
    assert len(rep["before"]) == 1, f"the {side} started on CPUs {rep['before']}, not one: {rep}"
    assert rep["widen"] != "ok" and rep["thread"]["widen"] != "ok", f"the {side} widened its CPUs: {rep}"
    assert "Operation not permitted" in rep["widen"], rep
    assert rep["after"] == rep["before"] and rep["thread"]["cpus"] == rep["before"], rep
    assert rep["policy"] != "ok", f"the {side} changed its scheduling policy: {rep}"
    assert all(_one(c) for c in rep["tasks"]), f"threads of the {side} run on {rep['tasks']}: {rep}"
    assert_next_evaluation_works(quick)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one CPU: nothing to widen to")
def test_more_threads_get_that_many_cpus_and_no_widening(quick, cfg):
    """cpu_threads=2: the candidate gets the evaluator's last two CPUs and cannot move off them."""
    src, files = hostile_pair("candidate", "affinity", cfg)
    res = evaluate(src, files, quick(torch_ops="allow", cpu_threads=2))
    rep = report_of(res)
    assert rep["before"] == sorted(os.sched_getaffinity(0))[-2:], rep
    assert rep["widen"] != "ok" and rep["policy"] != "ok", rep
