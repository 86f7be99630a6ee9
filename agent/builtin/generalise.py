"""A forward generated from a torch.export graph, made to follow the shapes it is called with.

torch.export specialises the graph to the shapes of get_inputs: model_new.py is written with
sizes as literals (`x.reshape(4, 256, -1, 64)`, `torch.empty((1, 1, 256, 256))`), while the
generated kernels take their sizes as arguments. At any other shape the candidate used to run
the reference's own forward, which torch-ops=forbid rejects, so the sandbox's shape trial
failed every exported graph under the default preset.

The policy captures the task once more per module-level size constant, with that constant
changed (`probe_source` at `probe_values`: halved where it is even; one at a time so that no
two sizes move together; the next value where the reference fails or builds another module) and
generates the same candidate from each capture. If the kernel files are the same and model_new.py differs only in integer literals, each such literal is written as
the expression of sizes that gives its value in every capture (`bind`): a product of input
dimensions (`v_x.shape[1]`), int attributes (`self.n_embd`) and parameter dimensions
(`self.fc.weight.shape[0]`), times or divided by a constant. Anything else (a size that is a
sum, a float that moves with a size, a kernel written per shape) keeps the specialised form. The
module digest then leaves out what moved with the sizes (agent.builtin.guard.parts_digest); what
did not move is still checked, so a module of another structure still runs the reference.

The result is checked as every candidate is, shape trial included; nothing here is trusted.
"""

from __future__ import annotations

import ast
import io
import math
import re
import tokenize
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from agent.builtin.graph import Graph, Scalar
from agent.builtin.guard import SPECIALISED_CHECK, parts_digest
from sandbox.options import SIZE_BLOCKLIST

MAX_PROBES = 8  # size constants varied (one capture each); a task with more stays specialised
PROBE_ATTEMPTS = 3  # values tried per constant (probe_values) before it stays fixed
MAX_FACTORS = 5  # atoms multiplied in one size expression (DETR's batch * (h * w) ** 2)
GUARD_LINE = re.compile(r"^_KW_GUARD = .*$", re.M)
_LINE_COMMENT = re.compile(r"//[^\n]*")
_IDENT_PATH = re.compile(r"^self(\.[A-Za-z_][A-Za-z0-9_]*)+$")


class NotGeneral(Exception):
    """Why a candidate stays specialised to the captured shapes."""


class NeedsInputs(NotGeneral):
    """A size outside forward follows an input's shape (a constant hoisted out of forward): the
    candidate generated again without hoisting may still be made general."""


# ---- the probes ---------------------------------------------------------------------------


def size_constants(source: str) -> dict[str, tuple[int, int]]:
    """Module-level `NAME = <int>` that get_inputs or get_init_inputs read (the shape trial's
    choice, sandbox.options.SIZE_BLOCKLIST applied): (its value, its value in its probe)."""
    tree = ast.parse(source)
    read: set[str] = set()
    values: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in ("get_inputs", "get_init_inputs"):
            read |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _int_value(node.value, values)
            if value is not None:
                values[node.targets[0].id] = value
    return {
        n: (v, _probe_value(v))
        for n, v in sorted(values.items())
        if n in read and v >= 2 and not any(b in n.lower() for b in SIZE_BLOCKLIST)
    }


_INT_OPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b if b else None,  # None: not a size
}


def _int_value(node: ast.expr, known: dict[str, int]) -> int | None:
    """The int a module-level assignment's value is, as the sandbox reads it from the module: a
    literal, an earlier constant, or their sum, difference, product or floor quotient (DINOv2's
    `num_tokens = 1 + 7 * 7`, DETR's `feature_size = image_size // 32`); None for anything else."""
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.Name):
        return known.get(node.id)
    if isinstance(node, ast.BinOp) and type(node.op) in _INT_OPS:
        a, b = _int_value(node.left, known), _int_value(node.right, known)
        return None if a is None or b is None else _INT_OPS[type(node.op)](a, b)
    return None


def _probe_value(v: int) -> int:
    return probe_values(v)[0]


