"""Fail closed: without bubblewrap (KERNELWRIGHT_BWRAP=/nonexistent) nothing untrusted runs and
the result says containment is unavailable; the opt-out KERNELWRIGHT_UNCONTAINED=1 is labelled
on every result (res.containment)."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from sandbox import evaluate
from sandbox.schema import Status
from tests.sandbox.helpers import candidate, task
from tests.sandbox.test_isolation import assert_next_evaluation_works

from . import hostile
from .support import analysis_spec, assert_next_analysis_works, evaluator_spec, outcome, run_evaluator

UNAVAILABLE = re.compile(
    r"(sandbox|containment|bubblewrap|bwrap)\b.*\bunavailable|unavailable\b.*\b(sandbox|containment|bubblewrap|bwrap)",
    re.I | re.S,
)
MISSING_BWRAP = {"KERNELWRIGHT_BWRAP": "/nonexistent"}


@pytest.fixture
def marker(cfg, token):
    path = Path(tempfile.gettempdir()) / f"kw-escape-ran-{token}"
    cfg["marker"] = str(path)
    yield path
    path.unlink(missing_ok=True)


def test_without_bubblewrap_nothing_runs(cache_dir, cfg, marker, quick):
    spec = evaluator_spec(hostile.task("marker", cfg), hostile.candidate("marker", cfg), cache_dir)
    out = run_evaluator(spec, MISSING_BWRAP, need_shield=False)
    result = outcome(out)
    assert not marker.exists(), f"untrusted code ran without containment: {marker.read_text()!r}"
    assert result["status"] != Status.OK.value
    assert UNAVAILABLE.search(" ".join(result["reasons"])), (
        f"the error does not say containment is unavailable: {result['reasons']}"
    )
    assert_next_evaluation_works(quick)


@pytest.mark.slow
def test_without_bubblewrap_no_analysis_runs(cfg, marker):
    out = run_evaluator(analysis_spec(hostile.task("marker", cfg)), MISSING_BWRAP, need_shield=False)
    result = outcome(out)
    assert not marker.exists(), f"the analysis ran the task without containment: {marker.read_text()!r}"
    assert not result["ok"]
    assert UNAVAILABLE.search(result["error"]), f"the error does not say containment is unavailable: {result['error']}"
    assert_next_analysis_works()


def test_a_contained_result_says_so(quick):
    res = evaluate(task("softmax_tiny.py"), candidate("softmax_cpp"), quick())
    assert res.status == Status.OK, res.reasons
    assert getattr(res, "containment", None) == "bubblewrap", "EvalResult.containment should be 'bubblewrap'"
    assert res.to_dict().get("containment") == "bubblewrap"


@pytest.mark.slow
def test_the_opt_out_is_labelled(cache_dir):
    spec = evaluator_spec(task("softmax_tiny.py"), candidate("softmax_cpp"), cache_dir)
    out = run_evaluator(spec, {"KERNELWRIGHT_UNCONTAINED": "1"}, need_shield=False)
    label = outcome(out).get("containment")
    assert isinstance(label, str) and label.startswith("uncontained"), f"an uncontained result is labelled {label!r}"
