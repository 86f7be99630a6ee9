"""benchmarks.runner.run_parallel: every task's result comes back, in or out of process."""

from __future__ import annotations

import math

from benchmarks.runner import run_parallel


def test_run_parallel_returns_every_result_in_separate_processes():
    args = [(n,) for n in range(2, 9)]
    assert sorted(run_parallel(math.factorial, args, jobs=3)) == sorted(math.factorial(n) for n in range(2, 9))


def test_run_parallel_with_one_job_keeps_the_order():
    assert list(run_parallel(math.factorial, [(5,), (3,), (4,)], jobs=1)) == [120, 6, 24]


def _threads(_: int) -> int:
    import torch

    return torch.get_num_threads()


def test_side_by_side_jobs_share_the_cores():
    import os

    got = set(run_parallel(_threads, [(i,) for i in range(2)], jobs=2))
    assert got == {max(1, (os.cpu_count() or 1) // 2)}
