"""An ExportedProgram saved with torch.export.save (a .pt2 file) -> a KernelBench-format task.

The file is never loaded here: torch.export.load unpickles the example inputs and runs code, so
it happens only where the task runs, inside the sandbox. The task source carries the file
itself (base64, at its end), because the task source is the one thing every sandbox child
receives (the reference writes it as task.py, the candidate's workspace has it as
reference.py, the policy's analysis child imports it); no path on the web host needs to be
visible to a worker on another machine.

What this module reads without loading: the archive's table of contents and its JSON graph
(`models/*.json`), for a clear error on a file that is not an ExportedProgram and for the
recorded inputs' names, shapes and dtypes (shown to the user; the forward's signature).

Inside the sandbox the task's `Model` is the program's `.module()`, and `get_inputs()` draws
random values of the recorded example inputs' shapes and dtypes (floats from randn, integers
within the example's own range, bools half true): the example values themselves are not used.

Plain Python (no Django, no torch): the web form, the API and the CLI call it.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import zipfile
from dataclasses import dataclass, field
from typing import Any

from agent.module_task import SpecError

MAX_EXPORTED_BYTES = 704 * 1024  # the file; base64 in a JSON body (the API) it still fits the 1 MiB new-job body limit
# The graph's JSON, uncompressed, is parsed in the web process (no login needed on /jobs/check/),
# so it is bounded by what Python allocates for it, not by the bytes alone: torch.export's graphs
# run at 1.2 to 1.7 KB and 19 to 31 `{`/`[` per KB of JSON per node (ResNet, BERT, Llama, Swin
# blocks), so 4 MiB holds a graph of about 2,500 nodes; a JSON of empty containers (500 per KB,
# 70 bytes of Python each) stops at MAX_JSON_CONTAINERS. Worst case about 60 MB for a moment.
MAX_JSON_BYTES = 4 * 1024 * 1024
MAX_JSON_CONTAINERS = 200_000
EXPORTED_MARK = (
    "# --- KernelBench-format task for an ExportedProgram, written by Kernelwright (agent/exported_task.py) ---"
)
# torch._export.serde.schema.ScalarType, the dtype numbers of the serialised graph
SCALAR_TYPES = {
    1: "uint8",
    2: "int8",
    3: "int16",
    4: "int32",
    5: "int64",
    6: "float16",
    7: "float32",
    8: "float64",
    9: "complex32",
    10: "complex64",
    11: "complex128",
    12: "bool",
    13: "bfloat16",
    28: "uint16",
    29: "float8_e4m3fn",
    30: "float8_e5m2",
    34: "uint32",
    35: "uint64",
}


def exported_task_limit() -> int:
    """The largest task source an exported program makes (task_check's limit for such a task)."""
    return (MAX_EXPORTED_BYTES + 2) // 3 * 4 * 77 // 76 + 16 * 1024


@dataclass
class ExportedInfo:
    """What the archive's JSON says about the program's inputs (no file loaded)."""

    inputs: list[str] = field(default_factory=list)  # "x: float32[8,64]", one per user input
    forward_args: list[str] | None = None  # forward's parameter names when all are plain tensors, else None
    torch_version: str = ""

    def summary(self) -> str:
        return "; ".join(self.inputs) or "no tensor inputs recorded"


def looks_exported(data: bytes) -> bool:
    """A zip archive (a .pt2 is one); a text task never starts with these bytes."""
    return data[:4] == b"PK\x03\x04"


def read_exported(data: bytes) -> ExportedInfo:
    """Check that `data` is an ExportedProgram archive and read its inputs. Raises SpecError
    saying what is wrong (too large, not a zip, a zip without a program, a damaged graph)."""
    if len(data) > MAX_EXPORTED_BYTES:
        raise SpecError(f"the .pt2 file is {len(data)} bytes; the limit is {MAX_EXPORTED_BYTES} bytes")
    if not looks_exported(data):
        raise SpecError(
            "not a .pt2 file: an ExportedProgram saved with torch.export.save is a zip archive, and this file is not one"
        )
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        names = archive.namelist()
        graph = next((i for i in archive.infolist() if "/models/" in i.filename and i.filename.endswith(".json")), None)
        if graph is None or not any(n.endswith("/archive_format") for n in names):
            raise SpecError(
                "the .pt2 file holds no ExportedProgram (no models/*.json in the archive): save it with torch.export.save(program, path)"
            )
        if graph.file_size > MAX_JSON_BYTES:
            raise SpecError(
                f"the .pt2 file's graph is {graph.file_size} bytes uncompressed; the limit is {MAX_JSON_BYTES} bytes"
            )
        raw = archive.read(graph)
        containers = raw.count(b"{") + raw.count(b"[")  # an upper bound: brackets inside strings count too
        if containers > MAX_JSON_CONTAINERS:
            raise SpecError(
                f"the .pt2 file's graph has {containers} JSON objects and lists; the limit is {MAX_JSON_CONTAINERS} "
                "(about 6,000 graph nodes)"
            )
        model = json.loads(raw)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError, KeyError) as exc:
        if isinstance(exc, SpecError):
            raise
        raise SpecError(f"the .pt2 file is damaged (truncated or not written by torch.export.save): {exc}") from None
    try:
        return _inputs_of(model)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
        raise SpecError(
            f"the .pt2 file's graph is not in a form this version can read ({type(exc).__name__}: {exc})"
        ) from None


