"""The web app's entry to agent.module_task (any module -> a KernelBench-format task) and
agent.exported_task (a .pt2 ExportedProgram -> a task): the logic lives there, once, for the
form, the API and the CLI alike; this module only names what the web app uses."""

from __future__ import annotations

from agent.exported_task import MAX_EXPORTED_BYTES, exported_task_source, looks_exported, read_exported
from agent.module_task import (
    WRAPPER_MARK,
    InputSpec,
    SpecError,
    find_module_classes,
    parse_init_args,
    parse_input_spec,
    parse_input_specs,
    task_from_module,
    wrapper_source,
)

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
