"""The shape of what a forward returns: one tensor, or lists and tuples of them, nested.

Both captures flatten the forward's outputs into a list of tensors; the sandbox compares the
candidate's output structure with the reference's exactly (a list is not a tuple, `(x,)` is not
`x`). The output node keeps the structure as a small JSON value so that the generated forward
returns the same shape: "t" for a tensor, ["list", [...]] or ["tuple", [...]] around its items,
["dict", [...], keys] for a dict with string keys. A namedtuple is returned as a tuple (the
sandbox compares it as one).
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
    values = list(obj.values()) if isinstance(obj, dict) else obj
    if isinstance(obj, list | tuple) or (isinstance(obj, dict) and all(isinstance(k, str) for k in obj)):
        leaves: list[Any] = []
        items = []
        for o in values:
            sub, spec = flatten(o, is_leaf)
            leaves += sub
            items.append(spec)
        if isinstance(obj, dict):
            return leaves, ["dict", items, list(obj)]
        return leaves, ["list" if isinstance(obj, list) else "tuple", items]
    raise TypeError(f"the forward returns a non-tensor value ({type(obj).__name__})")


def from_treespec(spec: Any) -> Any:
    """torch.utils._pytree's TreeSpec (an exported program's out_spec) -> the structure; None
    where it holds anything else (a dataclass, a dict with other keys): the capture refuses it."""
    if spec.is_leaf():
        return LEAF
    named = isinstance(spec.context, type) and issubclass(spec.context, tuple)  # a namedtuple's class
    kind = {list: "list", tuple: "tuple", dict: "dict"}.get(spec.type, "tuple" if named else None)
    if kind is None or (kind == "dict" and not all(isinstance(k, str) for k in spec.context)):
        return None
    children = spec.children() if hasattr(spec, "children") else spec.children_specs
    items = [from_treespec(c) for c in children]
    if any(i is None for i in items):
        return None
    return ["dict", items, list(spec.context)] if kind == "dict" else [kind, items]


def expression(structure: Any, names: list[str]) -> str:
    """Python source that rebuilds `structure` from the leaves' names, in order."""
    it = iter(names)

    def build(s: Any) -> str:
        if s == LEAF:
            return next(it)
        kind, items = s[0], s[1]
        inner = [build(i) for i in items]
        if kind == "dict":
            return "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(s[2], inner, strict=True)) + "}"
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
        kind, items = s[0], s[1]
        built = [build(i) for i in items]
        if kind == "dict":
            return dict(zip(s[2], built, strict=True))
        return built if kind == "list" else tuple(built)

    return build(structure)


def default(n: int) -> Any:
    """The structure a flat list of n outputs had before it was recorded: one tensor, or a tuple."""
    return LEAF if n == 1 else ["tuple", [LEAF] * n]
