"""Capture a task's forward as a small normalised graph, in a process of its own.

Capturing the graph means importing the task module and running its constructor and forward,
which is arbitrary user code: it runs here, in a child (`python -m agent.builtin.analyze
TASK.py`), never in the agent process. The child prints one JSON object: the graph (ops
normalised to the small vocabulary of `agent.builtin.graph`), shapes and dtypes from ShapeProp
on the task's own inputs, the eager per-op breakdown from torch.profiler, and a clear message
when something cannot be captured (data-dependent control flow, an op we do not know).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import operator
import os
import sys
import time
import traceback
import types
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.passes.shape_prop import ShapeProp

from agent.builtin import capture_export, outputs
from agent.builtin.fallback import source_parts
from agent.builtin.guard import NotFlat, describe_inputs
from agent.builtin.task_inputs import TaskInputs
from sandbox.devlock import lock_from_env


class Unsupported(Exception):
    """Something in the forward that the built-in policy cannot express; the message says what."""


class TaskFails(Unsupported):
    """The task's own forward raises on its own inputs: no capture can succeed, and no policy
    (built-in or model-driven) can optimise it until the task is fixed. The message is one line."""


def _where(e: BaseException, path: str) -> str:
    """' (task.py line N, in forward: <code>)' for the innermost frame of the task's own file."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == path]
    if not frames:
        return ""
    f = frames[-1]
    return f" ({os.path.basename(path)} line {f.lineno}, in {f.name}: {(f.line or '').strip()[:120]})"


def _one_line(e: BaseException) -> str:
    """`Type: message` on one line: the message's first line, at most 300 characters."""
    msg = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {msg[:300]}"


def _check_task_runs(model: nn.Module, inputs: list[Any], path: str) -> None:
    """Run the forward once, eagerly: if the task itself fails (a shape mismatch, a typo), that is
    the reason, not the capture's wrapping of it (ShapeProp's node dump, export's trace)."""
    try:
        with torch.no_grad():
            model(*inputs)
    except Exception as e:  # the task's own error, reported as it is
        raise TaskFails(
            f"the task's own forward fails on its inputs (get_inputs()): {_one_line(e)}{_where(e, path)}"
        ) from None


def _fx_error(e: BaseException) -> str:
    """torch.fx's failure in one line; ShapeProp wraps the op's own error (chained as its cause)
    in a dump of the fx node, which is kept out."""
    if isinstance(e, Unsupported):
        return str(e)
    cause = e.__cause__ if "ShapeProp error" in str(e) and e.__cause__ is not None else e
    return f"torch.fx failed: {_one_line(cause)}"


# Elementwise ops by target, with the IR name and how to read extra scalar arguments.
_UNARY = {
    torch.exp: "exp",
    torch.log: "log",
    torch.tanh: "tanh",
    torch.sigmoid: "sigmoid",
    torch.relu: "relu",
    F.relu: "relu",
    torch.rsqrt: "rsqrt",
    torch.sqrt: "sqrt",
    torch.abs: "abs",
    torch.erf: "erf",
    torch.sin: "sin",
    torch.cos: "cos",
    torch.neg: "neg",
    operator.neg: "neg",
    F.silu: "silu",
    torch.square: "square",
    torch.log1p: "log1p",
    torch.expm1: "expm1",
    F.mish: "mish",
    F.hardswish: "hardswish",
    F.hardsigmoid: "hardsigmoid",
    F.tanh: "tanh",
    F.sigmoid: "sigmoid",
    torch.nn.functional.relu6: "relu6",
}
_UNARY_METHODS = {
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
    "square": "square",
    "log1p": "log1p",
    "expm1": "expm1",
}
_BINARY = {
    operator.add: "add",
    torch.add: "add",
    operator.iadd: "add",
    operator.sub: "sub",
    torch.sub: "sub",
    operator.isub: "sub",
    operator.mul: "mul",
    torch.mul: "mul",
    operator.imul: "mul",
    operator.truediv: "div",
    torch.div: "div",
    operator.itruediv: "div",
    torch.maximum: "maximum",
    torch.minimum: "minimum",
    torch.pow: "pow",
    operator.pow: "pow",
    torch.multiply: "mul",
    torch.subtract: "sub",
    torch.divide: "div",
    torch.true_divide: "div",
}
_BINARY_METHODS = {
    "add": "add",
    "sub": "sub",
    "mul": "mul",
    "div": "div",
    "pow": "pow",
    "multiply": "mul",
    "subtract": "sub",
    "divide": "div",
    "add_": "add",
    "mul_": "mul",
    "sub_": "sub",
    "div_": "div",
    "maximum": "maximum",
    "minimum": "minimum",
}
_REDUCE = {torch.sum: "sum", torch.mean: "mean", torch.amax: "amax", torch.amin: "amin"}
_REDUCE_METHODS = {"sum": "sum", "mean": "mean", "amax": "amax", "amin": "amin"}
_VIEW_METHODS = {
    "view",
    "reshape",
    "flatten",
    "transpose",
    "permute",
    "t",
    "unsqueeze",
    "squeeze",
    "contiguous",
    "expand",
}
_VIEW_FUNCS = {
    torch.reshape: "reshape",
    torch.flatten: "flatten",
    torch.transpose: "transpose",
    torch.permute: "permute",
    torch.t: "t",
    torch.unsqueeze: "unsqueeze",
    torch.squeeze: "squeeze",
}
_IDENTITY_METHODS = {"clone", "detach", "float", "contiguous"}
_MATMUL = {torch.matmul: "matmul", operator.matmul: "matmul", torch.mm: "matmul", torch.bmm: "matmul"}

