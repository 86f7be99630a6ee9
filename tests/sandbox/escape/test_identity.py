"""Who the hostile code is inside: not root, no capabilities, a seccomp filter; and where it is:
it cannot move itself out of the evaluation's cgroup."""

from __future__ import annotations

import pytest

from tests.sandbox.test_isolation import assert_next_evaluation_works

from .support import SIDES, evaluate_hostile


@pytest.mark.parametrize("side", SIDES)
def test_runs_as_a_non_root_uid_without_capabilities(quick, cfg, side):
    res, rep = evaluate_hostile(quick, side, "identity", cfg)
    assert rep["uid"] != 0 and rep["euid"] != 0, f"the {side} ran as uid 0: {rep}"
    assert "ok" not in (rep["setuid"], rep["setresuid"], rep["setgid"]), f"the {side} could become root: {rep}"
    assert 0 not in rep["now"], rep
    for cap in ("CapEff", "CapPrm", "CapAmb", "CapBnd"):
        assert int(rep.get(cap, "0"), 16) == 0, f"the {side} holds capabilities ({cap}): {rep}"
    assert rep.get("Seccomp") == "2", f"no seccomp filter on the {side}: {rep}"
    assert_next_evaluation_works(quick)


@pytest.mark.parametrize("side", SIDES)
def test_cannot_move_itself_to_the_root_cgroup(quick, cfg, side):
    res, rep = evaluate_hostile(quick, side, "cgroup", cfg)
    moved = [path for path, outcome in rep["moves"].items() if outcome == "ok"]
    assert not moved, f"the {side} moved itself into {moved}: now {rep['now']!r}"
    assert_next_evaluation_works(quick)
