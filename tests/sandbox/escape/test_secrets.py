"""Secrets of the evaluator (its exec-time environment: OPENAI_API_KEY, a test token, a Redis
URL with a password) stay out of reach: not through /proc/PID/environ of the parent, the
ancestors, PID 1 or any process, not through /proc/PID/mem or process_vm_readv. The evaluator
runs in a subprocess started with those variables (tests.sandbox.escape.runner)."""

from __future__ import annotations

import json

import pytest

from .support import SIDES, evaluator_spec, finished, honest_after, hostile_pair, report_of, run_evaluator, secret_env


def _run(cache_dir, cfg, side, attack):
    secret, env = secret_env()
    src, files = hostile_pair(side, attack, cfg)
    out = run_evaluator(evaluator_spec(src, files, cache_dir), env, need_shield=False)
    res = finished(out)
    assert secret not in json.dumps(out["result"]), f"the {side} read the evaluator's secret: {res.reasons}"
    return out, report_of(res)


@pytest.mark.parametrize("side", SIDES)
def test_no_process_environment_is_readable(cache_dir, cfg, side):
    out, rep = _run(cache_dir, cfg, side, "environment")
    assert rep["found"] == {}, f"the {side} read secrets from process environments: {rep}"
    honest_after(out)


@pytest.mark.slow
@pytest.mark.parametrize("side", SIDES)
def test_no_ancestor_memory_is_readable(cache_dir, cfg, side):
    out, rep = _run(cache_dir, cfg, side, "memory")
    assert rep["hits"] == [], f"the {side} found the API key in an ancestor's memory: {rep}"
    read = {pid: n for pid, n in rep["mem"].items() if isinstance(n, int) and n > 0}
    assert not read, f"the {side} read the memory of {sorted(read)} (bytes: {read}): {rep}"
    vm = {pid: r for pid, r in rep["vm"].items() if r[0] != -1}
    assert not vm, f"process_vm_readv of {sorted(vm)} succeeded: {rep}"
    honest_after(out)
