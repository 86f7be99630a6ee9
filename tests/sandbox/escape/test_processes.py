"""Every process the hostile code starts dies with the evaluation: a new session, a double fork,
a move to the root cgroup and a name of its own do not keep one alive."""

from __future__ import annotations

import time

import pytest

from tests.sandbox.test_isolation import assert_next_evaluation_works

from . import checks
from .support import SIDES, evaluate_hostile, kill_pids, processes_named


@pytest.mark.parametrize("side", SIDES)
def test_no_process_outlives_the_evaluation(quick, cfg, listener, token, side):
    cfg |= checks.daemon_cfg(token)
    try:
        res, rep = evaluate_hostile(quick, side, "daemon", cfg)
        checks.no_survivor(rep, cfg, listener, time.time())
    finally:
        kill_pids(processes_named(cfg["name"]))
    assert_next_evaluation_works(quick)
