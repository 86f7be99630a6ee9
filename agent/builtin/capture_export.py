"""Capture through torch.export: an ATen-level graph specialised to the shapes of get_inputs.

Runs in the analysis child only (`agent.builtin.analyze`), like the fx capture: it calls the
task's own forward. `torch.export.export(model, inputs)` traces the forward with fake tensors
of the task's input shapes, so Python control flow on shapes, indexing, shape arithmetic and
tensor constructors (`torch.ones(t, t)`, `s[:, :, None, None]`, `buf[:seq_len]`) specialise
away; `run_decompositions({})` then functionalises it (in-place ops become out-of-place ones)
without decomposing the high-level ops (linear, conv2d, layer_norm, softmax stay whole).

Every ATen op is mapped onto the IR vocabulary of `agent.builtin.graph` where there is a
match; any other op becomes an `aten` node: an island that model_new.py calls as the same
ATen op (`torch.ops.aten.<op>.<overload>(...)`), so an op the generator lacks never fails
the capture. An island's call is stored with its tensor arguments as positions into the
node's `args` (`{"arg": i}`), so the rewrites' `replace_uses` keeps it right.

The graph is specialised: sizes are literals. `guard` records what it was specialised to (the
input shapes, the shapes of the parameters and buffers it reads, the model's simple
attributes), and the candidate checks those before taking its generated path (another shape
runs the reference's own forward).
"""

from __future__ import annotations

import math
import operator
import os
import re
from typing import Any, cast

import torch
import torch.fx as fx
import torch.nn as nn

from agent.builtin import constants, data_reads, outputs, read_fold, rnn_standins
from agent.builtin.generalise import member_expr
from agent.builtin.guard import describe_inputs, guard
from agent.builtin.matmul_forms import baddbmm_as_matmul, einsum_as_matmul, sdpa_written_out


class ExportUnsupported(Exception):
    pass


def _dt(t: Any) -> str | None:
    return str(t.dtype).replace("torch.", "") if isinstance(t, torch.Tensor) else None


def _shape(v: Any) -> list[int] | None:
    return [int(s) for s in v.shape] if isinstance(v, torch.Tensor) else None


# composite ops decomposed after all, into ops the IR maps: einsum into permutes and one matmul
# (agent.builtin.matmul_forms; PyTorch's permutes, views and bmm where that form does not apply);
# the triplet margin loss and pairwise distance into norms (kernels of our own) and elementwise ops;
# baddbmm (agent.builtin.matmul_forms) into a matmul, a scale and an add; glu into two halves, a
# sigmoid and a product (elementwise: fused, and no ATen island under forbid); weight norm
# (nn.utils.parametrizations.weight_norm: wav2vec2's positional convolution) into a norm over all
# dims but one and a product (`_weight_norm` decomposes into `_weight_norm_interface`, which does that)
_DECOMPOSE = (
    "einsum",
    "triplet_margin_loss",
    "pairwise_distance",
    "glu",
    "_weight_norm",
    "_weight_norm_interface",
    "outer",  # Transformer-XL's sinusoidal positions: a broadcast product
    "concat",  # torch.concat, cat by another name (MPT's ALiBi slopes)
)


def masked_index_put(x: Any, indices: Any, values: Any, accumulate: bool = False) -> Any:
    """`x[mask] = v` with one boolean mask over x's leading dims and one value (wav2vec2's
    `hidden_states[~mask] = 0`) as `where(mask, v, x)`: elementwise, where index_put would stay an
    ATen call. Any other index_put is left as it is."""
    mask = indices[0] if len(indices) == 1 else None
    if accumulate or mask is None or mask.dtype != torch.bool or values.numel() != 1:
        return NotImplemented
    if tuple(mask.shape) != tuple(x.shape[: mask.dim()]):  # (a mask of more dims than x is longer)
        return NotImplemented
    mask = mask.reshape(*mask.shape, *([1] * (x.dim() - mask.dim())))
    return torch.where(mask, values.reshape(()).to(x.dtype), x)


def _moments(x: Any, dim: Any, correction: Any, keepdim: bool) -> tuple[Any, Any]:
    """(variance, mean) over dim (None: every dim) as a mean, a difference, a square and a sum:
    reductions and elementwise ops the generator writes (PatchTST's RevIN and hand-written norms
    call var and std; PyTorch's own decomposition goes through prims the export cannot
    functionalise)."""
    dims = list(range(x.dim())) if dim is None or (isinstance(dim, list | tuple) and not dim) else dim
    dims = [dims] if isinstance(dims, int) else list(dims)
    n = math.prod(x.shape[d] for d in dims)
    mean = x.mean(dims, keepdim=True)
    centred = x - mean
    ss = (centred * centred).sum(dims, keepdim=keepdim)
    var = ss / max(n - (1.0 if correction is None else float(correction)), 0)
    return var, (mean if keepdim else mean.squeeze(dims))


def _variance(square_root: bool, with_mean: bool) -> Any:
    """A decomposition of var / std / var_mean / std_mean in all three overloads (`default`:
    unbiased only; `dim`: dim, unbiased, keepdim; `correction`: dim, correction=, keepdim=)."""

    def decomposed(x: Any, *args: Any, **kwargs: Any) -> Any:
        dim, correction, keepdim = None, kwargs.get("correction"), bool(kwargs.get("keepdim", False))
        if args and isinstance(args[0], bool):  # default: (unbiased)
            correction = 1 if args[0] else 0
        else:
            dim = args[0] if args else kwargs.get("dim")
            if len(args) > 1:  # dim: (dim, unbiased, keepdim)
                correction = 1 if args[1] else 0
                keepdim = bool(args[2]) if len(args) > 2 else keepdim
            elif "unbiased" in kwargs:
                correction = 1 if kwargs["unbiased"] else 0
        var, mean = _moments(x, dim, correction, keepdim)
        out = var.sqrt() if square_root else var
        return (out, mean) if with_mean else out

    return decomposed


_MOMENTS = {"var": (False, False), "std": (True, False), "var_mean": (False, True), "std_mean": (True, True)}


class DataDependent(Exception):
    """A branch on a value the forward computes from its inputs' values: no graph holds it."""