_MODULE_UNARY = {
    nn.ReLU: "relu",
    nn.Sigmoid: "sigmoid",
    nn.Tanh: "tanh",
    nn.SiLU: "silu",
    nn.Mish: "mish",
    nn.Hardswish: "hardswish",
    nn.Hardsigmoid: "hardsigmoid",
    nn.ReLU6: "relu6",
}


class _Builder:
    """Turns fx nodes into IR node dicts (see agent.builtin.graph for the vocabulary)."""

    def __init__(self, gm: fx.GraphModule, scalar_exprs: dict[str, str]):
        self.gm = gm
        self.modules = dict(gm.named_modules())
        self.nodes: list[dict[str, Any]] = []
        self.alias: dict[str, str] = {}  # fx node name -> IR node name
        self.scalar_exprs = scalar_exprs  # "<node>:<pos>" -> python expression on self
        self.params: dict[str, str] = {}  # state_dict name -> IR node name
        self.counter = 0

    # -- arguments -------------------------------------------------------------------------
    def ref(self, a: Any, where: str = "") -> dict[str, Any]:
        if isinstance(a, fx.Node):
            if a.name not in self.alias:
                raise Unsupported(f"value {a.name} is used before it is defined")
            return {"ref": self.alias[a.name]}
        if isinstance(a, bool) or a is None or isinstance(a, str):
            return {"lit": a}
        if isinstance(a, int | float):
            return {"scalar": float(a), "expr": self.scalar_exprs.get(where)}
        if isinstance(a, list | tuple):
            return {"lit": [self.ref(x, where)["ref"] if isinstance(x, fx.Node) else x for x in a]}
        if isinstance(a, torch.dtype):
            return {"lit": str(a).replace("torch.", "")}
        raise Unsupported(f"argument {a!r} of type {type(a).__name__} is not supported")

    def meta(self, n: fx.Node) -> tuple[list[int] | None, str | None]:
        tm = n.meta.get("tensor_meta")
        if tm is None or not hasattr(tm, "shape"):
            return None, None
        return list(tm.shape), str(tm.dtype).replace("torch.", "")

    def emit(
        self,
        fxnode: fx.Node | None,
        op: str,
        args: list[dict[str, Any]],
        attrs: dict[str, Any] | None = None,
        shape: list[int] | None = None,
        dtype: str | None = None,
        name: str | None = None,
    ) -> str:
        if name is None:
            name = fxnode.name if fxnode is not None else f"t{self.counter}"
            self.counter += 1
        if fxnode is not None and shape is None:
            shape, dtype = self.meta(fxnode)
        self.nodes.append({"name": name, "op": op, "args": args, "attrs": attrs or {}, "shape": shape, "dtype": dtype})
        if fxnode is not None:
            self.alias[fxnode.name] = name
        return name

    def param(self, qualname: str) -> dict[str, Any]:
        if qualname not in self.params:
            t = self.gm.get_parameter(qualname) if _has_param(self.gm, qualname) else self.gm.get_buffer(qualname)
            node = "p_" + qualname.replace(".", "_")
            self.nodes.append(
                {
                    "name": node,
                    "op": "param",
                    "args": [],
                    "attrs": {"path": qualname},
                    "shape": list(t.shape),
                    "dtype": str(t.dtype).replace("torch.", ""),
                }
            )
            self.params[qualname] = node
        return {"ref": self.params[qualname]}

    # -- node translation --------------------------------------------------------------------
    def add(self, n: fx.Node, input_index: int) -> int:
        a = n.args
        kw = dict(n.kwargs)
        if n.op == "placeholder":
            shape, dtype = self.meta(n)
            self.emit(n, "input", [], {"index": input_index})
            return input_index + 1
        if n.op == "get_attr":
            assert isinstance(n.target, str), "fx names a get_attr's attribute by its path"
            self.alias[n.name] = self.param(n.target)["ref"]
            return input_index
        if n.op == "output":
            try:
                outs, structure = outputs.flatten(a[0], lambda o: isinstance(o, fx.Node))
            except TypeError as e:
                raise Unsupported(str(e)) from None
            self.nodes.append(
                {
                    "name": "output",
                    "op": "output",
                    "args": [self.ref(o) for o in outs],
                    "attrs": {"structure": structure},
                    "shape": None,
                    "dtype": None,
                }
            )
            return input_index
        if n.op == "call_module":
            self.add_module(n)
            return input_index
        target = n.target
        if n.op == "call_method":
            assert isinstance(target, str), "fx names a call_method's method"
            self.add_method(n, target, a, kw)
            return input_index
        self.add_function(n, target, a, kw)
        return input_index

    def pos(self, n: fx.Node, i: int | str) -> str:
        return f"{n.name}:{i}"

    def add_binary(self, n: fx.Node, op: str, x: Any, y: Any) -> None:
        if self.meta(n)[0] is None:  # `bsz * self.num_heads`: arithmetic on sizes, a Python number
            raise Unsupported(f"{n.name}: arithmetic on a tensor's sizes (torch.export specialises it)")
        if op == "pow" and not isinstance(x, fx.Node):
            raise Unsupported(f"{n.name}: a scalar raised to a tensor power is not supported")
        self.emit(n, op, [self.ref(x, self.pos(n, 0)), self.ref(y, self.pos(n, 1))])

    def add_function(self, n: fx.Node, t: Any, a: tuple, kw: dict) -> None:
        if t in _UNARY:
            self.emit(n, _UNARY[t], [self.ref(a[0])])
        elif t in _BINARY:
            if kw.get("alpha") is not None or kw.get("rounding_mode") is not None:
                raise Unsupported(f"{n.name}: {t.__name__} with alpha/rounding_mode is not supported")
            self.add_binary(n, _BINARY[t], a[0], a[1] if len(a) > 1 else kw.get("other", kw.get("exponent")))
        elif t is torch.rsub:
            self.add_binary(n, "sub", a[1], a[0])
        elif t is F.gelu:
            self.emit(n, "gelu", [self.ref(a[0])], {"approximate": kw.get("approximate", "none")})
        elif t in (F.leaky_relu,):
            slope = a[1] if len(a) > 1 else kw.get("negative_slope", 0.01)
            self.emit(n, "leaky_relu", [self.ref(a[0]), self.ref(slope, self.pos(n, 1))])
        elif t in (torch.clamp, torch.clip, F.hardtanh):
            lo = a[1] if len(a) > 1 else kw.get("min", kw.get("min_val", -1.0 if t is F.hardtanh else None))
            hi = a[2] if len(a) > 2 else kw.get("max", kw.get("max_val", 1.0 if t is F.hardtanh else None))
            self.emit(n, "clamp", [self.ref(a[0]), self.ref(lo, self.pos(n, 1)), self.ref(hi, self.pos(n, 2))])
        elif t is F.elu:
            self.emit(
                n, "elu", [self.ref(a[0]), self.ref(kw.get("alpha", a[1] if len(a) > 1 else 1.0), self.pos(n, 1))]
            )
        elif t is F.softplus:
            beta = kw.get("beta", a[1] if len(a) > 1 else 1.0)
            thr = kw.get("threshold", a[2] if len(a) > 2 else 20.0)
            self.emit(n, "softplus", [self.ref(a[0]), self.ref(beta, self.pos(n, 1)), self.ref(thr, self.pos(n, 2))])
        elif t in (torch.softmax, F.softmax, torch.log_softmax, F.log_softmax):
            dim = a[1] if len(a) > 1 else kw.get("dim")
            op = "softmax" if t in (torch.softmax, F.softmax) else "log_softmax"
            self.emit(n, op, [self.ref(a[0])], {"dim": dim})
        elif t in _REDUCE:
            self.add_reduce(n, _REDUCE[t], a, kw)
        elif t is torch.max and (len(a) > 1 or "dim" in kw):
            self.add_reduce(n, "amax", a, kw, tuple_result=True)
        elif t is torch.min and (len(a) > 1 or "dim" in kw):
            self.add_reduce(n, "amin", a, kw, tuple_result=True)
        elif t in _MATMUL:
            self.emit(n, "matmul", [self.ref(a[0]), self.ref(a[1])])
        elif t is torch.diag:
            if len(a) > 1 and a[1] != 0:
                raise Unsupported(f"{n.name}: torch.diag with an offset is not supported")
            self.emit(n, "diag", [self.ref(a[0])])
        elif t is F.linear:
            self.emit(n, "linear", [self.ref(a[0]), self.ref(a[1]), self.ref(a[2] if len(a) > 2 else kw.get("bias"))])
        elif t is F.conv2d:
            args = list(a) + [None] * (7 - len(a))
            names = ["input", "weight", "bias", "stride", "padding", "dilation", "groups"]
            for i, k in enumerate(names):
                if k in kw:
                    args[i] = kw[k]
            self.add_conv(n, *args)
        elif t is F.layer_norm:
            shape = a[1] if len(a) > 1 else kw["normalized_shape"]
            w = a[2] if len(a) > 2 else kw.get("weight")
            b = a[3] if len(a) > 3 else kw.get("bias")
            eps = a[4] if len(a) > 4 else kw.get("eps", 1e-5)
            self.emit(
                n,
                "layernorm",
                [self.ref(a[0]), self.ref(w), self.ref(b), self.ref(eps, self.pos(n, "eps"))],
                {"ndim": len(shape) if isinstance(shape, list | tuple) else 1},
            )
        elif t in _VIEW_FUNCS:
            self.add_view(n, _VIEW_FUNCS[t], a, kw)
        elif t is operator.getitem:
            self.add_getitem(n, a)
        elif t is getattr:
            if a[1] == "shape":
                self.emit(n, "shape", [self.ref(a[0])])
            elif a[1] in ("T", "mT"):
                self.emit(n, "transpose", [self.ref(a[0]), {"lit": -2}, {"lit": -1}])
            else:
                raise Unsupported(f"{n.name}: attribute {a[1]!r} of a tensor is not supported")
        elif t in (F.dropout, torch.dropout, torch.clone, torch.detach):
            self.alias[n.name] = self.ref(a[0])["ref"]
        else:
            raise Unsupported(f"{n.name}: the call {_fn_name(t)} is not supported by the built-in policy")

    def add_method(self, n: fx.Node, m: str, a: tuple, kw: dict) -> None:
        if m in _UNARY_METHODS:
            self.emit(n, _UNARY_METHODS[m], [self.ref(a[0])])
        elif m in _BINARY_METHODS:
            self.add_binary(n, _BINARY_METHODS[m], a[0], a[1] if len(a) > 1 else kw.get("other", kw.get("exponent")))
        elif m in ("softmax", "log_softmax"):
            self.emit(n, m, [self.ref(a[0])], {"dim": a[1] if len(a) > 1 else kw.get("dim")})
        elif m in _REDUCE_METHODS:
            self.add_reduce(n, _REDUCE_METHODS[m], a, kw)
        elif m in ("max", "min") and (len(a) > 1 or "dim" in kw):
            self.add_reduce(n, "amax" if m == "max" else "amin", a, kw, tuple_result=True)
        elif m in ("clamp", "clip"):
            lo = a[1] if len(a) > 1 else kw.get("min")
            hi = a[2] if len(a) > 2 else kw.get("max")
            self.emit(n, "clamp", [self.ref(a[0]), self.ref(lo, self.pos(n, 1)), self.ref(hi, self.pos(n, 2))])
        elif m in ("matmul", "mm", "bmm"):
            self.emit(n, "matmul", [self.ref(a[0]), self.ref(a[1])])
        elif m in _IDENTITY_METHODS:
            self.emit(n, "contiguous" if m == "contiguous" else "identity", [self.ref(a[0])])
        elif m in _VIEW_METHODS:
            self.add_view(n, m, a, kw)
        elif m == "size":
            if len(a) > 1:
                self.emit(n, "size", [self.ref(a[0]), {"lit": a[1]}])
            else:
                self.emit(n, "shape", [self.ref(a[0])])
        elif m == "dim":
            self.emit(n, "ndim", [self.ref(a[0])])
        else:
            raise Unsupported(f"{n.name}: the method Tensor.{m} is not supported by the built-in policy")

    def add_module(self, n: fx.Node) -> None:
        assert isinstance(n.target, str), "fx names a call_module's module by its path"
        mod = self.modules[n.target]
        p = n.target
        x = n.args[0] if n.args else None
        t = type(mod)
        if t in _MODULE_UNARY:
            self.emit(n, _MODULE_UNARY[t], [self.ref(x)])
        elif t is nn.GELU:
            self.emit(n, "gelu", [self.ref(x)], {"approximate": mod.approximate})
        elif t is nn.LeakyReLU:
            self.emit(
                n, "leaky_relu", [self.ref(x), {"scalar": mod.negative_slope, "expr": f"{_attr(p)}.negative_slope"}]
            )
        elif t is nn.Hardtanh:
            self.emit(
                n,
                "clamp",
                [
                    self.ref(x),
                    {"scalar": mod.min_val, "expr": f"{_attr(p)}.min_val"},
                    {"scalar": mod.max_val, "expr": f"{_attr(p)}.max_val"},
                ],
            )
        elif t is nn.ELU:
            self.emit(n, "elu", [self.ref(x), {"scalar": mod.alpha, "expr": f"{_attr(p)}.alpha"}])
        elif t is nn.Softplus:
            self.emit(
                n,
                "softplus",
                [
                    self.ref(x),
                    {"scalar": mod.beta, "expr": f"{_attr(p)}.beta"},
                    {"scalar": mod.threshold, "expr": f"{_attr(p)}.threshold"},
                ],
            )
        elif t in (nn.Softmax, nn.LogSoftmax):
            self.emit(n, "softmax" if t is nn.Softmax else "log_softmax", [self.ref(x)], {"dim": mod.dim})
        elif t in (nn.Identity, nn.Dropout, nn.Dropout1d, nn.Dropout2d):
            self.alias[n.name] = self.ref(x)["ref"]
        elif t is nn.Flatten:
            self.emit(n, "flatten", [self.ref(x), {"lit": mod.start_dim}, {"lit": mod.end_dim}])
        elif t is nn.Linear:
            b = self.param(f"{p}.bias") if mod.bias is not None else {"lit": None}
            self.emit(n, "linear", [self.ref(x), self.param(f"{p}.weight"), b], {"module": p})
        elif t is nn.Conv2d:
            if mod.padding_mode != "zeros" or isinstance(mod.padding, str):
                raise Unsupported(f"{n.name}: Conv2d with padding {mod.padding!r}/{mod.padding_mode} is not supported")
            bias = self.param(f"{p}.bias") if mod.bias is not None else None
            self.add_conv(
                n, x, self.param(f"{p}.weight"), bias, mod.stride, mod.padding, mod.dilation, mod.groups, module=p
            )
        elif t in (nn.BatchNorm1d, nn.BatchNorm2d):
            if mod.training or not mod.track_running_stats:
                raise Unsupported(
                    f"{n.name}: batch norm in training mode uses batch statistics; only eval-mode "
                    "batch norm (running statistics) is supported"
                )
            w = self.param(f"{p}.weight") if mod.affine else {"lit": None}
            b = self.param(f"{p}.bias") if mod.affine else {"lit": None}
            self.emit(
                n,
                "batchnorm",
                [
                    self.ref(x),
                    self.param(f"{p}.running_mean"),
                    self.param(f"{p}.running_var"),
                    w,
                    b,
                    {"scalar": mod.eps, "expr": f"{_attr(p)}.eps"},
                ],
                {"module": p},
            )
        elif t is nn.LayerNorm:
            w = self.param(f"{p}.weight") if mod.elementwise_affine else {"lit": None}
            b = self.param(f"{p}.bias") if mod.elementwise_affine and mod.bias is not None else {"lit": None}
            self.emit(
                n,
                "layernorm",
                [self.ref(x), w, b, {"scalar": mod.eps, "expr": f"{_attr(p)}.eps"}],
                {"ndim": len(mod.normalized_shape), "module": p},
            )
        elif hasattr(nn, "RMSNorm") and t is nn.RMSNorm:
            w = self.param(f"{p}.weight") if mod.elementwise_affine else {"lit": None}
            eps = mod.eps if mod.eps is not None else torch.finfo(torch.float32).eps
            self.emit(
                n,
                "rmsnorm",
                [self.ref(x), w, {"scalar": eps, "expr": None}],
                {"ndim": len(mod.normalized_shape), "module": p},
            )
        else:
            raise Unsupported(f"{n.name}: the module {t.__name__} ({p}) is not supported by the built-in policy")

    def add_conv(
        self,
        n: fx.Node,
        x: Any,
        w: Any,
        b: Any,
        stride: Any,
        padding: Any,
        dilation: Any,
        groups: Any,
        module: str | None = None,
    ) -> None:
        def pair(v: Any, d: Any) -> list[Any]:
            v = d if v is None else v
            return list(v) if isinstance(v, list | tuple) else [v, v]

        if isinstance(padding, str):
            raise Unsupported(f"{n.name}: string padding is not supported")
        wref = w if isinstance(w, dict) else self.ref(w)
        bref = b if isinstance(b, dict) else self.ref(b)
        self.emit(
            n,
            "conv2d",
            [self.ref(x), wref, bref],
            {
                "stride": pair(stride, 1),
                "padding": pair(padding, 0),
                "dilation": pair(dilation, 1),
                "groups": int(groups or 1),
                "module": module,
            },
        )

    def add_reduce(self, n: fx.Node, op: str, a: Sequence[Any], kw: dict[str, Any], tuple_result: bool = False) -> None:
        dim = a[1] if len(a) > 1 else kw.get("dim")
        keep = a[2] if len(a) > 2 else kw.get("keepdim", False)
        if kw.get("dtype") is not None:
            raise Unsupported(f"{n.name}: a reduction with a dtype argument is not supported")
        if isinstance(dim, int):
            dim = [dim]
        self.emit(
            n,
            op,
            [self.ref(a[0])],
            {"dim": list(dim) if dim is not None else None, "keepdim": bool(keep), "tuple": tuple_result},
        )

    def add_view(self, n: fx.Node, m: str, a: Sequence[Any], kw: dict[str, Any]) -> None:
        rest = list(a[1:])
        if m in ("view", "reshape", "expand", "permute") and len(rest) == 1 and isinstance(rest[0], list | tuple):
            rest = list(rest[0])
        for k in ("dim", "start_dim", "end_dim", "dim0", "dim1"):
            if k in kw:
                rest.append(kw[k])
        if m in ("view", "reshape", "expand", "permute"):
            args = [
                self.ref(a[0]),
                {"lit": [{"ref": self.alias[r.name]} if isinstance(r, fx.Node) else r for r in rest]},
            ]
        else:
            args = [self.ref(a[0])] + [{"lit": r} for r in rest]
            if any(isinstance(r, fx.Node) for r in rest):
                raise Unsupported(f"{n.name}: {m} with a traced dimension is not supported")
        self.emit(n, "contiguous" if m == "contiguous" else m, args)

    def add_getitem(self, n: fx.Node, a: Sequence[Any]) -> None:
        src, idx = a
        if not isinstance(src, fx.Node):
            raise Unsupported(f"{n.name}: indexing a non-tensor is not supported")
        srcnode = next(x for x in self.nodes if x["name"] == self.alias[src.name])
        if srcnode["op"] == "shape":
            if not isinstance(idx, int):  # x.size()[:-1] + (h, d): torch.export specialises it
                raise Unsupported(f"{n.name}: a slice of a tensor's sizes is not supported in an fx graph")
            self.emit(n, "size", [{"ref": srcnode["args"][0]["ref"]}, {"lit": idx}])
        elif srcnode["attrs"].get("tuple"):
            if idx != 0:
                raise Unsupported(f"{n.name}: the indices of max/min are not supported (only the values)")
            self.alias[n.name] = srcnode["name"]
            srcnode["shape"], srcnode["dtype"] = self.meta(n)
        else:
            raise Unsupported(f"{n.name}: tensor indexing/slicing is not supported by the built-in policy")


