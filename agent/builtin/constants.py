"""Constant tensors made in a forward from Python values (N-BEATS's seasonality and trend bases
built with numpy, a mask from a list): how a captured graph carries them and how model_new.py
and the graph interpreter rebuild them.

Up to INLINE values travel as a nested list (readable in the candidate, as torch.tensor's
argument); larger ones, up to MAX_VALUES, as base64 of their bytes (little-endian, the dtype's
own width, so a float64 basis stays float64 until the forward casts it). Past that the capture
gives up: the candidate file would carry megabytes.
"""

from __future__ import annotations

import base64
from typing import Any

INLINE = 4096
MAX_VALUES = 1 << 16  # 512 KiB of float64, about 700 KB of base64


def encode(c: Any) -> dict[str, Any] | None:
    """The constant node's attrs for the tensor `c`, or None when it is too large to carry."""
    import torch  # here: modelgen imports this module, and the policy's process does not load torch

    dtype = str(c.dtype).replace("torch.", "")
    if c.numel() <= INLINE:
        return {"value": c.tolist(), "dtype": dtype}
    if c.numel() > MAX_VALUES or c.is_complex():
        return None
    raw = c.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()
    return {"b64": base64.b64encode(raw).decode("ascii"), "dtype": dtype}


def decode(attrs: dict[str, Any], shape: list[int]) -> Any:
    """The constant itself (the graph interpreter's), a tensor."""
    import torch

    dtype = getattr(torch, attrs.get("dtype") or "float32")
    if "b64" not in attrs:
        return torch.tensor(attrs["value"], dtype=dtype)
    return torch.frombuffer(bytearray(base64.b64decode(attrs["b64"])), dtype=dtype).reshape(shape)


def b64_expression(attrs: dict[str, Any], dims: list[int]) -> str:
    """model_new.py's expression for a base64 constant, on `_dev` (needs `import base64`)."""
    dt = f"torch.{attrs.get('dtype') or 'float32'}"
    return (
        f"torch.frombuffer(bytearray(base64.b64decode({attrs['b64']!r})), dtype={dt}).reshape({tuple(dims)!r}).to(_dev)"
    )
