"""Checks an uploaded task without running it: the web process parses, it never imports.

Importing user code in the web process would run it with the server's rights; `ast` tells us
enough to reject the usual mistakes (a syntax error, a missing `Model`, `get_inputs` or
`get_init_inputs`) before a worker spends time on it. The sandbox does the real check.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from agent.exported_task import exported_task_limit, is_exported_task

MAX_SOURCE_BYTES = 256 * 1024
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


# -- a run-time failure, said first -------------------------------------------------------------
_EXC_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception)): (?P<msg>.+)$")
_FILE_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)')
_WRAPPERS = ("ShapeProp error for:", "While executing", "Failed running call_", "Dynamo failed")


def error_that_matters(text: str) -> str:
    """The user's error in a failure's traceback, in one line: the root cause of a chained
    traceback (torch.fx's ShapeProp and export wrap a shape mismatch in errors about their own
    nodes) and the last frame outside torch and the standard library that led to it, e.g.
    "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x16 and 32x8) (task.py, line 12,
    in forward)". The text itself when it holds no exception line. Shown before the traceback."""
    lines = text.splitlines()
    place = ""
    for line in lines:
        frame = _FILE_LINE.match(line)
        if frame and not frame["file"].startswith("<") and not any(d in frame["file"] for d in ("site-packages", "/lib/python")):
            place = f"{frame['file'].rsplit('/', 1)[-1]}, line {frame['line']}, in {frame['fn']}"
        exc = _EXC_LINE.match(line.strip())
        if exc and not exc["msg"].startswith(_WRAPPERS):
            return f"{exc['type']}: {exc['msg']}" + (f" ({place})" if place else "")
    return text.strip().splitlines()[0] if text.strip() else ""