def _attr(path: str) -> str:
    """A module path as a Python expression on self ("shortcut.1" -> "self.shortcut[1]")."""
    out = "self"
    for part in path.split("."):
        out += f"[{part}]" if part.isdigit() else f".{part}"
    return out


def _has_param(m: nn.Module, name: str) -> bool:
    try:
        m.get_parameter(name)
        return True
    except AttributeError:
        return False


def _fn_name(t: Any) -> str:
    mod = getattr(t, "__module__", "") or ""
    return f"{mod}.{getattr(t, '__name__', repr(t))}".lstrip(".")


def _load_task(path: str) -> types.ModuleType:
    src = open(path).read()
    mod = types.ModuleType("task_under_analysis")
    mod.__file__ = path
    sys.modules[mod.__name__] = mod
    exec(compile(src, path, "exec"), mod.__dict__)
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, name):
            raise Unsupported(
                f"the task does not define {name} (KernelBench format needs Model, get_inputs, get_init_inputs)"
            )
    return mod


def _float_attrs(model: nn.Module) -> dict[str, float]:
    out = {}
    for k, v in vars(model).items():
        if isinstance(v, float) and not isinstance(v, bool) and not k.startswith("_"):
            out[k] = v
    return out


def _literals(gm: fx.GraphModule) -> dict[str, Any]:
    out = {}
    for n in gm.graph.nodes:
        for i, a in enumerate(n.args):
            if isinstance(a, float | int) and not isinstance(a, bool):
                out[f"{n.name}:{i}"] = a
        for k, a in n.kwargs.items():
            if isinstance(a, float | int) and not isinstance(a, bool):
                out[f"{n.name}:{k}"] = a
    return out


