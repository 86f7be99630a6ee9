"""The numbers an exported forward reads back from tensors, folded into its graph as constants.

Why: a forward that sizes tensors by, or branches on, values it reads back from tensors (`.item()`,
a tensor passed as a pad width: HF EnCodec keeps its convolutions' padding as int64 buffers) is
exported with each read as an unbacked symbol (by torch.export.draft_export where it branches on
one: agent.builtin.capture_export._exported), so shapes downstream read `u16 + u17 + 125` and no
kernel can be generated for them. agent.builtin.data_reads has already shown that none of these
values is computed from the inputs' values: each is a function of the module's state and the
inputs' sizes, and the capture is specialised to both (the forward's guard checks the sizes, and
the state these reads come from is named here so that the guard holds its values too).

How: run the program once on the real inputs (torch.fx.Interpreter), put each symbolic number's
value in place of its node, drop the runtime asserts that only checked them (each is checked to
hold first), remove what is left unused, and propagate fake tensors again
(torch.fx.passes.fake_tensor_prop) so every shape downstream is a plain size.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

_SYM = (torch.SymInt, torch.SymFloat, torch.SymBool)


class FoldError(Exception):
    """A read could not be folded (an assert on it fails at the real values)."""


def has_reads(ep: Any) -> bool:
    """Whether ep's graph holds a number read back from a tensor (an unbacked symbol)."""
    return any(n.op == "call_function" and isinstance(n.meta.get("val"), _SYM) for n in ep.graph_module.graph.nodes)


def program_args(ep: Any, inputs: list[Any]) -> list[Any]:
    """The flat arguments of ep.graph_module: its parameters, buffers and constants as the
    signature lists them, then the user inputs."""
    user = iter(torch.utils._pytree.tree_leaves((tuple(inputs), {})))
    args = []
    for spec in ep.graph_signature.input_specs:
        kind = spec.kind.name
        if kind == "USER_INPUT":
            args.append(next(user))
        elif spec.target in ep.state_dict:
            args.append(ep.state_dict[spec.target])
        else:
            args.append(ep.constants[spec.target])
    return args


class _Recorder(fx.Interpreter):
    """Runs the graph and keeps the value of every node whose fake value is a symbolic number."""

    def __init__(self, gm: fx.GraphModule):
        super().__init__(gm)
        self.values: dict[fx.Node, Any] = {}

    def run_node(self, n: fx.Node) -> Any:
        out = super().run_node(n)
        if isinstance(n.meta.get("val"), _SYM):
            self.values[n] = out.item() if isinstance(out, torch.Tensor) else out
        return out


def _sources(gm: fx.GraphModule, reads: list[fx.Node]) -> set[str]:
    """The placeholders (names) the reads are computed from."""
    seen: set[fx.Node] = set()
    todo = list(reads)
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        todo += n.all_input_nodes
    return {n.name for n in seen if n.op == "placeholder"}


def fold(ep: Any, inputs: list[Any]) -> list[str]:
    """Fold ep's symbolic numbers (in place) to their values at `inputs`; returns the state
    (parameter, buffer or constant targets) those values were read from, for the guard."""
    gm = ep.graph_module
    syms = [n for n in gm.graph.nodes if n.op == "call_function" and isinstance(n.meta.get("val"), _SYM)]
    if not syms:
        return []
    args = program_args(ep, inputs)
    rec = _Recorder(gm)
    with torch.no_grad():
        rec.run(*args)
    state = {
        spec.arg.name: spec.target
        for spec in ep.graph_signature.input_specs
        if spec.kind.name != "USER_INPUT" and spec.target is not None
    }
    read_from = sorted({state[p] for p in _sources(gm, syms) if p in state})
    for n in syms:
        value = rec.values[n]
        for user in list(n.users):
            if user.target is torch.ops.aten._assert_scalar.default:
                if not value:
                    raise FoldError(f"{user.args[1] if len(user.args) > 1 else user.name} at the real values")
                gm.graph.erase_node(user)
            else:
                user.args, user.kwargs = _put(user.args, n, value), _put(user.kwargs, n, value)
    _drop_unused(gm)
    gm.graph.lint()
    gm.recompile()
    _propagate(gm, args)
    return read_from


def _put(arg: Any, node: fx.Node, value: Any) -> Any:
    """arg (a node's args or kwargs) with `value` wherever it names `node`."""

    def one(a: fx.Node) -> Any:
        return value if a is node else a

    return fx.node.map_arg(arg, one)


def _drop_unused(gm: fx.GraphModule) -> None:
    """Remove the reads and what only they used: every call that neither the output nor an
    effect (an in-place update, a remaining assert) needs; export's dtype checks
    (`_assert_tensor_metadata`) go with the values they check."""
    check = torch.ops.aten._assert_tensor_metadata.default
    nodes = list(gm.graph.nodes)
    todo = [n for n in nodes if n.op == "output" or (n.op == "call_function" and n.target is not check and _effect(n))]
    live: set[fx.Node] = set()
    while todo:
        n = todo.pop()
        if n not in live:
            live.add(n)
            todo += n.all_input_nodes
    for n in reversed(nodes):
        if n.op == "call_function" and n not in live:
            gm.graph.erase_node(n)


def _effect(n: fx.Node) -> bool:
    """A call kept for what it does rather than what it returns."""
    if n.target is torch.ops.aten._assert_scalar.default:
        return True
    schema = getattr(n.target, "_schema", None)
    return schema is not None and schema.is_mutable


def _propagate(gm: fx.GraphModule, args: list[Any]) -> None:
    """Every node's fake value again, now with plain sizes."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    with torch.no_grad():
        FakeTensorProp(gm, mode).propagate(*args)
