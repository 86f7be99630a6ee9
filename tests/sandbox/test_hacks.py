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
