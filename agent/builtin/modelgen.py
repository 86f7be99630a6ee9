"""Generate model_new.py: the reference's constructor verbatim (same parameters, buffers and
attributes, so the sandbox's strict state_dict load works), and a forward that only allocates,
takes views, calls library GEMM/convolution ops and the generated kernels.

Weights that rewrites transform (folded batch norm, summed weight rows) are derived from the
loaded parameters by custom kernels and recomputed whenever a parameter's version or storage
changes; outputs are never cached.
"""

from __future__ import annotations

import math
import re
import textwrap
from typing import Any

from agent.builtin import constants, outputs, remap, tf32x3, typed_elementwise
from agent.builtin.cudagraph import CAPTURE_HELPER
from agent.builtin.fallback import REFERENCE_CLASS
from agent.builtin.fusion import COLGEN, GAP, GEN, ROWGEN, Group, Plan
from agent.builtin.graph import ISLAND_OPS, Graph, Lit, Node, Ref, Scalar, makes_strided
from agent.builtin.graph import LIBRARY as LIBRARY_OPS
from agent.builtin.guard import HELPER as GUARD_HELPER
from agent.builtin.guard import SPECIALISED_CHECK
from agent.builtin.kernelgen import KernelSig
from agent.builtin.layout import inverse, last_perm
from agent.builtin.ownkernels import DENSE_HELPER, GATHER_DTYPES, GATHER_HELPER, emit_lines, op_label, own_call

_HELPERS = '''

def _prod(dims):
    out = 1
    for d in dims:
        out *= int(d)
    return out


@functools.lru_cache(maxsize=256)
def _geom(k, sp, *shapes):
    """(broadcast shape, rows, cols) of operand shapes aligned to rank k (each with its trailing
    padding), split after dim sp. Cached: it runs in every call, and a few microseconds of
    Python per call are more than a small kernel takes."""
    out = [1] * k
    for shape, rpad in shapes:
        s = [1] * (k - rpad - len(shape)) + [int(d) for d in shape] + [1] * rpad
        for i, d in enumerate(s):
            if d != 1:
                out[i] = d
    return tuple(out), _prod(out[:sp]), _prod(out[sp:])


def _slot(module, path):
    """(dict, name) that holds module.<path>: a parameter, a buffer or a plain attribute. Looked
    up once, so the per-call check of derived weights reads dicts instead of walking
    nn.Module.__getattr__ chains (57 us per call for the ResNet block's 15 tensors, measured).
    A parameter or buffer replaced in its module is seen (the dict is the module's own); a whole
    submodule replaced after the first call is not (the sandbox loads weights in place)."""
    *mods, leaf = path.split(".")
    for name in mods:
        module = module._modules[name]
    for d in (module._parameters, module._buffers, module.__dict__):
        if leaf in d:
            return d, leaf
    raise AttributeError(f"the model has no {path}")


def _read(module, cache, paths):
    """The current values at `paths` of module, through slots looked up on the first call and
    kept in module.__dict__[cache]."""
    slots = module.__dict__.get(cache)
    if slots is None:
        slots = module.__dict__[cache] = [_slot(module, p) for p in paths]
    return [d[n] for d, n in slots]


_LIB = None


def _kernels():
    global _LIB
    if _LIB is None:
        _LIB = kwrt.load()
    return _LIB
'''


_GRAPH_HELPERS = '''

def _graphed(module, eager, inputs, paths, scalars):
    """The forward as one CUDA graph replay: where launching it op by op costs more host time than
    its kernels take, a replay issues them all with one launch. The inputs are copied into the
    graph's own buffers and the result out of them (stream-ordered copies, so every call computes
    afresh and returns a new tensor). A graph is kept per input shape and recaptured when a
    parameter's storage or version changes or a scalar attribute the kernels read (`scalars`, its
    current values) changes; inputs that are not contiguous CUDA tensors take the eager path."""
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    if not all(t.is_cuda and t.is_contiguous() for t in tensors):
        return eager(*inputs)
    wkey = [(w.data_ptr(), w._version) for w in _read(module, "_kw_gslots", paths)] + list(scalars)
    key = tuple((tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else t for t in inputs)
    graphs = module.__dict__.setdefault("_kw_graphs", {})
    entry = graphs.get(key)
    if entry is None or entry[0] != wkey:
        # the buffers' contents do not matter: generated kernels read no input to pick an address
        static_in = [torch.empty_like(t) if isinstance(t, torch.Tensor) else t for t in inputs]
        entry = graphs[key] = (wkey, *_capture(eager, static_in))
    _, graph, static_in, static_out = entry
    if graph is None:  # an output the byte copy cannot take (not contiguous): op by op
        return eager(*inputs)
    lib, stream = _kernels(), kwrt.stream(static_out.device)
    for dst, src in zip(static_in, inputs):
        if isinstance(src, torch.Tensor):
            lib.kw_copy(dst, src, src.numel() * src.element_size(), stream)
    graph.replay()
    out = torch.empty_like(static_out)
    lib.kw_copy(out, static_out, out.numel() * out.element_size(), stream)
    return out

'''


def output_structure(g: Graph) -> Any:
    """What the forward returns (agent.builtin.outputs); a graph built without it returns its
    outputs as one tensor or a flat tuple."""
    out = g.output
    return out.attrs.get("structure") or outputs.default(len(out.args))


def _flatten(v: Any) -> list:
    return [y for x in v for y in _flatten(x)] if isinstance(v, list) else [v]


def _num(v: Any) -> str:
    """A float as Python source (inf and nan have no literal)."""
    if isinstance(v, float) and not math.isfinite(v):
        return f"float({str(v)!r})"
    return repr(v)


def param_expr(path: str) -> str:
    out = "self"
    for part in path.split("."):
        out += f"[{part}]" if part.isdigit() else f".{part}"
    return out


def _input_vars(g: Graph) -> list[str]:
    """forward's tensor arguments, as `_kw_consts` is given them (their shapes key its cache)."""
    return [_var(n.name) for n in g.inputs() if n.shape is not None]


def _var(name: str) -> str:
    return f"v_{name}"


