"""The reference's own computation as a candidate, and the source pieces candidates reuse.

torch-free and import-free: the task's source is only parsed (ast), never run, so the agent
process can build the fallback even when the capture failed. The fallback is the floor every
run reaches under torch-ops=allow: a ModelNew that subclasses a verbatim copy of the task's
Model (renamed `_KwReference`), so its parameters, buffers, helper methods and forward are
the reference's, and the ops stay the library/ATen calls the reference makes.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from agent.builtin.cudagraph import CAPTURE_HELPER, REFERENCE_HELPER

REFERENCE_CLASS = "_KwReference"


def source_parts(src: str) -> dict[str, Any]:
    """The reference's module-level imports, assignments, helper functions/classes, Model's
    constructor and the whole Model class (renamed), verbatim: a candidate reuses them so that
    parameter names, buffers and attributes match exactly. TorchScript's overload declarations
    are left out (without_overloads)."""
    src = without_overloads(src)
    tree = ast.parse(src)
    imports = [ast.get_source_segment(src, n) for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    init = None
    model_class = None
    for n in tree.body:
        if isinstance(n, ast.ClassDef) and n.name == "Model":
            model_class = rename_model(_segment(src, n))
            for f in n.body:
                if isinstance(f, ast.FunctionDef) and f.name == "__init__":
                    init = ast.get_source_segment(src, f, padded=True)
    # assignments and helper functions/classes in the source's order: `to_2tuple = _ntuple(2)` needs
    # the function above it (KernelBench L3/29), a helper may read a constant assigned before it
    # (a definition after two blank lines, as written)
    body = [
        _segment(src, n) if isinstance(n, ast.Assign | ast.AnnAssign) else "\n\n" + _segment(src, n)
        for n in tree.body
        if isinstance(n, ast.Assign | ast.AnnAssign)
        or (isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name not in ("Model", "get_inputs", "get_init_inputs"))
    ]
    return {"imports": imports, "init": init, "body": body, "model_class": model_class}


_OVERLOADS = ("_overload", "_overload_method")


def without_overloads(src: str) -> str:
    """src without the stubs decorated `@torch.jit._overload_method` / `_overload` (torchvision's
    DenseNet declares forward's TorchScript signatures so). In eager code each is a `pass` body the
    real definition below replaces, and the decorator reads its caller's frame (sys._getframe),
    which the sandbox refuses to candidate code: a copy with them does not import."""
    lines = src.splitlines(keepends=True)
    for node in sorted(ast.walk(ast.parse(src)), key=lambda n: -getattr(n, "lineno", 0)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
            isinstance(d, ast.Attribute) and d.attr in _OVERLOADS for d in node.decorator_list
        ):
            del lines[node.decorator_list[0].lineno - 1 : node.end_lineno]
    return "".join(lines)


def _segment(src: str, node: ast.stmt) -> str:
    """A statement's text, with a definition's decorators (its segment starts at `def`/`class`)."""
    decorators = getattr(node, "decorator_list", None)
    if decorators:
        return "\n".join(src.splitlines()[decorators[0].lineno - 1 : node.end_lineno])
    seg = ast.get_source_segment(src, node)
    assert seg is not None, "a node parsed from src has its segment"
    return seg


def rename_model(class_src: str) -> str:
    """`class Model(...)` -> `class _KwReference(...)`, and the class's references to itself
    (`super(Model, self)`, `Model.attr`)."""
    out = re.sub(r"\bclass Model\b", f"class {REFERENCE_CLASS}", class_src, count=1)
    return re.sub(r"(?<![\w.])Model\b(?=\s*[,.)])", REFERENCE_CLASS, out)


def module_header(parts: dict[str, Any], summary: str, extra_imports: tuple[str, ...] = ()) -> list[str]:
    """The docstring, imports, module-level assignments and helpers of a candidate file."""
    out = ['"""' + summary.strip().replace('"""', "'''") + '\n"""', ""]
    imports = list(
        dict.fromkeys(list(parts.get("imports", [])) + ["import torch", "import torch.nn as nn", *extra_imports])
    )
    out += imports
    return [*out, "", *parts.get("body", [])]


def fallback_model(source: str, why: list[str], graphed: bool = False) -> str:
    """model_new.py whose forward is the reference's own: every op stays the library/ATen call
    the reference makes. `why`: the reasons, one comment line each (comments are not scanned: a
    reason quotes the scanned line that failed a candidate, and in a docstring it failed the
    fallback too, torchvision's MaxViT 2026-12-06). graphed (cuda): the same forward replayed as
    one CUDA graph per input signature (agent.builtin.cudagraph)."""
    parts = source_parts(source)
    if not parts.get("model_class"):
        raise ValueError("the task defines no class Model")
    summary = (
        "Generated by the Kernelwright built-in policy: the reference's own computation.\n\n"
        "No kernel was generated for this forward, so every op stays the library/ATen call the reference "
        "makes (cuBLAS/cuDNN/oneDNN, ATen); the reasons follow."
    )
    lines = module_header(parts, summary)
    lines[1:1] = [f"# - {' '.join(w.split())}" for w in why]
    if graphed:
        lines += [CAPTURE_HELPER.rstrip(), REFERENCE_HELPER.rstrip()]
    lines += ["", "", parts["model_class"], "", "", f"class ModelNew({REFERENCE_CLASS}):"]
    if not graphed:
        lines.append(
            '    """The reference Model, unchanged: its constructor, parameters and forward (library/ATen calls)."""'
        )
    else:
        lines += [
            '    """The reference Model, its forward replayed as one CUDA graph (same ops, one launch per call)."""',
            "",
            "    def forward(self, *inputs):",
            "        return _kw_graphed_reference(self, super().forward, inputs)",
        ]
    return "\n".join([*lines, ""]) + "\n"
