"""Child-side helpers shared by the worker roles: loading the task and the candidate,
load_inline redirection, output flattening, device moves, error locations."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import traceback
import types
from pathlib import Path
from typing import Any


class UserError(Exception):
    """A fault in the task or the candidate, with a message that says what and where."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None):
        super().__init__(message)
        self.file, self.line = file, line


def where(exc: BaseException, roots: list[str]) -> tuple[str | None, int | None, str]:
    """The innermost traceback frame inside user files, and a trimmed traceback: the exception
    first, then the user's frames (a one-line view of the error, a plan's or a summary's, keeps
    what went wrong; with the frames first it kept a line of the user's code and lost the error)."""
    frames = traceback.extract_tb(exc.__traceback__)
    file = line = None
    user_frames = []
    for fr in frames:
        for root in roots:
            if fr.filename.startswith(root):
                rel = os.path.relpath(fr.filename, root)
                file, line = rel, fr.lineno
                user_frames.append(f"  {rel}:{fr.lineno} in {fr.name}: {(fr.line or '').strip()}")
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    if len(text) > 2000:
        text = text[:2000] + " ...[trimmed]"
    if user_frames:
        text = text + "\n" + "\n".join(user_frames[-6:])
    return file, line, text


def module_from_file(name: str, path: str | Path, register: bool = False) -> types.ModuleType:
    """The Python file at `path` run as module `name` (first put in sys.modules with `register`,
    so that the module's own classes can find it while it runs)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_module_from_source(name: str, path: Path) -> types.ModuleType:
    return module_from_file(name, path, register=True)


# ---- load_inline: build in the compile step, load prebuilt at evaluation -------------------

_inline_calls: dict[str, int] = {}


def inline_arg_hash(args: tuple, kwargs: dict) -> tuple[str, str]:
    """(extension name, hash of the call's build inputs): the same call in the compile step
    and in the evaluation maps to the same prebuilt module."""
    name = args[0] if args else kwargs.get("name", "ext")
    skip = {"verbose", "build_directory", "keep_intermediates"}
    items = {
        "args": [repr(a) for a in args],
        "kwargs": {k: repr(v) for k, v in sorted(kwargs.items()) if k not in skip},
    }
    text = json.dumps(items, sort_keys=True)
    return str(name), hashlib.sha256(text.encode()).hexdigest()[:32]


class _CountingModule:
    """Wraps an extension module so calls into it are counted (a custom kernel ran)."""

    def __init__(self, module: Any, name: str):
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._module, attr)
        if callable(value) and not attr.startswith("_"):
            name = f"{self._name}.{attr}"

            def counted(*a: Any, **k: Any) -> Any:
                _inline_calls[name] = _inline_calls.get(name, 0) + 1
                return value(*a, **k)

            return counted
        return value


def install_inline_recorder(manifest_out: list[dict]) -> None:
    """prebuild role: build normally, remember which .so each call produced."""
    from torch.utils import cpp_extension

    original = cpp_extension.load_inline

    def recording_load_inline(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("verbose", False)
        name, arg_hash = inline_arg_hash(args, kwargs)
        module = original(*args, **kwargs)
        is_python_module = kwargs.get("is_python_module", True)
        so_path = getattr(module, "__file__", None) if is_python_module else None
        if so_path is None:
            base = Path(os.environ["TORCH_EXTENSIONS_DIR"]) / name
            found = sorted(base.glob("*.so"))
            so_path = str(found[0]) if found else None
        manifest_out.append(
            {"name": name, "arg_hash": arg_hash, "so_path": so_path, "is_python_module": is_python_module}
        )
        return module

    cpp_extension.load_inline = recording_load_inline


def install_inline_loader(manifest: list[dict], inline_dir: str | None) -> None:
    """evaluation: serve load_inline from the prebuilt modules; build only on a miss."""
    from torch.utils import cpp_extension

    original = cpp_extension.load_inline
    table = {e["arg_hash"]: e for e in manifest}

    def prebuilt_load_inline(*args: Any, **kwargs: Any) -> Any:
        import torch

        name, arg_hash = inline_arg_hash(args, kwargs)
        entry = table.get(arg_hash)
        if entry is None or inline_dir is None:
            print(f"[sandbox] load_inline({name!r}) not prebuilt by the compile step; building now", file=sys.stderr)
            module = original(*args, **kwargs)
        else:
            path = os.path.join(inline_dir, entry["file"])
            if entry["is_python_module"]:
                module = module_from_file(name, path)
            else:
                torch.ops.load_library(path)
                return path
        return _CountingModule(module, name)

    cpp_extension.load_inline = prebuilt_load_inline


def inline_calls() -> dict[str, int]:
    return dict(_inline_calls)


# ---- outputs -----------------------------------------------------------------------------


def flatten(obj: Any, leaves: list[Any]) -> Any:
    """A JSON-able description of the output's structure; tensors/numbers appended to leaves."""
    import torch

    if isinstance(obj, torch.Tensor):
        leaves.append(obj)
        return {"t": "tensor"}
    if isinstance(obj, list | tuple):
        return {
            "t": type(obj).__name__ if type(obj) in (list, tuple) else "tuple",
            "items": [flatten(x, leaves) for x in obj],
        }
    if isinstance(obj, dict):
        return {"t": "dict", "keys": [str(k) for k in obj], "items": [flatten(v, leaves) for v in obj.values()]}
    if isinstance(obj, bool | int | float) or obj is None:
        leaves.append(obj)
        return {"t": "scalar"}
    leaves.append(None)
    return {"t": f"unsupported:{type(obj).__name__}"}


def to_device(obj: Any, device: str) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, list):
        return [to_device(x, device) for x in obj]
    if isinstance(obj, tuple):
        return tuple(to_device(x, device) for x in obj)
    return obj