class _Emitter:
    def __init__(
        self, plan: Plan, backend: str, sigs: dict[str, KernelSig], gemm: str = "cublas", torch_ops: str = "forbid"
    ):
        self.plan, self.backend, self.sigs, self.gemm, self.torch_ops = plan, backend, sigs, gemm, torch_ops
        self.g = plan.graph
        self.lines: list[str] = []
        self.strided: set[str] = set()  # values that may not be contiguous where they are made
        self.gathers = 0  # strided operands copied to contiguous memory by the kw_gather kernel
        self.matmuls = 0  # library GEMMs through _kw_matmul (torch-ops=forbid)
        self.tf32x3 = 0  # GEMMs and convolutions computed in 3xTF32 (agent.builtin.tf32x3.HELPER)
        self.conv3s = 0  # of them convolutions (agent.builtin.tf32x3.CONV_HELPER)
        self.channels_last_weights = 0  # convolution weights kept in channels-last memory (KEPT_HELPER)
        self.own = 0  # ATen ops computed by kernels of our own (agent.builtin.ownkernels)
        self.strided_kernels: set[str] = set()  # of them, kw_elt and kw_remap (their helpers go in)
        self.const_out: list[str] = []  # hoisted values the forward reads (`_kw_consts`)
        self.b64 = False  # a constant carried as base64 (agent.builtin.constants): model_new.py imports base64
        self.params: dict[str, str] = {n.name: param_expr(n.attrs["path"]) for n in self.g.nodes if n.op == "param"}
        self.used_params: dict[str, str] = {}  # forward's parameters: graph name -> local variable
        self.used_attrs: dict[str, str] = {}  # plain module attributes the forward reads: path -> local variable

    def val(self, a: Any) -> str:
        if isinstance(a, Ref):
            if a.name in self.params:  # bound once at the top of forward (see generate_model)
                local = re.sub(r"\W", "_", a.name)
                return self.used_params.setdefault(a.name, local if local.startswith("p_") else "p_" + local)
            return _var(a.name)
        if isinstance(a, Scalar):
            return f"float({a.expr})" if a.runtime else _num(a.value)
        if isinstance(a, Lit):
            if isinstance(a.value, list):  # a tuple literal; () for a 0-d shape
                items = [self.val(x) if isinstance(x, Ref) else repr(x) for x in a.value]
                return "(" + ", ".join(items) + ",)" if items else "()"
            return _num(a.value) if isinstance(a.value, float) else repr(a.value)
        return repr(a)

    def sizes(self, a: Any) -> str:
        """A view's sizes as its arguments: `*(4, -1)`, or `()` for a 0-d view (`view(*())` is
        no call)."""
        return "()" if isinstance(a, Lit) and a.value == [] else f"*{self.val(a)}"

    def emit(self, line: str) -> None:
        self.lines.append("        " + line)

    def constant(self, v: str, n: Node) -> None:
        """A constant made in the forward (agent.builtin.constants): a full, a literal, or base64."""
        if "b64" in n.attrs:
            self.b64 = True
            self.emit(f"{v} = {constants.b64_expression(n.attrs, list(n.dims))}")
            return
        flat = _flatten(n.attrs["value"])
        dt = f"torch.{n.attrs.get('dtype') or 'float32'}"
        if flat and all(x == flat[0] for x in flat):
            self.emit(f"{v} = torch.full({tuple(n.dims)!r}, {_num(flat[0])}, dtype={dt}, device=_dev)")
        else:
            self.emit(f"{v} = torch.tensor({n.attrs['value']!r}, dtype={dt}, device=_dev)")

    def node(self, n: Node) -> None:
        v = _var(n.name)
        a = n.args
        src = a[0].name if a and isinstance(a[0], Ref) else None
        if makes_strided(n, self.strided):
            self.strided.add(n.name)
        own = own_call(n, self.g, self.torch_ops)
        if own:
            self.own += 1
            if own["kernel"] in ("kw_elt", "kw_remap"):
                self.strided_kernels.add(own["kernel"])
            self.emit(f"# {n.name}: {op_label(n)} by our kernel {own['kernel']}")
            for line in emit_lines(own, v, n.dims, lambda r: self.val(r)):
                self.emit(line)
        elif self.conv3_applies(n):
            self.conv3(n, v)
        elif n.attrs.get("island") or n.op in ISLAND_OPS:
            why = str(n.attrs.get("island") or "no generator for this op").replace("\n", " ")
            self.emit(f"# {n.name}: library/ATen call ({why[:150]})")
            self.emit(f"{v} = {self.torch_expr(n)}")
        elif n.op == "view" and src in self.strided:
            self.emit(f"{v} = {self.val(a[0])}.reshape({self.sizes(a[1])})")
        elif n.op in ("view", "reshape", "expand", "permute"):
            self.emit(f"{v} = {self.val(a[0])}.{n.op}({self.sizes(a[1])})")
        elif n.op == "slice":
            at = n.attrs
            self.emit(
                f"{v} = {self.val(a[0])}.narrow({at['dim']}, {at['start']}, {at['end'] - at['start']})"
                if at.get("step", 1) == 1
                else f"{v} = torch.ops.aten.slice.Tensor({self.val(a[0])}, {at['dim']}, {at['start']}, {at['end']}, "
                f"{at['step']})"
            )
        elif n.op == "constant":
            self.constant(v, n)
        elif n.op == "select":
            self.emit(f"{v} = {self.val(a[0])}.select({n.attrs['dim']}, {n.attrs['index']})")
        elif n.op == "getitem":
            self.emit(f"{v} = {self.val(a[0])}[{n.attrs['index']}]")
        elif n.op == "contiguous" and self.torch_ops != "allow" and n.dtype in GATHER_DTYPES:
            # a copy of a strided view (a permute's `.contiguous()`) is compute: ATen's clone under forbid
            self.gathers += 1
            x = self.val(a[0])
            self.emit(f"{v} = {x} if {x}.is_contiguous() else _kw_contig(lib, {x}, _stream)  # kw_gather kernel")
        elif n.op in ("flatten", "transpose", "unsqueeze", "squeeze", "t", "contiguous"):
            rest = ", ".join(self.val(x) for x in a[1:])
            self.emit(f"{v} = {self.val(a[0])}.{n.op}({rest})")
        elif n.op == "size":
            self.emit(f"{v} = {self.val(a[0])}.shape[{a[1].value}]")
        elif n.op == "shape":
            self.emit(f"{v} = tuple({self.val(a[0])}.shape)")
        elif n.op == "ndim":
            self.emit(f"{v} = {self.val(a[0])}.dim()")
        elif n.op == "matmul_nt":
            x, w = self.val(a[0]), self.val(a[1])
            if self.backend == "cuda" and self.gemm == "3xtf32" and tf32x3.node_pays(self.g, n):
                self.tf32x3 += 1
                self.emit(
                    f"# {n.name}: GEMM x @ W^T as 3xTF32 on tensor cores (agent/builtin/tf32x3.py), W's split kept"
                )
                self.contiguous(a[0])
                self.emit(f"{v} = _kw_mm3(lib, {x}, {w}.t(), _stream, self, {n.name!r})")
            elif self.backend == "cuda" and self.gemm == "aten":
                self.emit(
                    f"# {n.name}: GEMM x @ W^T through ATen (torch.mm: cuBLAS/cuBLASLt with PyTorch's workspace "
                    "and heuristics), W read transposed in place"
                )
                self.emit(f"_x2 = {x}.reshape(-1, {x}.shape[-1])")
                self.emit(f"{v} = torch.mm(_x2, {w}.t()).view(*{x}.shape[:-1], {w}.shape[0])")
            elif self.backend == "cuda":
                self.emit(f"# {n.name}: GEMM x @ W^T through cuBLAS (gemm_nt), W read transposed in place")
                for arg in a[:2]:
                    self.contiguous(arg)
                self.emit(f"_x2 = {x}.reshape(-1, {x}.shape[-1])")
                self.emit(f"{v} = torch.empty((_x2.shape[0], {w}.shape[0]), device=_dev, dtype=torch.float32)")
                self.emit(f"lib.gemm_nt(_x2, {w}, {v}, _x2.shape[0], {w}.shape[0], _x2.shape[1], _stream)")
                self.emit(f"{v} = {v}.view(*{x}.shape[:-1], {w}.shape[0])")
            else:
                self.emit(f"# {n.name}: GEMM x @ W^T through the library (oneDNN/MKL), W read transposed in place")
                self.emit(f"{v} = {self.matmul_call(x, f'{w}.t()')}")
        elif n.op == "matmul" and self.backend == "cuda" and self.gemm == "3xtf32" and tf32x3.node_pays(self.g, n):
            self.tf32x3 += 1
            self.emit(
                f"# {n.name}: GEMM as 3xTF32 on tensor cores (agent/builtin/tf32x3.py; other layouts: torch.matmul)"
            )
            self.emit(f"{v} = _kw_mm3(lib, {self.val(a[0])}, {self.val(a[1])}, _stream)")
        elif n.op == "matmul":
            self.emit(f"# {n.name}: library GEMM")
            self.emit(f"{v} = {self.matmul_call(self.val(a[0]), self.val(a[1]))}")
        elif n.op == "conv2d":
            at = n.attrs
            self.emit(
                f"# {n.name}: library convolution ({'cuDNN' if self.backend == 'cuda' else 'oneDNN'}); its "
                "epilogue is fused into the next kernel"
            )
            self.emit(
                f"{v} = torch.nn.functional.conv2d({self.val(a[0])}, {self.val(a[1])}, None, "
                f"{', '.join(self.conv_geometry(at))})"
            )
        elif n.op == "derived":
            self.emit(f"{v} = _derived[{n.name!r}]")
        elif n.op == "channels_last":
            self.channels_last(v, self.val(a[0]), len(n.dims))
        else:
            raise ValueError(f"no Python emission for {n.op}")

    def matmul_call(self, a: str, b: str) -> str:
        """torch.matmul(a, b); under forbid `_kw_matmul`, which gives mm or bmm operands they take
        as views (ATen's matmul copies an operand whose batch dims do not merge, a permuted
        attention head's for one, with aten::clone: a compute op that forbid rejects)."""
        if self.torch_ops == "allow":
            return f"torch.matmul({a}, {b})"
        self.gathers += 1
        self.matmuls += 1
        return f"_kw_matmul(lib, {a}, {b}, _stream)"

    def conv3_applies(self, n: Node) -> bool:
        """A convolution the 3xTF32 candidate times against float32 (tf32x3.CONV_HELPER); under
        forbid not one whose bias is inside the ATen call (the bias would be a torch add)."""
        if self.backend != "cuda" or self.gemm != "3xtf32" or not tf32x3.conv_worth_timing(self.g, n):
            return False
        return self.torch_ops == "allow" or not tf32x3.conv_bias(n)

    def conv3(self, n: Node, v: str) -> None:
        self.tf32x3 += 1
        self.conv3s += 1
        self.contiguous(n.args[0])
        self.emit(
            f"# {n.name}: convolution as 3xTF32 on tensor cores where that times faster on the first call "
            "(agent/builtin/tf32x3.py), W's split kept"
        )
        if n.op == "conv2d":
            x, w = self.val(n.args[0]), self.val(n.args[1])
            bias = tf32x3.conv2d_bias(n)  # kept in the call where its add would be alone (pipeline.LONE_BIAS)
            geometry = ", ".join(self.conv_geometry(n.attrs))
            self.emit(
                f"{v} = _kw_conv3(lib, torch.ops.aten.conv2d.default, 'conv', _stream, self, {n.name!r}, {x}, {w}, "
                f"{'None' if bias is None else self.val(bias)}, {geometry})"
            )
            return
        kind = tf32x3.conv_kind(n)
        self.emit(
            f"{v} = _kw_conv3(lib, torch.ops.{n.attrs['target']}, {kind!r}, _stream, self, {n.name!r}, "
            f"{self.call_args(n, n.attrs['call'])})"
        )

    def channels_last(self, v: str, w: str, nd: int) -> None:
        """v = w in channels-last memory (a convolution's weight: the layout picks cuDNN's NHWC kernels);
        under forbid through the gather kernel (w permuted to N...C made contiguous, viewed back)."""
        p, back = last_perm(nd), inverse(last_perm(nd))
        self.channels_last_weights += 1
        self.emit(f"# {v}: the weight in channels-last memory (the convolution runs in NHWC order)")
        if self.torch_ops == "allow":
            fmt = "channels_last" if nd == 4 else "channels_last_3d"
            make = f"lambda w: w.contiguous(memory_format=torch.{fmt})"
        else:
            self.gathers += 1
            make = f"lambda w: _kw_contig(lib, w.permute{tuple(p)}, _stream).permute{tuple(back)}"
        self.emit(f"{v} = _kw_kept(self, '_kw_cl', {v!r}, {w}, {make})")

    def conv_geometry(self, at: dict[str, Any]) -> list[str]:
        """stride, padding, dilation, groups of a convolution as call arguments."""
        if at.get("module"):
            # the module's own geometry, read at run time: another init argument (the shape trial's) can
            # change its groups (a depthwise convolution's channels) and the candidate must follow
            return [self.attr(f"{at['module']}.{k}") for k in ("stride", "padding", "dilation", "groups")]
        return [str(tuple(at["stride"])), str(tuple(at["padding"])), str(tuple(at["dilation"])), str(at["groups"])]

    def attr(self, path: str) -> str:
        """A module attribute (conv geometry) as a local bound once per call through slots."""
        return self.used_attrs.setdefault(path, "a_" + re.sub(r"\W", "_", path))

    def contiguous(self, a: Any) -> None:
        """A strided operand of a kernel made contiguous at the boundary (kernels read raw pointers):
        rebinds the variable, so later kernels reading it copy nothing."""
        if not isinstance(a, Ref) or a.name not in self.strided:
            return
        x = self.val(a)
        if self.torch_ops == "allow":
            self.emit(f"{x} = {x} if {x}.is_contiguous() else {x}.contiguous()  # kernels assume contiguous memory")
        else:
            self.gathers += 1
            self.emit(
                f"{x} = {x} if {x}.is_contiguous() else _kw_contig(lib, {x}, _stream)  # strided -> contiguous "
                "(kw_gather kernel)"
            )
        self.strided.discard(a.name)

    def torch_expr(self, n: Node) -> str:
        """n as a torch call: an island (an op the generator lacks, or one that did not lower or fuse)."""
        a = [self.val(x) for x in n.args]
        op, at = n.op, n.attrs
        F = "torch.nn.functional"
        if op == "aten":
            first = "[0]" if at.get("first") else ""  # a tuple of which only the first tensor is read
            return f"torch.ops.{at['target']}({self.call_args(n, at['call'])}){first}"
        simple = {
            "exp": "torch.exp",
            "log": "torch.log",
            "tanh": "torch.tanh",
            "sigmoid": "torch.sigmoid",
            "relu": "torch.relu",
            "rsqrt": "torch.rsqrt",
            "sqrt": "torch.sqrt",
            "abs": "torch.abs",
            "erf": "torch.erf",
            "sin": "torch.sin",
            "cos": "torch.cos",
            "neg": "torch.neg",
            "silu": f"{F}.silu",
            "square": "torch.square",
            "log1p": "torch.log1p",
            "expm1": "torch.expm1",
            "mish": f"{F}.mish",
            "hardswish": f"{F}.hardswish",
            "hardsigmoid": f"{F}.hardsigmoid",
            "relu6": f"{F}.relu6",
        }
        if op in simple:
            return f"{simple[op]}({a[0]})"
        if op == "identity":
            return a[0]
        infix = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
        if op in infix:
            return f"({a[0]} {infix[op]} {a[1]})"
        if op in ("maximum", "minimum", "pow"):
            return f"torch.{op}({a[0]}, {a[1]})"
        if op == "gelu":
            return f"{F}.gelu({a[0]}, approximate={at.get('approximate', 'none')!r})"
        if op == "leaky_relu":
            return f"{F}.leaky_relu({a[0]}, {a[1]})"
        if op == "clamp":
            return f"torch.clamp({a[0]}, {a[1]}, {a[2]})"
        if op == "elu":
            return f"{F}.elu({a[0]}, {a[1]})"
        if op == "softplus":
            return f"{F}.softplus({a[0]}, {a[1]}, {a[2]})"
        if op == "where":
            return f"torch.where({a[0]} != 0, {a[1]}, {a[2]})"
        if op in ("sum", "mean", "amax", "amin"):
            dims = at.get("dim")
            if dims is None:
                src = self.g.node(n.args[0].name)
                dims = list(range(len(src.shape or [])))
            return f"torch.{op}({a[0]}, dim={tuple(dims)!r}, keepdim={bool(at.get('keepdim'))})"
        if op == "logsumexp":
            return f"torch.logsumexp({a[0]}, dim={tuple(at['dim'])!r}, keepdim={bool(at.get('keepdim'))})"
        if op in ("softmax", "log_softmax"):
            return f"torch.{op}({a[0]}, {at['dim']})"
        if op == "linear":
            return f"{F}.linear({a[0]}, {a[1]}, {a[2]})"
        if op == "matmul":
            return f"torch.matmul({a[0]}, {a[1]})"
        if op == "matmul_nt":
            return f"torch.matmul({a[0]}, {a[1]}.t())"
        if op == "conv2d":
            return f"{F}.conv2d({a[0]}, {a[1]}, {a[2]}, {', '.join(self.conv_geometry(at))})"
        if op == "batchnorm":
            return f"{F}.batch_norm({a[0]}, {a[1]}, {a[2]}, {a[3]}, {a[4]}, False, 0.0, {a[5]})"
        if op == "layernorm":
            return f"{F}.layer_norm({a[0]}, {a[0]}.shape[-{at.get('ndim', 1)}:], {a[1]}, {a[2]}, {a[3]})"
        if op == "rmsnorm":
            return f"{F}.rms_norm({a[0]}, {a[0]}.shape[-{at.get('ndim', 1)}:], {a[1]}, {a[2]})"
        if op == "groupnorm":
            return f"{F}.group_norm({a[0]}, {at['groups']}, {a[1]}, {a[2]}, {a[3]})"
        if op == "diag":
            return f"torch.diag({a[0]})"
        raise ValueError(f"no torch call for {op}")

    def call_args(self, n: Node, call: dict[str, Any]) -> str:
        def dec(v: Any) -> str:
            if "arg" in v:
                return self.val(n.args[v["arg"]])
            if "list" in v:
                return "[" + ", ".join(dec(x) for x in v["list"]) + "]"
            if "dtype" in v:
                return f"torch.{v['dtype']}"
            if "device" in v:
                return "_dev"
            if "memory_format" in v:
                return f"torch.{v['memory_format']}"
            if "layout" in v:
                return f"torch.{v['layout']}"
            if v.get("expr"):
                return f"float({v['expr']})"
            x = v["v"]
            return _num(x) if isinstance(x, float) else repr(x)

        parts = [dec(v) for v in call["args"]] + [f"{k}={dec(v)}" for k, v in call["kwargs"].items()]
        return ", ".join(parts)

    def group(self, grp: Group) -> None:
        sig = self.sigs[grp.name]
        for o in grp.operands:
            self.contiguous(Ref(o.value))
        k = len(grp.full)
        sp = grp.split
        self.emit(f"# {grp.name}: one kernel for [{', '.join(n.op for n in grp.nodes)}]")
        shapes = ", ".join(f"({self.val(Ref(o.value))}.shape, {o.rpad})" for o in grp.operands)
        self.emit(f"_D, _rows, _cols = _geom({k}, {sp}, {shapes})")
        outs = []
        for name in grp.outputs:
            n = self.g.node(name)
            if grp.space[name] == "row" and list(n.dims) == grp.full[:sp] and len(n.dims) < k:
                shape = f"_D[:{sp}]"
            else:
                aligned = [1] * (k - len(n.dims)) + list(n.dims)
                dims = ["1" if aligned[i] == 1 else f"_D[{i}]" for i in range(k)][k - len(n.dims) :]
                shape = "(" + "".join(d + ", " for d in dims) + ")"
            self.emit(f"{_var(name)} = torch.empty({shape}, device=_dev, dtype=torch.float32)")
            outs.append(_var(name))
        args = [self.val(Ref(o.value)) for o in grp.operands] + outs + ["_rows", "_cols"]
        for kk in sig.generic:
            o = grp.operands[kk]
            a, b = o.block
            if o.kind == ROWGEN:
                args += [f"_prod(_D[{b}:{sp}])", f"_prod(_D[{a}:{b}])"]
            elif o.kind in (COLGEN, GEN):
                args += [f"_prod(_D[{b}:])", f"_prod(_D[{a}:{b}])"]
            elif o.kind == GAP:
                assert o.gap is not None, "a GAP operand has its gap"
                g0, g1 = o.gap
                args += [f"_prod(_D[{g1}:])", f"_prod(_D[{a}:{g0}])", f"_prod(_D[{g0}:])"]
        args += [self.val(s) for s in grp.scalars]
        args.append("_stream")
        self.emit(f"lib.{sig.symbol or grp.name}({', '.join(args)})")

    def const_method(self, plan: Plan, hoisted: set[str]) -> list[str]:
        """`_kw_consts`: the values computed from no input (a causal mask from torch.ones(t, t), a
        slice of a buffer compared with 0), by the same torch calls, once per device and per version of
        the parameters and buffers they read, instead of in every call."""
        saved_lines, saved_params = self.lines, self.used_params
        self.lines, self.used_params = [], {}
        for st in plan.steps:
            if st.node is not None and st.node.name in hoisted:
                self.node(st.node)
        users = {
            r
            for st in plan.steps
            if not (st.node is not None and st.node.name in hoisted)
            for n in st.nodes()
            for r in n.refs()
        }
        users |= {a.name for a in self.g.output.args if isinstance(a, Ref)}
        self.const_out = [
            h for h in (st.node.name for st in plan.steps if st.node is not None) if h in hoisted and h in users
        ]
        if self.torch_ops == "allow":  # contiguous once here rather than checked in every call
            for h in self.const_out:
                self.contiguous(Ref(h))
        body, params = self.lines, self.used_params
        self.lines, self.used_params = saved_lines, saved_params
        paths = tuple(self.g.node(n).attrs["path"] for n in params)
        ins = _input_vars(self.g)
        L = [
            f"    def _kw_consts(self, {', '.join(['_dev', *ins])}):",
            '        """Values that depend on no input data, only on the input shapes (a size bound to one after',
            '        the size probes), the parameters/buffers they read and the device: computed once per key."""',
        ]
        key = "(str(_dev)" + "".join(f", {v}.shape" for v in ins) + ",)"
        if paths:
            L.append(f'        vals = _read(self, "_kw_cslots", {paths!r})')
            L.append(f"        key = {key} + tuple((t.data_ptr(), t._version) for t in vals)")
        else:
            L.append(f"        key = {key}")
        L += [
            '        cache = self.__dict__.get("_kw_const_cache")',
            "        if cache is not None and cache[0] == key:",
            "            return cache[1]",
        ]
        if paths:
            L.append(f"        {', '.join(params.values())}, = vals")
        if any("lib" in line or "_stream" in line for line in body):  # a kernel of our own (a causal mask's tril)
            L += ["        lib = _kernels()", "        _stream = kwrt.stream(_dev)"]
        L += body
        L.append("        out = {" + ", ".join(f"{h!r}: {_var(h)}" for h in self.const_out) + "}")
        L += ['        self.__dict__["_kw_const_cache"] = (key, out)', "        return out"]
        return L

    def derived_method(self) -> list[str]:
        ders = [n for n in self.g.nodes if n.op == "derived"]
        if not ders:
            return []
        L = [
            "    def _kw_derived(self, lib, dev, stream):",
            '        """Weights computed from the loaded parameters by custom kernels (folded batch norm, summed',
            '        weight rows); recomputed whenever a parameter\'s storage or version changes."""',
        ]
        srcs = sorted({a.name for n in ders for a in n.args if isinstance(a, Ref)})
        paths = [self.g.node(s).attrs["path"] for s in srcs]
        scal = [a for n in ders for a in n.args if isinstance(a, Scalar) and a.expr is not None]
        simple = [a for a in scal if a.expr is not None and re.fullmatch(r"self(\.\w+|\[\d+\])+", a.expr)]
        paths += list(dict.fromkeys(re.sub(r"\[(\d+)\]", r".\1", str(a.expr))[len("self.") :] for a in simple))
        L.append(f'        vals = _read(self, "_kw_slots", {tuple(paths)!r})')
        other = "".join(f" + [{self.val(a)}]" for a in dict.fromkeys(scal) if a not in simple)
        L.append(f"        key = [(t.data_ptr(), t._version) for t in vals[:{len(srcs)}]] + vals[{len(srcs)}:]{other}")
        L.append('        cache = self.__dict__.get("_kw_cache")')
        L.append("        if cache is not None and cache[0] == key:")
        L.append("            return cache[1]")
        L.append("        out = {}")
        done = set()
        for n in ders:
            r = n.attrs["recipe"]
            if r == "colsum":
                src = self.params[n.args[0].name]
                L.append(
                    f"        # {n.name}: column sums of {n.attrs.get('of')} ({'summed weight rows' if n.shape != [1] else 'summed bias'})"
                )
                L.append(f"        _w = {src}.reshape({src}.shape[0], -1)")
                L.append(f"        out[{n.name!r}] = torch.empty(_w.shape[1], device=dev, dtype=torch.float32)")
                L.append(f"        lib.colsum(_w, out[{n.name!r}], _w.shape[0], _w.shape[1], stream)")
            elif r == "tapfold":
                at = n.attrs
                pad = 3 - len(at["taps"])
                spec = [
                    *([1] * pad + [f"_w.shape[{2 + i}]" for i in range(len(at["taps"]))]),
                    *([1] * pad + at["taps"]),
                    *([1] * pad + at["window"]),
                    *([1] * pad + at["alpha"]),
                    *([0] * pad + at["beta"]),
                    *([0] * pad + at["gamma"]),
                ]
                L.append(f"        # {n.name}: {at.get('of')} composed with the average pool after it")
                L.append(f"        _w = {self.params[n.args[0].name]}")
                L.append(f"        out[{n.name!r}] = torch.empty({n.dims!r}, device=dev, dtype=torch.float32)")
                L.append(
                    f"        lib.kw_tapfold(_w, out[{n.name!r}], _w.shape[0] * _w.shape[1], "
                    f"{', '.join(map(str, spec))}, {at['scale']!r}, stream)"
                )
            elif r == "tapbox":
                at = n.attrs
                d = len(at["boxes"][0])
                dims = [1] * (3 - d) + [f"_w.shape[{2 + i}]" for i in range(d)]
                L.append(f"        # {n.name}: signed box sums of {at.get('of')}'s taps (a mean over space folded)")
                L.append(f"        _w = {self.params[n.args[0].name]}")
                L.append(f"        out[{n.name!r}] = torch.empty({n.dims!r}, device=dev, dtype=torch.float32)")
                for k, box in enumerate(at["boxes"]):
                    lo = [0] * (3 - d) + [b[0] for b in box]
                    hi = [1] * (3 - d) + [b[1] for b in box]
                    L.append(
                        f"        lib.kw_tapbox(_w, out[{n.name!r}], {n.dims[0]}, {n.dims[1]}, {', '.join(map(str, dims))}, "
                        f"{', '.join(map(str, lo + hi))}, {float(at['sign'])!r}, {int(at['transposed'])}, {int(k > 0)}, stream)"
                    )
            elif r == "bn_fold" and n.attrs["key"] not in done:
                done.add(n.attrs["key"])
                w, b, mean, var, gamma, beta, eps = n.args
                kk = n.attrs["key"]
                P = self.params
                dummy = P[mean.name]
                L.append(f"        # {kk}: batch norm {n.attrs.get('bn')} folded into {n.attrs.get('of')}")
                L.append(f"        _w = {P[w.name]}")
                L.append("        _wf = torch.empty_like(_w)")
                L.append("        _bf = torch.empty(_w.shape[0], device=dev, dtype=torch.float32)")
                bexpr = P[b.name] if isinstance(b, Ref) else dummy
                gexpr = P[gamma.name] if isinstance(gamma, Ref) else dummy
                beexpr = P[beta.name] if isinstance(beta, Ref) else dummy
                L.append(
                    f"        lib.bn_fold(_w, {bexpr}, {P[mean.name]}, {P[var.name]}, {gexpr}, {beexpr}, _wf, _bf, "
                    f"_w.shape[0], _w.numel() // _w.shape[0], {self.val(eps)}, {int(isinstance(b, Ref))}, "
                    f"{int(isinstance(gamma, Ref))}, {int(isinstance(beta, Ref))}, stream)"
                )
                L.append(f"        out[{kk + '_w'!r}] = _wf")
                L.append(f"        out[{kk + '_b'!r}] = _bf")
        L.append('        self.__dict__["_kw_cache"] = (key, out)')
        L.append("        return out")
        return L


