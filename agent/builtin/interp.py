"""Run a graph of the built-in policy's IR with eager torch ops.

Used to check that a rewrite keeps the function (the rewritten graph, run here, against the
original module) and that lowering is right, independently of the generated kernels. It runs
in the caller's process, so it is for tests and developer tools, never for user tasks inside
the agent process.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from agent.builtin import constants
from agent.builtin.graph import Graph, Lit, Ref, Scalar
from agent.builtin.outputs import default as default_structure
from agent.builtin.outputs import rebuild

_UNARY: dict[str, Callable[..., Any]] = {
    "exp": torch.exp,
    "log": torch.log,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "rsqrt": torch.rsqrt,
    "sqrt": torch.sqrt,
    "abs": torch.abs,
    "erf": torch.erf,
    "sin": torch.sin,
    "cos": torch.cos,
    "neg": torch.neg,
    "silu": F.silu,
    "square": torch.square,
    "log1p": torch.log1p,
    "expm1": torch.expm1,
    "mish": F.mish,
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "relu6": F.relu6,
    "identity": lambda x: x,
}
_REDUCE: dict[str, Callable[..., Any]] = {"sum": torch.sum, "mean": torch.mean, "amax": torch.amax, "amin": torch.amin}
_BINARY: dict[str, Callable[..., Any]] = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "pow": torch.pow,
}


def run_graph(g: Graph, model: torch.nn.Module, inputs: list[Any], scope: dict[str, Any] | None = None) -> Any:
    env: dict[str, Any] = {}
    scope = {"self": model, **(scope or {})}

    def v(a: Any) -> Any:
        if isinstance(a, Ref):
            return env[a.name]
        if isinstance(a, Scalar):
            return eval(a.expr, {}, scope) if a.expr is not None else a.value  # our own expressions on self
        if isinstance(a, Lit):
            if isinstance(a.value, list):
                return [env[x.name] if isinstance(x, Ref) else x for x in a.value]
            return a.value
        return a

    for n in g.nodes:
        op, a, at = n.op, n.args, n.attrs
        if op == "input":
            env[n.name] = inputs[at["index"]]
        elif op == "param":
            env[n.name] = _attribute(model, at["path"])
        elif op == "output":
            return rebuild(at.get("structure") or default_structure(len(a)), [v(x) for x in a])
        elif op in _UNARY:
            env[n.name] = _UNARY[op](v(a[0]))
        elif op in _BINARY:
            env[n.name] = _BINARY[op](v(a[0]), v(a[1]))
        elif op == "gelu":
            env[n.name] = F.gelu(v(a[0]), approximate=at.get("approximate", "none"))
        elif op == "leaky_relu":
            env[n.name] = F.leaky_relu(v(a[0]), v(a[1]))
        elif op == "clamp":
            env[n.name] = torch.clamp(v(a[0]), v(a[1]), v(a[2]))
        elif op == "elu":
            env[n.name] = F.elu(v(a[0]), v(a[1]))
        elif op == "where":
            c, x, y = (v(z) for z in a)
            env[n.name] = torch.where(torch.as_tensor(c) != 0, torch.as_tensor(x), torch.as_tensor(y))
        elif op == "softplus":
            env[n.name] = F.softplus(v(a[0]), v(a[1]), v(a[2]))
        elif op in ("sum", "mean", "amax", "amin"):
            fn = _REDUCE[op]
            dims = at.get("dim")
            x = v(a[0])
            env[n.name] = fn(
                x, dim=tuple(dims) if dims is not None else tuple(range(x.dim())), keepdim=bool(at.get("keepdim"))
            )
        elif op in ("softmax", "log_softmax"):
            env[n.name] = (torch.softmax if op == "softmax" else torch.log_softmax)(v(a[0]), at["dim"])
        elif op == "linear":
            env[n.name] = F.linear(v(a[0]), v(a[1]), v(a[2]))
        elif op == "matmul":
            env[n.name] = torch.matmul(v(a[0]), v(a[1]))
        elif op == "matmul_nt":
            env[n.name] = torch.matmul(v(a[0]), v(a[1]).t())
        elif op == "conv2d":
            env[n.name] = F.conv2d(v(a[0]), v(a[1]), v(a[2]), at["stride"], at["padding"], at["dilation"], at["groups"])
        elif op == "batchnorm":
            env[n.name] = F.batch_norm(v(a[0]), v(a[1]), v(a[2]), v(a[3]), v(a[4]), False, 0.0, v(a[5]))
        elif op == "layernorm":
            x = v(a[0])
            env[n.name] = F.layer_norm(x, x.shape[-at.get("ndim", 1) :], v(a[1]), v(a[2]), v(a[3]))
        elif op == "rmsnorm":
            x = v(a[0])
            env[n.name] = F.rms_norm(x, x.shape[-at.get("ndim", 1) :], v(a[1]), v(a[2]))
        elif op == "diag":
            env[n.name] = torch.diag(v(a[0]))
        elif op in ("view", "reshape", "expand", "permute"):
            env[n.name] = getattr(v(a[0]), op)(*v(a[1]))
        elif op in ("flatten", "transpose", "unsqueeze", "squeeze", "t", "contiguous"):
            env[n.name] = getattr(v(a[0]), op)(*[v(x) for x in a[1:]])
        elif op == "slice":
            x = v(a[0])
            d = at["dim"] % x.dim()
            env[n.name] = x[(slice(None),) * d + (slice(at["start"], at["end"], at["step"]),)]
        elif op == "select":
            env[n.name] = v(a[0]).select(at["dim"], at["index"])
        elif op == "size":
            env[n.name] = v(a[0]).shape[a[1].value]
        elif op == "shape":
            env[n.name] = tuple(v(a[0]).shape)
        elif op == "ndim":
            env[n.name] = v(a[0]).dim()
        elif op == "channels_last":
            x = v(a[0])
            env[n.name] = x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
        elif op == "derived":
            env[n.name] = _derived(n.attrs, [v(x) for x in a])
        elif op == "constant":
            env[n.name] = constants.decode(at, n.shape or [])
        elif op == "aten":
            env[n.name] = _aten(at, [v(x) for x in a], scope)
        else:
            raise ValueError(f"interp: no rule for {op}")
    raise ValueError("graph has no output node")


def _derived(attrs: dict[str, Any], args: list[Any]) -> torch.Tensor:
    if attrs["recipe"] == "colsum":
        w = args[0]
        return w.reshape(w.shape[0], -1).sum(0)
    if attrs["recipe"] == "tapfold":
        return _tapfold(args[0], attrs)
    if attrs["recipe"] == "tapbox":
        w = args[0].transpose(0, 1) if attrs["transposed"] else args[0]
        boxes = [w[(slice(None), slice(None), *[slice(lo, hi) for lo, hi in box])] for box in attrs["boxes"]]
        return attrs["sign"] * sum(b.sum(tuple(range(2, b.dim()))) for b in boxes)
    w, b, mean, var, gamma, beta, eps = args
    s = (gamma if gamma is not None else torch.ones_like(var)) / torch.sqrt(var + eps)
    if attrs["part"] == "weight":
        return w * s.reshape(-1, *([1] * (w.dim() - 1)))
    b0 = b if b is not None else torch.zeros_like(mean)
    return (b0 - mean) * s + (beta if beta is not None else torch.zeros_like(mean))


def _tapfold(w: torch.Tensor, at: dict[str, Any]) -> torch.Tensor:
    """out[..., t] = scale * sum_j w[..., alpha t + beta j + gamma] (in range), per spatial dim
    (agent.builtin.poolfold): a sum of shifted, strided slices of w, one per window offset j."""
    import itertools

    d = len(at["taps"])
    out = w.new_zeros([*w.shape[:2], *at["taps"]])
    for js in itertools.product(*[range(k) for k in at["window"]]):
        idx, keep = [], []
        for i in range(d):
            src = torch.arange(at["taps"][i]) * at["alpha"][i] + at["beta"][i] * js[i] + at["gamma"][i]
            ok = (src >= 0) & (src < w.shape[2 + i])
            idx.append(src.clamp(0, w.shape[2 + i] - 1))
            keep.append(ok)
        grid = torch.meshgrid(*idx, indexing="ij")
        mask = torch.meshgrid(*keep, indexing="ij")
        m = mask[0]
        for x in mask[1:]:
            m = m & x
        index: tuple[Any, ...] = (slice(None), slice(None), *grid)
        out += w[index] * m
    return out * at["scale"]


def _attribute(m: torch.nn.Module, path: str) -> Any:
    """A parameter, a buffer or a plain tensor attribute (GPT-NeoX's rotary `cos_cached`) by path."""
    return functools.reduce(getattr, path.split("."), m)


def _aten(attrs: dict[str, Any], args: list[Any], scope: dict[str, Any]) -> Any:
    """An island: the ATen op itself, its call decoded as modelgen writes it."""

    def dec(x: dict[str, Any]) -> Any:
        if "arg" in x:
            return args[x["arg"]]
        if "list" in x:
            return [dec(y) for y in x["list"]]
        if "dtype" in x:
            return getattr(torch, x["dtype"])
        if "device" in x:
            return None  # the default device, as the candidate's _dev on the CPU
        if "layout" in x or "memory_format" in x:
            return getattr(torch, x.get("layout") or x["memory_format"])
        if x.get("expr"):
            return float(eval(x["expr"], {}, scope))  # our own expressions on self
        return x["v"]

    fn: Any = torch.ops
    for part in attrs["target"].split("."):
        fn = getattr(fn, part)
    call = attrs["call"]
    out = fn(*[dec(x) for x in call["args"]], **{k: dec(x) for k, x in call["kwargs"].items()})
    return out[0] if attrs.get("first") else out