def _bind_scalars(mod: types.ModuleType, model: nn.Module, gm: fx.GraphModule, notes: list[str]) -> dict[str, str]:
    """Which literal constants in the traced graph came from a float attribute of the model
    (`self.scale`), found by tracing again with those attributes perturbed. Those constants are
    read from the module at run time, so a candidate stays right when the init arguments change."""
    attrs = _float_attrs(model)
    lit1 = _literals(gm)
    if not attrs:
        return _bind_int_scalars(model, gm, lit1)
    for i, (k, v) in enumerate(attrs.items()):
        setattr(model, k, capture_export.perturbed(v, i))
    try:
        gm2 = fx.symbolic_trace(model)
        lit2 = _literals(gm2)
    finally:
        for k, v in attrs.items():
            setattr(model, k, v)
    binds = capture_export.match_bindings(lit1, lit2, {f"self.{k}": v for k, v in attrs.items()}, notes)
    # fx names the arguments by node name; a kwarg 'eps' is stored by its key
    return binds | _bind_int_scalars(model, gm, lit1)


_ARITHMETIC = {
    operator.add,
    operator.sub,
    operator.mul,
    operator.truediv,
    operator.floordiv,
    torch.add,
    torch.sub,
    torch.mul,
    torch.div,
    operator.iadd,
    operator.isub,
    operator.imul,
    operator.itruediv,
}


