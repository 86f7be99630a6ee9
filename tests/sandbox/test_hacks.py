"""Every known exploit class has a candidate under hacks/ with its expected verdict.

A hack must never earn more than honest work: every one of them must end with reward -1,
while the honest candidate for the same task earns at least 1 (tests/sandbox/test_evaluate.py).
"""

from __future__ import annotations

import json

import pytest

from sandbox import evaluate, load_candidate
from tests.sandbox.helpers import HACKS, task

CASES = sorted(p.name for p in HACKS.iterdir() if (p / "expected.json").exists())


def test_every_documented_class_has_a_candidate():
    doc = (HACKS.parent.parent.parent / "docs" / "hacks.md").read_text()
    missing = [name for name in CASES if f"`{name}`" not in doc]
    assert not missing, f"hack candidates not described in docs/hacks.md: {missing}"


@pytest.mark.parametrize("name", CASES)
def test_hack_is_caught(name, quick):
    expected = json.loads((HACKS / name / "expected.json").read_text())
    files = load_candidate(HACKS / name)
    files.pop("expected.json", None)
    res = evaluate(task(expected["task"]), files, quick(**expected.get("options", {})))
    text = "\n".join(res.reasons + [t.message for t in res.trials])
    assert res.status.value == expected["status"], f"{name}: got {res.status.value}: {text}"
    assert expected["reason"] in text, f"{name}: reason should mention {expected['reason']!r}: {text}"
    assert res.reward == -1
    assert res.verdict.value == "fail"


def test_an_output_repeated_across_input_sets_is_a_replay():
    """The bound check alone lets a replay through where two sets' expected outputs lie within the
    tolerance of each other (replay_outputs passed it once on a loaded CI machine, 2026-12-01):
    an output repeated bit for bit on another set whose expected output differs is counted."""
    from sandbox.protocol import replayed_calls

    bounds = [(1.0, 0.5), (1.2, 0.5), (1.0, 0.5)]
    honest = [(0, 1.01), (1, 1.19), (2, 0.99), (0, 1.01)]  # the same set again: the same value
    assert replayed_calls(honest, bounds) == 0
    replay = [(0, 1.01), (1, 1.01), (2, 1.01), (0, 1.01)]
    assert replayed_calls(replay, bounds) == 1  # set 2 expects what set 0 does: a repeat there is no proof
    constant = [(0, 3.0), (1, 3.0)]  # a task whose output does not depend on its input
    assert replayed_calls(constant, [(3.0, 0.1), (3.0, 0.1)]) == 0
    # a set whose reference output is not finite has no bound (a causal mask with fully masked rows):
    # the rule must still judge the other sets, not raise (it raised on None, 2026-12-05)
    assert replayed_calls(replay, [(1.0, 0.5), None, (1.2, 0.5)]) == 1
    assert replayed_calls(replay, [None, None, None]) == 0
