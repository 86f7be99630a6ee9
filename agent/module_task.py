"""Any Python file with `nn.Module` subclasses -> a KernelBench-format task, without importing it.

A KernelBench task is a module with `class Model(nn.Module)`, `get_inputs()` and
`get_init_inputs()`. People have modules of their own instead: a block from their model with its
own class name and constructor. This module

- lists the `nn.Module` subclasses a file defines (`find_module_classes`, by `ast`: the file is
  parsed, never imported, so it can run in the web process),
- reads input specs such as `float32[8,64,28,28]` or `int64[8,128] randint(0,50257)`
  (`parse_input_spec`) and constructor arguments as JSON (`parse_init_args`),
- writes the task (`wrapper_source`): the file verbatim, then `class Model(TheirClass)` and
  `get_inputs` / `get_init_inputs` built from the specs,
- says what went wrong when such a module fails at run time (`error_that_matters`: the root
  cause of a chained traceback, in one line).

Plain Python (no Django, no torch): the web app (webapp/jobs/module_wrapper.py), the API and the
CLI (`python -m agent optimize FILE --class NAME ...`) all call it.

Input spec grammar: `DTYPE[DIM, ...] [DISTRIBUTION]`, where DTYPE is a torch dtype name
(float32, float16, bfloat16, float64, int64, int32, int16, int8, uint8, bool), DIM a positive
integer (an empty `[]` is a 0-d tensor) and DISTRIBUTION one of `randn` (the default for floating
dtypes), `rand`, `uniform(LOW,HIGH)`, `normal(MEAN,STD)`, `zeros`, `ones`, `randint(LOW,HIGH)`
(the default for integer dtypes: randint(0,100); HIGH exclusive) or `bernoulli(P)` (bool's
default: bernoulli(0.5)).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
INT_DTYPES = ("int64", "int32", "int16", "int8", "uint8")
DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",)
DTYPE_ALIASES = {
    "float": "float32",
    "half": "float16",
    "double": "float64",
    "long": "int64",
    "int": "int32",
    "fp32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp64": "float64",
}
MAX_DIMS = 8
MAX_ELEMENTS = 1 << 31  # one input; the sandbox limits memory for real
MODULE_BASES = {"Module", "nn.Module", "torch.nn.Module"}
WRAPPER_MARK = "# --- KernelBench-format wrapper written by Kernelwright (agent/module_task.py) ---"


class SpecError(ValueError):
    """An input spec, the constructor arguments or the class choice is not usable; the message says why."""


@dataclass
class ModuleClass:
    """One `nn.Module` subclass found in a file."""

    name: str
    line: int
    init_params: list[str] = field(default_factory=list)  # "name", "name=default", "*args", "**kw"
    forward_params: list[str] | None = None  # the inputs, without self; None: no forward in this class
    doc: str = ""
    # forward's parameters as source and the call that passes them on (the wrapper's forward)
    forward_signature: str = "*args, **kwargs"
    forward_call: str = "*args, **kwargs"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "line": self.line,
            "init_params": self.init_params,
            "forward_params": self.forward_params,
            "doc": self.doc,
        }


@dataclass
class InputSpec:
    dtype: str
    shape: tuple[int, ...]
    distribution: str  # randn | rand | uniform | normal | zeros | ones | randint | bernoulli
    args: tuple[float, ...] = ()

    def __str__(self) -> str:
        dist = self.distribution + (f"({','.join(_num(a) for a in self.args)})" if self.args else "")
        return f"{self.dtype}[{','.join(map(str, self.shape))}] {dist}"

    def expression(self) -> str:
        """The torch expression that makes one such input (for get_inputs)."""
        shape = (
            "(" + "".join(f"{d}, " for d in self.shape) + ")"
            if len(self.shape) == 1
            else "(" + ", ".join(map(str, self.shape)) + ")"
        )
        dtype = f"torch.{self.dtype}"
        d, a = self.distribution, self.args
        if d == "randn":
            return f"torch.randn({shape}, dtype={dtype})"
        if d == "rand":
            return f"torch.rand({shape}, dtype={dtype})"
        if d == "uniform":
            return f"torch.empty({shape}, dtype={dtype}).uniform_({_num(a[0])}, {_num(a[1])})"
        if d == "normal":
            return f"torch.empty({shape}, dtype={dtype}).normal_({_num(a[0])}, {_num(a[1])})"
        if d == "zeros":
            return f"torch.zeros({shape}, dtype={dtype})"
        if d == "ones":
            return f"torch.ones({shape}, dtype={dtype})"
        if d == "randint":
            return f"torch.randint({int(a[0])}, {int(a[1])}, {shape}, dtype={dtype})"
        if d == "bernoulli":
            return f"(torch.rand({shape}) < {_num(a[0])})" + ("" if self.dtype == "bool" else f".to({dtype})")
        raise SpecError(f"unknown distribution {d!r}")


def _num(value: float) -> str:
    return repr(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(float(value))


# -- finding the classes ---------------------------------------------------------------------
def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _base_name(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def _params(fn: ast.FunctionDef | None) -> list[str]:
    if fn is None:
        return []
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    out = []
    for arg, default in zip(positional, defaults, strict=True):
        out.append(arg.arg if default is None else f"{arg.arg}={ast.unparse(default)}")
    if a.vararg:
        out.append(f"*{a.vararg.arg}")
    for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        out.append(arg.arg if default is None else f"{arg.arg}={ast.unparse(default)}")
    if a.kwarg:
        out.append(f"**{a.kwarg.arg}")
    return out[1:] if out and positional and positional[0].arg in ("self", "cls") else out


def _pass_on(fn: ast.FunctionDef) -> tuple[str, str]:
    """(signature without self, the call passing every parameter on), from forward's own arguments."""
    a = fn.args
    args = ast.arguments(
        posonlyargs=[],
        args=list(a.posonlyargs + a.args),
        vararg=a.vararg,
        kwonlyargs=list(a.kwonlyargs),
        kw_defaults=list(a.kw_defaults),
        kwarg=a.kwarg,
        defaults=list(a.defaults),
    )
    if args.args and args.args[0].arg in ("self", "cls"):
        args.args = args.args[1:]
        args.defaults = args.defaults[-len(args.args) :] if args.args and args.defaults else []
    for arg in args.args + args.kwonlyargs + [x for x in (args.vararg, args.kwarg) if x]:
        arg.annotation = None  # an annotation may name what only the file imports under TYPE_CHECKING
    call = [x.arg for x in args.args]
    call += [f"*{args.vararg.arg}"] if args.vararg else []
    call += [f"{x.arg}={x.arg}" for x in args.kwonlyargs]
    call += [f"**{args.kwarg.arg}"] if args.kwarg else []
    return ast.unparse(args), ", ".join(call)