def _bind_int_scalars(model: nn.Module, gm: fx.GraphModule, lit1: dict[str, Any]) -> dict[str, str]:
    """An int attribute used as an arithmetic operand (`x / self.divisor`, divisor = 2 from the init
    arguments) is read at run time too: the sandbox's shape trial changes it. Found as for floats,
    tracing again with each such int changed (to 2v + 1); only positions of arithmetic ops are bound
    (an int that is a size or a dim stays a literal; an fx graph keeps sizes symbolic)."""
    ints = {
        k: v
        for k, v in vars(model).items()
        if isinstance(v, int) and not isinstance(v, bool) and not k.startswith("_") and k != "training"
    }
    if not ints:
        return {}
    for k, v in ints.items():
        setattr(model, k, 2 * v + 1)
    try:
        lit2 = _literals(fx.symbolic_trace(model))
    except Exception:  # an int that shapes the graph: the constants stay baked in
        return {}
    finally:
        for k, v in ints.items():
            setattr(model, k, v)
    arith = {
        n.name
        for n in gm.graph.nodes
        if n.op == "call_function"
        and n.target in _ARITHMETIC
        or n.op == "call_method"
        and n.target in ("add", "sub", "mul", "div", "__truediv__")
    }
    out = {}
    for pos, v1 in lit1.items():
        attr = next((k for k, v in ints.items() if v1 == v and lit2.get(pos) == 2 * v + 1), None)
        if attr is not None and pos.split(":")[0] in arith:
            out[pos] = f"self.{attr}"
    return out