KEPT_HELPER = '''

def _kw_kept(module, slot, key, w, make):
    """make(w), a weight transformed once (channels-last memory, the 3xTF32 split), kept in
    module.__dict__[slot] while w reads the same tensor (w itself, or the weight it is a view of:
    W.t()) at the same version, shape, strides and offset (a load_state_dict or an optimiser step
    moves the version; a derived weight recomputed is a new tensor). The cache holds that tensor,
    so no new one can take its address and pass for it. A transform per call would cost a launch
    and a pass over the weight."""
    owner = w._base if w._base is not None else w
    where = (owner._version, tuple(w.shape), w.stride(), w.storage_offset())
    cache = module.__dict__.setdefault(slot, {})
    hit = cache.get(key)
    if hit is not None and hit[0] is owner and hit[1] == where:
        return hit[2]
    out = make(w)
    cache[key] = (owner, where, out)
    return out
'''


_CONTIG_HELPER = '''

def _kw_contig(lib, x, stream):
    """x copied to contiguous memory by the kw_gather kernel, which reads it through its sizes
    and strides (a permuted, sliced or expanded view; _kw_gather_into); the kernel's element
    types only (_KW_GATHER), any other dtype by .contiguous()."""
    if x.dtype not in _KW_GATHER:
        return x.contiguous()
    out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    _kw_gather_into(lib, x, out, stream)
    return out
'''


