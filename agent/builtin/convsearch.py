"""cuDNN's algorithm search as one more candidate: the best candidate so far, with cuDNN asked
to time its algorithms for each convolution shape and keep the fastest.

PyTorch's default picks a convolution algorithm by cuDNN's heuristics; in benchmark mode cuDNN
times the applicable ones on the first call of each shape. On fp32 3-d and transposed
convolutions the heuristic choice is not always the fastest, and a KernelBench level-2 problem
is usually its convolution's time. The candidate asks through kwrt.search_conv_algorithms() (a
candidate may not set global flags itself: the sandbox rejects it); the evaluation records the
setting, and the policy's summary says when a speedup rests on it, because the user gets the
same for eager with one line (torch.backends.cudnn.benchmark = True).
"""

from __future__ import annotations

import ast
import re

from agent.builtin.graph import Graph

TAG = "[cuDNN algorithm search]"
_CONV_SOURCE = re.compile(r"\bnn\.Conv(Transpose)?[123]d\b|\bF\.conv(_transpose)?[123]d\b|\btorch\.conv")


def has_convolutions(graph: Graph | None, source: str) -> bool:
    """Whether the forward convolves: from the captured graph, or from the task's text when the
    capture failed (the reference's own computation is then the only candidate)."""
    if graph is not None:
        return any(
            n.op == "conv2d" or (n.op == "aten" and "conv" in str(n.attrs.get("target", ""))) for n in graph.nodes
        )
    return bool(_CONV_SOURCE.search(source))


def with_search(model_new: str) -> str:
    """model_new.py that asks for the search at import, after its docstring and __future__ imports."""
    tree = ast.parse(model_new)
    at = 0
    for i, stmt in enumerate(tree.body):
        docstring = i == 0 and isinstance(stmt, ast.Expr) and isinstance(getattr(stmt, "value", None), ast.Constant)
        future = isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"
        if not (docstring or future):
            break
        at = stmt.end_lineno or at
    lines = model_new.splitlines()
    added = [
        "import kwrt as _kw_search",
        "",
        "_kw_search.search_conv_algorithms()  # cuDNN times its algorithms per convolution shape; recorded",
    ]
    return "\n".join([*lines[:at], *added, *lines[at:]]) + "\n"
