from __future__ import annotations

from agent.policy import TaskInfo, ToolInvocation
from agent.tools import INVALID_ARGUMENTS_KEY, TOOL_SPECS, ToolRunner, tool_specs, trim_for_model
from agent.workspace import Workspace


def runner() -> ToolRunner:
    ws = Workspace(reference="class Model: pass\n")
    return ToolRunner(ws, None, TaskInfo("t", "class Model: pass\n", "cpu"))


def call(name, **args):
    return ToolInvocation(name, args, f"id-{name}")


def test_specs_are_openai_function_schemas():
    names = [s["function"]["name"] for s in tool_specs()]
    assert names == ["list_files", "read_file", "write_file", "edit_file", "compile", "evaluate", "profile", "finish"]
    for s in TOOL_SPECS:
        assert s["type"] == "function" and s["function"]["parameters"]["type"] == "object"


def test_trim_cuts_the_middle_and_says_how_much():
    text = "HEAD" + "x" * 10_000 + "TAIL"
    out, cut = trim_for_model(text, 1000)
    assert out.startswith("HEAD") and out.endswith("TAIL")
    assert cut == len(text) - 1000
    assert f"{cut} characters cut" in out
    assert trim_for_model("short", 1000) == ("short", 0)


def test_file_tools_and_errors_become_observations():
    r = runner()
    w = r.execute(call("write_file", path="model_new.py", content="x = 1\n"))
    assert w.ok and w.edit is not None and "workspace version 1" in w.content
    e = r.execute(call("edit_file", path="model_new.py", old="x = 1", new="x = 2"))
    assert e.ok and "+x = 2" in e.content
    assert r.execute(call("read_file", path="model_new.py")).content == "x = 2\n"
    listing = r.execute(call("list_files")).content
    assert "reference.py" in listing and "read-only" in listing and "model_new.py" in listing
    bad = r.execute(call("write_file", path="reference.py", content="evil"))
    assert not bad.ok and "protected" in bad.content
    missing = r.execute(call("write_file", path="a.py"))
    assert not missing.ok and "content" in missing.content
    unknown = r.execute(ToolInvocation("rm_rf", {}, "z"))
    assert not unknown.ok and "unknown tool 'rm_rf'" in unknown.content
    broken = r.execute(ToolInvocation("write_file", {INVALID_ARGUMENTS_KEY: "{oops"}, "y"))
    assert not broken.ok and "not valid JSON" in broken.content
    assert r.workspace.version == 2


def test_long_outputs_are_trimmed_for_the_model_but_kept_in_full():
    r = runner()
    r.execute(call("write_file", path="notes.txt", content="line\n" * 20_000))
    out = r.execute(call("read_file", path="notes.txt"))
    assert len(out.content) == 100_000
    assert out.trimmed_chars > 0 and len(out.model_content) < 41_000


def test_evaluate_without_model_new_is_a_clear_error():
    out = runner().execute(call("evaluate"))
    assert not out.ok and "model_new.py" in out.content


def test_finish_carries_the_summary():
    out = runner().execute(call("finish", summary="done"))
    assert out.finish and out.summary == "done"
