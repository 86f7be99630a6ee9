"""Killing what it can see (its parent, every ancestor and the zygote, every process with
kill(-1)) yields a clean error result within seconds and leaves the evaluator working.

The evaluator runs in a subprocess inside a PID namespace of its own (support.shield), so that
where containment does not hold the kill reaches only that evaluator, never the host."""

from __future__ import annotations

import pytest

from sandbox.schema import Status

from . import hostile
from .support import SIDES, evaluator_spec, finished, honest_after, hostile_pair, run_evaluator

WITHIN_S = 60  # the evaluation's own limit is 120 s: a hang until then is not "within seconds"


@pytest.mark.slow
@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("attack", ["kill_parent", "kill_family", "kill_all"])
def test_killing_what_it_can_see_is_a_clean_error(cache_dir, cfg, side, attack):
    src, files = hostile_pair(side, attack, cfg)
    out = run_evaluator(evaluator_spec(src, files, cache_dir), timeout=300)
    res = finished(out)
    rep = hostile.find_report(*res.reasons) or {}
    assert "refused" not in rep, f"the attack ran in the test's own PID namespace: {rep}"
    assert out["elapsed_s"] < WITHIN_S, f"the evaluation took {out['elapsed_s']:.0f} s: {res.status} {res.reasons}"
    assert res.status != Status.TIMEOUT, res.reasons
    assert res.reasons, "an error result says why"
    honest_after(out)