def _exported(model: nn.Module, inputs: list[Any], notes: list[str] | None) -> tuple[Any, bool]:
    """(torch.export's program, whether it holds values read back from tensors to fold in). Where
    export fails on a branch on a read-back value, draft_export's program, with each decision as
    it went at these inputs. Either kind of read is taken only where none depends on the inputs'
    values (agent.builtin.data_reads: module configuration, a mask made from sizes)."""
    try:
        ep = torch.export.export(model, tuple(inputs), strict=False)
    except Exception as e:
        if "GuardOnDataDependentSymNode" not in type(e).__name__:
            raise
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        if not hasattr(torch.export, "draft_export"):
            raise DataDependent(f"data-dependent control flow ({first})") from None
        total = _reads_not_from_inputs(model, inputs, f"data-dependent control flow: {{}} ({first})")
        ep = torch.export.draft_export(model, tuple(inputs))
        if notes is not None:
            notes.append(
                f"the forward reads {total} value(s) back from tensors, none computed from its inputs (module "
                "configuration, masks made from sizes): captured with torch.export.draft_export, each decision "
                "as it went at these inputs, each value folded in as a constant that the guard checks"
            )
        return ep, True
    if not read_fold.has_reads(ep):
        return ep, False
    total = _reads_not_from_inputs(
        model, inputs, "a number read back from a tensor's values (`.item()`, a tensor as a size): {}"
    )
    if notes is not None:
        notes.append(
            f"the forward reads {total} value(s) back from tensors (`.item()`, a tensor as a size), none "
            "computed from its inputs: each folded in as a constant that the guard checks"
        )
    return ep, True


def _reads_not_from_inputs(model: nn.Module, inputs: list[Any], why: str) -> int:
    """How many values the forward reads back (agent.builtin.data_reads); DataDependent, with
    `why` formatted, where one of them is computed from the inputs' values or none shows."""
    r = data_reads.reads(model, inputs)
    if r.from_inputs:
        raise DataDependent(
            why.format(
                f"{r.from_inputs} of the {r.total} values the forward reads back from tensors are computed "
                "from its inputs' values"
            )
        )
    if not r.total:
        raise DataDependent(why.format("no value read back in eager shows"))
    return r.total


def program(
    model: nn.Module, inputs: list[Any], write_out_attention: bool = False, notes: list[str] | None = None
) -> tuple[Any, list[str] | None]:
    """(the exported program with our decompositions, None; or where it reads values back from
    tensors (`_exported`), with them folded in (agent.builtin.read_fold), the state they came from).
    write_out_attention (torch-ops=forbid): scaled_dot_product_attention as its math
    (agent.builtin.matmul_forms.sdpa_written_out); otherwise it stays one call."""
    with torch.no_grad(), rnn_standins.standins():
        ep, reads = _exported(model, inputs, notes)
    table = torch.export.default_decompositions()
    wanted = {getattr(torch.ops.aten, op).default for op in _DECOMPOSE}
    chosen = {op: table[op] for op in wanted if op in table}
    einsum = torch.ops.aten.einsum.default
    if einsum in chosen:
        chosen[einsum] = einsum_as_matmul(chosen[einsum])
    chosen[torch.ops.aten.baddbmm.default] = baddbmm_as_matmul
    chosen[torch.ops.aten.index_put.default] = masked_index_put
    for name, (square_root, with_mean) in _MOMENTS.items():
        packet = getattr(torch.ops.aten, name)
        for overload in ("default", "dim", "correction"):
            if hasattr(packet, overload):
                chosen[getattr(packet, overload)] = _variance(square_root, with_mean)
    if write_out_attention:
        chosen[torch.ops.aten.scaled_dot_product_attention.default] = sdpa_written_out
    ep = ep.run_decompositions(chosen)
    if not reads:
        return ep, None
    try:
        return ep, read_fold.fold(ep, inputs)
    except read_fold.FoldError as e:
        raise DataDependent(f"data-dependent control flow: an assert on a value read back fails ({e})") from None


def export_program(model: nn.Module, inputs: list[Any], write_out_attention: bool = False) -> Any:
    """The program alone (`program`)."""
    return program(model, inputs, write_out_attention)[0]


# ATen packet name -> IR op, for ops whose only argument is the tensor
_UNARY = {
    "exp": "exp",
    "log": "log",
    "tanh": "tanh",
    "sigmoid": "sigmoid",
    "relu": "relu",
    "rsqrt": "rsqrt",
    "sqrt": "sqrt",
    "abs": "abs",
    "erf": "erf",
    "sin": "sin",
    "cos": "cos",
    "neg": "neg",
    "silu": "silu",
    "square": "square",
    "log1p": "log1p",
    "expm1": "expm1",
    "mish": "mish",
    "hardswish": "hardswish",
    "hardsigmoid": "hardsigmoid",
    "relu6": "relu6",
}
_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "maximum": "maximum", "minimum": "minimum"}
_REDUCE = {"sum": "sum", "mean": "mean", "amax": "amax", "amin": "amin"}
_ALIAS = {"alias", "detach", "lift_fresh_copy", "dropout", "feature_dropout"}


