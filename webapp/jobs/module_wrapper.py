"""The web app's entry to agent.module_task (any module -> a KernelBench-format task) and
agent.exported_task (a .pt2 ExportedProgram -> a task): the logic lives there, once, for the
form, the API and the CLI alike; this module only names what the web app uses."""

from __future__ import annotations

import functools

from agent import exported_task, module_task
from agent.exported_task import MAX_EXPORTED_BYTES, looks_exported
from agent.module_task import (
    WRAPPER_MARK,
    InputSpec,
    SpecError,
    parse_init_args,
    parse_input_spec,
    parse_input_specs,
    wrapper_source,
)
from webapp.jobs.task_check import TOO_DEEP


def _refuses_deep_nesting(parse):
    """An upload nested past the parsers' limits (`ast.parse`, `ast.unparse`, `json.loads` of a
    .pt2's graph) is a SpecError that says so, like any other unusable upload, not a 500."""

    @functools.wraps(parse)
    def inner(*args, **kwargs):
        try:
            return parse(*args, **kwargs)
        except TOO_DEEP:
            raise SpecError("the file is nested too deeply to be read") from None

    return inner


find_module_classes = _refuses_deep_nesting(module_task.find_module_classes)
task_from_module = _refuses_deep_nesting(module_task.task_from_module)
read_exported = _refuses_deep_nesting(exported_task.read_exported)
exported_task_source = _refuses_deep_nesting(exported_task.exported_task_source)

__all__ = [
    "MAX_EXPORTED_BYTES",
    "WRAPPER_MARK",
    "InputSpec",
    "SpecError",
    "exported_task_source",
    "find_module_classes",
    "looks_exported",
    "parse_init_args",
    "parse_input_spec",
    "parse_input_specs",
    "read_exported",
    "task_from_module",
    "wrapper_source",
]
