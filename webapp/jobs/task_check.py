"""Checks an uploaded task without running it: the web process parses, it never imports.

Importing user code in the web process would run it with the server's rights; `ast` tells us
enough to reject the usual mistakes (a syntax error, a missing `Model`, `get_inputs` or
`get_init_inputs`) before a worker spends time on it. The sandbox does the real check.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from agent.exported_task import exported_task_limit, is_exported_task
from agent.module_task import error_that_matters

__all__ = ["MAX_SOURCE_BYTES", "TOO_DEEP", "TaskCheck", "check_task_source", "error_that_matters", "source_limit"]

MAX_SOURCE_BYTES = 256 * 1024
# What CPython's parsers raise on input nested past their limits (`ast.parse` of "-" * 10**5 + "1",
# a long attribute chain; json.loads of deep brackets): a refusal, never an error of the server.
TOO_DEEP = (RecursionError, MemoryError)
REQUIRED_FUNCTIONS = ("get_inputs", "get_init_inputs")


@dataclass
class TaskCheck:
    ok: bool
    errors: list[str] = field(default_factory=list)
    name: str = ""  # a default job name taken from the module docstring


def source_limit(source: str) -> int:
    """A task's size limit: a task made from a .pt2 carries the file (agent.exported_task), so it
    may be larger than a hand-written one."""
    return exported_task_limit() if is_exported_task(source) else MAX_SOURCE_BYTES


def check_task_source(source: str, max_bytes: int | None = None) -> TaskCheck:
    """`max_bytes`: None for the limit of the task's kind (source_limit)."""
    errors: list[str] = []
    size = len(source.encode("utf-8", errors="replace"))
    max_bytes = source_limit(source) if max_bytes is None else max_bytes
    if not source.strip():
        return TaskCheck(False, ["The source is empty."])
    if size > max_bytes:
        return TaskCheck(False, [f"The source is {size} bytes; the limit is {max_bytes} bytes."])
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return TaskCheck(False, [f"Syntax error on line {exc.lineno}: {exc.msg}"])
    except TOO_DEEP:
        return TaskCheck(False, ["The source is nested too deeply to parse."])
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    assigned = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    if "Model" not in classes:
        errors.append("No top-level `class Model(nn.Module)` found.")
    else:
        model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
        methods = {n.name for n in model.body if isinstance(n, ast.FunctionDef)}
        if "forward" not in methods:
            errors.append("`Model` has no `forward` method.")
    for fn in REQUIRED_FUNCTIONS:
        if fn not in functions and fn not in assigned:
            errors.append(f"No top-level function `{fn}()` found.")
    doc = ast.get_docstring(tree) or ""
    name = doc.strip().splitlines()[0][:120] if doc.strip() else ""
    return TaskCheck(not errors, errors, name)