def _eager_profile(model: nn.Module, inputs: list[Any], device: str) -> tuple[list[dict[str, Any]], float]:
    """Per-op breakdown of the eager forward (self time per aten op), and the median forward time.
    One forward is profiled: the profiler's own parsing costs about a millisecond per 100 events,
    and a cuDNN GRU over 512 steps launches kernels per step (KernelBench L3/41: three profiled
    forwards took 39 s of the analysis alone, and beside seven other analyses it ran out of its
    CPU limit)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch.no_grad():
        for _ in range(3):
            model(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            model(*inputs)
            if device == "cuda":
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        with profile(activities=acts) as prof:
            model(*inputs)
            if device == "cuda":
                torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        self_us = e.self_device_time_total if device == "cuda" else e.self_cpu_time_total
        if self_us <= 0 or not e.key.startswith("aten::"):
            continue
        rows.append({"name": e.key, "calls": e.count, "ms": self_us / 1e3})
    rows.sort(key=lambda r: -r["ms"])
    total = sum(r["ms"] for r in rows) or 1.0
    for r in rows:
        r["share"] = r["ms"] / total
    return rows[:12], sorted(times)[len(times) // 2]


def _init_source(src: str) -> dict[str, Any]:
    """The reference Model's constructor, the whole class (renamed) and module-level imports,
    verbatim (agent.builtin.fallback.source_parts)."""
    return source_parts(src)


@contextlib.contextmanager
def _autocast_entries() -> Iterator[list[str]]:
    """The dtypes of the torch.autocast regions entered meanwhile. fx's symbolic trace runs `with
    torch.autocast(...)` as plain Python and records none of its casts: its graph would compute in
    float32 what the module computes in bfloat16. torch.export records them (as `_to_copy` ops)."""
    cls = torch.amp.autocast_mode.autocast
    original = cls.__enter__
    entered: list[str] = []

    def enter(self: Any) -> Any:
        if getattr(self, "_enabled", True):  # `enabled=False` (a float32 region) casts nothing fx could miss
            entered.append(str(self.fast_dtype).replace("torch.", ""))
        return original(self)

    cls.__enter__ = enter  # type: ignore[method-assign]
    try:
        yield entered
    finally:
        cls.__enter__ = original  # type: ignore[method-assign]


@contextlib.contextmanager
def _attributes_kept(model: nn.Module) -> Any:
    """The model as it was after the trace: fx stores each tensor constant it meets (a 0-d tensor
    in a lambda, NeRF's frequency bands) on the traced module as `_tensor_constantN`, even when the
    trace then fails. Left there, torch.export read them as attributes of the model (parameters of
    the capture) that a fresh ModelNew does not have, and the candidate raised. The traced
    GraphModule keeps its own copies."""
    before = {name: set(vars(m)) for name, m in model.named_modules()}
    try:
        yield
    finally:
        for name, m in model.named_modules():
            for attr in set(vars(m)) - before.get(name, set()):
                delattr(m, attr)


def _capture_fx(
    mod: types.ModuleType, model: nn.Module, inputs: TaskInputs, notes: list[str]
) -> tuple[list[dict], str]:
    """torch.fx symbolic tracing + ShapeProp: a graph whose sizes stay symbolic (size/shape nodes),
    so its candidates run at any shape. Raises Unsupported for anything outside the vocabulary.
    ShapeProp runs on fake inputs where they were drawn (task_inputs), on the real ones otherwise."""
    try:
        with _autocast_entries() as autocast, _attributes_kept(model):
            gm = fx.symbolic_trace(model)
    except Exception as e:  # any tracing failure becomes a message
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        hint = ""
        if "symbolically traced variables cannot be used as inputs to control flow" in str(e):
            hint = (
                " The forward branches on a traced value (an `if`, `assert` or loop on a tensor's values or "
                f"sizes){_where(e, getattr(mod, '__file__', '') or '')}, which fx cannot follow."
            )
        raise Unsupported(f"torch.fx could not capture the forward: {msg}.{hint}") from None
    if autocast:
        raise Unsupported(
            f"the forward computes under torch.autocast ({', '.join(sorted(set(autocast)))}), whose casts "
            "torch.fx does not record"
        )
    fx_notes: list[str] = []
    binds = _bind_scalars(mod, model, gm, fx_notes)
    with torch.no_grad():
        try:
            ShapeProp(gm, fake_mode=inputs.fake_mode).propagate(*inputs.shapes())
        except Exception:
            if not inputs.is_fake:
                raise
            ShapeProp(gm).propagate(*inputs.real())  # an op fake tensors cannot run: the values
    b = _Builder(gm, binds)
    idx = 0
    for n in gm.graph.nodes:
        idx = b.add(n, idx)
    for node in b.nodes:
        if node["op"] not in ("output", "shape", "size", "ndim") and node["dtype"] not in (None, "float32"):
            raise Unsupported(
                f"{node['name']}: dtype {node['dtype']} is not supported (the built-in policy "
                "generates float32 kernels)"
            )
    try:  # the graph leaves this process as JSON: a value it cannot hold is a capture failure
        json.dumps(b.nodes)
    except (TypeError, ValueError) as e:
        raise Unsupported(f"the fx graph holds a value that cannot be serialised ({e})") from None
    notes += fx_notes
    return b.nodes, gm.code.strip()


def analyze(path: str, device: str = "cpu", profile: bool = True, write_out_attention: bool = False) -> dict[str, Any]:
    notes: list[str] = []
    src = open(path).read()
    mod = _load_task(path)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs())
    training = model.training
    model.eval()  # the evaluation compares forward outputs; dropout and batch norm use eval semantics
    if training and any(isinstance(m, nn.modules.batchnorm._BatchNorm | nn.Dropout) for m in model.modules()):
        notes.append("the model has batch norm/dropout; it is analysed in eval mode (running statistics, no dropout)")
    inputs = TaskInputs(mod)
    try:
        described = describe_inputs(inputs.shapes())
    except NotFlat as e:
        _check_task_runs(model, inputs.real(), path)
        raise Unsupported(str(e)) from None
    fx_code = ""
    extra: dict[str, Any] = {}
    try:
        nodes, fx_code = _capture_fx(mod, model, inputs, notes)
        capture = "fx"
        extra = {"guard": capture_export.structure_guard(model)}
    except Exception as e:  # any fx failure: try torch.export
        fx_error = _fx_error(e)
        try:
            ex = capture_export.capture(model, inputs.real(), notes, write_out_attention)
        except capture_export.ExportUnsupported as e2:
            _check_task_runs(model, inputs.real(), path)
            raise Unsupported(f"{fx_error}; and {e2}") from None
        nodes, capture = ex["nodes"], "export"
        extra = {"guard": ex["guard"], "islands": ex["islands"], "export_code": ex["code"], "fx_error": fx_error}
        notes.append(
            "torch.fx could not capture the forward ("
            + fx_error.removeprefix("torch.fx could not capture the forward: ").rstrip(".")
            + "); captured with torch.export "
            "instead: an ATen graph specialised to the shapes of get_inputs"
        )
    result: dict[str, Any] = {
        "ok": True,
        "nodes": nodes,
        "inputs": described,
        "init_args": [a if isinstance(a, int | float | bool | str) else repr(a) for a in mod.get_init_inputs()],
        "source": _init_source(src),
        "training_default": training,
        "notes": notes,
        "fx_code": fx_code,
        "capture": capture,
        **extra,
    }
    if profile:
        _profile_into(result, model, inputs, device, notes)
    return result


PROFILE_MAX_BYTES = 1 << 30  # inputs and parameters above this are not profiled on a GPU


def _profile_into(
    result: dict[str, Any], model: nn.Module, inputs: TaskInputs | list[Any], device: str, notes: list[str]
) -> None:
    """The eager profile for the plan's per-op breakdown (nothing else reads it). On a GPU it is
    skipped for a task whose inputs and parameters pass PROFILE_MAX_BYTES: its forward would hold
    several times that on a device that evaluations share, outside their memory shares
    (sandbox.devmem; KernelBench level 1's 6 GiB tensors ran evaluations out of memory on an 80 GB
    H100, 2026-12-07), and the analysis would wait for the device lock besides."""
    dev = device if device == "cuda" and torch.cuda.is_available() else "cpu"
    if not isinstance(inputs, TaskInputs):
        inputs = TaskInputs.drawn(inputs)
    size = sum(t.numel() * t.element_size() for t in [*inputs.shapes(), *model.parameters()] if torch.is_tensor(t))
    if dev == "cuda" and size > PROFILE_MAX_BYTES:
        notes.append(
            f"the eager profile was skipped: inputs and parameters take {size / 2**30:.1f} GiB, and its forward "
            "on the shared GPU would hold memory outside the evaluations' shares; the plan has no per-op breakdown"
        )
        return
    waited: list[bool] = []
    try:  # the copy to the device too: beside other evaluations it can run out of memory
        with lock_from_env(dev).shared(on_wait=lambda w: waited.append(w)):  # never beside a timed loop
            m = model.to(dev)
            ins = [t.to(dev) if torch.is_tensor(t) else t for t in inputs.real()]
            rows, ms = _eager_profile(m, ins, dev)
    except Exception as e:  # the graph is what matters; the profile only informs the plan
        notes.append(f"the eager profile failed ({type(e).__name__}: {str(e)[:200]}); the plan has no per-op breakdown")
        return
    result["eager_profile"] = {
        "device": dev,
        "rows": rows,
        "forward_ms": ms,
        "device_name": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "waited_for_device": any(waited),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument(
        "--write-out-attention", action="store_true", help="torch-ops=forbid: SDPA as its math in an exported graph"
    )
    ap.add_argument("--out", help="write the result here (the sandbox keeps 1 MiB of a command's output)")
    args = ap.parse_args(argv)
    # The sandbox may run this child under a throwaway uid that has no passwd entry (as root on the
    # H200 host): torch's export and profiler then failed in getpass.getuser() ("getpwuid(): uid not
    # found", torch 2.11 there), which reads these variables first; HOME likewise for expanduser.
    for k in ("USER", "LOGNAME"):
        os.environ.setdefault(k, "kernelwright")
    os.environ.setdefault("HOME", os.environ.get("TMPDIR") or "/tmp")
    try:
        out = analyze(args.task, args.device, not args.no_profile, args.write_out_attention)
    except Unsupported as e:
        out = {"ok": False, "error": str(e), "task_fails": isinstance(e, TaskFails)}
    except Exception as e:  # the task's own code failed
        tb = traceback.format_exc(limit=4)
        out = {
            "ok": False,
            "error": f"the task failed while being analysed: {_one_line(e)}{_where(e, args.task)}",
            "traceback": tb,
            "task_fails": True,
        }
    text = json.dumps(out)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