def find_module_classes(source: str) -> list[ModuleClass]:
    """The file's top-level classes that derive from `nn.Module` (directly, or through another
    class of the same file), in file order. Raises SyntaxError for a file that does not parse."""
    tree = ast.parse(source)
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    modules: set[str] = set()
    changed = True
    while changed:  # transitively: class B(A) where A(nn.Module) is in the file
        changed = False
        for c in classes:
            if c.name in modules:
                continue
            if any(_base_name(b) in MODULE_BASES or _base_name(b) in modules for b in c.bases):
                modules.add(c.name)
                changed = True
    found = []
    for c in classes:
        if c.name not in modules:
            continue
        methods = {n.name: n for n in c.body if isinstance(n, ast.FunctionDef)}
        doc = (ast.get_docstring(c) or "").strip().split("\n\n")[0]
        info = ModuleClass(
            name=c.name,
            line=c.lineno,
            init_params=_params(methods.get("__init__")),
            forward_params=_params(methods["forward"]) if "forward" in methods else None,
            doc=" ".join(doc.split())[:200],
        )
        if "forward" in methods:
            info.forward_signature, info.forward_call = _pass_on(methods["forward"])
        found.append(info)
    return found


# -- specs -------------------------------------------------------------------------------------
SPEC = re.compile(
    r"^\s*(?P<dtype>[A-Za-z0-9_.]+)\s*\[(?P<shape>[^\]]*)\]\s*(?P<dist>[A-Za-z_]+)?\s*(?:\((?P<args>[^)]*)\))?\s*$"
)
DIST_ARGS = {"randn": 0, "rand": 0, "zeros": 0, "ones": 0, "uniform": 2, "normal": 2, "randint": 2, "bernoulli": 1}