_MATMUL_HELPER = '''

def _kw_merged(lib, x, keep, stream):
    """x viewed with its leading dims merged into one and its last `keep` kept: a view where
    those dims step as one, else a copy by the kw_gather kernel first (_kw_contig)."""
    lead = [(n, s) for n, s in zip(x.shape[: x.dim() - keep], x.stride()) if n != 1]
    if any(s != n2 * s2 for (_, s), (n2, s2) in zip(lead, lead[1:])):
        x = _kw_contig(lib, x, stream)
    return x.reshape(-1, *x.shape[x.dim() - keep :])


def _kw_matmul(lib, a, b, stream):
    """torch.matmul(a, b) as the one mm or bmm ATen's matmul reduces it to, with operands that
    need no copy of ATen's (aten::clone inside matmul is a compute op under torch-ops=forbid):
    a [..., k] @ b [k, n] folds a's leading dims into the rows of one mm; batched operands are
    broadcast (expand: a view) and their batch dims merged into one for bmm."""
    if a.dim() < 2 or b.dim() < 2 or a.dim() + b.dim() == 4:
        return torch.matmul(a, b)
    if b.dim() == 2:
        return torch.mm(_kw_merged(lib, a, 1, stream), b).view(*a.shape[:-1], b.shape[-1])
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a3 = _kw_merged(lib, a.expand(*batch, *a.shape[-2:]), 2, stream)
    b3 = _kw_merged(lib, b.expand(*batch, *b.shape[-2:]), 2, stream)
    return torch.bmm(a3, b3).view(*batch, a.shape[-2], b.shape[-1])
'''


