"""Recurrent layers as single ops in torch.export, so that capturing one costs milliseconds.

torch.export traces `nn.LSTM`/`nn.GRU`/`nn.RNN` through ATen's composite decomposition: one cell
per time step, layer and direction, each dispatched on fake tensors (KernelBench L3/38, six
bidirectional layers over 512 steps: 12288 cells, about 25 s per pass on a fast CPU, and the
analysis ran out of its CPU limit on the GPU host). The generator has no recurrent kernel, so
the layer is an island either way. While the forward is exported, `standins()` routes each
recurrent call (`torch._VF.lstm/gru/rnn_tanh/rnn_relu`, the calls the modules make) to a custom
op of the same signature whose fake computes the output shapes directly; the exported node then
becomes an island calling the ATen op itself (`ISLAND_TARGET`), which on CUDA is cuDNN's RNN.
Packed sequences (another overload) are left to torch.export as they were.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_NS = "kernelwright"
# op -> its hidden state's schema type: the LSTM's (h, c) pair, one tensor for the others
_HX = {"lstm": "Tensor[]", "gru": "Tensor", "rnn_tanh": "Tensor", "rnn_relu": "Tensor"}
_LIB = torch.library.Library(_NS, "DEF")


def _out_shape(x: torch.Tensor, h: torch.Tensor, bidirectional: bool) -> list[int]:
    """output: [T, B, D * H_out] ([B, T, ...] batch-first; [T, D * H_out] unbatched), with H_out
    the hidden state's last dim (the projection size where there is one)."""
    return [*x.shape[:-1], (2 if bidirectional else 1) * h.shape[-1]]


def _define(name: str, hx_type: str) -> None:
    """kernelwright::<name>, ATen's <name>.input signature: the real op where it runs, shapes alone
    on fake tensors."""
    states = 2 if hx_type == "Tensor[]" else 1
    outs = ", ".join(["Tensor"] * (1 + states))
    _LIB.define(
        f"{name}(Tensor input, {hx_type} hx, Tensor[] params, bool has_biases, int num_layers, float dropout, "
        f"bool train, bool bidirectional, bool batch_first) -> ({outs})"
    )
    aten = getattr(torch.ops.aten, name).input

    def real(*args: Any) -> tuple[torch.Tensor, ...]:
        return tuple(t.clone() for t in aten(*args))  # an op's outputs may not alias what ATen keeps

    def fake(x: torch.Tensor, hx: Any, params: list[torch.Tensor], *flags: Any) -> tuple[torch.Tensor, ...]:
        hs = list(hx) if states == 2 else [hx]
        return (x.new_empty(_out_shape(x, hs[0], flags[-2])), *(h.new_empty(h.shape) for h in hs))

    _LIB.impl(name, real, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{_NS}::{name}", fake, lib=_LIB)


for _name, _hx_type in _HX.items():
    _define(_name, _hx_type)
_OPS: dict[str, Any] = {name: getattr(getattr(torch.ops, _NS), name).default for name in _HX}
# the exported stand-in's target -> the ATen op its island calls
ISLAND_TARGET = {f"{_NS}.{name}.default": f"aten.{name}.input" for name in _HX}
_VF_CALLS = {getattr(torch._VF, name): name for name in _HX}


class _Route(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = _VF_CALLS.get(func)
        # the .input overload: (input, hx, params, has_biases, ...); a packed sequence's .data
        # overload has nine arguments too, (data, batch_sizes, hx, params, has_biases, ...)
        if name is not None and not kwargs and len(args) == 9 and isinstance(args[3], bool):
            return _OPS[name](args[0], *(list(a) if isinstance(a, tuple) else a for a in args[1:3]), *args[3:])
        return func(*args, **kwargs)


@contextmanager
def standins() -> Iterator[None]:
    """Recurrent calls inside this block export as one stand-in op each (see the module's doc)."""
    with _Route():
        yield
