"""The CLI prints one JSON result and exits 0 whenever an evaluation ran."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.sandbox.helpers import CANDIDATES, HACKS, TASKS


def run(*args: str, cache: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sandbox", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "KERNELWRIGHT_CACHE": cache},
    )


def test_evaluate_json_ok(cache_dir):
    p = run(
        "evaluate",
        "--reference",
        str(TASKS / "softmax_tiny.py"),
        "--candidate",
        str(CANDIDATES / "softmax_cpp"),
        "--backend",
        "cpu",
        "--no-compile-baseline",
        "--budget",
        "0.05",
        "--json",
        cache=cache_dir,
    )
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert data["schema"] == "kernelwright.eval/2" and data["status"] == "ok" and data["verdict"] == "pass"
    for key in (
        "reasons",
        "trials",
        "timing",
        "speedup_vs_eager",
        "speedup_vs_compile",
        "speed",
        "reward",
        "audit",
        "profile",
        "roofline",
    ):
        assert key in data
    assert data["timing"]["candidate"]["median_ms"] > 0
    assert data["timing"]["mode"] == "paired" and data["speed"]["vs_eager"]["ci_low"] <= data["speedup_vs_eager"]


def test_failed_verdict_still_exits_zero(cache_dir):
    p = run(
        "evaluate",
        "--reference",
        str(TASKS / "softmax_tiny.py"),
        "--candidate",
        str(HACKS / "torch_fallback"),
        "--backend",
        "cpu",
        "--no-compile-baseline",
        "--json",
        cache=cache_dir,
    )
    assert p.returncode == 0
    assert json.loads(p.stdout)["status"] == "rejected"


def test_bad_usage_exits_nonzero(cache_dir):
    assert (
        run("evaluate", "--reference", "/nonexistent.py", "--candidate", "/nonexistent", cache=cache_dir).returncode
        == 2
    )
    assert run("evaluate", cache=cache_dir).returncode == 2


@pytest.mark.slow
def test_baseline_and_profile_commands(cache_dir):
    p = run(
        "baseline",
        str(TASKS / "softmax_tiny.py"),
        "--backend",
        "cpu",
        "--no-compile-baseline",
        "--budget",
        "0.05",
        "--json",
        cache=cache_dir,
    )
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert data["status"] == "ok" and data["timing"]["eager"]["trials"] >= 20 and data["timing"]["mode"] == "alone"
    p = run(
        "profile",
        "--reference",
        str(TASKS / "softmax_tiny.py"),
        "--candidate",
        str(CANDIDATES / "softmax_cpp"),
        "--backend",
        "cpu",
        "--no-compile-baseline",
        "--budget",
        "0.05",
        "--json",
        cache=cache_dir,
    )
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert data["status"] == "ok"
    names = [row["name"] for row in data["profile"]]
    assert any("kwrt::softmax_rows" in n for n in names), names
    assert abs(sum(row["share"] for row in data["profile"]) - 1.0) < 1e-6
    roof = data["roofline"]
    assert roof["peak_bandwidth_gbs"] > 0 and 0 < roof["fraction_of_sol"] <= 1
