"""The model reads no blobs: a task made from a .pt2 (agent.exported_task) carries the file as
base64, and what a model sees of the task (read_file of reference.py, the task message the
OpenAI policy sends to a real loopback server) has that part replaced by a one-line marker
saying what was cut and why; the evaluator still gets the whole task."""

from __future__ import annotations

import ast
import re

import pytest

from agent.exported_task import exported_task_source
from agent.policy import TaskInfo, ToolInvocation
from agent.testing.scenarios import call, reply
from agent.tools import ToolRunner, source_for_model, tool_specs
from agent.workspace import Workspace

from .conftest import SOFTMAX_TASK, policy_for

BASE64_LINE = re.compile(r"^[A-Za-z0-9+/=]{60,}$", re.M)


@pytest.fixture(scope="module")
def exported_task(tmp_path_factory) -> str:
    """A task from a .pt2 of a 256x256 linear layer: its weights alone are 256 KiB."""
    import torch

    path = tmp_path_factory.mktemp("pt2") / "wide.pt2"
    torch.export.save(torch.export.export(torch.nn.Linear(256, 256), (torch.randn(2, 256),)), str(path))
    return exported_task_source(path.read_bytes(), "wide")


def blob_of(source: str) -> str:
    return re.search(r'_KW_PT2 = """\n(.*?)"""', source, re.S).group(1)


def test_read_file_of_the_reference_shows_the_source_without_the_file(exported_task):
    runner = ToolRunner(Workspace(reference=exported_task), None, TaskInfo("wide", exported_task, "cpu", {}))
    out = runner.execute(ToolInvocation("read_file", {"path": "reference.py"}, "c1"))
    blob = blob_of(exported_task)
    assert len(blob) > 300_000 and BASE64_LINE.search(exported_task)
    assert out.ok and out.trimmed_chars == 0 and out.model_content == out.content
    assert not BASE64_LINE.search(out.content) and len(out.content) < 6_000
    marker = f"[{len(blob)} characters cut: the .pt2 file itself, base64 ({blob.count(chr(10))} lines)."
    assert marker in out.content and "torch.export.load" in out.content.split(marker)[1].split("\n")[0]
    tree = ast.parse(out.content)  # still Python, with everything but the file
    assert {"Model", "get_inputs", "get_init_inputs"} <= {n.name for n in tree.body if hasattr(n, "name")}
    assert "Recorded inputs: " in out.content and out.content.replace(blob_of(out.content), blob) == exported_task
    assert runner.task.source == exported_task  # the evaluator gets the file


def test_the_task_message_carries_no_blob(scripted, exported_task):
    srv = scripted({"replies": [reply(call("list_files"))]})
    policy = policy_for(srv)
    policy.reset(TaskInfo("wide", exported_task, "cpu", {}), tool_specs(), [])
    policy.next_action([])
    task_message = srv.requests[0]["messages"][1]["content"]
    assert "characters cut: the .pt2 file itself" in task_message and "class Model" in task_message
    assert not BASE64_LINE.search(task_message) and len(task_message) < 8_000


def test_other_sources_are_left_as_they_are():
    text = SOFTMAX_TASK.read_text()
    assert source_for_model(text) == text
    hand_written = text + '\n_KW_PT2 = """\nQUJD\n"""\n'  # the name alone, without the exported task's mark
    assert source_for_model(hand_written) == hand_written
