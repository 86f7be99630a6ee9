from __future__ import annotations

import pytest

from agent.workspace import MAX_FILE_BYTES, Workspace, WorkspaceError


def test_write_and_edit_record_versions_and_diffs():
    ws = Workspace(reference="class Model: pass\n")
    e1 = ws.write("model_new.py", "a = 1\nb = 2\n")
    assert (e1.version, e1.created) == (1, True)
    assert "+a = 1" in e1.diff and e1.diff.startswith("--- /dev/null")
    e2 = ws.edit("model_new.py", "b = 2", "b = 3")
    assert e2.version == 2 and ws.version == 2
    assert "-b = 2" in e2.diff and "+b = 3" in e2.diff
    assert ws.read("model_new.py") == "a = 1\nb = 3\n"
    assert ws.read("reference.py") == "class Model: pass\n"


@pytest.mark.parametrize(
    "path, why",
    [
        ("reference.py", "protected"),
        ("/etc/passwd.txt", "absolute"),
        ("../outside.py", "'..'"),
        ("kernels/../../x.py", "'..'"),
        ("C:/x.py", "absolute"),
        ("kwrt.py", "protected"),
        ("sandbox/harness.py", "protected"),
        ("evaluate_helper.py", "protected"),
        (".hidden.py", "may use only"),
        ("kernels/run.sh", "allowed file types"),
        ("lib.so", "allowed file types"),
        ("a b.py", "may use only"),
        ("", "non-empty"),
    ],
)
def test_protected_and_invalid_paths_are_refused(path, why):
    ws = Workspace(reference="x")
    with pytest.raises(WorkspaceError, match=why):
        ws.write(path, "x = 1\n")
    assert ws.version == 0 and ws.files == {}


def test_too_large_file_is_refused():
    ws = Workspace()
    with pytest.raises(WorkspaceError, match="limit"):
        ws.write("big.py", "#" * (MAX_FILE_BYTES + 1))


def test_edit_must_match_exactly_once():
    ws = Workspace()
    ws.write("k.cpp", "int a;\nint a;\nint b;\n")
    with pytest.raises(WorkspaceError, match="2 times"):
        ws.edit("k.cpp", "int a;", "int c;")
    with pytest.raises(WorkspaceError, match="not found"):
        ws.edit("k.cpp", "int z;", "int c;")
    assert ws.edit("k.cpp", "int b;", "int c;").version == 2


def test_reference_cannot_be_edited_and_unchanged_write_is_refused():
    ws = Workspace(reference="class Model: pass\n")
    with pytest.raises(WorkspaceError, match="protected"):
        ws.edit("reference.py", "pass", "x = 1")
    ws.write("a.py", "x")
    with pytest.raises(WorkspaceError, match="nothing changed"):
        ws.write("a.py", "x")


def test_listing_marks_the_task_read_only():
    ws = Workspace(reference="abc")
    ws.write("kernels/add.cu", "int x;")
    assert ws.listing() == [("reference.py", 3, False), ("kernels/add.cu", 6, True)]
    assert ws.snapshot() == {"kernels/add.cu": "int x;"}