def probe_values(v: int) -> list[int]:
    """The values a size constant is probed at, in order, each tried when the reference cannot
    run at (or builds another module at) the one before: half where that keeps the factors of two
    a size usually needs, else one more; from 32 on three quarters and one and a half times, to a
    multiple of 8 (a grouped convolution's width must stay a multiple of its group width: RegNet's
    104 runs at 72, not at 52)."""
    out = [v // 2 if v % 2 == 0 and v >= 4 else v + 1]
    if v >= 32:
        out += [v * 3 // 4 // 8 * 8, (v * 3 // 2 + 7) // 8 * 8]
    out.append(v + 1)
    return [w for i, w in enumerate(out) if w >= 2 and w != v and w not in out[:i]]


def odd_neighbour(v: int, used: set[int]) -> int:
    """The first odd value above v that is not in `used`: a check capture's (generalise's
    `checks`), where a size bound as a half of v does not divide."""
    w = v + 1 if v % 2 == 0 else v + 2
    while w in used:
        w += 2
    return w


def same_structure(a: list, b: list) -> bool:
    """Whether two guard parts (agent.builtin.guard.guard_parts) are one module at other sizes:
    the same tree, the same parameters and buffers of the same ranks."""
    return a[0] == b[0] and {k: len(s) for k, s in a[2].items()} == {k: len(s) for k, s in b[2].items()}


def probe_source(source: str, name: str, value: int) -> str:
    """source with the module-level `name = <int>` set to value."""
    lines = source.splitlines(keepends=True)
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == name
            and node.value.lineno == node.value.end_lineno
        ):
            at = node.value
            line = lines[at.lineno - 1]
            lines[at.lineno - 1] = line[: at.col_offset] + str(value) + line[at.end_col_offset :]
    return "".join(lines)


# ---- the sizes a literal may be -----------------------------------------------------------


def atoms(input_names: list[str], guard: dict[str, Any]) -> dict[str, int]:
    """expression -> value at this capture: each input tensor's dimensions (`v_<name>.shape[d]`,
    readable in forward only), each int attribute (or item of a list of them) and each parameter
    dimension of the module."""
    out: dict[str, int] = {}
    for name, spec in zip(input_names, guard.get("inputs", []), strict=False):
        for d, size in enumerate(spec.get("shape") or []):
            out[f"v_{name}.shape[{d}]"] = int(size)
    tree, attrs, state, *_ = guard.get("parts") or [[], {}, {}]
    for key, v in attrs.items():
        if type(v) is int:
            out[member_expr(key)] = v
        elif isinstance(v, list):  # torchvision's Swin keeps its shift and window as [h, w]
            out |= {f"{member_expr(key)}[{i}]": x for i, x in enumerate(v) if type(x) is int}
    for path, shape in state.items():
        for d, size in enumerate(shape):
            out[f"{member_expr(path)}.shape[{d}]"] = int(size)
    return out


def member_expr(path: str) -> str:
    """Python for the module's member at a dotted path: `self.c_attn.weight`, or through
    get_submodule where a part is not a name (`self.get_submodule('mlp.0').weight`)."""
    if _IDENT_PATH.match(f"self.{path}"):
        return f"self.{path}"
    owner, _, name = path.rpartition(".")
    return f"self.get_submodule({owner!r}).{name}"


def _triples(captures: list[dict[str, int]]) -> list[tuple[str, tuple[int, ...]]]:
    """Atoms present in every capture, one per distinct triple of values (inputs first), sizes of
    1 left out (export specialises them)."""
    seen: set[tuple[int, ...]] = set()
    out = []
    for expr in captures[0]:
        vals = tuple(c.get(expr, 0) for c in captures)
        if min(vals) >= 2 and vals not in seen and len(set(vals)) > 1:
            seen.add(vals)
            out.append((expr, vals))
    return out


SUM_OFFSETS = (1, -1, 2, -2, 3, -3, 4, -4)  # tried only where no product of sizes (or its quotient) fits


def bind(
    values: tuple[int, ...],
    triples: list[tuple[str, tuple[int, ...]]],
    forward: bool,
    floor: bool = True,
    divisions: list[str] | None = None,
) -> str:
    """An expression of atoms with `values` in every capture: a product of up to MAX_FACTORS
    atoms, times or floor-divided by a constant, else such a product (or quotient) plus or minus a
    small constant. Raises NotGeneral.

    A quotient is found where the product divides exactly in every capture, so nothing says
    whether the module floors or rounds up where it does not (a stride-2 pool of 25 gives 13, and
    `25 // 2` is 12): `divisions` gets `(product) % k`, which the candidate's guard checks so that
    such sizes run the reference (Res2Net's pool, bound as `size // 2`, was wrong at 25)."""
    usable = [(e, v) for e, v in triples if forward or e.startswith("self.")]

    def search(rem: tuple[int, ...], start: int, depth: int) -> list[str] | None:
        if len(set(rem)) == 1:
            return [] if rem[0] == 1 else [str(rem[0])]
        if depth == MAX_FACTORS:
            return None
        for i in range(start, len(usable)):
            e, v = usable[i]
            if all(r % x == 0 for r, x in zip(rem, v, strict=True)):
                rest = search(tuple(r // x for r, x in zip(rem, v, strict=True)), i, depth + 1)
                if rest is not None:
                    return [e, *rest]
        return None

    found = search(values, 0, 0)
    if found:
        return " * ".join(found)
    for k in range(2, 65 if floor else 2):  # a size divided by a constant (a head's width, a pooled side)
        found = search(tuple(v * k for v in values), 0, 0)
        if found:
            if divisions is not None:
                divisions.append(f"({' * '.join(found)}) % {k}")
            return f"({' * '.join(found)}) // {k}"
    for c in SUM_OFFSETS:  # a size plus or minus a constant (a kernel's k - 1, a pad's 2 * p + n)
        shifted = tuple(v - c for v in values)
        found = search(shifted, 0, 0) if min(shifted) >= 1 else None
        if found:
            return f"({' * '.join(found)} {'+' if c > 0 else '-'} {abs(c)})"
    for k in range(2, 65 if floor else 2):  # both: T5's last bucket, num_buckets // 2 - 1
        for c in SUM_OFFSETS:
            shifted = tuple((v - c) * k for v in values)
            found = search(shifted, 0, 0) if min(shifted) >= 1 else None
            if found:
                if divisions is not None:
                    divisions.append(f"({' * '.join(found)}) % {k}")
                return f"(({' * '.join(found)}) // {k} {'+' if c > 0 else '-'} {abs(c)})"
    found_sum = _sum_of_two(values, usable) or (_window(values, usable) if floor else None)
    if found_sum is not None:
        return found_sum
    found_ratio = _over_attributes(values, usable, search) if floor else None
    if found_ratio is not None:
        return found_ratio
    found_shifted = _times_shifted(values, usable, search)
    if found_shifted is not None:
        return found_shifted
    if not forward and bind_or_none(values, triples) is not None:
        raise NeedsInputs(f"a size outside forward, {values}, follows an input's shape")
    raise NotGeneral(f"no product of sizes gives {values}")


def _sum_of_two(values: tuple[int, ...], usable: list[tuple[str, tuple[int, ...]]]) -> str | None:
    """`m * a + n * b` of two atoms, m and n up to 8, or such a sum times one or two atoms:
    DenseNet's concatenated channels, the block's input plus its layers' growth (64 + 4 * 32), and
    their size with the feature map's (192 * 28 * 28)."""
    found = _sum(values, usable)
    if found is not None:
        return found
    for p, pv in _products(usable):
        if all(x > 0 and v % x == 0 for v, x in zip(values, pv, strict=True)):
            found = _sum(tuple(v // x for v, x in zip(values, pv, strict=True)), usable)
            if found is not None:
                return f"{found} * {p}"
    return None


def _products(usable: list[tuple[str, tuple[int, ...]]]) -> list[tuple[str, tuple[int, ...]]]:
    """Each atom, and each product of two."""
    return list(usable) + [
        (f"{a} * {b}", tuple(x * y for x, y in zip(av, bv, strict=True)))
        for i, (a, av) in enumerate(usable)
        for b, bv in usable[i:]
    ]


def _sum(values: tuple[int, ...], usable: list[tuple[str, tuple[int, ...]]]) -> str | None:
    """`m * a + n * b`, or `m * a - n * b` (torchvision's Swin masks the last `size - shift`
    rows), m and n from 1 to 8."""
    for i, (a, av) in enumerate(usable):
        for j, (b, bv) in enumerate(usable):
            if j == i:
                continue
            for m in range(1, 9):
                rest = [v - m * x for v, x in zip(values, av, strict=True)]
                n = rest[0] // bv[0] if bv[0] else 0
                if not all(r == n * y for r, y in zip(rest, bv, strict=True)):
                    continue
                if 1 <= n <= 8 and j > i:  # a sum once, in the atoms' order
                    return f"({_times(m, a)} + {_times(n, b)})"
                if -8 <= n <= -1:
                    return f"({_times(m, a)} - {_times(-n, b)})"
    return None


def _window(values: tuple[int, ...], usable: list[tuple[str, tuple[int, ...]]]) -> str | None:
    """`(P + c) // k` for a product P of one or two atoms, k up to 16 and |c| up to 64: a strided
    window's output length (wav2vec2's convolutions: (16000 - 5) // 5 = 3199). The c nearest 0
    of those that fit every capture."""
    products = _products(usable)
    for k in range(1, 17):
        for p, pv in products:
            lo = max(v * k - x for v, x in zip(values, pv, strict=True))
            hi = min(v * k - x + k - 1 for v, x in zip(values, pv, strict=True))
            c = min(range(lo, hi + 1), key=abs, default=None) if hi - lo < 1 << 20 else None
            if c is not None and abs(c) <= 64 and (k, c) != (1, 0):
                inner = f"{p} {'+' if c >= 0 else '-'} {abs(c)}"
                return f"({inner})" if k == 1 else f"(({inner}) // {k})"
    return None


def _over_attributes(values: tuple[int, ...], usable: list[tuple[str, tuple[int, ...]]], search: Any) -> str | None:
    """A product of atoms floor-divided by a module attribute, or by one squared or two of them
    (`_products`), and a constant up to 64: a size reduced by a ratio the module is built with
    (SegFormer's keys after its sequence reduction, `h * w // (16 * sr_ratio * sr_ratio)`)."""
    divisors = _products([(e, v) for e, v in usable if e.startswith("self.")])
    for k in range(1, 65):
        for name, dv in divisors:
            found = search(tuple(v * k * d for v, d in zip(values, dv, strict=True)), 0, 0)
            if found:
                return f"({' * '.join(found)}) // ({f'{k} * ' if k > 1 else ''}{name})"
    return None


def _times_shifted(values: tuple[int, ...], usable: list[tuple[str, tuple[int, ...]]], search: Any) -> str | None:
    """A product of atoms times one atom plus or minus 1 or 2: a count of positions with one
    more (GPT-J's `seq * (seq + 1)`, 16512 at 128)."""
    for e, v in usable:
        for c in (1, -1, 2, -2):
            shifted = tuple(x + c for x in v)
            if min(shifted) >= 2 and all(val % d == 0 for val, d in zip(values, shifted, strict=True)):
                found = search(tuple(val // d for val, d in zip(values, shifted, strict=True)), 0, 0)
                if found is not None:
                    return " * ".join([*found, f"({e} {'+' if c > 0 else '-'} {abs(c)})"])
    return None


def _times(m: int, a: str) -> str:
    return a if m == 1 else f"{m} * {a}"


# how far from an int the float's int may be, relative: a scale computed in float32 (GPT-NeoX's
# 1 / sqrt(head_size) from a float32 tensor: 1 / 0.17677669**2 = 32.0000004) is still that int
FLOAT_INT_TOL = 1e-6
# a float that moves with the sizes, as the int it comes from: (the int, how to write the float)
_FLOAT_FORMS = (
    (lambda f: f, "float({})"),
    (lambda f: f * f, "({}) ** 0.5"),  # a scale by sqrt(head size)
    (lambda f: 1.0 / f, "1.0 / ({})"),  # a mean's 1 / n
    (lambda f: 1.0 / (f * f), "({}) ** -0.5"),
)


def bind_float(values: tuple[float, ...], triples: list[tuple[str, tuple[int, ...]]], forward: bool, line: int) -> str:
    """A float literal that moves with the sizes: a size, its square root, or their reciprocals;
    else a ratio of sizes, or its log (T5's `log(max_distance / max_exact)`)."""
    forms = [*_FLOAT_FORMS, *((lambda f, k=k: k / f, f"{k} / ({{}})") for k in range(2, 65))]  # LoRA's alpha / r
    for floor in (False, True):  # a floor division inside a float's formula only where nothing else fits
        for to_int, form in forms:
            ints = _ints([to_int(v) if v else 0.0 for v in values])
            found = bind_or_none(ints, triples, forward, floor) if ints else None
            if found is not None:
                return form.format(found)
        found = _ratio(values, triples, forward) if not floor else None
        if found is not None:  # DETR's image_size / feature_size
            return found
    if all(v < 64 for v in values):  # T5's log(max_distance / max_exact), DeBERTa's log((max_position - 1) / mid)
        found = _ratio(tuple(math.exp(v) for v in values), triples, forward)
        if found is not None:
            return f"math.log({found})"
    where = f"line {line}: " if line else ""
    raise NotGeneral(f"{where}the float {values[0]!r} moves with the sizes and follows no size")


def _ints(floats: list[float]) -> tuple[int, ...] | None:
    """floats as ints, where each is one (to FLOAT_INT_TOL) and at least 2."""
    if all(n >= 2 and abs(n - round(n)) <= FLOAT_INT_TOL * n for n in floats):
        return tuple(round(n) for n in floats)
    return None


def _ratio(values: tuple[float, ...], triples: list[tuple[str, tuple[int, ...]]], forward: bool) -> str | None:
    """`(N) / (a)` or `(N) / (a // 2)` with values in every capture: N an expression of sizes (a
    product, or one plus a constant) whose values are values times the denominator's, computed
    in floats (T5's 128 / (32 // 4) = 16 is 128 * 4 / 32; DeBERTa's (512 - 1) / (256 // 2))."""
    for a, av in triples:
        if not forward and not a.startswith("self."):
            continue
        for k in (1, 2):
            den = tuple(x // k for x in av)
            nums = _ints([v * d for v, d in zip(values, den, strict=True)]) if min(den) >= 1 else None
            found = bind_or_none(nums, triples, forward, floor=False) if nums else None
            if found is not None and found != a:
                return f"({found}) / ({a})" if k == 1 else f"({found}) / ({a} // {k})"
    return None


def bind_or_none(
    values: tuple[int, ...], triples: list[tuple[str, tuple[int, ...]]], forward: bool = True, floor: bool = True
) -> str | None:
    try:
        return bind(values, triples, forward, floor)
    except NotGeneral:
        return None


# ---- scalars the kernels are generated with ------------------------------------------------


def bind_scalars(graphs: list[Graph], captures: list[dict[str, int]]) -> None:
    """A float constant of the graph that moves with the sizes (a scale by 1/sqrt(head size),
    a mean's 1/n) becomes a runtime scalar with its size expression, in every capture's graph
    (in place), so the kernels take it as an argument instead of a literal. An expression may
    read an input's shape: forward and `_kw_consts` (keyed by the input shapes) both see them."""
    triples = _triples(captures)
    for i, j, values in moving_scalars(graphs):
        try:
            expr = bind_float(values, triples, False, 0)
        except NotGeneral:
            expr = bind_float(values, triples, True, 0)
        for g, v in zip(graphs, values, strict=True):
            g.nodes[i].args[j] = Scalar(v, expr)


def scalars_as_arguments(graphs: list[Graph]) -> None:
    """Each float constant that moves between the graphs made a run-time scalar (in place), of
    no particular expression: the graphs' candidates then compare as `bind_scalars` would leave
    them, where two captures alone cannot say what a float is made of (T5's log of a ratio of
    sizes whose other term moves only in a third capture)."""
    for i, j, values in moving_scalars(graphs):
        for g, v in zip(graphs, values, strict=True):
            g.nodes[i].args[j] = Scalar(v, "0.0")


def moving_scalars(graphs: list[Graph]) -> list[tuple[int, int, tuple[float, ...]]]:
    """(node index, argument index, values) of each float constant whose value differs between
    the graphs, which must otherwise be the same; raises NotGeneral where they are not."""
    first, others = graphs[0], graphs[1:]
    if any(len(g.nodes) != len(first.nodes) for g in others):
        raise NotGeneral("the captured graph differs between sizes")
    out = []
    for i, node in enumerate(first.nodes):
        peers = [g.nodes[i] for g in others]
        if any(p.name != node.name or p.op != node.op or len(p.args) != len(node.args) for p in peers):
            raise NotGeneral(f"the captured graph differs between sizes at {node.name}")
        for j, arg in enumerate(node.args):
            if not isinstance(arg, Scalar) or arg.expr is not None:
                continue
            moved = [p.args[j] for p in peers]
            if not all(isinstance(m, Scalar) and m.expr is None for m in moved):
                raise NotGeneral(f"the captured graph differs between sizes at {node.name}")
            values = (arg.value, *(m.value for m in moved))
            if len(set(values)) > 1:
                out.append((i, j, values))
    return out


# ---- model_new.py at several sizes -> one -------------------------------------------------


def _tokens(text: str) -> list[tokenize.TokenInfo]:
    return [t for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type != tokenize.NL]


def _scopes(tokens: list[tokenize.TokenInfo]) -> Iterator[tuple[str, bool]]:
    """Per token: the name of the function it is in ("" at module level or in a class body), and
    whether it is the value of a module-level `NAME = <int>` (a size constant's own line)."""
    stack: list[tuple[int, str]] = []  # (indent depth of the def, its name)
    depth = 0
    pending = ""
    for i, t in enumerate(tokens):
        if t.type == tokenize.INDENT:
            depth += 1
            if pending:
                stack.append((depth, pending))
                pending = ""
        elif t.type == tokenize.DEDENT:
            if stack and stack[-1][0] == depth:
                stack.pop()
            depth -= 1
        elif t.type == tokenize.NAME and t.string == "def" and i + 1 < len(tokens):
            pending = tokens[i + 1].string
        module_const = (
            depth == 0
            and i >= 2
            and tokens[i - 1].string == "="
            and tokens[i - 2].type == tokenize.NAME
            and (i < 3 or tokens[i - 3].type in (tokenize.NEWLINE, tokenize.DEDENT, tokenize.INDENT))
        )
        yield (stack[-1][1] if stack else ""), module_const


Checks = Callable[[], list[tuple[dict[str, str], dict[str, int]]]]  # more captures' files and atoms, on demand


def generalise(
    files: list[dict[str, str]],
    captures: list[dict[str, int]],
    guards: list[dict[str, Any]],
    checks: Checks | None = None,
) -> dict[str, str]:
    """files[0] (the candidate at the task's sizes) with each literal that moves with the sizes
    across the files written as its expression; raises NotGeneral saying why not. Where a size
    is bound as a half (`bind`'s divisions by 2), `checks` gives captures at sizes none of the
    bindings was fitted on (`checked`)."""
    if len({kernel_code(f) for f in files}) != 1:
        raise NotGeneral("the kernel files differ between sizes")
    texts = [_model_text(f) for f in files]
    toks = [_tokens(t) for t in texts]
    if len({len(t) for t in toks}) != 1:
        raise NotGeneral("model_new.py differs in more than numbers between sizes")
    triples = _triples(captures)
    edits: list[tuple[tokenize.TokenInfo, str]] = []
    divisions: list[str] = []
    bound: list[_Bound] = []
    for at, ((scope, module_const), *same) in enumerate(zip(_scopes(toks[0]), *toks, strict=True)):
        kinds = {(t.type, t.string) for t in same}
        if len(kinds) == 1:
            continue
        first = same[0]
        if {t.type for t in same} != {first.type}:
            raise NotGeneral(f"line {first.start[0]}: the code differs between sizes")
        if first.type in (tokenize.COMMENT, tokenize.STRING) and _docstring_or_comment(first):
            continue
        if first.type != tokenize.NUMBER:
            raise NotGeneral(f"line {first.start[0]}: {first.string!r} moves with the sizes")
        if module_const:
            continue  # the size constant itself: the sandbox's shape trial sets it like the task's
        if not scope:
            raise NotGeneral(f"line {first.start[0]}: a size outside any method")
        forward = scope in ("forward", "_kw_consts")  # both are given the input tensors (their shapes key the consts)
        before = len(divisions)
        if all(t.string.isdigit() for t in same):
            expr = bind(tuple(int(t.string) for t in same), triples, forward, divisions=divisions)
        else:
            expr = bind_float(tuple(float(t.string) for t in same), triples, forward, first.start[0])
        bound.append(_Bound(at, first, expr, divisions[before] if len(divisions) > before else None))
    if not bound:
        raise NotGeneral("no literal moves with the sizes")
    if checks is not None and any(b.division and b.division.endswith(" % 2") for b in bound):
        divisions = checked(bound, divisions, checks(), form(files[0]))
    edits = [(b.token, f"({b.expr})") for b in bound]
    text = _apply(texts[0], edits, _guard_line(files, captures, guards))
    return {**files[0], "model_new.py": _checked_divisions(text, divisions)}


@dataclass
class _Bound:
    """A literal of model_new.py written as an expression: its token's index and token, the
    expression, and the division `bind` left for the guard to check (or None)."""

    at: int
    token: tokenize.TokenInfo
    expr: str
    division: str | None


def checked(
    bound: list[_Bound], divisions: list[str], checks: list[tuple[dict[str, str], dict[str, int]]], fitted: Any
) -> list[str]:
    """The divisions left after captures at other sizes (`checks`: files and atoms). A half
    (`(p) // 2`) whose product is odd in a check is the floor where the check's literal is, the
    ceiling where that is (the expression becomes `-(-(p) // 2)`), and its division check goes
    (an odd size then runs these kernels, not the reference), but only where every other bound
    literal gives the check's value too. Where one does not, the divisions all stay if one of
    them already sends that size to the reference, else NotGeneral: the candidate would be wrong
    there (Attention U-Net's upsampling scale, bound as `2 * g / x`, is 0.5 at 33 where that gives
    0.485). Only halves: a quarter's three odd residues are not all told apart by one size. A
    check of another `form` than the fitted candidates' (`fitted`) is left out."""
    for files, atoms_at in checks:
        if form(files) != fitted:
            continue
        toks = _tokens(_model_text(files))
        told = [_told(b, toks[b.at].string, atoms_at) for b in bound]
        if all(t is not None for t in told):
            for b, t in zip(bound, told, strict=True):
                assert t is not None
                b.expr, learned = t
                if learned and b.division in divisions:
                    divisions.remove(b.division)
            continue
        if any(_evaluate(d, atoms_at) for d in divisions):
            continue  # the guard sends this size to the reference as it is
        b, literal = next((b, toks[b.at].string) for b, t in zip(bound, told, strict=True) if t is None)
        raise NotGeneral(
            f"line {b.token.start[0]}: bound as {b.expr}, which is {_evaluate(b.expr, atoms_at)} at another "
            f"size where the literal is {literal}"
        )
    return divisions


def _told(b: _Bound, literal: str, atoms_at: dict[str, int]) -> tuple[str, bool] | None:
    """What a check capture's literal says of b: (its expression, whether its half was odd there and
    is now known), or None where b gives another value there. An expression this cannot evaluate
    says nothing: it stays, its division too."""
    value, want = _evaluate(b.expr, atoms_at), float(literal)
    if value is None:
        return b.expr, False
    half = b.division is not None and b.division.endswith(" % 2") and _evaluate(b.division, atoms_at) == 1
    if math.isclose(value, want, rel_tol=1e-6, abs_tol=1e-9):
        return b.expr, half
    if half and b.division:
        prod = b.division[: -len(" % 2")]
        ceil = b.expr.replace(f"{prod} // 2", f"-(-{prod} // 2)")
        if ceil != b.expr and math.isclose(_evaluate(ceil, atoms_at) or math.nan, want):
            return ceil, True
    return None


def _evaluate(expr: str, atoms_at: dict[str, int]) -> float | None:
    """expr's value where each atom (`v_x.shape[1]`, `self.fc.weight.shape[0]`) has atoms_at's
    value; None where an atom is missing or it is not plain arithmetic."""
    text = expr
    for name in sorted(atoms_at, key=len, reverse=True):
        text = text.replace(name, str(atoms_at[name]))
    if set(re.findall(r"[A-Za-z_]\w*", text)) - _MATH_NAMES or re.search(r"[^0-9A-Za-z_.+\-*/%(), ]", text):
        return None  # an atom this capture lacks, or more than arithmetic: never evaluated
    try:
        return float(eval(text, {"__builtins__": {}, "math": math}))
    except Exception:
        return None


_MATH_NAMES = {"math"} | {n for n in dir(math) if not n.startswith("_")}


def _checked_divisions(text: str, divisions: list[str]) -> str:
    """The forward's guard also sends the reference every size at which a bound quotient would
    not divide exactly (`bind`'s divisions); a forward with no guard to extend stays specialised."""
    conds = list(dict.fromkeys(divisions))
    if not conds:
        return text
    if text.count(SPECIALISED_CHECK) != 1:
        raise NotGeneral("a size is a quotient and the forward has no guard to check that it divides")
    return text.replace(SPECIALISED_CHECK, SPECIALISED_CHECK + "".join(f" or {c}" for c in conds))


def ints_as_literals(text: str) -> str:
    """text with each module-level int written as arithmetic (`num_tokens = 1 + 7 * 7`,
    `feature_size = image_size // 32`) written as its value, as the sandbox's trial sees the task
    (it sets each constant on the module, the others unchanged): the probes change one constant
    of this text, and a candidate's copy of the line compares as its value."""
    known: dict[str, int] = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _int_value(node.value, known)
            if value is not None:
                known[node.targets[0].id] = value
                if not isinstance(node.value, ast.Constant):
                    text = probe_source(text, node.targets[0].id, value)
    return text


def kernel_code(files: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """A candidate's kernel files without their comments: what must be the same at every size."""
    return tuple(sorted((p, _code(t)) for p, t in files.items() if p != "model_new.py"))


def form(files: dict[str, str]) -> tuple[Any, ...]:
    """What `generalise` needs to be the same in every capture's candidate: the kernel files and
    model_new.py's tokens but its numbers."""
    tokens = tuple(_masked(t) for t in _tokens(_model_text(files)))
    return kernel_code(files), tokens


def _masked(t: tokenize.TokenInfo) -> str:
    """A token as `generalise` compares it between sizes: any number is one, and comments and
    docstrings (which may name the sizes) are passed over."""
    if t.type == tokenize.NUMBER:
        return "#"
    if t.type in (tokenize.COMMENT, tokenize.STRING) and _docstring_or_comment(t):
        return "''"
    return t.string


def _model_text(files: dict[str, str]) -> str:
    """model_new.py as the captures are compared: no guard digest, module ints as literals."""
    return ints_as_literals(GUARD_LINE.sub("_KW_GUARD = None", files["model_new.py"]))


def _code(text: str) -> str:
    """A kernel file without its `//` comments (which describe the sizes it was generated at)."""
    return _LINE_COMMENT.sub("", text)


def _docstring_or_comment(t: tokenize.TokenInfo) -> bool:
    return t.type == tokenize.COMMENT or t.line.strip().startswith(('"""', "'''", 'f"""'))


def _guard_line(files: list[dict[str, str]], captures: list[dict[str, int]], guards: list[dict[str, Any]]) -> str:
    """_KW_GUARD for a forward whose sizes follow the module: the digest without the int
    attributes and parameter shapes that moved with the sizes (the same in every capture)."""
    bound = set(guards[0].get("bound", [])) | _moved(guards)
    digests = {parts_digest(g["parts"], bound) for g in guards}
    if len(digests) != 1:
        raise NotGeneral("the module differs between sizes in more than its sizes")
    kind, read = guards[0].get("kind"), tuple(guards[0].get("read", []))
    return f"_KW_GUARD = {(kind, tuple(sorted(bound)), digests.pop(), read)!r}"


def _moved(guards: list[dict[str, Any]]) -> set[str]:
    """The attributes ("self.<path>") and parameter shapes ("self.<path>.shape") whose values
    differ between the captures, as guard_parts names them."""
    parts = [g["parts"] for g in guards]
    attrs = {k for q in parts for k in q[1] if len({repr(p[1].get(k)) for p in parts}) > 1}
    state = {k for q in parts for k in q[2] if len({repr(p[2].get(k)) for p in parts}) > 1}
    return {f"self.{k}" for k in attrs} | {f"self.{k}.shape" for k in state}


def _apply(text: str, edits: list[tuple[tokenize.TokenInfo, str]], guard_line: str) -> str:
    lines = text.splitlines(keepends=True)
    for tok, new in sorted(edits, key=lambda e: e[0].start, reverse=True):
        (r, c0), (r1, c1) = tok.start, tok.end
        assert r == r1
        line = lines[r - 1]
        lines[r - 1] = line[:c0] + new + line[c1:]
    text = "".join(lines).replace("_KW_GUARD = None", guard_line, 1)
    return _WHOLE_SHAPE.sub(_rank_check, text)


# an input's shape compared with its own dimensions, every one bound: what is left to check is its rank
_WHOLE_SHAPE = re.compile(r"(v_\w+)\.shape != \(((?:\(\1\.shape\[\d+\]\), )*\(\1\.shape\[\d+\]\),?)\)")


def _rank_check(m: re.Match) -> str:
    dims = re.findall(r"\.shape\[(\d+)\]", m.group(2))
    if dims != [str(i) for i in range(len(dims))]:
        return m.group(0)
    return f"{m.group(1)}.dim() != {len(dims)}"
