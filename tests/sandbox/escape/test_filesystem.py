"""The file system: the project tree, var/ (the SQLite database), home folders, the host's /tmp
and the parents' device-memory shares are neither readable nor writable; the runtime is read-only."""

from __future__ import annotations

import secrets
import shutil
import tempfile
from pathlib import Path

import pytest

from sandbox import devmem
from tests.sandbox.test_isolation import assert_next_evaluation_works

from . import checks
from .support import REPO, SIDES, evaluate_hostile, texts_of


@pytest.fixture
def var_dir():
    """The project's var/, made for the test where a fresh clone has none yet."""
    var = REPO / "var"
    made = not var.exists()
    if made:
        var.mkdir()
    yield var
    if made:
        shutil.rmtree(var, ignore_errors=True)


@pytest.fixture
def planted(token, var_dir):
    """A secret in a file (mode 0644) in the tree, var/ (as a SQLite file), the home folder and
    the host's /tmp, wherever this user may write. (secret, label -> path)."""
    secret = "kwsecret" + secrets.token_hex(12)
    places = {
        "repo": REPO / f"kw-escape-{token}.txt",
        "var": var_dir / f"kw-escape-{token}.sqlite3",
        "home": Path.home() / f".kw-escape-{token}",
        "tmp": Path(tempfile.gettempdir()) / f"kw-escape-{token}",
        # the parents' device-memory shares (sandbox.devmem): a child that could open them could hold them
        "memory": Path(devmem.folder_for(f"gpu-escape-{token}")) / "00",
    }
    made = {}
    for label, path in places.items():
        try:
            if label == "memory":
                devmem.prepare(f"gpu-escape-{token}")
            path.write_text(("SQLite format 3\0" if label == "var" else "") + secret)
            path.chmod(0o644)
            made[label] = path
        except OSError:
            pass
    yield secret, made
    for path in made.values():
        path.unlink(missing_ok=True)
    shutil.rmtree(devmem.folder_for(f"gpu-escape-{token}"), ignore_errors=True)


@pytest.mark.parametrize("side", SIDES)
def test_cannot_read_the_tree_var_homes_or_host_tmp(quick, cfg, planted, side):
    secret, made = planted
    cfg |= checks.read_files_cfg(made)
    res, rep = evaluate_hostile(quick, side, "read_files", cfg)
    checks.read_files(rep, texts_of(res), secret, cfg)
    assert_next_evaluation_works(quick)


@pytest.mark.parametrize("side", SIDES)
def test_cannot_write_the_tree_var_homes_runtime_or_host_tmp(quick, cfg, token, var_dir, side):
    cfg |= checks.write_files_cfg(token)
    try:
        res, rep = evaluate_hostile(quick, side, "write_files", cfg)
        checks.written_files(rep, cfg)
    finally:
        for path in cfg["create"].values():
            Path(path).unlink(missing_ok=True)
    assert_next_evaluation_works(quick)
