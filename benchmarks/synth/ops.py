"""The operators tasks are composed from, found by probing rather than listed by hand.

torch's functions come from `torch.overrides.get_testing_overrides()` (the public functions that
take tensors, each with a dummy of its signature): a function is kept by what it does to a small
float tensor, e.g. "unary" when its only required argument is the input and the output has the
input's shape and dtype. Activation modules are the classes of torch.nn.modules.activation that
build without arguments and keep the shape; transformers' activations (ACT2CLS) join them when
transformers is installed. Which mined operators then make good tasks is the filters' business
(a random op fails the determinism check, `log` of a normal input the finiteness check).
Layers with weights (Linear, Conv2d, norms) need shapes, so those few are templates in compose.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass, field


@dataclass
class Catalogue:
    unary: list[str] = field(default_factory=list)  # torch.<f>(x), same shape
    binary: list[str] = field(default_factory=list)  # torch.<f>(x, other), same shape
    along_dim: list[str] = field(default_factory=list)  # torch.<f>(x, dim=-1), same shape (softmax, cumsum)
    reducing: list[str] = field(default_factory=list)  # torch.<f>(x, dim=-1), the last dim removed
    modules: list[str] = field(
        default_factory=list
    )  # "nn.GELU" or "transformers:gelu_new": a module() keeping the shape
    sources: dict[str, str] = field(default_factory=dict)  # where each group came from, for the report

    def sizes(self) -> dict[str, int]:
        return {k: len(getattr(self, k)) for k in ("unary", "binary", "along_dim", "reducing", "modules")}


def _required(dummy) -> list[str] | None:
    try:
        sig = inspect.signature(dummy)
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in sig.parameters.values() if p.default is inspect.Parameter.empty and p.kind in kinds]


def _same(out, x) -> bool:
    import torch

    return isinstance(out, torch.Tensor) and out.shape == x.shape and out.dtype == x.dtype


def _classify(cat: Catalogue, name: str, f, required: list[str], x, y) -> None:
    """Put the torch function `name` in the groups its behaviour on x (and y) fits."""
    if required == ["input"]:
        if _same(f(x), x):
            cat.unary.append(name)
            return
        out = f(x, dim=-1)
        if _same(out, x[..., 0]):
            cat.reducing.append(name)
    elif required == ["input", "other"] and _same(f(x, y), x):
        cat.binary.append(name)
    elif required == ["input", "dim"] and _same(f(x, -1), x):
        cat.along_dim.append(name)


def mine_torch(cat: Catalogue) -> None:
    import torch

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    for f, dummy in torch.overrides.get_testing_overrides().items():
        name = getattr(f, "__name__", "") or ""
        if not name or name.startswith("_") or name.endswith("_") or getattr(torch, name, None) is not f:
            continue  # private, in-place, or not reachable as torch.<name>
        required = _required(dummy)
        if required is None:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _classify(cat, name, f, required, x.clone(), y.clone())
        except Exception:  # a function that does not take this call is simply not kept
            continue
    cat.sources["torch"] = f"torch {torch.__version__}: torch.overrides.get_testing_overrides()"


def mine_modules(cat: Catalogue) -> None:
    import torch
    from torch.nn.modules import activation

    x = torch.randn(4, 8)
    for cls_name in sorted(activation.__all__):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if _same(getattr(activation, cls_name)()(x), x):
                    cat.modules.append(f"nn.{cls_name}")
        except Exception:  # needs arguments (MultiheadAttention, ...) or changes the shape
            continue


def mine_transformers(cat: Catalogue) -> None:
    try:
        import torch
        from transformers.activations import ACT2CLS
    except ImportError:
        cat.sources["transformers"] = "not installed"
        return
    x = torch.randn(4, 8)
    for key in sorted(ACT2CLS):
        try:
            cls = ACT2CLS[key]
            module = cls[0](**cls[1]) if isinstance(cls, tuple) else cls()
            if _same(module(x), x):
                cat.modules.append(f"transformers:{key}")
        except Exception:
            continue
    cat.sources["transformers"] = "transformers.activations.ACT2CLS"


def mine() -> Catalogue:
    cat = Catalogue()
    mine_torch(cat)
    mine_modules(cat)
    mine_transformers(cat)
    return cat
