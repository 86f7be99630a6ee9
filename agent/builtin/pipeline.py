"""From a captured graph to a candidate workspace: rewrite, lower, fuse, generate.

The policy drives these steps one turn at a time; `build_candidate` is the part that turns a
(rewritten) graph into files, used by the policy, the tests and the case-study script alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.builtin import tf32x3
from agent.builtin.fusion import GAP, ROW, ROWGEN, SCALAR, FusionError, Plan, plan
from agent.builtin.graph import ELEMENTWISE, ISLAND_OPS, LIBRARY, REDUCTIONS, Graph, Node, Ref, Scalar, makes_strided
from agent.builtin.kernelgen import KernelSig, default_config, generate
from agent.builtin.lower import LoweringError, lower
from agent.builtin.modelgen import generate_model
from agent.builtin.ownkernels import own_call
from agent.workspace import MAX_FILE_BYTES


class GenerationError(Exception):
    """The graph uses something the generator cannot express; the message says what."""


@dataclass
class Candidate:
    files: dict[str, str]
    plan: Plan
    sigs: list[KernelSig]
    configs: dict[str, dict] = field(default_factory=dict)

    @property
    def kernel_path(self) -> str:
        """The compiled file (kernels/fused.cu or .cpp); any parts are headers it includes."""
        return next(p for p in self.files if p.startswith("kernels/") and p.endswith((".cu", ".cpp")))


def make_plan(g: Graph, islands: bool = True, gemm: str = "cublas", gaps: bool = False) -> Plan:
    """Lower and fuse g. With `islands`, a node that cannot be lowered or fused is kept as a
    library/ATen call (marked `island` with the reason) and the rest is planned again; without,
    the first such node is a GenerationError. gemm "3xtf32" keeps every linear ours (its bias add
    a kernel of its own if need be): the GEMM it saves is worth far more than one pass. `gaps`
    (cuda): split broadcasts read in place (read_gaps_in_place); the CPU's vector loops are faster
    over the expanded copy than with two divisions per element."""
    g = g.copy()
    _scalar_inputs(g)
    _expand_split_broadcasts(g)
    for _ in range(2 * len(g.nodes) + 1):
        try:
            p = plan(lower(g))
            if gaps:
                read_gaps_in_place(p)
            lone = _lone_bias_adds(g, p, gemm) if islands else []
            if not lone:
                return p
            for bias_add in lone:
                g.node(bias_add).attrs["island"] = LONE_BIAS
            continue
        except (LoweringError, FusionError) as e:
            name = getattr(e, "node", None)
            if isinstance(e, FusionError) and name is not None:
                name = (g.meta.get("origin") or {}).get(name, name)
            if not islands or name is None or not _has(g, name) or g.node(name).attrs.get("island"):
                raise GenerationError(str(e)) from None
            n = g.node(name)
            if isinstance(e, FusionError) and n.op in ELEMENTWISE | REDUCTIONS and not n.attrs.get("alone"):
                # first a kernel of its own: YOLOX's objectness sigmoid ([2, 1, H, W]) is read by a
                # group of the class scores' shape and returned as well, so it fits no group's outputs
                n.attrs["alone"] = True
                continue
            n.attrs["island"] = str(e)
    raise GenerationError("the graph could not be planned")


def _scalar_inputs(g: Graph) -> None:
    """A number passed to forward (KernelBench's `A * s` with s = 3.14 in get_inputs) read by an
    elementwise op becomes a run-time scalar argument of the kernel (`float(v_s)`), as a model's
    float attribute does: it has no tensor shape for the group's iteration space."""
    inputs = list((g.meta or {}).get("inputs") or [])
    for n in g.nodes:
        if n.op != "input" or n.shape is not None:
            continue
        i = n.attrs.get("index", -1)
        value = inputs[i].get("value") if 0 <= i < len(inputs) else None
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        for m in g.nodes:
            if m.op in ELEMENTWISE:
                m.args = [
                    Scalar(float(value), f"v_{n.name}") if isinstance(a, Ref) and a.name == n.name else a
                    for a in m.args
                ]


def _expand_split_broadcasts(g: Graph) -> None:
    """An elementwise operand broadcast over a dim between dims it varies in (x / rms with rms
    [B, 1, H, W] against x [B, C, H, W]: RMS norm over channels) is no block of the group's
    iteration space, which a kernel reads through one stride per block. An expand view to the
    shape of the op's full-size operand, taken at run time (`tuple(x.shape)`, so an fx graph stays
    right at other sizes), makes it one: a strided operand, copied to contiguous memory at the
    kernel boundary (by kw_gather under forbid)."""
    out: list[Node] = []
    for n in g.nodes:
        full = (
            next((a for a in n.args if isinstance(a, Ref) and g.node(a.name).shape == n.shape), None)
            if n.op in ELEMENTWISE and n.shape
            else None
        )
        for j, a in enumerate(n.args if full is not None else []):
            s = g.node(a.name).shape if isinstance(a, Ref) else None
            if s is None or full is None or n.shape is None or len(s) > len(n.shape):
                continue
            s = [1] * (len(n.shape) - len(s)) + list(s)
            nz = [i for i in range(len(s)) if s[i] != 1]
            if nz and any(s[i] == 1 and n.shape[i] != 1 for i in range(nz[0], nz[-1] + 1)):
                shape = Node(f"{full.name}_kwshape{len(out)}", "shape", [full])
                e = Node(
                    f"{a.name}_kwexp{len(out)}",
                    "expand",
                    [a, Ref(shape.name)],
                    {"split_broadcast": True},  # read in place where a kernel can (read_gaps_in_place)
                    list(n.shape),
                    g.node(a.name).dtype,
                )
                out += [shape, e]
                n.args[j] = Ref(e.name)
        out.append(n)
    g.nodes[:] = out


def read_gaps_in_place(p: Plan) -> None:
    """An elementwise group (no reduction, no per-row operand) reads a split broadcast through its
    index instead of the expand `_expand_split_broadcasts` made for it: rms [B, 1, H, W] against
    x [B, C, H, W] as ((i / (C H W)) % B) * H W + i % (H W), a GAP operand. The expand, copied to
    contiguous memory at the kernel boundary, was a tensor the input's size (7 GiB for KernelBench
    L1/36's RMS norm, which then ran out of memory beside other evaluations)."""
    g = p.graph
    for grp in p.groups:
        if grp.reductions or any(o.kind in (ROW, ROWGEN, SCALAR) for o in grp.operands):
            continue
        for o in grp.operands:
            n = g.node(o.value)
            if not n.attrs.get("split_broadcast") or not isinstance(n.args[0], Ref):
                continue
            gap = _gap_of(g.node(n.args[0].name).dims, grp.full)
            if gap is None:
                continue
            src = n.args[0].name
            for m in grp.nodes:  # the group's ops read the operand itself
                m.args = [Ref(src) if isinstance(x, Ref) and x.name == n.name else x for x in m.args]
            o.value, o.kind, o.block, o.gap = src, GAP, (gap[0], len(grp.full)), gap[1:]
    _drop_unread_steps(p)


def _drop_unread_steps(p: Plan) -> None:
    """Python-level steps whose value nothing reads any more (the expand and its shape after
    read_gaps_in_place): the forward runs every step in every call."""
    while True:
        read = {r for st in p.steps for n in st.nodes() for r in n.refs()}
        read |= {o.value for grp in p.groups for o in grp.operands}
        read |= {a.name for a in p.graph.output.args if isinstance(a, Ref)}
        dead = [
            st
            for st in p.steps
            if st.node is not None and st.node.op in ("expand", "shape") and st.node.name not in read
        ]
        if not dead:
            return
        p.steps = [st for st in p.steps if st not in dead]


def _gap_of(shape: list[int], full: list[int]) -> tuple[int, int, int] | None:
    """(a, g0, g1) when `shape`, aligned right to `full`, is full over [a, g0) and [g1, end), and 1
    over [g0, g1) where full is not; None for any other pattern."""
    k = len(full)
    if len(shape) > k:
        return None
    s = [1] * (k - len(shape)) + [int(d) for d in shape]
    nz = [i for i in range(k) if s[i] != 1]
    if not nz or nz[-1] != k - 1 or any(s[i] != full[i] for i in nz):
        return None
    a = nz[0]
    holes = [i for i in range(a, k) if s[i] == 1 and full[i] != 1]
    if not holes or holes != list(range(holes[0], holes[-1] + 1)):
        return None
    return a, holes[0], holes[-1] + 1


LONE_BIAS = (
    "its bias add would be a kernel of its own (a launch and a pass over the output for one add): the "
    "library call adds it in its epilogue"
)


def _lone_bias_adds(g: Graph, p: Plan, gemm: str = "cublas") -> list[str]:
    """The linear/conv2d nodes of g whose lowered bias add is alone in its group (nothing to fuse it
    with: a view, a reduction over other dims or the output follows). With the bias, the library call
    (addmm, a convolution with bias) does the add in its epilogue, one launch fewer. Not a linear
    that gemm "3xtf32" computes (tf32x3.node_pays): its GEMM is worth more than that pass."""
    origin = p.graph.meta.get("origin") or {}
    out = []
    for grp in p.groups:
        if len(grp.nodes) != 1 or grp.nodes[0].op != "add":
            continue
        src = origin.get(grp.nodes[0].name)
        if src and _has(g, src) and g.node(src).op in ("linear", "conv2d") and not g.node(src).attrs.get("island"):
            if g.node(src).op == "linear" and not _addmm_linear(g, g.node(src)):
                continue
            if gemm == "3xtf32" and g.node(src).op == "linear" and tf32x3.node_pays(g, g.node(src)):
                continue
            out.append(src)
    return out


def _addmm_linear(g: Graph, n: Node) -> bool:
    """Whether ATen's linear runs n as one addmm: a 2-D input, or a contiguous 3-D one (viewed as
    2-D). On any other input it is a matmul, a copy and a separate aten::add, ops that
    torch-ops=forbid rejects (torchvision's ViT: the attention's in-projection of a transposed
    view)."""
    x = n.args[0] if n.args else None
    if not isinstance(x, Ref) or not _has(g, x.name) or g.node(x.name).shape is None:
        return False
    rank = len(g.node(x.name).dims)
    if rank <= 2:
        return True
    strided: set[str] = set()
    for m in g.nodes:
        if makes_strided(m, strided):
            strided.add(m.name)
        if m.name == x.name:
            break
    return rank == 3 and x.name not in strided


def _has(g: Graph, name: str) -> bool:
    return any(n.name == name for n in g.nodes)


def library_parts(p: Plan, torch_ops: str = "forbid") -> list[Node]:
    """The plan's nodes that run as library/ATen calls and compute something (not views); an ATen
    op that a kernel of our own computes (agent.builtin.ownkernels) is not one."""
    return [
        st.node
        for st in p.steps
        if st.node is not None
        and (st.node.op in ISLAND_OPS or st.node.attrs.get("island") or st.node.op in LIBRARY)
        and not own_call(st.node, p.graph, torch_ops)
    ]


def own_parts(p: Plan, torch_ops: str = "forbid") -> list[tuple[Node, str]]:
    """(node, kernel) for each ATen op of the plan that a kernel of our own computes."""
    out = []
    for st in p.steps:
        call = own_call(st.node, p.graph, torch_ops) if st.node is not None else None
        if call and st.node is not None:
            out.append((st.node, call["kernel"]))
    return out


def strided_operands(p: Plan) -> list[tuple[str, str]]:
    """(kernel, value) for each kernel operand that may be strided: made contiguous at the boundary."""
    strided: set[str] = set()
    out = []
    for st in p.steps:
        if st.node is not None and makes_strided(st.node, strided):
            strided.add(st.node.name)
        elif st.group is not None:
            for o in st.group.operands:
                if o.value in strided:
                    out.append((st.group.name, o.value))
                    strided.discard(o.value)
    return out


def build_candidate(
    g: Graph,
    meta: dict[str, Any],
    backend: str,
    configs: dict[str, dict] | None = None,
    note: str = "",
    gemm: str = "cublas",
    graph: bool = False,
    torch_ops: str = "forbid",
    gaps: bool | None = None,
) -> Candidate:
    """gaps: split broadcasts read in place (make_plan), by default on cuda only."""
    p = make_plan(g, gemm=gemm, gaps=backend == "cuda" if gaps is None else gaps)
    if not p.groups and not own_parts(p) and torch_ops != "allow" and gemm != "3xtf32":
        raise GenerationError(
            "after the rewrites nothing is left for a custom kernel (the forward is only library "
            "GEMM/convolution calls); the default torch-ops policy needs at least one custom kernel"
        )
    cfg = {grp.name: dict(default_config(grp, backend)) for grp in p.groups}
    for k, v in (configs or {}).items():
        cfg[k] = dict(v)
    kfiles, sigs = generate(p, backend, cfg, gemm, limit=MAX_FILE_BYTES)
    summary = ("Generated by the Kernelwright built-in policy.\n" + note).strip()
    try:
        model = generate_model(p, meta, backend, sigs, summary, gemm, graph, torch_ops=torch_ops)
    except ValueError as e:
        raise GenerationError(str(e)) from None
    files = {"model_new.py": model, **kfiles}
    check_sizes(files)
    return Candidate(files, p, sigs, cfg)


def check_sizes(files: dict[str, str]) -> None:
    """A generated file over the workspace's limit per file could not be written (the evaluation
    would find no model_new.py): a GenerationError that says so, instead (DenseNet-121's forward,
    op by op, is about 300 KB of Python)."""
    for name, text in files.items():
        size = len(text.encode())
        if size > MAX_FILE_BYTES:
            raise GenerationError(
                f"the generated {name} would be {size} bytes, over the workspace's limit of "
                f"{MAX_FILE_BYTES} bytes per file"
            )