def _inputs_of(model: dict[str, Any]) -> ExportedInfo:
    gm = model["graph_module"]
    tensors = gm["graph"].get("tensor_values", {})
    inputs = []
    for spec in gm["signature"]["input_specs"]:
        if "user_input" not in spec:
            continue  # parameters, buffers and constants come with the program
        arg = spec["user_input"]["arg"]
        kind, value = next(iter(arg.items()))
        name = value.get("name", "?") if isinstance(value, dict) else "?"
        meta = tensors.get(name) if kind == "as_tensor" else None
        if meta is None:
            inputs.append(f"{name}: {kind.removeprefix('as_')}")
            continue
        dtype = SCALAR_TYPES.get(meta.get("dtype"), f"dtype #{meta.get('dtype')}")
        dims = ",".join(str(s["as_int"]) if "as_int" in s else "?" for s in meta.get("sizes", []))
        inputs.append(f"{name}: {dtype}[{dims}]")
    return ExportedInfo(
        inputs=inputs,
        forward_args=_plain_forward_args(gm, len(inputs)),
        torch_version=str(model.get("torch_version", "")),
    )


def _plain_forward_args(gm: dict[str, Any], n_inputs: int) -> list[str] | None:
    """forward's argument names when it takes exactly that many plain positional values (no
    tuples, dicts or keyword inputs): then the task's forward spells them out, as tracers like."""
    root = next((m for m in gm.get("module_call_graph", []) if m.get("fqn") == ""), None)
    if root is None:
        return None
    sig = root["signature"]
    names = sig.get("forward_arg_names") or []
    spec = json.loads(sig["in_spec"])[1]  # [protocol version, (args, kwargs)]
    args, kwargs = spec["children_spec"]
    leaves = all(c["type"] is None for c in args["children_spec"])
    if not (leaves and not kwargs["children_spec"] and len(names) == len(args["children_spec"]) == n_inputs):
        return None
    if not all(isinstance(n, str) and n.isidentifier() for n in names) or len(set(names)) != len(names):
        return None
    return names


def exported_task_source(data: bytes, name: str) -> str:
    """The KernelBench-format task for the ExportedProgram in `data` (checked by read_exported)."""
    info = read_exported(data)
    args = info.forward_args
    signature = ", ".join(args) if args is not None else "*args"
    blob = base64.b64encode(data).decode("ascii")
    lines = [blob[i : i + 76] for i in range(0, len(blob), 76)]
    head = f'''"""{_one_line(name)}: an ExportedProgram (torch.export.save) as a KernelBench task.

The program is loaded here, inside the sandbox, by torch.export.load. get_inputs() draws random
values of the recorded example inputs' shapes and dtypes (floats from randn, integers within the
example's range, bools half true), not the example values themselves.
Recorded inputs: {_one_line(info.summary())}
"""
{EXPORTED_MARK}
# file: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}{f", saved by torch {info.torch_version}" if info.torch_version else ""}
import base64
import io

import torch
import torch.nn as nn


def _kw_program():
    """A fresh load of the program: each Model gets weights of its own."""
    return torch.export.load(io.BytesIO(base64.b64decode(_KW_PT2)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.program = _kw_program().module()

    def forward(self, {signature}):
        return self.program({signature})

    def train(self, mode=True):
        """The program's graph is fixed at export, dropout and batch-norm modes with it, and its
        module refuses train()/eval(): the flag is kept, nothing under it changes."""
        self.training = mode
        return self


def _kw_like(value):
    """A random value of the example's shape and dtype (integers within its range)."""
    if not isinstance(value, torch.Tensor):
        return value
    if value.dtype == torch.bool:
        return torch.rand(value.shape) < 0.5
    if value.is_floating_point() or value.is_complex():
        return torch.randn(value.shape, dtype=value.dtype)
    low, high = (int(value.min()), int(value.max()) + 1) if value.numel() else (0, 1)
    return torch.randint(low, high, value.shape, dtype=value.dtype)


def _kw_example():
    example = _kw_program().example_inputs
    if example is None:
        raise ValueError("the ExportedProgram holds no example inputs (exported with an older torch?): export it again with torch.export.export(model, args) and save it")
    args, kwargs = example
    if kwargs:
        raise ValueError(f"the ExportedProgram takes keyword inputs ({{', '.join(kwargs)}}); a KernelBench task passes its inputs by position")
    return args


def get_inputs():
    import torch.utils._pytree as pytree

    return [pytree.tree_map(_kw_like, a) for a in _KW_EXAMPLE]


def get_init_inputs():
    return []


_KW_PT2 = """
'''
    return head + "\n".join(lines) + '\n"""\n_KW_EXAMPLE = _kw_example()\n'


def is_exported_task(source: str) -> bool:
    return EXPORTED_MARK in source


def _one_line(text: str) -> str:
    return " ".join(str(text).replace('"""', "'''").replace("\\", "/").split())[:300]
