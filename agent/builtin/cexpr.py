"""C expressions for the elementwise vocabulary, shared by the C++ (OpenMP) and CUDA generators.

Every op computes in float32, as the eager op does; transcendental functions are CUDA's device
versions on the GPU, and on the CPU our vectorisable kw_expf/kw_tanhf/kw_logf/kw_log1pf/kw_erff
(kernelgen.CPU_PRELUDE) or the C library's single-precision ones (expm1f, powf, ...).
"""

from __future__ import annotations

import math
import re

from agent.builtin.graph import Node, Scalar


def c_float(v: float) -> str:
    if math.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    if math.isnan(v):
        return "NAN"
    r = repr(float(v))
    if "e" not in r and "." not in r:
        r += ".0"
    return f"{r}f"


def c_op(n: Node, a: list[str | None], cuda: bool) -> str:
    s = _c_op(n, a, cuda)
    if not cuda:  # libm's fminf/fmaxf/tanhf/expf/logf/log1pf are calls that stop vectorisation; ours are not
        s = _CPU_MATH_CALL.sub(lambda m: _CPU_MATH[m.group(1)] + "(", s)
    return s


_CPU_MATH = {
    "fminf": "kw_minf",
    "fmaxf": "kw_maxf",
    "tanhf": "kw_tanhf",
    "expf": "kw_expf",
    "logf": "kw_logf",
    "log1pf": "kw_log1pf",
    "erff": "kw_erff",
}  # kernelgen.CPU_PRELUDE
_CPU_MATH_CALL = re.compile(r"\b(" + "|".join(_CPU_MATH) + r")\(")


def _select(cond: str, a: str | None, b: str | None, cuda: bool) -> str:
    """cond ? a : b. On the CPU as an integer-mask select (kw_pick): GCC does not if-convert a
    ?: whose branches compute (they might trap under its default trapping math), and a loop with
    control flow is not vectorised. Both sides are computed; the result is the same."""
    if cuda:
        return f"({cond} ? {a} : {b})"
    return f"kw_pick(-(int32_t)({cond}), {a}, {b})"


def _c_op(n: Node, a: list[str | None], cuda: bool) -> str:
    op = n.op
    x = a[0]
    assert x is not None, f"{n.name}: an elementwise op's first operand is always given (None is an omitted bound)"
    rsqrt = "rsqrtf" if cuda else "1.0f / sqrtf"
    if op == "add":
        return f"({a[0]} + {a[1]})"
    if op == "sub":
        return f"({a[0]} - {a[1]})"
    if op == "mul":
        return f"({a[0]} * {a[1]})"
    if op == "div":
        return f"({a[0]} / {a[1]})"
    if op == "maximum":
        return f"fmaxf({a[0]}, {a[1]})"
    if op == "minimum":
        return f"fminf({a[0]}, {a[1]})"
    if op == "pow":
        e = n.args[1]
        if isinstance(e, Scalar) and not e.runtime:
            if e.value == 2.0:
                return f"({x} * {x})"
            if e.value == 3.0:
                return f"({x} * {x} * {x})"
            if e.value == 0.5:
                return f"sqrtf({x})"
            if e.value == 1.0:
                return x
            if e.value == -1.0:
                return f"(1.0f / {x})"
        return f"powf({x}, {a[1]})"
    if op == "neg":
        return f"(-{x})"
    if op == "exp":
        return f"expf({x})"
    if op == "log":
        return f"logf({x})"
    if op == "tanh":
        return f"tanhf({x})"
    if op == "sigmoid":
        return f"(1.0f / (1.0f + expf(-{x})))"
    if op == "silu":
        return f"({x} / (1.0f + expf(-{x})))"
    if op == "relu":
        return f"({x} > 0.0f ? {x} : 0.0f)"
    if op == "relu6":
        return f"fminf(fmaxf({x}, 0.0f), 6.0f)"
    if op == "rsqrt":
        return f"({rsqrt}({x}))"
    if op == "sqrt":
        return f"sqrtf({x})"
    if op == "abs":
        return f"fabsf({x})"
    if op == "erf":
        return f"erff({x})"
    if op == "sin":
        return f"sinf({x})"
    if op == "cos":
        return f"cosf({x})"
    if op == "square":
        return f"({x} * {x})"
    if op == "log1p":
        return f"log1pf({x})"
    if op == "expm1":
        return f"expm1f({x})"
    if op == "identity":
        return x
    if op == "gelu":
        if n.attrs.get("approximate", "none") == "tanh":
            return f"(0.5f * {x} * (1.0f + tanhf(0.7978845608028654f * ({x} + 0.044715f * {x} * {x} * {x}))))"
        return f"(0.5f * {x} * (1.0f + erff({x} * 0.7071067811865476f)))"
    if op == "mish":
        return f"({x} * tanhf({_select(f'{x} > 20.0f', x, f'log1pf(expf({x}))', cuda)}))"
    if op == "hardswish":
        return f"({x} * fminf(fmaxf({x} + 3.0f, 0.0f), 6.0f) / 6.0f)"
    if op == "hardsigmoid":
        return f"fminf(fmaxf({x} / 6.0f + 0.5f, 0.0f), 1.0f)"
    if op == "leaky_relu":
        return _select(f"{x} > 0.0f", x, f"{x} * {a[1]}", cuda)
    if op == "clamp":
        out = x
        if a[1] is not None:
            out = f"fmaxf({out}, {a[1]})"
        if a[2] is not None:
            out = f"fminf({out}, {a[2]})"
        return out
    if op == "elu":
        return f"({x} > 0.0f ? {x} : {a[1]} * expm1f({x}))"
    if op == "where":  # masked_fill / torch.where with the condition as a float mask
        return _select(f"{a[0]} != 0.0f", a[1], a[2], cuda)
    if op == "softplus":
        return _select(f"{x} * {a[1]} > {a[2]}", x, f"log1pf(expf({x} * {a[1]})) / {a[1]}", cuda)
    raise ValueError(f"no C expression for {op}")


REDUCE_INIT = {"sum": "0.0", "mean": "0.0", "amax": "(-INFINITY)", "amin": "INFINITY"}


def c_accumulate(op: str, acc: str, v: str) -> str:
    if op in ("sum", "mean"):
        return f"{acc} += (double){v};"
    if op == "amax":
        return f"{acc} = {acc} > {v} ? {acc} : {v};"
    return f"{acc} = {acc} < {v} ? {acc} : {v};"


def c_combine(op: str, a: str, b: str) -> str:
    if op in ("sum", "mean"):
        return f"({a} + {b})"
    if op == "amax":
        return f"fmaxf({a}, {b})"
    return f"fminf({a}, {b})"