_NOT_CONSTANT = (
    "rand",
    "normal",
    "bernoulli",
    "uniform",
    "multinomial",
    "poisson",
    "exponential",
    "geometric",
    "cauchy",
    "dropout",
    "empty",
)


def _hoistable(plan: Plan) -> set[str]:
    """Python steps that depend on no input, only on parameters/buffers or nothing, where at least one
    island (a torch call that computes) is among them: worth computing once instead of per call."""
    g = plan.graph
    base = {n.name for n in g.nodes if n.op == "param"}
    ok: set[str] = set()
    for st in plan.steps:
        n = st.node if st.kind == "node" else None
        if n is None or n.op in ("derived", "size", "shape", "ndim") or n.op in LIBRARY_OPS:
            continue
        if any(w in str(n.attrs.get("target", "")) for w in _NOT_CONSTANT):
            continue  # a random draw or uninitialised memory is not a constant
        if all(r in base or r in ok for r in n.refs()):
            ok.add(n.name)
    islands = {
        x for x in ok if g.node(x).op in ISLAND_OPS or g.node(x).op == "constant" or g.node(x).attrs.get("island")
    }
    if not islands:
        return set()
    # the islands and what they read (views of parameters), and views of them
    keep = set(islands)
    stack = list(islands)
    while stack:
        for r in g.node(stack.pop()).refs():
            if r in ok and r not in keep:
                keep.add(r)
                stack.append(r)
    for st in plan.steps:
        if st.node is not None and st.node.name in ok and any(r in keep for r in st.node.refs()):
            keep.add(st.node.name)
    keep -= {a.name for a in g.output.args if isinstance(a, Ref)}  # outputs are never cached
    for st in plan.steps:  # and what reads them is then not computable in _kw_consts
        if st.node is not None and st.node.name in keep and not all(r in base or r in keep for r in st.node.refs()):
            keep.discard(st.node.name)
    return keep