class ExportBuilder:
    """ATen nodes of an exported program -> IR node dicts (the same format as the fx builder's)."""

    def __init__(self, ep: Any, scalar_exprs: dict[str, str], model: nn.Module | None = None):
        self.ep = ep
        self.model = model
        self.gm: fx.GraphModule = ep.graph_module
        self.scalar_exprs = scalar_exprs
        self.nodes: list[dict[str, Any]] = []
        self.alias: dict[str, str] = {}
        self.constant_nodes: dict[str, dict[str, Any]] = {}  # the constant nodes by name (fold_constant reads them)
        self.kinds: dict[str, tuple[str, str | None]] = {}  # placeholder -> (kind, target)
        self.tuples: dict[str, dict[str, Any]] = {}  # IR name of a tuple-valued node -> how getitem reads it
        self.islands: list[str] = []
        self.counter = 0
        sig = ep.graph_signature
        for spec in sig.input_specs:
            kind = spec.kind.name
            name: Any = getattr(spec.arg, "name", None)  # every input spec's argument has one
            self.kinds[name] = (kind, spec.target)
        for spec in sig.output_specs:
            if spec.kind.name != "USER_OUTPUT":
                raise ExportUnsupported(
                    f"the forward mutates state ({spec.kind.name.lower()} of {spec.target}); "
                    "a candidate would not reproduce the mutation"
                )

    # -- helpers -----------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        names = {n["name"] for n in self.nodes}
        while True:
            self.counter += 1
            c = f"{base}_k{self.counter}"
            if c not in names:
                return c

    def ref(self, a: Any, where: str = "") -> dict[str, Any]:
        if isinstance(a, fx.Node):
            if a.name not in self.alias:
                raise ExportUnsupported(f"value {a.name} is used before it is defined")
            return {"ref": self.alias[a.name]}
        if isinstance(a, bool) or a is None or isinstance(a, str):
            return {"lit": a}
        if isinstance(a, int | float):
            return {"scalar": float(a), "expr": self.scalar_exprs.get(where)}
        raise ExportUnsupported(f"argument {a!r}")

    def lit(self, a: Any) -> dict[str, Any]:
        if isinstance(a, list | tuple):
            if any(isinstance(x, fx.Node) for x in a):
                raise ExportUnsupported("a traced value inside a size list")
            return {"lit": [int(x) if isinstance(x, int) else x for x in a]}
        return {"lit": a}

    def emit(
        self,
        n: fx.Node | None,
        op: str,
        args: list[dict[str, Any]],
        attrs: dict[str, Any] | None = None,
        shape: list[int] | None = None,
        dtype: str | None = None,
        name: str | None = None,
    ) -> str:
        val = n.meta.get("val") if n is not None else None
        if name is None:
            name = n.name if n is not None else self.fresh("t")
        if shape is None and val is not None:
            shape, dtype = _shape(val), _dt(val)
        self.nodes.append({"name": name, "op": op, "args": args, "attrs": attrs or {}, "shape": shape, "dtype": dtype})
        if op == "constant":
            self.constant_nodes[name] = self.nodes[-1]
        if n is not None:
            self.alias[n.name] = name
        return name

    def val(self, n: fx.Node) -> Any:
        return n.meta.get("val")

    # -- the walk ----------------------------------------------------------------------------
    def build(self) -> list[dict[str, Any]]:
        user = 0
        for n in self.gm.graph.nodes:
            if n.op == "placeholder":
                kind, target = self.kinds.get(n.name, ("USER_INPUT", None))
                v = self.val(n)
                if kind == "USER_INPUT":
                    self.emit(n, "input", [], {"index": user}, shape=_shape(v), dtype=_dt(v))
                    user += 1
                elif kind == "CONSTANT_TENSOR" and not _is_attribute(self.model, str(target)):
                    # a tensor made in the forward from Python values (torch.tensor(self.c)): lifted by
                    # export, not reachable as an attribute; small ones are written into the candidate
                    c = self.ep.constants.get(target)
                    owner = _state_alias(self.model, c)
                    if owner is not None:  # a parameter reached through a plain list: read as the parameter
                        self.emit(
                            n, "param", [], {"path": owner[0], "kind": owner[1]}, _shape(c), _dt(c), "p_" + n.name
                        )
                        continue
                    carried = constants.encode(c) if isinstance(c, torch.Tensor) else None
                    if carried is None:
                        raise ExportUnsupported(
                            f"a constant tensor made in the forward ({target}"
                            + (f", {c.numel()} values" if isinstance(c, torch.Tensor) else "")
                            + f"; at most {constants.MAX_VALUES} are carried into the candidate)"
                        )
                    self.emit(n, "constant", [], carried, shape=_shape(c), dtype=_dt(c))
                elif kind in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
                    # export's placeholder names are unique (p_fc_weight, b_bn_running_mean, c_mask)
                    pname = n.name if n.name.startswith("p_") else "p_" + n.name
                    self.emit(
                        n,
                        "param",
                        [],
                        {"path": target, "kind": kind.lower()},
                        shape=_shape(v),
                        dtype=_dt(v),
                        name=pname,
                    )
                else:
                    raise ExportUnsupported(f"an input of kind {kind}")
            elif n.op == "output":
                outs = n.args[0] if isinstance(n.args[0], tuple | list) else (n.args[0],)
                args = []
                for o in outs:
                    if not isinstance(o, fx.Node):
                        raise ExportUnsupported("the forward returns a non-tensor value")
                    args.append(self.ref(o))
                structure = outputs.from_treespec(self.ep.call_spec.out_spec)
                if structure is None:
                    raise ExportUnsupported("the forward returns a structure other than lists and tuples of tensors")
                self.nodes.append(
                    {
                        "name": "output",
                        "op": "output",
                        "args": args,
                        "attrs": {"structure": structure},
                        "shape": None,
                        "dtype": None,
                    }
                )
            elif n.op == "call_function":
                self.call(n)
            elif n.op == "get_attr":
                raise ExportUnsupported(f"a submodule call ({n.target})")
            else:
                raise ExportUnsupported(f"node kind {n.op}")
        return _without_unread_constants(self.nodes)

    def call(self, n: fx.Node) -> None:
        t = n.target
        if isinstance(self.val(n), torch.SymInt | torch.SymFloat | torch.SymBool):
            raise ExportUnsupported(
                f"{n.name}: a number read from a tensor's values (`.item()`, a tensor in Python arithmetic) "
                "decides the computation; a generated forward cannot depend on the data that way"
            )
        if t is operator.getitem:
            self.getitem(n)
            return
        if not isinstance(t, torch._ops.OpOverload):
            self.island(n)
            return
        name = t.overloadpacket.__name__
        over = t._overloadname
        if name == "_assert_tensor_metadata":  # export's check of a `.float()`'s input: returns None, computes nothing
            return
        a, kw = list(n.args), dict(n.kwargs)
        v = self.val(n)
        if not isinstance(v, torch.Tensor) and not isinstance(v, list | tuple):
            self.island(n)
            return
        first = v[0] if isinstance(v, list | tuple) and v else v
        floaty = isinstance(first, torch.Tensor) and first.dtype == torch.float32
        if self.fold_constant(n, t, a, kw):
            return
        try:
            if self.mapped(n, name, over, a, kw, floaty):
                return
        except _NotMapped:
            pass
        self.island(n)

    def fold_constant(self, n: fx.Node, t: Any, a: list[Any], kw: dict[str, Any]) -> bool:
        """An op whose tensor operands are all constants made in the forward (N-BEATS's numpy
        bases: a float64 tensor, cat, `.float()`, `.to(device)`): computed here, once, on the CPU
        and carried as one constant (agent.builtin.constants). Random ops and ops of no constant
        operand (a factory: full, arange) are left to the graph."""
        v = self.val(n)
        if not isinstance(v, torch.Tensor) or torch.Tag.nondeterministic_seeded in t.tags:
            return False
        leaves = [x for x in [*a, *kw.values()] for x in (x if isinstance(x, list | tuple) else [x])]
        nodes = [x for x in leaves if isinstance(x, fx.Node)]
        if not nodes or any(self.alias.get(x.name) not in self.constant_nodes for x in nodes):
            return False  # no operand, or one computed from the inputs

        def value(x: Any) -> Any:
            if isinstance(x, list | tuple):
                return type(x)(value(y) for y in x)
            if not isinstance(x, fx.Node):
                return x
            d = self.constant_nodes[self.alias[x.name]]
            return constants.decode(d["attrs"], d["shape"] or [])

        try:
            args, kwargs = [value(x) for x in a], {k: value(x) for k, x in kw.items() if k != "device"}
            out = t(*args, **kwargs)
        except Exception:  # the op refused these values: left to the graph
            return False
        carried = constants.encode(out) if isinstance(out, torch.Tensor) and out.dtype == v.dtype else None
        if carried is None or list(out.shape) != _shape(v):
            return False
        self.emit(n, "constant", [], carried, shape=_shape(v), dtype=_dt(v))
        return True

    def mapped(self, n: fx.Node, name: str, over: str, a: list[Any], kw: dict[str, Any], floaty: bool) -> bool:
        x: Any = a[0] if a else None
        # per op below: fx arguments (nodes, Python values or None) or, for b, an IR reference too
        y: Any
        b: Any
        dims: Any
        tensor_in = isinstance(x, fx.Node) and isinstance(self.val(x), torch.Tensor)
        float_in = tensor_in and self.val(x).dtype == torch.float32
        P = self.pos
        # elementwise and reductions: float32 only (the kernels are float32)
        if name in _UNARY and over == "default" and floaty and float_in:
            self.emit(n, _UNARY[name], [self.ref(x)])
            return True
        if name in ("min", "max") and over == "other" and floaty:
            name, over = ("minimum" if name == "min" else "maximum"), "Tensor"
        if name in _BINARY and over in ("Tensor", "Scalar") and floaty:
            y = a[1] if len(a) > 1 else kw.get("other")
            for z in (x, y):
                if isinstance(z, fx.Node) and self.val(z).dtype != torch.float32:
                    raise _NotMapped
            alpha = kw.get("alpha", 1)
            if not isinstance(x, fx.Node):
                raise _NotMapped
            if name in ("add", "sub") and alpha != 1:
                if not isinstance(y, fx.Node):
                    self.emit(n, name, [self.ref(x, P(n, 0)), {"scalar": float(y) * float(alpha), "expr": None}])
                    return True
                m = self.emit(
                    None,
                    "mul",
                    [self.ref(y), {"scalar": float(alpha), "expr": None}],
                    name=self.fresh(n.name),
                    shape=_shape(self.val(y)),
                    dtype="float32",
                )
                self.emit(n, name, [self.ref(x, P(n, 0)), {"ref": m}])
                return True
            self.emit(n, _BINARY[name], [self.ref(x, P(n, 0)), self.ref(y, P(n, 1))])
            return True
        if name == "rsub" and floaty and float_in and kw.get("alpha", 1) == 1:
            self.emit(n, "sub", [self.ref(a[1], P(n, 1)), self.ref(x, P(n, 0))])
            return True
        if name == "reciprocal" and floaty and float_in:
            self.emit(n, "div", [{"scalar": 1.0, "expr": None}, self.ref(x)])
            return True
        if name == "pow" and over in ("Tensor_Scalar", "Tensor_Tensor") and floaty and float_in:
            y = a[1]
            if isinstance(y, fx.Node) and self.val(y).dtype != torch.float32:
                raise _NotMapped
            self.emit(n, "pow", [self.ref(x), self.ref(y, P(n, 1))])
            return True
        if name in ("masked_fill", "where") and floaty and over in ("Scalar", "self", "ScalarOther", "ScalarSelf"):
            self.where(n, name, a)
            return True
        if not (floaty and float_in) and name not in (
            "view",
            "_unsafe_view",
            "reshape",
            "permute",
            "transpose",
            "t",
            "unsqueeze",
            "squeeze",
            "expand",
            "slice",
            "select",
            "split",
            "split_with_sizes",
            "clone",
            "flatten",
            "alias",
            "detach",
            "lift_fresh_copy",
            "dropout",
            "unbind",
            "chunk",
        ):
            raise _NotMapped
        if name == "gelu":
            self.emit(n, "gelu", [self.ref(x)], {"approximate": kw.get("approximate", "none")})
        elif name == "leaky_relu":
            slope = a[1] if len(a) > 1 else kw.get("negative_slope", 0.01)
            self.emit(n, "leaky_relu", [self.ref(x), self.ref(slope, P(n, 1))])
        elif name == "hardtanh":
            lo = a[1] if len(a) > 1 else kw.get("min_val", -1.0)
            hi = a[2] if len(a) > 2 else kw.get("max_val", 1.0)
            self.emit(n, "clamp", [self.ref(x), self.ref(lo, P(n, 1)), self.ref(hi, P(n, 2))])
        elif name == "clamp" and over == "default":
            lo = a[1] if len(a) > 1 else kw.get("min")
            hi = a[2] if len(a) > 2 else kw.get("max")
            self.emit(n, "clamp", [self.ref(x), self.ref(lo, P(n, 1)), self.ref(hi, P(n, 2))])
        elif name in ("clamp_min", "clamp_max") and over == "default":
            b = self.ref(a[1], P(n, 1))
            self.emit(
                n, "clamp", [self.ref(x), b, {"lit": None}] if name == "clamp_min" else [self.ref(x), {"lit": None}, b]
            )
        elif name == "elu":
            alpha = a[1] if len(a) > 1 else kw.get("alpha", 1.0)
            scale = a[2] if len(a) > 2 else kw.get("scale", 1.0)
            iscale = a[3] if len(a) > 3 else kw.get("input_scale", 1.0)
            if iscale != 1:
                raise _NotMapped
            if scale == 1:
                self.emit(n, "elu", [self.ref(x), self.ref(alpha, P(n, 1))])
            else:
                e = self.emit(
                    None,
                    "elu",
                    [self.ref(x), self.ref(alpha, P(n, 1))],
                    name=self.fresh(n.name),
                    shape=_shape(self.val(n)),
                    dtype="float32",
                )
                self.emit(n, "mul", [{"ref": e}, self.ref(scale, P(n, 2))])
        elif name == "selu":
            e = self.emit(
                None,
                "elu",
                [self.ref(x), {"scalar": 1.6732632423543772, "expr": None}],
                name=self.fresh(n.name),
                shape=_shape(self.val(n)),
                dtype="float32",
            )
            self.emit(n, "mul", [{"ref": e}, {"scalar": 1.0507009873554805, "expr": None}])
        elif name == "softplus":
            beta = a[1] if len(a) > 1 else kw.get("beta", 1.0)
            thr = a[2] if len(a) > 2 else kw.get("threshold", 20.0)
            self.emit(n, "softplus", [self.ref(x), self.ref(beta, P(n, 1)), self.ref(thr, P(n, 2))])
        elif name in ("softmax", "_softmax", "log_softmax", "_log_softmax"):
            if name.startswith("_") and a[2]:
                raise _NotMapped
            dt = a[2] if len(a) > 2 else kw.get("dtype")
            if not name.startswith("_") and dt is not None and not (dt == torch.float32 and float_in):
                raise _NotMapped  # a cast to another dtype; to float32 of float32 (SigLIP's) is no cast
            self.emit(n, name.lstrip("_"), [self.ref(x)], {"dim": int(a[1])})
        elif name in _REDUCE and over in ("dim_IntList", "dim", "default"):
            dims = a[1] if len(a) > 1 else kw.get("dim")
            keep = a[2] if len(a) > 2 else kw.get("keepdim", False)
            if kw.get("dtype") is not None or (len(a) > 3 and a[3] is not None):
                raise _NotMapped
            if isinstance(dims, int):
                dims = [dims]
            if dims is not None and len(dims) == 0:
                dims = None
            self.emit(
                n,
                _REDUCE[name],
                [self.ref(x)],
                {"dim": list(dims) if dims is not None else None, "keepdim": bool(keep), "tuple": False},
            )
        elif name in ("max", "min") and over == "dim":
            # (values, indices): the values are a row reduction; an island if the indices are used
            users = list(n.users)
            if any(u.target is not operator.getitem or u.args[1] != 0 for u in users):
                raise _NotMapped
            dim = a[1]
            keep = a[2] if len(a) > 2 else kw.get("keepdim", False)
            self.emit(
                n,
                "amax" if name == "max" else "amin",
                [self.ref(x)],
                {"dim": [int(dim)], "keepdim": bool(keep), "tuple": True},
                shape=_shape(self.val(n)[0]),
                dtype="float32",
            )
            self.tuples[self.alias[n.name]] = {"kind": "values"}
        elif name in ("max", "min") and over == "default":
            self.emit(
                n, "amax" if name == "max" else "amin", [self.ref(x)], {"dim": None, "keepdim": False, "tuple": False}
            )
        elif name == "logsumexp":
            dims = a[1] if len(a) > 1 else kw.get("dim")
            keep = a[2] if len(a) > 2 else kw.get("keepdim", False)
            if isinstance(dims, int):
                dims = [dims]
            self.emit(n, "logsumexp", [self.ref(x)], {"dim": list(dims), "keepdim": bool(keep)})
        elif name == "linear":
            b = a[2] if len(a) > 2 else kw.get("bias")
            self.emit(n, "linear", [self.ref(x), self.ref(a[1]), self.ref(b)])
        elif name in ("matmul", "mm", "bmm") and over == "default":
            self.emit(n, "matmul", [self.ref(x), self.ref(a[1])])
        elif name == "conv2d" and over == "default":
            args = list(a) + [None] * (7 - len(a))
            stride, padding, dilation, groups = (
                (args[3] or [1, 1]),
                (args[4] or [0, 0]),
                (args[5] or [1, 1]),
                args[6] or 1,
            )

            def pair(v: Any) -> list[int]:
                return list(v) * (2 if len(v) == 1 else 1) if isinstance(v, list | tuple) else [v, v]

            self.emit(
                n,
                "conv2d",
                [self.ref(x), self.ref(a[1]), self.ref(args[2])],
                {
                    "stride": pair(stride),
                    "padding": pair(padding),
                    "dilation": pair(dilation),
                    "groups": int(groups),
                    "module": None,
                },
            )
        elif name == "_native_batch_norm_legit_no_training":
            users = list(n.users)
            if any(u.target is not operator.getitem or u.args[1] != 0 for u in users):
                raise _NotMapped
            xs, w, b, mean, var = a[:5]
            eps = a[6] if len(a) > 6 else kw.get("eps", 1e-5)
            self.emit(
                n,
                "batchnorm",
                [self.ref(xs), self.ref(mean), self.ref(var), self.ref(w), self.ref(b), self.ref(eps, P(n, 6))],
                {"module": None, "tuple": True},
                shape=_shape(self.val(n)[0]),
                dtype="float32",
            )
            self.tuples[self.alias[n.name]] = {"kind": "values"}
        elif name == "batch_norm" and not a[5]:
            xs, w, b, mean, var = a[:5]
            self.emit(
                n,
                "batchnorm",
                [self.ref(xs), self.ref(mean), self.ref(var), self.ref(w), self.ref(b), self.ref(a[7], P(n, 7))],
                {"module": None},
            )
        elif name == "layer_norm":
            shape = a[1]
            w = a[2] if len(a) > 2 else kw.get("weight")
            b = a[3] if len(a) > 3 else kw.get("bias")
            eps = a[4] if len(a) > 4 else kw.get("eps", 1e-5)
            self.emit(
                n,
                "layernorm",
                [self.ref(x), self.ref(w), self.ref(b), self.ref(eps, P(n, 4))],
                {"ndim": len(shape), "module": None},
            )
        elif name == "rms_norm":
            shape = a[1]
            w = a[2] if len(a) > 2 else kw.get("weight")
            eps = a[3] if len(a) > 3 else kw.get("eps")
            if eps is None:
                eps = torch.finfo(torch.float32).eps
            self.emit(
                n, "rmsnorm", [self.ref(x), self.ref(w), self.ref(eps, P(n, 3))], {"ndim": len(shape), "module": None}
            )
        elif name == "instance_norm" and (a[5] if len(a) > 5 else kw.get("use_input_stats")):
            # statistics of each (sample, channel) over the spatial dims: a group norm with a group per channel
            w, b = (a[1] if len(a) > 1 else None), (a[2] if len(a) > 2 else None)
            eps = a[7] if len(a) > 7 else kw.get("eps", 1e-5)
            self.emit(
                n,
                "groupnorm",
                [self.ref(x), self.ref(w), self.ref(b), self.ref(eps, P(n, 7))],
                {"groups": int(self.val(x).shape[1])},
            )
        elif name == "group_norm":
            G = int(a[1])
            w = a[2] if len(a) > 2 else None
            b = a[3] if len(a) > 3 else None
            eps = a[4] if len(a) > 4 else 1e-5
            self.emit(n, "groupnorm", [self.ref(x), self.ref(w), self.ref(b), self.ref(eps, P(n, 4))], {"groups": G})
        # -- views (Python steps; any dtype) ---------------------------------------------------
        elif name in ("view", "_unsafe_view", "reshape") and over == "default":
            self.emit(n, "view" if name != "reshape" else "reshape", [self.ref(x), self.lit(a[1])])
        elif name == "permute":
            self.emit(n, "permute", [self.ref(x), self.lit(a[1])])
        elif name == "expand":
            self.emit(n, "expand", [self.ref(x), self.lit(a[1])])
        elif name == "transpose" and over == "int":
            self.emit(n, "transpose", [self.ref(x), {"lit": int(a[1])}, {"lit": int(a[2])}])
        elif name == "t":
            self.emit(n, "t", [self.ref(x)])
        elif name == "unsqueeze":
            self.emit(n, "unsqueeze", [self.ref(x), {"lit": int(a[1])}])
        elif name == "squeeze":
            if over == "default":
                self.emit(n, "view", [self.ref(x), self.lit(_shape(self.val(n)))])
            else:
                d = a[1]
                self.emit(n, "view", [self.ref(x), self.lit(_shape(self.val(n)))]) if isinstance(
                    d, list | tuple
                ) else self.emit(n, "squeeze", [self.ref(x), {"lit": int(d)}])
        elif name == "flatten" and over == "using_ints":
            self.emit(
                n,
                "flatten",
                [self.ref(x), {"lit": int(a[1]) if len(a) > 1 else 0}, {"lit": int(a[2]) if len(a) > 2 else -1}],
            )
        elif name == "clone":
            mf = kw.get("memory_format")
            if mf not in (None, torch.contiguous_format, torch.preserve_format):
                raise _NotMapped
            self.emit(n, "contiguous", [self.ref(x)])
        elif name == "slice" and over == "Tensor":
            nd = len(self.val(x).shape)
            dim = int(a[1]) % nd if len(a) > 1 else 0
            size = int(self.val(x).shape[dim])
            start = a[2] if len(a) > 2 and a[2] is not None else 0
            end = a[3] if len(a) > 3 and a[3] is not None else size
            step = a[4] if len(a) > 4 else 1
            start, end, _ = slice(start, end).indices(size)
            self.emit(
                n, "slice", [self.ref(x)], {"dim": dim, "start": start, "end": max(end, start), "step": int(step)}
            )
        elif name == "select" and over == "int":
            nd = len(self.val(x).shape)
            self.emit(n, "select", [self.ref(x)], {"dim": int(a[1]) % nd, "index": int(a[2])})
        elif name in ("split", "split_with_sizes", "chunk", "unbind"):
            self.split(n, name, a, kw)
        elif name in _ALIAS:
            if name in ("dropout", "feature_dropout") and (a[2] if len(a) > 2 else kw.get("train", False)):
                raise _NotMapped
            self.alias[n.name] = self.ref(x)["ref"]
        else:
            raise _NotMapped
        return True

    def where(self, n: fx.Node, name: str, a: list) -> None:
        """masked_fill(x, mask, v) = where(mask, v, x); torch.where(c, a, b): an elementwise select on
        the condition as a float32 0/1 mask (the kernels read float32 operands), cast by an island."""
        if name == "masked_fill":
            cond, yes, no = a[1], a[2], a[0]
        else:
            cond, yes, no = a[0], a[1], a[2]
        for z in (yes, no):
            if isinstance(z, fx.Node) and self.val(z).dtype != torch.float32:
                raise _NotMapped
        if not isinstance(cond, fx.Node) or not any(isinstance(z, fx.Node) for z in (yes, no)):
            raise _NotMapped
        cv = self.val(cond)
        c = self.ref(cond)["ref"]
        if cv.dtype != torch.float32:
            c = self.emit(
                None,
                "aten",
                [{"ref": c}],
                {
                    "target": "aten._to_copy.default",
                    "call": {"args": [{"arg": 0}], "kwargs": {"dtype": {"dtype": "float32"}}},
                    "tuple": False,
                },
                name=self.fresh(f"{n.name}_mask"),
                shape=_shape(cv),
                dtype="float32",
            )
            self.islands.append("aten._to_copy.default")
        self.emit(
            n,
            "where",
            [
                {"ref": c},
                self.ref(yes, self.pos(n, 2 if name == "masked_fill" else 1)),
                self.ref(no, self.pos(n, 0 if name == "masked_fill" else 2)),
            ],
        )

    def split(self, n: fx.Node, name: str, a: list, kw: dict) -> None:
        """split/chunk/unbind: a tuple of slices (or selects), read by the getitems that follow."""
        x = a[0]
        parts = self.val(n)
        nd = len(self.val(x).shape)
        dim = (
            (a[2] if len(a) > 2 else kw.get("dim", 0))
            if name != "unbind"
            else (a[1] if len(a) > 1 else kw.get("dim", 0))
        )
        dim = int(dim) % nd
        starts, off = [], 0
        for p in parts:
            ln = 1 if name == "unbind" else int(p.shape[dim])
            starts.append((off, off + ln))
            off += ln
        src = self.ref(x)["ref"]
        self.alias[n.name] = n.name
        self.tuples[n.name] = {"kind": "split", "src": src, "dim": dim, "bounds": starts, "select": name == "unbind"}

    def getitem(self, n: fx.Node) -> None:
        src, idx = n.args
        if not isinstance(src, fx.Node) or src.name not in self.alias:
            raise ExportUnsupported(f"{n.name}: getitem of {src!r}")
        ir = self.alias[src.name]
        info = self.tuples.get(ir)
        if info is not None and info["kind"] == "values":
            if idx != 0:
                raise ExportUnsupported(f"{n.name}: element {idx} of {src.name}")
            self.alias[n.name] = ir
            return
        if info is not None and info["kind"] == "split":
            s, e = info["bounds"][idx]
            if info["select"]:
                self.emit(n, "select", [{"ref": info["src"]}], {"dim": info["dim"], "index": s})
            else:
                self.emit(n, "slice", [{"ref": info["src"]}], {"dim": info["dim"], "start": s, "end": e, "step": 1})
            return
        self.emit(n, "getitem", [{"ref": ir}], {"index": int(cast(int, idx))})

    def pos(self, n: fx.Node, i: int | str) -> str:
        return f"{n.name}:{i}"

    def island(self, n: fx.Node) -> None:
        """An op the generator does not express: model_new.py calls it as the same ATen op."""
        refs: list[str] = []

        def enc(v: Any, where: str) -> Any:
            if isinstance(v, fx.Node):
                if v.name not in self.alias:
                    raise ExportUnsupported(f"{n.name}: argument {v.name} is not defined")
                r = self.alias[v.name]
                if r in self.tuples and self.tuples[r]["kind"] == "split":
                    raise ExportUnsupported(f"{n.name}: a split passed whole to {n.target}")
                if r not in refs:
                    refs.append(r)
                return {"arg": refs.index(r)}
            if isinstance(v, list | tuple):
                return {"list": [enc(x, where) for x in v]}
            if v is None or isinstance(v, bool | str):
                return {"v": v}
            if isinstance(v, int):
                return {"v": v}
            if isinstance(v, float):
                e = self.scalar_exprs.get(where)
                return {"v": v, "expr": e} if e else {"v": v}
            if isinstance(v, torch.dtype):
                return {"dtype": str(v).replace("torch.", "")}
            if isinstance(v, torch.device):
                return {"device": True}
            if isinstance(v, torch.memory_format):
                return {"memory_format": str(v).replace("torch.", "")}
            if isinstance(v, torch.layout):
                return {"layout": str(v).replace("torch.", "")}
            raise ExportUnsupported(f"{n.name}: argument {v!r} of {n.target}")

        call = {
            "args": [enc(v, self.pos(n, i)) for i, v in enumerate(n.args)],
            "kwargs": {k: enc(v, self.pos(n, k)) for k, v in n.kwargs.items()},
        }
        t = n.target
        if isinstance(t, torch._ops.OpOverload):
            target = f"{t.namespace}.{t.overloadpacket.__name__}.{t._overloadname}"
            target = rnn_standins.ISLAND_TARGET.get(target, target)
        else:
            raise ExportUnsupported(f"{n.name}: the call {getattr(t, '__name__', t)!r}")
        v = self.val(n)
        multi = isinstance(v, list | tuple)
        # a tuple of which only the first tensor is read (_embedding_bag's output beside its
        # offset2bag and bag sizes): the island is that tensor, so a kernel of ours can stand in
        first = multi and isinstance(v[0], torch.Tensor) and _only_first(n)
        self.emit(
            n,
            "aten",
            [{"ref": r} for r in refs],
            {"target": target, "call": call, "tuple": multi and not first, **({"first": True} if first else {})},
            shape=_shape(v[0]) if first else None if multi else _shape(v),
            dtype=_dt(v[0]) if first else None if multi else _dt(v),
        )
        if first:
            self.tuples[self.alias[n.name]] = {"kind": "values"}
        self.islands.append(target)