def parse_input_spec(text: str) -> InputSpec:
    """`float32[8,64,28,28]`, `int64[8,128] randint(0,50257)`, `bool[4,4] bernoulli(0.1)`..."""
    m = SPEC.match(text or "")
    if not m:
        raise SpecError(
            f"{text!r} is not an input spec: write DTYPE[DIMS] [DISTRIBUTION], e.g. float32[8,64,28,28] or int64[8,128] randint(0,50257)"
        )
    dtype = m["dtype"].removeprefix("torch.")
    dtype = DTYPE_ALIASES.get(dtype, dtype)
    if dtype not in DTYPES:
        raise SpecError(f"{text!r}: unknown dtype {m['dtype']!r} (one of {', '.join(DTYPES)})")
    dims = [d.strip() for d in m["shape"].split(",") if d.strip()]
    if len(dims) > MAX_DIMS:
        raise SpecError(f"{text!r}: at most {MAX_DIMS} dimensions")
    try:
        shape = tuple(int(d) for d in dims)
    except ValueError:
        raise SpecError(f"{text!r}: dimensions are whole numbers, e.g. [8,128]") from None
    if any(d <= 0 for d in shape):
        raise SpecError(f"{text!r}: dimensions must be positive")
    elements = 1
    for d in shape:
        elements *= d
    if elements > MAX_ELEMENTS:
        raise SpecError(f"{text!r}: {elements} elements is more than one input may have ({MAX_ELEMENTS})")
    dist = m["dist"]
    if dist is None:
        dist = "randn" if dtype in FLOAT_DTYPES else "bernoulli" if dtype == "bool" else "randint"
        args: tuple[float, ...] = {"randint": (0.0, 100.0), "bernoulli": (0.5,)}.get(dist, ())
        if m["args"] is not None:
            raise SpecError(f"{text!r}: arguments without a distribution")
    else:
        if dist not in DIST_ARGS:
            raise SpecError(f"{text!r}: unknown distribution {dist!r} (one of {', '.join(DIST_ARGS)})")
        raw = [a.strip() for a in (m["args"] or "").split(",") if a.strip()]
        try:
            args = tuple(float(a) for a in raw)
        except ValueError:
            raise SpecError(f"{text!r}: the arguments of {dist} are numbers") from None
        if len(args) != DIST_ARGS[dist]:
            raise SpecError(f"{text!r}: {dist} takes {DIST_ARGS[dist]} argument{'s' if DIST_ARGS[dist] != 1 else ''}")
    if dist in ("randn", "rand", "uniform", "normal") and dtype not in FLOAT_DTYPES:
        raise SpecError(f"{text!r}: {dist} makes floating-point values; an {dtype} input wants randint(LOW,HIGH)")
    if dist == "randint":
        if dtype == "bool":
            raise SpecError(f"{text!r}: a bool input wants bernoulli(P)")
        if not (args[0] < args[1]) or not all(float(a).is_integer() for a in args):
            raise SpecError(f"{text!r}: randint(LOW,HIGH) wants whole numbers with LOW < HIGH (HIGH exclusive)")
    if dist == "bernoulli" and not 0 <= args[0] <= 1:
        raise SpecError(f"{text!r}: bernoulli(P) wants 0 <= P <= 1")
    if dist == "uniform" and not args[0] < args[1]:
        raise SpecError(f"{text!r}: uniform(LOW,HIGH) wants LOW < HIGH")
    if dist == "normal" and args[1] <= 0:
        raise SpecError(f"{text!r}: normal(MEAN,STD) wants STD > 0")
    return InputSpec(dtype=dtype, shape=shape, distribution=dist, args=args)


def parse_input_specs(text: str | list[str]) -> list[InputSpec]:
    """One spec per line (or a list of them); `;` also separates specs on one line."""
    items = text if isinstance(text, list) else re.split(r"[\n;]", text or "")
    specs = [parse_input_spec(t) for t in (str(i) for i in items) if t.strip()]
    if not specs:
        raise SpecError("give one input spec per input of forward(), e.g. float32[8,64,28,28]")
    return specs


def _literal(value: Any) -> str:
    """JSON data as Python source (repr of what json.loads made is valid, safe Python)."""
    return repr(value)


