"""Which values a forward reads back from its tensors (`.item()`, `if tensor:`), and whether any
of them depends on the inputs' values.

torch.export runs the forward on fake tensors, so a branch on any tensor's value fails it, even
where that value is the module's own configuration: EnCodec's padding, which transformers keeps
as int64 buffers, or Transformer-XL's `torch.sum(attn_mask).item()` on a mask built from sizes.
`torch.export.draft_export` captures such a forward with real values beside the fake ones, and
bakes each decision into the graph as it went at the task's inputs. That is sound only where no
decision reads the inputs' values (a mixture-of-experts' routing does: its graph would hold one
draw's routing). This module runs one eager forward under a dispatch mode that follows which
tensors are computed from the inputs, and records each read with that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

_READS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.is_nonzero.default}
# ops whose result takes no value from a tensor argument, only its dtype, device or shape
_VALUELESS = {
    "new_ones",
    "new_zeros",
    "new_empty",
    "new_full",
    "new_empty_strided",
    "empty_like",
    "zeros_like",
    "ones_like",
    "full_like",
    "rand_like",
    "randn_like",
    "sym_size",
    "sym_numel",
    "sym_stride",
}


@dataclass
class Reads:
    total: int  # values read back from tensors in one forward
    from_inputs: int  # of them, values computed from the inputs' values


class _Follow(TorchDispatchMode):
    """Marks every tensor computed from a marked one (the inputs at first), and counts reads."""

    def __init__(self, inputs: list[Any]):
        super().__init__()
        self.keep = [t for t in inputs if isinstance(t, torch.Tensor)]  # ids stay unique while kept
        self.marked = {id(t) for t in self.keep}
        self.total = self.from_inputs = 0

    def _is_marked(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and (
            id(t) in self.marked or (t._base is not None and id(t._base) in self.marked)
        )

    def _mark(self, t: Any) -> None:
        if isinstance(t, torch.Tensor):
            self.marked.add(id(t))
            self.keep.append(t)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        flat, _ = tree_flatten((args, kwargs))
        out = func(*args, **kwargs)
        marked = func.overloadpacket.__name__ not in _VALUELESS and any(self._is_marked(a) for a in flat)
        if func in _READS:
            self.total += 1
            self.from_inputs += int(marked)
        if marked:
            for o in tree_flatten(out)[0]:
                self._mark(o)
            if func._schema.is_mutable:  # an in-place op writes input-derived values into its operand
                for a in flat:
                    self._mark(a)
        return out


def reads(model: torch.nn.Module, inputs: list[Any]) -> Reads:
    """One forward of `model` on `inputs` (no grad), its reads counted."""
    with torch.no_grad(), _Follow(inputs) as follow:
        model(*inputs)
    return Reads(follow.total, follow.from_inputs)
