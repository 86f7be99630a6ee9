"""Candidate file names and texts (red-team a11): a name that cannot be a file of the workspace,
or text that is not UTF-8, is a compile_error result that names the file; evaluate never raises
for it (it raised IsADirectoryError, ValueError, FileExistsError or UnicodeEncodeError)."""

from __future__ import annotations

import pytest

from sandbox import compile_candidate, evaluate
from sandbox.build import MAX_NAME_CHARS, MAX_NAME_DEPTH, _validate_files
from sandbox.isolation import Child
from sandbox.schema import Status
from tests.sandbox.helpers import candidate, task

BAD = {
    "dot": {".": "x"},
    "trailing slash": {"kernels/": "x"},
    "nul": {"kernels/a\x00b.h": "x"},
    "file and folder": {"model_new.py/x.h": "x"},
    "dotdot": {"./kernels/../../x.h": "x"},
    "absolute": {"/tmp/x.h": "x"},
    "empty component": {"kernels//x.h": "x"},
    "space": {"kernels/a b.h": "x"},
    "non-ascii": {"kernels/\u00e9.h": "x"},
    "surrogate in name": {"kernels/\ud800.h": "x"},
    "too deep": {"/".join(["d"] * (MAX_NAME_DEPTH + 1)) + ".h": "x"},
    "too long": {"k" * (MAX_NAME_CHARS + 1): "x"},
    "lone surrogate": {"kernels/x.cpp": "\ud800"},
}


@pytest.mark.parametrize("extra", BAD.values(), ids=list(BAD))
def test_bad_names_and_texts_are_compile_errors(quick, extra):
    files = candidate("softmax_cpp") | extra
    res = evaluate(task("softmax_tiny.py"), files, quick())
    assert res.status == Status.COMPILE_ERROR, res.reasons
    assert res.compile is not None and not res.compile.ok
    assert all("\x00" not in e.file and e.file.isprintable() for e in res.compile.errors)
    assert compile_candidate(files, quick()).ok is False


def test_plain_nested_names_are_accepted():
    files = candidate("softmax_cpp") | {
        "kernels/sub/dir/x_1.cuh": "",
        "notes/README.md": "",
        ".config.json": "{}",
        "/".join(["d"] * MAX_NAME_DEPTH) + ".h": "",
    }
    assert _validate_files(files) == []
    assert [e.message for e in _validate_files(files | {"kernels/x.h": b"x"})] == ["file contents must be text"]


def test_the_clash_is_named():
    errors = _validate_files(candidate("softmax_cpp") | {"kernels/softmax.cpp/x.h": ""})
    assert [e.message for e in errors] == ["kernels/softmax.cpp is both a file and a folder"]


def test_files_that_cannot_be_set_up_are_a_compile_error(quick, monkeypatch):
    """Whatever writing the candidate's files into its child raises past build's checks is a
    result, not a raise."""

    write = Child.write_files

    def refuse(self, files, subdir="cand"):
        if subdir == "cand":
            raise OSError(28, "No space left on device")
        return write(self, files, subdir)

    monkeypatch.setattr(Child, "write_files", refuse)
    res = evaluate(task("softmax_tiny.py"), candidate("softmax_cpp"), quick())
    assert res.status == Status.COMPILE_ERROR
    assert "could not be set up" in res.reasons[0] and "No space left" in res.reasons[0]