def parse_init_args(text: str | list | dict | None) -> list[Any] | dict[str, Any]:
    """Constructor arguments as JSON: a list (positional) or an object (keyword arguments); empty means none."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return []
    if isinstance(text, (list, dict)):
        value = text
    else:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(
                f'constructor arguments are JSON, e.g. [64, 256] or {{"channels": 64}}: {exc.msg} at column {exc.colno}'
            ) from None
    if not isinstance(value, (list, dict)):
        value = [value]  # a single number or string: one positional argument
    if isinstance(value, dict) and not all(isinstance(k, str) and k.isidentifier() for k in value):
        raise SpecError("keyword argument names must be Python identifiers")
    return value


# -- the task ----------------------------------------------------------------------------------
def wrapper_source(source: str, class_name: str, init_args: list[Any] | dict[str, Any], inputs: list[InputSpec]) -> str:
    """The KernelBench-format task: `source` verbatim, then the wrapper. Raises SpecError when
    `class_name` is not an nn.Module subclass of the file or the inputs do not fit its forward."""
    classes = {c.name: c for c in find_module_classes(source)}
    if class_name not in classes:
        names = ", ".join(classes) or "none"
        raise SpecError(f"{class_name!r} is not an nn.Module subclass of this file (found: {names})")
    cls = classes[class_name]
    _check_arity(cls, inputs)
    if isinstance(init_args, dict):
        init = f"    def __init__(self):\n        super().__init__(**{_literal(init_args)})\n"
        init_inputs = "[]"
    else:
        init = ""
        init_inputs = _literal(list(init_args))
    lines = [
        source.rstrip("\n"),
        "",
        "",
        WRAPPER_MARK,
        f"# module: {class_name}; constructor arguments: {json.dumps(init_args)}; inputs: {'; '.join(map(str, inputs))}",
        "import torch  # noqa: E402",
        "",
        f"_KwModule = {class_name}",
        "",
        "",
        "class Model(_KwModule):",
        f'    """{class_name} as a KernelBench task (the wrapper adds nothing to its forward)."""',
        "",
        *([init.rstrip("\n"), ""] if init else []),
        # forward spelled out (not *args): tracers and the policy's analysis see the real inputs
        f"    def forward(self{', ' if cls.forward_signature else ''}{cls.forward_signature}):",
        f"        return super().forward({cls.forward_call})",
        "",
        "",
        "def get_inputs():",
        "    return [" + ", ".join(s.expression() for s in inputs) + "]",
        "",
        "",
        "def get_init_inputs():",
        f"    return {init_inputs}",
        "",
    ]
    return "\n".join(lines)


def _check_arity(cls: ModuleClass, inputs: list[InputSpec]) -> None:
    params = cls.forward_params
    if params is None or any(p.startswith("*") for p in params):
        return  # forward inherited, or *args: the sandbox finds out
    required = [p for p in params if "=" not in p]
    if not len(required) <= len(inputs) <= len(params):
        want = f"{len(required)}" if len(required) == len(params) else f"{len(required)} to {len(params)}"
        raise SpecError(
            f"{cls.name}.forward({', '.join(params)}) takes {want} input{'s' if len(params) != 1 else ''}; {len(inputs)} spec{'s' if len(inputs) != 1 else ''} given"
        )


def task_from_module(source: str, class_name: str, init_args: str | list | dict | None, inputs: str | list[str]) -> str:
    """The form's and the API's one call: parse the arguments and the specs, write the task."""
    try:
        return wrapper_source(source, class_name.strip(), parse_init_args(init_args), parse_input_specs(inputs))
    except SyntaxError as exc:
        raise SpecError(f"Syntax error on line {exc.lineno}: {exc.msg}") from None


# -- a run-time failure, said first -------------------------------------------------------------
_EXC_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception)): (?P<msg>.+)$")
_FILE_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)')
_WRAPPERS = ("ShapeProp error for:", "While executing", "Failed running call_", "Dynamo failed")


def error_that_matters(text: str) -> str:
    """The user's error in a failure's traceback, in one line: the root cause of a chained
    traceback (torch.fx's ShapeProp and export wrap a shape mismatch in errors about their own
    nodes) and the last frame outside torch and the standard library that led to it, e.g.
    "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x16 and 32x8) (task.py, line 12,
    in forward)". The text itself when it holds no exception line. Shown before the traceback;
    plain Python, so the agent's policies and the job page use the same words."""
    lines = text.splitlines()
    place = ""
    for line in lines:
        frame = _FILE_LINE.match(line)
        if (
            frame
            and not frame["file"].startswith("<")
            and not any(d in frame["file"] for d in ("site-packages", "/lib/python"))
        ):
            place = f"{frame['file'].rsplit('/', 1)[-1]}, line {frame['line']}, in {frame['fn']}"
        exc = _EXC_LINE.match(line.strip())
        if exc and not exc["msg"].startswith(_WRAPPERS):
            return f"{exc['type']}: {exc['msg']}" + (f" ({place})" if place else "")
    return text.strip().splitlines()[0] if text.strip() else ""