def generate_model(
    plan: Plan,
    meta: dict[str, Any],
    backend: str,
    sigs: list[KernelSig],
    summary: str,
    gemm: str = "cublas",
    graph: bool = False,
    torch_ops: str = "forbid",
) -> str:
    """gemm (cuda): "cublas" calls the .cu's gemm_nt (cublasSgemm), "aten" calls torch.mm,
    "3xtf32" computes every GEMM as three TF32 tensor-core products (agent.builtin.tf32x3).
    graph (cuda): forward replays a CUDA graph of the generated forward (`_graphed`).

    A graph captured by torch.export (meta["capture"] == "export") is specialised to the task's
    shapes: ModelNew then subclasses a verbatim copy of the reference Model (`_KwReference`) and
    its forward checks the input shapes and meta["guard"] first; anything else runs the
    reference's own forward."""
    if graph and (backend != "cuda" or output_structure(plan.graph) != outputs.LEAF):
        raise ValueError("a CUDA-graph forward needs the cuda backend and a single output tensor")
    src = meta["source"]
    specialised = meta.get("capture") == "export"
    guarded = bool(meta.get("guard")) and bool(src.get("model_class"))
    if specialised and not src.get("model_class"):
        raise ValueError(
            "the reference Model class could not be copied (needed for the shapes the graph was not specialised to)"
        )
    em = _Emitter(plan, backend, {s.name: s for s in sigs}, gemm, torch_ops)
    g = plan.graph
    inputs = g.inputs()
    tensors_in = [n for n in inputs if n.shape is not None]
    dev_src = _var(tensors_in[0].name) if tensors_in else "next(self.parameters())"
    em.lines = []
    if any(n.op == "derived" for n in g.nodes):
        em.emit("_derived = self._kw_derived(lib, _dev, _stream)")
    hoisted = _hoistable(plan) if meta.get("hoist", True) else set()
    const_method: list[str] = []
    if hoisted:
        const_method = em.const_method(plan, hoisted)
        em.emit(f"_c = self._kw_consts({', '.join(['_dev', *_input_vars(g)])})")
    for st in plan.steps:
        if st.node is not None and st.node.name in hoisted:
            if st.node.name in em.const_out:
                em.emit(f"{_var(st.node.name)} = _c[{st.node.name!r}]")
            continue
        if st.node is not None:
            em.node(st.node)
        else:
            assert st.group is not None
            em.group(st.group)
    outs = [em.val(a) for a in g.output.args]
    em.emit("return " + outputs.expression(output_structure(g), outs))

    init = src.get("init") or "    def __init__(self):\n        super().__init__()\n"
    init = init.replace("super(Model, self)", "super()")
    if not init.startswith("    "):
        init = textwrap.indent(textwrap.dedent(init), "    ")
    parts = ['"""' + summary.strip().replace('"""', "'''") + '\n"""', ""]
    extra = ["import ctypes"] if em.gathers or em.own or em.tf32x3 else []
    extra += ["import base64"] if em.b64 else []
    imports = list(
        dict.fromkeys(
            src.get("imports", [])
            + ["import functools", "import math", "import torch", "import torch.nn as nn", "import kwrt", *extra]
        )
    )
    parts += imports
    parts += ["", *src.get("body", [])]
    parts.append(_HELPERS)
    if em.gathers or em.own:
        parts.append(GATHER_HELPER)
    if em.gathers:
        parts.append(_CONTIG_HELPER)
    if em.matmuls:
        parts.append(_MATMUL_HELPER)
    if em.channels_last_weights or em.tf32x3:
        parts.append(KEPT_HELPER)
    if em.tf32x3:
        parts.append(tf32x3.HELPER)
    if em.conv3s:
        parts.append(tf32x3.CONV_HELPER)
    if em.own:
        parts.append(DENSE_HELPER)
    if "kw_elt" in em.strided_kernels:
        parts.append(typed_elementwise.HELPER)
    if "kw_remap" in em.strided_kernels:
        parts.append(remap.HELPER)
    if graph:
        parts += [_GRAPH_HELPERS, CAPTURE_HELPER]
    if guarded:
        guard = meta.get("guard") or {}
        parts.append(GUARD_HELPER)
        kw_guard = (guard.get("kind"), tuple(guard.get("bound", [])), guard.get("digest"), tuple(guard.get("read", [])))
        parts.append(f"_KW_GUARD = {kw_guard!r}")
    if specialised:
        parts += [
            "",
            "",
            src["model_class"],
            "",
            "",
            f"class ModelNew({REFERENCE_CLASS}):",
            '    """The reference Model (copied above as ' + REFERENCE_CLASS + ", constructor inherited); forward runs "
            "the generated kernels\n    for the shapes the graph was captured at, the reference's own forward "
            'otherwise."""',
            "",
        ]
    elif src.get("model_class"):
        # the whole reference class, so class attributes and helper methods come along with the constructor
        parts += [
            "",
            "",
            src["model_class"],
            "",
            "",
            f"class ModelNew({REFERENCE_CLASS}):",
            '    """The reference Model (copied above as ' + REFERENCE_CLASS + ", constructor inherited); forward runs "
            'the generated kernels."""',
            "",
        ]
    else:
        parts += [
            "",
            "class ModelNew(nn.Module):",
            '    """Same constructor as the reference Model (copied verbatim); forward runs the generated kernels."""',
            "",
            init.rstrip(),
            "",
        ]
    parts += em.derived_method()
    if em.derived_method():
        parts.append("")
    if const_method:
        parts += const_method + [""]
    args = ", ".join(_var(n.name) for n in inputs)
    guard_lines: list[str] = []
    if guarded:
        conds = []
        for n, spec in zip(inputs, (meta.get("guard") or {}).get("inputs", []), strict=False):
            if "shape" in spec:
                conds.append(f"{_var(n.name)}.shape != {tuple(spec['shape'])!r}")
            else:
                conds.append(f"{_var(n.name)} != {spec.get('value')!r}")
        conds.append(SPECIALISED_CHECK)
        guard_lines = [
            f"        if {' or '.join(conds)}:",
            "            # not the " + ("shapes and " if specialised else "") + "module structure this forward "
            "was generated for: the reference's own computation",
            f"            return super().forward({args})",
        ]
    if graph:
        # every parameter the forward or the derived weights read: a change recaptures the graph
        weights = tuple(n.attrs["path"] for n in g.nodes if n.op == "param")
        scalars = sorted({a.expr for n in g.nodes for a in n.args if isinstance(a, Scalar) and a.expr is not None})
        scal = "(" + "".join(f"{e}, " for e in scalars).rstrip() + ")"
        parts += [
            f"    def forward(self, {args}):",
            *guard_lines,
            f"        return _graphed(self, self._kw_eager, ({args}{',' if len(inputs) == 1 else ''}), {weights!r}, {scal})",
            "",
            "    def _kw_eager(self, " + args + "):",
            '        """The forward launched op by op: what the graph captures."""',
        ]
    else:
        parts += [f"    def forward(self, {args}):", *guard_lines]
    parts += ["        lib = _kernels()", f"        _dev = {dev_src}.device", "        _stream = kwrt.stream(_dev)"]
    if em.used_params:
        # parameters through (dict, name) slots looked up once: each self.a.b is two
        # nn.Module.__getattr__ calls, microseconds of host time per call that a small kernel notices
        paths = tuple(g.node(n).attrs["path"] for n in em.used_params)
        parts += [f'        {", ".join(em.used_params.values())}, = _read(self, "_kw_pslots", {paths!r})']
    if em.used_attrs:
        parts += [f'        {", ".join(em.used_attrs.values())}, = _read(self, "_kw_aslots", {tuple(em.used_attrs)!r})']
    parts += em.lines
    return "\n".join(parts) + "\n"


