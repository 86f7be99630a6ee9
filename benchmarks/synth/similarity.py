"""How alike two tasks are: the multiset of operators their forward computes, compared by Jaccard.

`ops_of(source)` reads a KernelBench-format file without running it (KernelBench's problems are
sized for a large GPU): the normalised AST of Model.forward, where each call or arithmetic
operator becomes one canonical name. Layers are named by their class (self.gemm = nn.Linear ->
"matmul"), functions by their last attribute (torch.tanh, F.tanh, x.tanh() -> "tanh"), aliases
are folded (nn.Linear, F.linear, torch.mm, bmm and @ are all "matmul"; divide, true_divide and /
are "div"), names lose case and underscores (nn.LogSoftmax and F.log_softmax are "logsoftmax"),
and what only moves data (view, permute, contiguous, ...) is not counted. The similarity of two
tasks is |A ∩ B| / |A ∪ B| over those multisets: 1.0 for the same operators the same number of
times, whatever the shapes or constants.
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ALIASES = {
    "linear": "matmul",
    "mm": "matmul",
    "bmm": "matmul",
    "addmm": "matmul",
    "einsum": "matmul",
    "gemm": "matmul",
    "divide": "div",
    "truediv": "div",
    "truedivide": "div",
    "multiply": "mul",
    "subtract": "sub",
    "rsub": "sub",
    "absolute": "abs",
    "negative": "neg",
    "sgn": "sign",
    "clip": "clamp",
    "arccos": "acos",
    "arcsin": "asin",
    "arctan": "atan",
    "arccosh": "acosh",
    "arcsinh": "asinh",
    "arctanh": "atanh",
    "arctan2": "atan2",
    "swish": "silu",
    "fix": "trunc",
    "fmax": "maximum",
    "fmin": "minimum",
}
MOVES_DATA = frozenset(
    {
        "view",
        "reshape",
        "permute",
        "transpose",
        "contiguous",
        "size",
        "flatten",
        "unsqueeze",
        "squeeze",
        "expand",
        "expandas",
        "viewas",
        "to",
        "cuda",
        "cpu",
        "float",
        "half",
        "double",
        "type",
        "clone",
        "detach",
        "chunk",
        "split",
        "cat",
        "stack",
        "narrow",
        "select",
        "repeat",
        "t",
        "super",
        "len",
        "range",
        "int",
        "list",
        "tuple",
        "getattr",
        "isinstance",
        "print",
        "item",
        "dim",
        "numel",
        "zeroslike",
        "oneslike",
        "emptylike",
        "newzeros",
        "newones",
    }
)
CONTAINERS = frozenset({"sequential", "modulelist", "moduledict", "parameter", "append"})
MAKERS = ("randn", "rand", "zeros", "ones", "tensor", "empty", "full", "arange")  # make parameters, compute nothing
BINOPS = {
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Mult: "mul",
    ast.Div: "div",
    ast.MatMult: "matmul",
    ast.Pow: "pow",
    ast.FloorDiv: "floordivide",
    ast.Mod: "remainder",
}


def canonical(name: str) -> str:
    key = name.split(":")[-1].lower().replace("_", "")
    return ALIASES.get(key, key)


def _last_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _layer_names(node: ast.AST) -> Counter:
    calls = [c for c in ast.walk(node) if isinstance(c, ast.Call)]
    names = [canonical(n) for c in calls if (n := _last_name(c.func))]
    return Counter(n for n in names if n not in CONTAINERS and n not in MOVES_DATA and not n.startswith(MAKERS))


def _modules(cls: ast.ClassDef) -> dict[str, Counter]:
    """self.<attr> -> the operators its module computes (nn.Sequential: each of its layers; one
    built from a list, `nn.Sequential(*layers)`: the layers appended to lists in __init__)."""
    appended = sum(
        (
            _layer_names(c)
            for c in ast.walk(cls)
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "append"
        ),
        Counter(),
    )
    out: dict[str, Counter] = {}
    for node in ast.walk(cls):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        for target in node.targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                found = _layer_names(node.value)
                built_from_list = any(isinstance(a, ast.Starred) for a in node.value.args)
                out[target.attr] = found + appended if built_from_list else found
    return out


def ops_of(source: str) -> Counter:
    """The multiset of canonical operators of Model.forward (empty when there is no Model)."""
    tree = ast.parse(source)
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        return Counter()
    modules = _modules(model)
    found: Counter = Counter()
    for fn in model.body:
        if not isinstance(fn, ast.FunctionDef) or fn.name == "__init__":
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.BinOp) and type(node.op) in BINOPS:
                found[BINOPS[type(node.op)]] += 1
            elif isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
                    found.update(modules.get(func.attr, Counter()))
                elif (name := _last_name(func)) and canonical(name) not in MOVES_DATA:
                    found[canonical(name)] += 1
    return found


def jaccard(a: Counter, b: Counter) -> float:
    union = sum((a | b).values())
    return sum((a & b).values()) / union if union else 1.0


@dataclass
class Nearest:
    score: float
    problem: str  # e.g. "level2/12_Gemm_Multiply_LeakyReLU.py"


class KernelBenchIndex:
    """The operator multisets of every KernelBench problem (level*/*.py), read once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.problems: dict[str, Counter] = {}
        for path in sorted(root.glob("level*/*.py")):
            try:
                self.problems[path.relative_to(root).as_posix()] = ops_of(path.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError):
                continue
        if not self.problems:
            raise FileNotFoundError(f"no KernelBench problems under {root} (expected level1/*.py, ...)")

    def nearest(self, ops: Counter) -> Nearest:
        score, problem = max((jaccard(ops, theirs), name) for name, theirs in self.problems.items())
        return Nearest(round(score, 3), problem)
