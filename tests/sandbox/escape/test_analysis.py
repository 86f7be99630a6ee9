"""The built-in policy's analysis of an upload (agent.builtin.graph.analyze_source) imports and
runs the task: a hostile task there reads no secret, reaches no network, writes nothing outside
and leaves no process behind; the next analysis works."""

from __future__ import annotations

import json
import time

import pytest

from agent.builtin.graph import analyze_source

from . import checks, hostile
from .support import (
    analysis_report,
    analysis_spec,
    assert_next_analysis_works,
    honest_after,
    kill_pids,
    outcome,
    processes_named,
    run_evaluator,
    secret_env,
)


def _analyze(attack: str, cfg: dict):
    a = analyze_source(hostile.task(attack, cfg), device="cpu", profile=False, timeout=120)
    return a, analysis_report(a)


@pytest.mark.slow
def test_analysis_reads_no_secret(cfg):
    secret, env = secret_env()
    out = run_evaluator(analysis_spec(hostile.task("environment", cfg)), env, need_shield=False)
    result = outcome(out)
    rep = hostile.find_report(result["error"])
    assert rep is not None, f"the hostile task sent no report: {result}"
    assert secret not in json.dumps(result), f"the analysed task read the worker's secret: {rep}"
    assert rep["found"] == {}, f"the analysed task read secrets from process environments: {rep}"
    honest_after(out)


def test_analysis_reaches_no_network(cfg, listener):
    a, rep = _analyze("network", cfg)
    checks.network(rep, listener)
    a, rep = _analyze("join_network", cfg)
    checks.joined_network(rep, listener)
    assert_next_analysis_works()


def test_analysis_writes_nothing_outside(cfg, token):
    cfg |= checks.write_files_cfg(token)
    a, rep = _analyze("write_files", cfg)
    checks.written_files(rep, cfg)
    assert_next_analysis_works()


def test_analysis_leaves_no_process(cfg, listener, token):
    cfg |= checks.daemon_cfg(token)
    try:
        a, rep = _analyze("daemon", cfg)
        checks.no_survivor(rep, cfg, listener, time.time())
    finally:
        kill_pids(processes_named(cfg["name"]))
    assert_next_analysis_works()


def test_analysis_runs_unprivileged(cfg):
    a, rep = _analyze("identity", cfg)
    assert rep["uid"] != 0 and rep["euid"] != 0 and 0 not in rep["now"], f"the analysis ran as root: {rep}"
    assert int(rep.get("CapEff", "0"), 16) == 0, rep
    assert_next_analysis_works()
