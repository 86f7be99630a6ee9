"""The escape tests once more, as an unprivileged user (issue 16: the sandbox must hold whether
the service runs as root or not). CI runs as root, so this test creates the system user
`kw-escape` and runs this folder's other tests as it (tests.support.unprivileged); run as any
other user, the suite itself is the unprivileged run and this test is skipped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import unprivileged

from .support import REPO

HERE = Path(__file__).resolve().parent


# the fast tier's share (what ./kw test and CI run): the wall's core, in-process
CORE = ("test_identity.py", "test_filesystem.py", "test_network.py", "test_syscalls.py")


def _run_as_user(*pytest_args: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("not root: this run already is the unprivileged variant")
    why = unprivileged.why_unavailable()
    if why:
        pytest.skip(why)
    argv = unprivileged.command(
        [
            sys.executable,
            "-m",
            "pytest",
            *pytest_args,
            "-k",
            "not unprivileged",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rfE",
            "--tb=short",
        ]
    )
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=3000)
    assert proc.returncode == 0, f"as user {unprivileged.USER}:\n{proc.stdout[-12000:]}\n{proc.stderr[-3000:]}"


def test_the_core_escape_tests_pass_as_an_unprivileged_user():
    _run_as_user(*(str(HERE / name) for name in CORE), "-m", "not slow")


@pytest.mark.slow
def test_the_escape_tests_pass_as_an_unprivileged_user():
    _run_as_user(str(HERE), "-m", "slow or not slow")