def _only_first(n: fx.Node) -> bool:
    """Whether n's only users are `getitem(n, 0)`."""
    return bool(n.users) and all(u.target is operator.getitem and u.args[1] == 0 for u in n.users)


class _NotMapped(Exception):
    pass


def _without_unread_constants(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The graph less the constants nothing reads: the steps of a folded constant (a cast of a
    cat of a clone) are each a constant, and only the last is used."""

    def refs(x: Any) -> Any:
        if isinstance(x, dict):
            return [x["ref"]] if "ref" in x else [r for v in x.values() for r in refs(v)]
        if isinstance(x, list | tuple):
            return [r for v in x for r in refs(v)]
        return []

    read = {r for d in nodes for r in refs(d["args"])}
    return [d for d in nodes if d["op"] != "constant" or d["name"] in read]


def _state_alias(model: nn.Module | None, c: Any) -> tuple[str, str] | None:
    """(path, "parameter" or "buffer") of the model's tensor that a lifted constant views whole:
    export lifts a parameter as a constant where the forward reaches it through a plain Python
    list (N-BEATS keeps its blocks in lists, their weights in a ParameterList). Read as that
    parameter, the candidate follows the model's weights; carried as values it would not."""
    if model is None or not isinstance(c, torch.Tensor) or c.numel() == 0:
        return None
    key = (c.data_ptr(), tuple(c.shape), c.stride(), c.dtype)
    for kind, named in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
        for path, t in named:
            if (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype) == key:
                return path, kind
    return None


def _is_attribute(model: nn.Module | None, path: str) -> bool:
    if model is None:
        return True
    obj: Any = model
    for part in path.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return isinstance(obj, torch.Tensor)


def literals(gm: fx.GraphModule) -> dict[str, Any]:
    out = {}
    for n in gm.graph.nodes:
        for i, a in enumerate(n.args):
            if isinstance(a, float) and not isinstance(a, bool):
                out[f"{n.name}:{i}"] = a
        for k, a in n.kwargs.items():
            if isinstance(a, float) and not isinstance(a, bool):
                out[f"{n.name}:{k}"] = a
    return out


class FloatSlot:
    """A float the forward may read from the model: an attribute, or a value in a dict attribute
    (PEFT's LoRA keeps `self.scaling[adapter] = alpha / r`)."""

    def __init__(self, owner: Any, key: Any) -> None:
        self.owner, self.key = owner, key
        self.value = float(owner[key] if isinstance(owner, dict) else getattr(owner, key))

    def set(self, v: float) -> None:
        if isinstance(self.owner, dict):
            self.owner[self.key] = v
        else:
            setattr(self.owner, self.key, v)


def float_slots(model: nn.Module) -> dict[str, FloatSlot]:
    """Python for each float of the model's own and of its submodules of the upload's own classes
    (torch.nn's eps, momentum and dropout rates are read where torch.nn reads them) -> its slot:
    `self.scale`, `self.fc1.scaling['default']`."""
    out: dict[str, FloatSlot] = {}
    for path, m in model.named_modules():
        if path and type(m).__module__.startswith("torch."):
            continue
        for k, v in vars(m).items():
            if k.startswith("_") or not k.isidentifier():
                continue
            expr = member_expr(f"{path}.{k}" if path else k)
            if type(v) is float:
                out[expr] = FloatSlot(m, k)
            elif type(v) is dict and len(v) <= 8:
                for dk, dv in v.items():
                    if type(dk) is str and type(dv) is float:
                        out[f"{expr}[{dk!r}]"] = FloatSlot(v, dk)
    return out


def bind_scalars(
    model: nn.Module,
    inputs: list[Any],
    ep: Any,
    slots: dict[str, FloatSlot],
    notes: list[str],
    write_out_attention: bool = False,
) -> dict[str, str]:
    """Which float literals of the exported graph come from a float of the model (float_slots):
    export again with each perturbed and compare (the fx capture's trick)."""
    if not slots:
        return {}
    lit1 = literals(ep.graph_module)
    for i, slot in enumerate(slots.values()):
        slot.set(perturbed(slot.value, i))
    try:
        lit2 = literals(export_program(model, inputs, write_out_attention).graph_module)
    except Exception:  # the perturbed model may not export; the constants stay baked in
        notes.append(
            "the model's float attributes could not be perturbed to find where they are used; constants "
            "derived from them are baked into the candidate (it checks them before its fast path)"
        )
        return {}
    finally:
        for slot in slots.values():
            slot.set(slot.value)
    return match_bindings(lit1, lit2, {e: slot.value for e, slot in slots.items()})


def perturbed(v: float, i: int = 0) -> float:
    """The value the i-th float takes in the second capture (both captures use this): each its
    own, so that two floats of one value (two LoRA layers' scalings) are told apart."""
    return v * (1.37 + 0.0113 * i) + 0.113


def match_bindings(
    lit1: dict[str, Any], lit2: dict[str, Any], attrs: dict[str, float], notes: list[str] | None = None
) -> dict[str, str]:
    """Literal positions whose value moved with a perturbed float (attrs: its Python, `self.scale`,
    -> its value, in the order perturbed numbered them): "<node>:<pos>" -> that Python."""
    binds: dict[str, str] = {}
    for pos, v1 in lit1.items():
        v2 = lit2.get(pos)
        if v2 is None or v2 == v1:
            continue
        for i, (expr, v) in enumerate(attrs.items()):
            if v1 == v and math.isclose(v2, perturbed(v, i), rel_tol=1e-12):
                binds[pos] = expr
                break
        else:
            if notes is not None:
                notes.append(
                    f"constant {v1} at {pos} depends on a model attribute in a way the policy cannot express; "
                    "it is baked into the kernel"
                )
    return binds


def structure_guard(model: nn.Module) -> dict[str, Any]:
    """What an fx graph (sizes symbolic) still assumes: the module tree and the flags (bool, None and
    str attributes) its Python control flow read while tracing (agent.builtin.guard)."""
    return guard(model, "fx", set(), [])


def _user_call(error: str) -> str:
    """Where in the upload torch.export gave up, from its own "The following call raised this
    error" lines (a data-dependent guard names no user code in its first line): " (file, line N,
    in f: code)", or "" when the error does not say."""
    lines = error.splitlines()
    at = next((i for i, line in enumerate(lines) if "The following call raised this error" in line), None)
    if at is None or at + 1 >= len(lines):
        return ""
    m = re.match(r'\s*File "([^"]+)", line (\d+), in (\S+)', lines[at + 1])
    if not m:
        return ""
    code = lines[at + 2].strip() if at + 2 < len(lines) else ""
    return f" (at {os.path.basename(m[1])}, line {m[2]}, in {m[3]}: {code[:160]})"


def capture(
    model: nn.Module,
    inputs: list[Any],
    notes: list[str],
    write_out_attention: bool = False,
) -> dict[str, Any]:
    """The exported graph as IR node dicts plus what it is specialised to."""
    try:
        ep, read = program(model, inputs, write_out_attention, notes)
    except DataDependent as e:
        raise ExportUnsupported(f"torch.export failed: {e}") from None
    except Exception as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ExportUnsupported(f"torch.export failed: {type(e).__name__}: {msg[:300]}{_user_call(str(e))}") from None
    binds = bind_scalars(model, inputs, ep, float_slots(model), notes, write_out_attention)
    b = ExportBuilder(ep, binds, model)
    nodes = b.build()
    specialised_to = guard(model, "export", set(binds.values()), describe_inputs(inputs), read or ())
    return {"nodes": nodes, "guard": specialised_to, "islands": b.islands, "code": ep.graph_module.code.strip()}
