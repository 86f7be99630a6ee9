"""The shape of what a forward returns: one tensor, or lists and tuples of them, nested.

Both captures flatten the forward's outputs into a list of tensors; the sandbox compares the
candidate's output structure with the reference's exactly (a list is not a tuple, `(x,)` is not
`x`). The output node keeps the structure as a small JSON value so that the generated forward
returns the same shape: "t" for a tensor, ["list", [...]] or ["tuple", [...]] around its items.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

LEAF = "t"


def flatten(obj: Any, is_leaf: Callable[[Any], bool]) -> tuple[list[Any], Any]:
    """(the leaves in order, the structure); a value that is neither a leaf nor a list or tuple
    raises TypeError (a capture refuses such a forward)."""
    if is_leaf(obj):
        return [obj], LEAF
    if isinstance(obj, list | tuple):
        leaves: list[Any] = []
        items = []
        for o in obj:
            sub, spec = flatten(o, is_leaf)
            leaves += sub
            items.append(spec)
        return leaves, ["list" if isinstance(obj, list) else "tuple", items]
    raise TypeError(f"the forward returns a non-tensor value ({type(obj).__name__})")


def from_treespec(spec: Any) -> Any:
    """torch.utils._pytree's TreeSpec (an exported program's out_spec) -> the structure; None
    where it holds anything but lists and tuples (the caller keeps a flat tuple)."""
    if spec.is_leaf():
        return LEAF
    kind = {list: "list", tuple: "tuple"}.get(spec.type)
    if kind is None:
        return None
    children = spec.children() if hasattr(spec, "children") else spec.children_specs
    items = [from_treespec(c) for c in children]
    return None if any(i is None for i in items) else [kind, items]


def expression(structure: Any, names: list[str]) -> str:
    """Python source that rebuilds `structure` from the leaves' names, in order."""
    it = iter(names)

    def build(s: Any) -> str:
        if s == LEAF:
            return next(it)
        kind, items = s
        inner = [build(i) for i in items]
        if kind == "list":
            return "[" + ", ".join(inner) + "]"
        return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"

    out = build(structure)
    if next(it, None) is not None:
        raise ValueError("more outputs than the structure holds")
    return out


def rebuild(structure: Any, values: list[Any]) -> Any:
    """The values, in order, in `structure` (what `expression` writes as source)."""
    it = iter(values)

    def build(s: Any) -> Any:
        if s == LEAF:
            return next(it)
        kind, items = s
        built = [build(i) for i in items]
        return built if kind == "list" else tuple(built)

    return build(structure)


def default(n: int) -> Any:
    """The structure a flat list of n outputs had before it was recorded: one tensor, or a tuple."""
    return LEAF if n == 1 else ["tuple", [LEAF] * n]