def cast_floating(obj: Any, precision: str) -> Any:
    """A model (its floating parameters and buffers) or a tree of inputs (its floating tensors)
    in the task's precision (EvalOptions.precision); "task" leaves everything as the task made it."""
    import torch

    if precision in ("", "task"):
        return obj
    dtype = getattr(torch, precision)
    if isinstance(obj, torch.nn.Module):
        return obj.to(dtype)  # Module.to casts floating parameters and buffers only
    if isinstance(obj, torch.Tensor):
        return obj.to(dtype) if obj.is_floating_point() else obj
    if isinstance(obj, list | tuple):
        return type(obj)(cast_floating(x, precision) for x in obj)
    return obj


def to_cpu(obj: Any) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, list):
        return [to_cpu(x) for x in obj]
    if isinstance(obj, tuple):
        return tuple(to_cpu(x) for x in obj)
    return obj


def same_bits(a: Any, b: Any) -> bool:
    """Bitwise equality (NaN-safe), for 'inputs unchanged' and 'output materialised'."""
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    av = a.contiguous().reshape(-1).view(torch.uint8)
    bv = b.contiguous().reshape(-1).view(torch.uint8)
    return bool(torch.equal(av, bv))


def storage_span(t: Any) -> tuple[int, int] | None:
    try:
        st = t.untyped_storage()
        return st.data_ptr(), st.data_ptr() + st.nbytes()
    except Exception:
        return None


def same_view(a: Any, b: Any) -> bool:
    """The very same tensor view: one storage, offset, shape, strides and dtype."""
    return (
        a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
        and a.storage_offset() == b.storage_offset()
        and a.shape == b.shape
        and a.stride() == b.stride()
        and a.dtype == b.dtype
    )


def passthrough(inputs: list, leaves: list) -> list[int | None]:
    """For each output, the input it is returned as (the same view), else None: torchaudio's
    Conformer returns its `lengths`, and blocks pass masks and caches on. A candidate may return
    that input exactly where the reference does (worker._output_checks)."""
    import torch

    tensors = [(k, x) for k, x in enumerate(inputs) if type(x) is torch.Tensor and x.numel()]
    return [
        next((k for k, x in tensors if same_view(leaf, x)), None)
        if type(leaf) is torch.Tensor and leaf.numel()
        else None
        for leaf in leaves
    ]


def fingerprint_weights(shapes: list[tuple], seed: int, device: str) -> list[Any]:
    """Standard normal weights drawn on the device itself (fast for GB-sized outputs); the
    reference and the candidate child draw them on the same kind of device, so they agree."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    return [
        torch.randn(shape, generator=gen, dtype=torch.float32, device=device) if shape is not None else None
        for shape in shapes
    ]


CHUNK = 1 << 24  # elements per step of a whole-output check (`flat_chunks`)


def flat_chunks(*tensors: Any) -> Any:
    """(start, each tensor's chunk...) over tensors of one shape, flat, CHUNK elements at a
    time: the output checks (the comparison, its float64 second look, the fingerprints and their
    bounds) convert and combine one chunk at a time, so their temporaries stay small whatever the
    output's size (made at once for a 4 GiB output they ran the two children of one evaluation to
    57 and 42 GiB on an 80 GB H100, 2026-12-06)."""
    flat = [t.detach().reshape(-1) for t in tensors]
    for start in range(0, flat[0].numel(), CHUNK):
        yield start, *(f[start : start + CHUNK] for f in flat)


def fingerprint(leaves: list[Any], weights: list[Any]) -> float:
    """A random projection of the outputs: cheap per call, and matching it without the real
    output needs the expected values, which this process never has."""
    import torch

    total = 0.0
    for leaf, w in zip(leaves, weights, strict=False):
        if isinstance(leaf, torch.Tensor) and w is not None and leaf.shape == w.shape:
            total += sum(float((x.double() * c).sum()) for _, x, c in flat_chunks(leaf, w))
        elif isinstance(leaf, int | float) and not isinstance(leaf, bool):
            total += float(leaf)
    return total
