"""What a generated forward assumes about its module, as one digest.

A captured graph is specialised to the module it was captured from: torch.export bakes in the
parameter and buffer shapes and the plain attributes (ints, floats, flags); torch.fx keeps sizes
symbolic but follows the module tree and the flags its Python control flow read. The generated
forward runs only on a module with the same digest and runs the reference's own forward on any
other. `guard_digest` runs in the analysis child on the reference module and, copied by its
source into model_new.py (modelgen), on the candidate's module at its first call: one function,
so the two sides cannot disagree. (The tables it replaces, written out in model_new.py, were a
third of DenseNet-121's 314 KB file.)
"""

from __future__ import annotations

import inspect
import re
from typing import Any


def guard_digest(module: Any, kind: str, bound: Any, read: Any = ()) -> str:
    """SHA-256 of guard_parts(module, kind, bound, read)."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(guard_parts(module, kind, bound, read), sort_keys=True).encode()).hexdigest()


def guard_parts(module: Any, kind: str, bound: Any, read: Any = ()) -> list:
    """The module tree, the plain attributes and (kind "export") every parameter's, buffer's and
    plain tensor attribute's shape (export bakes a table's length in as it does a weight's: GPT-J's
    sinusoidal positions). What `bound` names ("self.<path>", "self.<path>.shape") the forward
    reads at run time (a float attribute) or computes its sizes from (agent.builtin.generalise),
    so not part of it; bool, str and None attributes always are. `read`: the buffers whose values
    the capture folded in as constants (agent.builtin.read_fold: EnCodec's int64 paddings), as a
    fourth part with their values."""
    import hashlib
    import math

    import torch

    tree = [[name, type(m).__name__] for name, m in module.named_modules() if name]
    attrs: dict = {}
    tables: dict = {}
    for mpath, m in module.named_modules():
        for k, v in vars(m).items():
            if k.startswith("_") or k == "training":
                continue
            key = f"{mpath}.{k}" if mpath else k
            if isinstance(v, torch.Tensor):
                tables[key] = list(v.shape)
            elif isinstance(v, bool | str) or v is None:
                attrs[key] = v
            elif kind != "export" or f"self.{key}" in bound:
                continue
            elif isinstance(v, int):
                attrs[key] = v
            elif isinstance(v, float):
                if math.isfinite(v):
                    attrs[key] = v
            elif isinstance(v, tuple | list) and all(isinstance(x, bool | int) for x in v):
                attrs[key] = list(v)
    state: dict = {}
    if kind == "export":
        named = [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]
        state = {
            p: s
            for p, s in [*((p, list(t.shape)) for p, t in named), *tables.items()]
            if f"self.{p}.shape" not in bound
        }
    if not read:
        return [tree, attrs, state]
    values: dict = {}
    for p in sorted(read):
        t = _kw_tensor_at(module, p)
        if isinstance(t, torch.Tensor):  # a large one (a weight read back) by its bytes' digest
            flat = t.detach().cpu().flatten().contiguous()
            big = flat.numel() > 4096
            values[p] = hashlib.sha256(flat.view(torch.uint8).numpy().tobytes()).hexdigest() if big else flat.tolist()
    return [tree, attrs, state, values]


def parts_digest(parts: list, bound: Any) -> str:
    """guard_digest from guard_parts(module, "export", set()) as JSON, with `bound` left out as
    guard_parts leaves it out: the policy's process, which never holds the module, computes the
    digest of a forward whose sizes follow the module (agent.builtin.generalise)."""
    import hashlib
    import json

    tree, attrs, state, *values = parts
    attrs = {k: v for k, v in attrs.items() if isinstance(v, bool | str) or v is None or f"self.{k}" not in bound}
    state = {p: s for p, s in state.items() if f"self.{p}.shape" not in bound}
    return hashlib.sha256(json.dumps([tree, attrs, state, *values], sort_keys=True).encode()).hexdigest()


class NotFlat(Exception):
    """An argument of forward that is neither a tensor nor a plain number, string, flag or None."""


def describe_inputs(inputs: list[Any]) -> list[dict[str, Any]]:
    """What the generated forward checks each argument against: a tensor's shape and dtype, or a
    plain value (it is compared with `!=`). Lists, dicts and other objects raise NotFlat: the
    captured graph's arguments are their leaves, not the forward's own arguments."""
    import torch

    out: list[dict[str, Any]] = []
    for i, v in enumerate(inputs):
        if torch.is_tensor(v):
            out.append({"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")})
        elif v is None or isinstance(v, bool | int | float | str):
            out.append({"value": v})
        else:
            raise NotFlat(
                f"forward's argument {i} is a {type(v).__name__}, not a tensor or a plain value: the "
                "built-in policy generates a forward over flat tensor arguments"
            )
    return out


def guard(module: Any, kind: str, bound: set[str], inputs: list[dict[str, Any]], read: Any = ()) -> dict[str, Any]:
    """The analysis's `guard`: the inputs' shapes (or values) and the module's digest (with the
    values of the buffers `read` back into constants); for an export also its parts with nothing
    bound, which agent.builtin.generalise compares between captures at other sizes."""
    out = {
        "inputs": inputs,
        "kind": kind,
        "bound": sorted(bound),
        "read": sorted(read),
        "digest": guard_digest(module, kind, set(bound), sorted(read)),
    }
    if kind == "export":
        out["parts"] = guard_parts(module, kind, set(), sorted(read))
    return out


def _kw_tensor_at(module: object, path: str) -> object:
    """What a dotted attribute path of module names (a buffer's name in the state dict), or None:
    guard_parts and the generated forward's version check read `read` through it."""
    t = module
    for part in path.split("."):
        t = getattr(t, part, None)
    return t


def _plain_source(fn: Any) -> str:
    """fn's source without annotations in its signature (model_new.py does not import typing)."""
    src = inspect.getsource(fn)
    plain = re.sub(
        r"\(module: Any, kind: str, bound: Any, read: Any = \(\)\) -> \w+:",
        "(module, kind, bound, read=()):",
        src,
        count=1,
    )
    if plain == src:
        raise RuntimeError(f"{fn.__name__}'s signature changed: update guard._plain_source")
    return plain.replace("    attrs: dict = {}", "    attrs = {}").replace("    state: dict = {}", "    state = {}")


SPECIALISED_CHECK = "not _kw_specialised(self)"  # the last condition of a guarded forward's fallback test

HELPER = (
    "\n\n"
    + _plain_source(guard_digest)
    + "\n\n"
    + _plain_source(guard_parts)
    + "\n\n"
    + inspect.getsource(_kw_tensor_at)
    + '''

def _kw_specialised(module):
    """Whether module is the model this forward was generated for (agent.builtin.guard): checked
    once per instance, and again whenever a tensor whose values the capture folded in (`read`)
    was replaced or updated in place (its version counter: load_state_dict, fill_)."""
    d = module.__dict__
    kind, bound, digest, read = _KW_GUARD
    key = _kw_read_versions(module, read) if read else ()
    got = d.get("_kw_spec_ok")
    if got is None or got[0] != key:
        got = d["_kw_spec_ok"] = (key, guard_digest(module, kind, set(bound), read) == digest)
    return got[1]


def _kw_read_versions(module, read):
    return tuple((id(t), getattr(t, "_version", None)) for t in (_kw_tensor_at(module, p) for p in read))
'''
)