def speed_of_light(g_original: Any) -> dict[str, float]:
    """FLOPs and the minimal bytes of the task as written (inputs, parameters and outputs once)."""
    flops = 0.0
    g = g_original
    for n in g.nodes:
        if n.shape is None:
            continue
        numel = math.prod(n.shape)
        if n.op in ("linear", "matmul_nt"):
            k = g.node(n.args[0].name).shape[-1]
            flops += 2.0 * numel * k
        elif n.op == "matmul":
            a = g.node(n.args[0].name).shape
            flops += 2.0 * numel * a[-1]
        elif n.op == "conv2d":
            w = g.node(n.args[1].name).shape
            flops += 2.0 * numel * math.prod(w[1:])
        elif n.op not in (
            "input",
            "param",
            "output",
            "view",
            "reshape",
            "flatten",
            "transpose",
            "permute",
            "t",
            "unsqueeze",
            "squeeze",
            "size",
            "shape",
            "derived",
        ):
            flops += numel
    bytes_ = 0.0
    for n in g.nodes:
        if n.op in ("input", "param") and n.shape is not None:
            bytes_ += 4.0 * math.prod(n.shape)
    for a in g.output.args:
        if isinstance(a, Ref):
            bytes_ += 4.0 * math.prod(g.node(a.name).shape)
    return {"flops": flops, "bytes": bytes_}
