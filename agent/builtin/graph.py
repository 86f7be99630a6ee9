"""The built-in policy's view of a task: a small graph IR built from the fx capture.

The capture itself runs in a child process (`agent.builtin.analyze`); this module only parses
its JSON into `Graph`, which the rewrites and the code generators share. Vocabulary:
input, param, linear, matmul, conv2d, batchnorm, layernorm, rmsnorm, softmax, log_softmax,
diag, groupnorm, logsumexp, the elementwise ops in ELEMENTWISE, the reductions in REDUCTIONS,
views (view, reshape, flatten, transpose, permute, t, unsqueeze, squeeze, expand, contiguous,
slice, select, getitem), channels_last (a weight copied into channels-last memory:
agent.builtin.layout), identity, size/shape (Python ints), derived (a tensor computed from
parameters by a custom kernel, e.g. folded batch-norm weights), constant (a small tensor the
forward makes from Python values, `torch.tensor(self.c)`), aten (an island: an ATen op
the generator does not express, called as itself) and output. Any node may carry
attrs["island"] (the reason): it is then called as a torch op instead of being fused.
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

UNARY = {
    "exp",
    "log",
    "tanh",
    "sigmoid",
    "relu",
    "rsqrt",
    "sqrt",
    "abs",
    "erf",
    "sin",
    "cos",
    "neg",
    "silu",
    "square",
    "log1p",
    "expm1",
    "mish",
    "hardswish",
    "hardsigmoid",
    "relu6",
    "gelu",
    "identity",
}
BINARY = {"add", "sub", "mul", "div", "maximum", "minimum", "pow"}
PARAMETRIC = {"leaky_relu", "clamp", "elu", "softplus", "where"}  # where(c, a, b): c != 0 ? a : b (c float)
ELEMENTWISE = UNARY | BINARY | PARAMETRIC
REDUCTIONS = {"sum", "mean", "amax", "amin"}
VIEWS = {
    "view",
    "reshape",
    "flatten",
    "transpose",
    "permute",
    "t",
    "unsqueeze",
    "squeeze",
    "expand",
    "contiguous",
    "slice",
    "select",
    "getitem",
}
LIBRARY = {"matmul", "matmul_nt", "conv2d"}
# an op the generator does not express, kept as the same ATen call (torch.export captures only)
ISLAND_OPS = {"aten"}
# views whose result may not be contiguous (a fused kernel reads raw pointers)
STRIDED_VIEWS = {"permute", "transpose", "t", "expand", "slice", "select", "getitem"}
PYTHON_INTS = {"size", "shape", "ndim"}


def makes_strided(n: Node, strided: set[str]) -> bool:
    """Whether n's value may be non-contiguous (a fused kernel reads raw pointers): a strided view,
    an island's result, a view of one of those, or a convolution of one (timm's ConvNeXt permutes
    back from its channels-last LayerNorm into the convolution)."""
    if n.op in STRIDED_VIEWS or n.op in ISLAND_OPS or n.attrs.get("island"):
        return True
    if n.op == "channels_last" or n.attrs.get("channels_last"):  # NCHW shape, NHWC memory (agent.builtin.layout)
        return True
    src = n.args[0].name if n.args and isinstance(n.args[0], Ref) else None
    if n.op == "conv2d" and src in strided:  # the output takes the input's memory format: NHWC from a permuted view
        return True
    return n.op in ("view", "reshape", "flatten", "unsqueeze", "squeeze") and src in strided


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class Scalar:
    """A float constant; `expr` (e.g. "self.scale") when it comes from a model attribute and
    must be read at run time, so the candidate stays right for other init arguments."""

    value: float
    expr: str | None = None

    @property
    def runtime(self) -> bool:
        return self.expr is not None


@dataclass(frozen=True)
class Lit:
    value: Any


@dataclass
class Node:
    name: str
    op: str
    args: list[Any]
    attrs: dict[str, Any] = field(default_factory=dict)
    shape: list[int] | None = None
    dtype: str | None = None

    def refs(self) -> list[str]:
        out = [a.name for a in self.args if isinstance(a, Ref)]
        for a in self.args:
            if isinstance(a, Lit) and isinstance(a.value, list):
                out += [x.name for x in a.value if isinstance(x, Ref)]
        return out

    @property
    def dims(self) -> list[int]:
        """The shape of a tensor node, which the capture always records (None is for Python ints)."""
        assert self.shape is not None, f"{self.name} ({self.op}) has no shape"
        return self.shape

    @property
    def numel(self) -> int:
        return math.prod(self.shape) if self.shape is not None else 0


@dataclass
class Graph:
    nodes: list[Node]
    meta: dict[str, Any] = field(default_factory=dict)

    def copy(self) -> Graph:
        import copy

        return copy.deepcopy(self)

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def users(self, name: str) -> list[Node]:
        return [n for n in self.nodes if name in n.refs()]

    @property
    def output(self) -> Node:
        return next(n for n in self.nodes if n.op == "output")

    def inputs(self) -> list[Node]:
        return sorted((n for n in self.nodes if n.op == "input"), key=lambda n: n.attrs["index"])

    def fresh(self, prefix: str) -> str:
        names = {n.name for n in self.nodes}
        i = 0
        while f"{prefix}_{i}" in names:
            i += 1
        return f"{prefix}_{i}"

    def replace_uses(self, old: str, new: str) -> None:
        for n in self.nodes:
            n.args = [_swap(a, old, new) for a in n.args]

    def insert_before(self, anchor: str, node: Node) -> None:
        i = next(k for k, n in enumerate(self.nodes) if n.name == anchor)
        self.nodes.insert(i, node)

    def toposort(self) -> None:
        """Stable topological order (a rewrite may insert a node before some of its inputs)."""
        done: set[str] = set()
        out: list[Node] = []
        pending = list(self.nodes)
        while pending:
            rest = []
            for n in pending:
                if all(r in done for r in n.refs()):
                    out.append(n)
                    done.add(n.name)
                else:
                    rest.append(n)
            if len(rest) == len(pending):
                raise ValueError(f"graph has a cycle or a dangling reference at {rest[0].name}")
            pending = rest
        self.nodes = out

    def remove_dead(self) -> None:
        while True:
            used = {r for n in self.nodes for r in n.refs()}
            dead = [n for n in self.nodes if n.op not in ("output", "input") and n.name not in used]
            if not dead:
                return
            self.nodes = [n for n in self.nodes if n not in dead]

    def summary(self) -> str:
        """One line per node, as an expert would write the captured program down."""
        lines = []
        for n in self.nodes:
            if n.op in ("input",):
                lines.append(f"  {n.name:<14} = input[{n.attrs['index']}]            {fmt_shape(n.shape)}")
            elif n.op == "param":
                lines.append(f"  {n.name:<14} = self.{n.attrs['path']:<18} {fmt_shape(n.shape)}")
            elif n.op == "output":
                lines.append(f"  return {', '.join(fmt_arg(a) for a in n.args)}")
            elif n.op == "aten":
                args = ", ".join(fmt_arg(a) for a in n.args)
                lines.append(
                    f"  {n.name:<14} = {n.attrs['target']}({args})  [library/ATen call]   {fmt_shape(n.shape)}"
                )
            else:
                args = ", ".join(fmt_arg(a) for a in n.args)
                extra = {
                    k: v
                    for k, v in n.attrs.items()
                    if k not in ("module", "tuple", "island", "value") and v is not None
                }
                ex = " " + " ".join(f"{k}={v}" for k, v in extra.items()) if extra else ""
                lines.append(f"  {n.name:<14} = {n.op}({args}){ex}   {fmt_shape(n.shape)}")
        return "\n".join(lines)


def _swap(a: Any, old: str, new: str) -> Any:
    if isinstance(a, Ref) and a.name == old:
        return Ref(new)
    if isinstance(a, Lit) and isinstance(a.value, list):
        return Lit([Ref(new) if isinstance(x, Ref) and x.name == old else x for x in a.value])
    return a


def fmt_shape(shape: list[int] | None) -> str:
    return "" if shape is None else "[" + ", ".join(str(s) for s in shape) + "]"


def fmt_arg(a: Any) -> str:
    if isinstance(a, Ref):
        return a.name
    if isinstance(a, Scalar):
        return a.expr if a.expr else repr(a.value)
    if isinstance(a, Lit):
        if isinstance(a.value, list):
            return "[" + ", ".join(x.name if isinstance(x, Ref) else repr(x) for x in a.value) + "]"
        return repr(a.value)
    return repr(a)


def _parse_arg(a: dict[str, Any]) -> Any:
    if "ref" in a:
        return Ref(a["ref"])
    if "scalar" in a:
        return Scalar(float(a["scalar"]), a.get("expr"))
    v = a["lit"]
    if isinstance(v, list):
        v = [Ref(x["ref"]) if isinstance(x, dict) and "ref" in x else x for x in v]
    return Lit(v)


def graph_from_analysis(data: dict[str, Any]) -> Graph:
    nodes = [
        Node(n["name"], n["op"], [_parse_arg(a) for a in n["args"]], dict(n["attrs"]), n["shape"], n["dtype"])
        for n in data["nodes"]
    ]
    meta = {k: v for k, v in data.items() if k != "nodes"}
    return Graph(nodes, meta)


@dataclass
class Analysis:
    ok: bool
    error: str = ""
    graph: Graph | None = None
    data: dict[str, Any] = field(default_factory=dict)


def _admission(device: str, profile: bool) -> tuple[Any, bool]:
    """(the memory share, whether to profile). On a GPU the analysis runs the task there only for
    its eager profile (the model, one input set, a few forwards; nothing else reads it), with no
    measured footprint: it holds a set-up's share of the device's memory (sandbox.devmem.SETUP_PARTS)
    if that can be had at once, and otherwise goes without the profile. Queueing for it (behind an
    evaluation waiting for a level-1 task's 40 GiB) held analyses for up to 200 s of a problem's
    time on an H100 with four shards (thirty-seventh session); the capture itself needs no device."""
    from sandbox import devmem
    from sandbox.devlock import host_lock_name

    share = devmem.MemoryShare()
    if device != "cuda" or not profile:
        return share, profile
    share.open(host_lock_name("cuda"))
    return share, not share.available or share.take_now(devmem.SETUP_PARTS)


PROFILE_SKIPPED = (
    "the eager profile was skipped: evaluations held the device's memory, and the analysis does not "
    "wait for it; the plan has no per-op breakdown"
)


def _read_result(path: str) -> bytes:
    """The analysis child's result file: the child runs the task's code, so not through a link
    it may have put there (a secret of ours read as its result), and a regular file only."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()  # at most the child's file-size limit (fsize_mb below)
    finally:
        os.close(fd)


def analyze_source(
    source: str, device: str = "cpu", profile: bool = True, timeout: float = 300.0, write_out_attention: bool = False
) -> Analysis:
    """Run the capture in the sandbox: the task is user code and must not run in ours (the
    same wall as an evaluation's children, sandbox.isolation.run_command). write_out_attention
    (torch-ops=forbid): an exported SDPA call captured as its math."""
    from sandbox import EvalOptions
    from sandbox.containment import REPO_ROOT, Unavailable
    from sandbox.devlock import prepare_dir
    from sandbox.isolation import Limits, run_command

    with tempfile.TemporaryDirectory(prefix="kw-analyze-") as d:
        os.chmod(d, 0o755)
        path = os.path.join(d, "task.py")
        with open(path, "w") as f:
            f.write(source)
        result = os.path.join(d, "analysis.json")  # a large module's graph passes the 1 MiB the log keeps
        share, profiled = _admission(device, profile)
        cmd = [sys.executable, "-m", "agent.builtin.analyze", path, "--device", device, "--out", result]
        if not profiled:
            cmd.append("--no-profile")
        if write_out_attention:
            cmd.append("--write-out-attention")
        limits = Limits(wall_s=timeout, cpu_s=int(timeout * 4) + 60, fsize_mb=64, nproc=1024)
        try:
            rc, log, timed_out = run_command(
                cmd,
                Path(d),
                limits,
                EvalOptions(backend=device),
                with_agent=True,
                env_extra={"PYTHONPATH": str(REPO_ROOT), "PYTHONDONTWRITEBYTECODE": "1", "KW_LOCK_DIR": prepare_dir()},
            )
        except Unavailable as exc:
            return Analysis(False, str(exc))
        finally:
            share.release()
        if timed_out:
            return Analysis(False, f"the analysis of the task did not finish within {timeout:.0f} s")
        try:
            data = json.loads(_read_result(result))
        except (OSError, ValueError):
            return Analysis(False, f"the analysis process failed (exit {rc}): {log[-800:]}")
    if not isinstance(data, dict):
        return Analysis(False, "the analysis process wrote no result")
    if profile and not profiled and isinstance(data.get("notes"), list):
        data["notes"].append(PROFILE_SKIPPED)
    if not data.get("ok"):
        return Analysis(False, data.get("error", "unknown analysis failure"), data=data)
    return Analysis(True, graph=graph_from_analysis(data), data=data)
