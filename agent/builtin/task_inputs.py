"""The analysis's view of a task's get_inputs(): drawn as fake tensors (shapes, dtypes, strides,
no storage) where only shapes are needed, and for real only when a step needs values.

Why: KernelBench level 1 at its published sizes draws 6-7 GiB inputs; the analysis drew them on
the CPU (torch.rand, one thread: 21 s for InstanceNorm's 7.5 GB on the development machine) and
ran the forward over them for ShapeProp (10 s more), minutes of a problem's time on a GPU host
with four shards. An fx capture needs only the shapes: ShapeProp runs under the same fake mode.
An export, the task-fails check and a CPU profile draw the real inputs (the same values as
before: a fake draw takes nothing from the random generator).
"""

from __future__ import annotations

import types
from typing import Any

import torch

FAKE_FROM_BYTES = 256 << 20  # inputs up to this size are drawn for real at once


class TaskInputs:
    def __init__(self, mod: types.ModuleType, fake_from: int | None = None):
        self.mod: types.ModuleType | None = mod
        self._real: list[Any] | None = None
        self.fake_mode, self.fake = _fake_draw(mod, FAKE_FROM_BYTES if fake_from is None else fake_from)

    @classmethod
    def drawn(cls, inputs: list[Any]) -> TaskInputs:
        """Inputs already drawn for real."""
        self = cls.__new__(cls)
        self.mod, self._real, self.fake_mode, self.fake = None, inputs, None, None
        return self

    @property
    def is_fake(self) -> bool:
        return self.fake is not None

    def shapes(self) -> list[Any]:
        """Inputs that tell shapes and dtypes: the fake draw where there is one."""
        return self.fake if self.fake is not None else self.real()

    def real(self) -> list[Any]:
        """get_inputs() itself, drawn once."""
        if self._real is None:
            assert self.mod is not None
            self._real = self.mod.get_inputs()
        return self._real


def _fake_draw(mod: types.ModuleType, fake_from: int) -> tuple[Any, list[Any] | None]:
    """(the fake mode, get_inputs() drawn under it) when that works and its tensors take at least
    `fake_from` bytes; (None, None) otherwise (small inputs, or a get_inputs that needs values)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    try:
        with mode:
            drawn = list(mod.get_inputs())
    except Exception:  # e.g. a draw that reads its own values back: drawn for real instead
        return None, None
    if any(isinstance(x, torch.Tensor) and not isinstance(x, torch._subclasses.FakeTensor) for x in drawn):
        return None, None  # a tensor made outside the mode (a module-level constant)
    size = sum(x.numel() * x.element_size() for x in drawn if isinstance(x, torch.Tensor))
    return (mode, drawn) if size > fake_from else (None, None)
