"""`./kw test`'s fast tier: a parallel pass over pytest-xdist workers, then the `quiet` tests
(the sandbox's, which judge time) alone. Asserted on the arguments each pass gets and on what
pytest itself collects with them."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _launcher():
    spec = importlib.util.spec_from_file_location("kw_launcher_passes", ROOT / "scripts" / "launcher.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_fast_tier_is_a_parallel_pass_then_a_quiet_one():
    kw = _launcher()
    first, second = kw.passes(["--junitxml=j.xml"])
    assert first[:2] == ["-m", "not slow and not quiet"] and "-n" in first and "--dist" in first
    assert second[:2] == ["-m", "not slow and quiet"] and "-n" not in second
    assert first[-1] == second[-1] == "--junitxml=j.xml"  # the caller's arguments reach both passes
    # a marker expression or named tests of the caller's own: one pass, as given
    assert kw.passes(["-m", "slow"]) == [["-m", "slow"]]
    assert kw.passes(["tests/sandbox/test_cli.py", "-x"]) == [["tests/sandbox/test_cli.py", "-x"]]


def test_one_exit_code_for_both_passes():
    kw = _launcher()
    assert kw.combined([0, 0]) == 0
    assert kw.combined([0, 5]) == 0  # a pass that collected nothing is no failure beside one that ran
    assert kw.combined([5, 5]) == 5
    assert kw.combined([1, 0]) == 1 and kw.combined([0, 1]) == 1


def test_the_sandbox_tests_and_only_they_are_quiet():
    files = ["tests/sandbox/test_parent_clock.py", "tests/agent/test_export.py"]
    quiet = _collected(["-m", "quiet", *files])
    loud = _collected(["-m", "not quiet", *files])
    assert quiet and all(t.startswith("tests/sandbox/") for t in quiet), quiet
    assert loud and not any(t.startswith("tests/sandbox/") for t in loud), loud


def _collected(args: list[str]) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return [line for line in proc.stdout.splitlines() if "::" in line]
