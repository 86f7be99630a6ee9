"""Generate one kernel per fused group, as C++ with OpenMP (cpu) or CUDA (cuda).

A group is computed in phases over each row: one loop per reduction (its input recomputed
from the group's inputs, so nothing intermediate touches memory), the per-row values in
registers, then a final loop that writes the group's full-size outputs. CPU: rows in an
OpenMP parallel loop, columns in `omp simd` loops. CUDA: reductions give each row TPR threads
(a warp or a block) with shuffle reductions; elementwise groups are grid-stride loops over
float4 vectors when the pointers are 16-byte aligned. Launch parameters are compile-time
constants (`config`), so trying a configuration means compiling a variant.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.builtin import tf32x3
from agent.builtin.cexpr import REDUCE_INIT, c_accumulate, c_float, c_op
from agent.builtin.fusion import COL, COLGEN, FULL, GAP, GEN, ROW, ROWGEN, SCALAR, Group, Plan
from agent.builtin.graph import REDUCTIONS, Lit, Node, Ref, Scalar, fmt_shape
from agent.builtin.ownkernels import CPU_SOURCE as OWN_CPU
from agent.builtin.ownkernels import CUDA_SOURCE as OWN_CUDA
from agent.builtin.ownkernels import own_call


@dataclass
class KernelSig:
    """How model_new.py calls a group's kernel: argument kinds in order."""

    name: str
    operands: list[str]  # node names read
    outputs: list[str]  # node names written
    generic: list[int]  # operand indices that need (inner, extent)
    scalars: list[Scalar]
    bytes_moved: int = 0
    ops: list[str] = field(default_factory=list)
    symbol: str = ""  # the exported function to call: an earlier group's where the two kernels are the same text


def _bytes(plan: Plan, grp: Group) -> int:
    total = 0
    for o in grp.operands:
        total += 4 * math.prod(plan.graph.node(o.value).dims)
    for name in grp.outputs:
        total += 4 * math.prod(plan.graph.node(name).dims)
    return total


def _header_comment(plan: Plan, grp: Group, sig: KernelSig) -> str:
    ins = ", ".join(f"{o.value}{fmt_shape(plan.graph.node(o.value).shape)} ({o.kind})" for o in grp.operands)
    outs = ", ".join(f"{o}{fmt_shape(plan.graph.node(o).shape)}" for o in grp.outputs)
    red = grp.reductions
    kind = f"{len(red)} row reduction(s) over {math.prod(grp.full[grp.split :])} columns" if red else "elementwise"
    return (
        f"// {grp.name}: fuses {len(grp.nodes)} graph ops [{', '.join(n.name + '=' + n.op for n in grp.nodes)}]\n"
        f"//   iteration space {fmt_shape(grp.full)} split as rows={fmt_shape(grp.full[: grp.split])} x "
        f"cols={fmt_shape(grp.full[grp.split :])}; {kind}\n"
        f"//   reads {ins}\n//   writes {outs}\n"
        f"//   moves {sig.bytes_moved / 1e6:.2f} MB (each input read once per phase, each output written once)"
    )


class _Body:
    """Emits the statements of one group's phases for a given way of reading operands."""

    def __init__(self, plan: Plan, grp: Group, cuda: bool):
        self.plan, self.grp, self.cuda = plan, grp, cuda
        self.scalar_names = {s: f"s{i}" for i, s in enumerate(grp.scalars)}
        self.gen_rows = False  # CPU row loops: GEN operands read through a per-row pointer

    def gen_row_pointers(self) -> list[str]:
        """For each GEN operand (a block spanning row and column dims): where the row r = base / cols
        starts in it. Within a row its index ((base + c) / inner) % ext is that start plus c / inner
        (ext is a multiple of the row's extent in the block), so the column loop does no modulo and
        vectorises where inner is 1 (the block reaches the last dim)."""
        out = []
        for k, o in enumerate(self.grp.operands):
            if o.kind == GEN:
                start = f"base % ext{k}" if o.block[1] == len(self.grp.full) else f"(base / inner{k}) % ext{k}"
                out.append(f"const float* __restrict__ g{k} = in{k} + ({start});")
        return out

    def arg(self, a: object, lane: str) -> str | None:
        if isinstance(a, Ref):
            if self.grp.member(a.name):
                return f"v_{a.name}" + ("" if self.grp.space[a.name] == "row" else lane)
            k = self.grp.operand_index(a.name)
            kind = self.grp.operands[k].kind
            return f"a{k}" + ("" if kind in (SCALAR, ROW, ROWGEN) else lane)
        if isinstance(a, Scalar):
            return self.scalar_names[a] if a.runtime else c_float(a.value)
        if isinstance(a, Lit) and a.value is None:
            return None
        raise ValueError(f"unexpected argument {a!r}")

    def value(self, a: object, lane: str) -> str:
        """arg() of an operand that is always given (a tensor or a scalar, never an omitted bound)."""
        s = self.arg(a, lane)
        assert s is not None, f"no value for {a!r}"
        return s

    def cone(self, targets: list[str]) -> list[Node]:
        """Full-space group nodes needed to compute targets inside a column loop, in order."""
        return self.cone_avail(targets, set())[0]

    def cone_avail(self, targets: list[str], avail: set[str]) -> tuple[list[Node], set[str]]:
        """(cone(targets) without the values in `avail`, the values of `avail` it reads): what a
        loop computes when some values are already at hand (kept in registers by earlier loops on
        cuda, or in the output row on the cpu)."""
        need: set[str] = set()
        used: set[str] = set()
        stack = list(targets)
        while stack:
            t = stack.pop()
            if not self.grp.member(t) or self.grp.space[t] == "row":
                continue
            if t in avail:
                used.add(t)
                continue
            if t not in need:
                need.add(t)
                stack += self.plan.graph.node(t).refs()
        return [n for n in self.grp.nodes if n.name in need], used

    def operands_of(self, nodes: list[Node], extra: tuple[str, ...] = ()) -> list[int]:
        ks = set()
        for refs in [n.refs() for n in nodes] + [list(extra)]:
            for a in refs:
                if not self.grp.member(a):
                    k = self.grp.operand_index(a)
                    if self.grp.operands[k].kind not in (SCALAR, ROW, ROWGEN):
                        ks.add(k)
        return sorted(ks)

    def compute(self, nodes: list[Node], lane: str) -> list[str]:
        out = []
        for n in nodes:
            args = [self.arg(a, lane) for a in n.args]
            out.append(f"const float v_{n.name}{lane} = {c_op(n, args, self.cuda)};")
        return out

    def row_nodes_ready(self, done: set[str]) -> list[Node]:
        """Per-row elementwise nodes whose inputs are all available, in order."""
        ready = []
        for n in self.grp.nodes:
            if n.name in done or n.op in REDUCTIONS or self.grp.space[n.name] != "row":
                continue
            if all((not self.grp.member(d)) or d in done for d in n.refs()):
                ready.append(n)
                done.add(n.name)
        return ready

    def load(self, k: int, lane_index: str = "i", col: str = "c") -> str:
        o = self.grp.operands[k]
        if o.kind == FULL:
            return f"in{k}[{lane_index}]"
        if o.kind == COL:
            return f"in{k}[{col}]"
        if o.kind == COLGEN:
            return f"in{k}[({col} / inner{k}) % ext{k}]"
        if o.kind == GEN and self.gen_rows:
            # the row's start in the operand is computed once per row (gen_row_pointer)
            return f"g{k}[{col}]" if o.block[1] == len(self.grp.full) else f"g{k}[{col} / inner{k}]"
        if o.kind == GEN:
            return f"in{k}[({lane_index} / inner{k}) % ext{k}]"
        if o.kind == GAP:  # outer block index times the inner block's extent, plus the inner index
            return f"in{k}[(({lane_index} / gap{k}) % ext{k}) * inner{k} + {lane_index} % inner{k}]"
        raise ValueError(o.kind)

    def row_load(self, k: int) -> str:
        o = self.grp.operands[k]
        if o.kind == SCALAR:
            return f"in{k}[0]"
        if o.kind == ROW:
            return f"in{k}[r]"
        return f"in{k}[(r / inner{k}) % ext{k}]"


def signature(plan: Plan, grp: Group) -> KernelSig:
    sig = KernelSig(
        grp.name,
        [o.value for o in grp.operands],
        list(grp.outputs),
        [k for k, o in enumerate(grp.operands) if o.kind in (GEN, ROWGEN, COLGEN, GAP)],
        list(grp.scalars),
    )
    sig.bytes_moved = _bytes(plan, grp)
    sig.ops = [n.op for n in grp.nodes]
    return sig


def _generic_names(grp: Group, k: int) -> list[str]:
    """The index arguments of generic operand k: its inner and outer extents, and a GAP's gap."""
    return [f"inner{k}", f"ext{k}"] + ([f"gap{k}"] if grp.operands[k].kind == GAP else [])


def _params(grp: Group, sig: KernelSig) -> str:
    p = [f"const float* __restrict__ in{k}" for k in range(len(grp.operands))]
    p += [f"float* __restrict__ out{k}" for k in range(len(grp.outputs))]
    p += ["int64_t rows", "int64_t cols"]
    for k in sig.generic:
        p += [f"int64_t {name}" for name in _generic_names(grp, k)]
    p += [f"float s{i}" for i in range(len(grp.scalars))]
    return ", ".join(p)


def _call_args(grp: Group, sig: KernelSig) -> str:
    a = [f"in{k}" for k in range(len(grp.operands))] + [f"out{k}" for k in range(len(grp.outputs))] + ["rows", "cols"]
    for k in sig.generic:
        a += _generic_names(grp, k)
    a += [f"s{i}" for i in range(len(grp.scalars))]
    return ", ".join(a)


def _phases(body: _Body) -> list[tuple[Node | None, list[Node], list[Node]]]:
    """[(reduction or None for the final loop, full-space nodes in its loop, row nodes after it)]"""
    grp = body.grp
    done: set[str] = set()
    phases: list[tuple[Node | None, list[Node], list[Node]]] = []
    pre = body.row_nodes_ready(done)
    phases.append((None, [], pre))  # the row prologue (per-row values that need no reduction)
    for red in grp.reductions:
        src = red.args[0].name
        loop = body.cone([src]) if grp.member(src) else []
        done.add(red.name)
        phases.append((red, loop, body.row_nodes_ready(done)))
    return phases


# ops whose recomputation in the final loop costs more than storing and re-reading one float
_COSTLY = {
    "exp",
    "log",
    "tanh",
    "sigmoid",
    "silu",
    "pow",
    "erf",
    "log1p",
    "expm1",
    "gelu",
    "mish",
    "softplus",
    "elu",
    "sin",
    "cos",
    "rsqrt",
    "sqrt",
}


def _kept_in_output(body: _Body, phases: list, full_out: list[str], final_nodes: list[Node]) -> str | None:
    """CPU rows: a value the last reduction loop computes and the final loop would compute again
    (softmax's exp(x - max)) is stored in the output row there and read back, instead of being
    recomputed, when that recomputation includes a costly op. One full-size output only (it is
    the scratch row); the values are the same bits as recomputing them."""
    reds = [(red, loop) for red, loop, _ in phases if red is not None]
    if len(full_out) != 1 or not reds:
        return None
    last_loop = {n.name for n in reds[-1][1]}
    shared = [n for n in final_nodes if n.name in last_loop]
    if not shared:
        return None
    keep = shared[-1].name
    if keep == full_out[0] or not any(n.op in _COSTLY for n in body.cone([keep])):
        return None
    return keep


def _final_targets(grp: Group) -> tuple[list[str], list[str]]:
    full = [o for o in grp.outputs if grp.space[o] == "full"]
    row = [o for o in grp.outputs if grp.space[o] == "row"]
    return full, row


def _src_expr(body: _Body, red: Node, lane: str) -> str:
    src = red.args[0]
    return body.value(src, lane)


# --------------------------------------------------------------------------------------------- CPU


def cpu_kernel(plan: Plan, grp: Group, config: dict) -> tuple[str, KernelSig]:
    sig = signature(plan, grp)
    body = _Body(plan, grp, cuda=False)
    sched = config.get("schedule", "static")
    L = [_header_comment(plan, grp, sig), f'extern "C" int {grp.name}({_params(grp, sig)}, void* stream) {{']
    phases = _phases(body)
    full_out, row_out = _final_targets(grp)
    final_nodes = body.cone(full_out)
    out_index = {o: k for k, o in enumerate(grp.outputs)}
    row_operands = [k for k, o in enumerate(grp.operands) if o.kind in (ROW, ROWGEN, SCALAR)]
    flat = not grp.reductions and not row_operands and all(o.kind in (FULL, GEN, GAP) for o in grp.operands)
    # `parallel:` names the construct the condition is for: on the combined `parallel for simd` an
    # unmodified if() also applies to the simd part (OpenMP 5.0), and below the threshold the loop ran scalar
    par = f"if(parallel: rows * cols >= {int(config.get('parallel_min', 1 << 17))}) "
    L.append("    (void)stream;")
    if flat:
        L.append("    const int64_t n = rows * cols;")
        L.append(f"    #pragma omp parallel for simd {par}schedule({sched})")
        L.append("    for (int64_t i = 0; i < n; ++i) {")
        for k in body.operands_of(final_nodes):
            L.append(f"        const float a{k} = {body.load(k)};")
        L += ["        " + s for s in body.compute(final_nodes, "")]
        for o in full_out:
            L.append(f"        out{out_index[o]}[i] = {body.arg(Ref(o), '')};")
        L += ["    }", "    return 0;", "}"]
        return "\n".join(L), sig
    keep = _kept_in_output(body, phases, full_out, final_nodes)
    if keep is not None:
        final_nodes = body.cone_avail(full_out, {keep})[0]
    L.append(f"    #pragma omp parallel for {par}schedule({sched})")
    L.append("    for (int64_t r = 0; r < rows; ++r) {")
    L.append("        const int64_t base = r * cols;")
    body.gen_rows = True
    L += ["        " + s for s in body.gen_row_pointers()]
    for k in row_operands:
        L.append(f"        const float a{k} = {body.row_load(k)};")
    for phase_no, (red, loop, after) in enumerate(phases):
        if red is not None:
            acc = f"acc_{red.name}"
            clause = "+" if red.op in ("sum", "mean") else ("max" if red.op == "amax" else "min")
            L.append(f"        {_acc_type(red.op)} {acc} = {REDUCE_INIT[red.op]};")
            L.append(f"        #pragma omp simd reduction({clause}:{acc})")
            L.append("        for (int64_t c = 0; c < cols; ++c) {")
            L.append("            const int64_t i = base + c; (void)i;")
            for k in body.operands_of(loop, (red.args[0].name,)):
                L.append(f"            const float a{k} = {body.load(k)};")
            L += ["            " + s for s in body.compute(loop, "")]
            L.append("            " + c_accumulate(red.op, acc, _src_expr(body, red, "")))
            if (
                keep is not None and phase_no == len(phases) - 1
            ):  # the last reduction's loop (_phases: one per reduction, in order)
                L.append(f"            out{out_index[full_out[0]]}[i] = v_{keep};  // kept for the final loop")
            L.append("        }")
            val = f"(float)({acc} / (double)cols)" if red.op == "mean" else f"(float){acc}"
            L.append(f"        const float v_{red.name} = {val};")
        L += ["        " + s for s in body.compute(after, "")]
    if full_out:
        L.append("        #pragma omp simd")
        L.append("        for (int64_t c = 0; c < cols; ++c) {")
        L.append("            const int64_t i = base + c; (void)i;")
        for k in body.operands_of(final_nodes):
            L.append(f"            const float a{k} = {body.load(k)};")
        if keep is not None:
            L.append(f"            const float v_{keep} = out{out_index[full_out[0]]}[i];")
        L += ["            " + s for s in body.compute(final_nodes, "")]
        for o in full_out:
            L.append(f"            out{out_index[o]}[i] = {body.arg(Ref(o), '')};")
        L.append("        }")
    for o in row_out:
        L.append(f"        out{out_index[o]}[r] = v_{o};")
    L += ["    }", "    return 0;", "}"]
    return "\n".join(L), sig


CPU_PRELUDE = """// Generated by the Kernelwright built-in policy (cpu backend): plain C++, OpenMP, no torch headers.
// Every exported function is extern "C" and returns 0 on success.
#include <cmath>
#include <cstdint>

// max/min as selects (vectorisable; libm's fmaxf/fminf are calls that stop `omp simd`)
static inline float kw_maxf(float a, float b) { return a > b ? a : b; }
static inline float kw_minf(float a, float b) { return a < b ? a : b; }

// exp as a polynomial with masks (Cephes' expf: range reduction by ln2 in two parts, degree-6
// polynomial, max error about 1 ulp), written so that `omp simd` loops vectorise it: libm's expf
// is a call, and GCC will not vectorise float selects (?:) here under its default trapping-math,
// so every choice is an integer mask. 2^n is applied in two halves, so results from the
// denormals up to FLT_MAX are right; exp(-inf) = 0, exp(inf) = inf, exp(NaN) = NaN.
static inline float kw_pick(int32_t mask, float a, float b) {  // mask ? a : b, mask all ones or zero
    const int32_t r = (__builtin_bit_cast(int32_t, a) & mask) | (__builtin_bit_cast(int32_t, b) & ~mask);
    return __builtin_bit_cast(float, r);
}
static inline float kw_expf(float x) {
    const int32_t big = -(int32_t)(x > 88.72283f), tiny = -(int32_t)(x < -103.972f), nan = -(int32_t)(x != x);
    const float xc = kw_pick(big | tiny | nan, kw_pick(big, 88.72283f, kw_pick(tiny, -103.972f, 0.0f)), x);
    const float fx = xc * 1.44269504088896341f + 0.5f;
    int32_t ni = (int32_t)fx;  // truncation, then down to the floor
    ni -= (int32_t)((float)ni > fx);
    const float n = (float)ni;
    const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t n1 = ni >> 1, n2 = ni - n1;
    const uint32_t b1 = (uint32_t)(n1 + 127) << 23, b2 = (uint32_t)(n2 + 127) << 23;
    const float y = p * __builtin_bit_cast(float, b1) * __builtin_bit_cast(float, b2);
    return kw_pick(big | tiny | nan, kw_pick(big, INFINITY, kw_pick(tiny, 0.0f, x)), y);
}
// tanh as Cephes' tanhf with masks (vectorised like kw_expf): an odd polynomial below 0.625,
// 1 - 2 / (exp(2|x|) + 1) with x's sign above; about 2 ulp; +-inf -> +-1, NaN -> NaN.
static inline float kw_tanhf(float x) {
    const int32_t sign = __builtin_bit_cast(int32_t, x) & INT32_MIN;
    const float ax = __builtin_bit_cast(float, __builtin_bit_cast(int32_t, x) & INT32_MAX);
    const float big = 1.0f - 2.0f / (kw_expf(2.0f * ax) + 1.0f);
    const float z = x * x;
    const float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z
                          + 1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
    return kw_pick(-(int32_t)(ax >= 0.625f), __builtin_bit_cast(float, __builtin_bit_cast(int32_t, big) | sign), small);
}
// log as Cephes' logf with masks: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), a degree-9
// polynomial in m - 1, e * ln2 added in two parts; about 1 ulp. Denormals are scaled first;
// log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN -> NaN.
static inline float kw_logf(float x) {
    const int32_t den = -(int32_t)(x < 1.17549435e-38f), zero = -(int32_t)(x == 0.0f), neg = -(int32_t)(x < 0.0f);
    const int32_t inf = -(int32_t)(x == INFINITY), nan = -(int32_t)(x != x);
    const int32_t b = __builtin_bit_cast(int32_t, kw_pick(den, x * 8388608.0f, x));
    int32_t e = ((b >> 23) & 0xff) - 126 - (den & 23);
    float m = __builtin_bit_cast(float, (b & 0x007fffff) | 0x3f000000);  // [0.5, 1)
    const int32_t low = -(int32_t)(m < 0.707106781186547524f);
    e -= low & 1;
    m = kw_pick(low, m + m - 1.0f, m - 1.0f);
    const float z = m * m;
    float y = 7.0376836292e-2f;
    y = y * m - 1.1514610310e-1f;
    y = y * m + 1.1676998740e-1f;
    y = y * m - 1.2420140846e-1f;
    y = y * m + 1.4249322787e-1f;
    y = y * m - 1.6668057665e-1f;
    y = y * m + 2.0000714765e-1f;
    y = y * m - 2.4999993993e-1f;
    y = y * m + 3.3333331174e-1f;
    const float fe = (float)e;
    y = y * m * z - 2.12194440e-4f * fe - 0.5f * z;
    const float r = m + y + 0.693359375f * fe;
    return kw_pick(zero | inf | neg | nan, kw_pick(zero, -INFINITY, kw_pick(inf, INFINITY, kw_pick(nan, x, __builtin_nanf("")))), r);
}
// log1p(x) = log(u) * x / (u - 1) with u = 1 + x (exact where u - 1 is 0: log1p(x) = x for
// tiny x); about 2 ulp; -1 -> -inf, below -1 NaN, inf -> inf.
static inline float kw_log1pf(float x) {
    const float u = 1.0f + x, d = u - 1.0f;
    const int32_t keep = -(int32_t)(d == 0.0f) | -(int32_t)(x == INFINITY);
    return kw_pick(keep, x, kw_logf(u) * (x / kw_pick(keep, 1.0f, d)));
}
// erf, fitted for this file (least squares in double, relative weights): |x| < 1: x + x * P(x^2),
// P of degree 6 with 2/sqrt(pi) - 1 as its constant term (relative error 1e-9); 1 <= |x| < 4:
// 1 - exp(-x^2) * Q(1/|x|), Q of degree 9 fitting erfc(x) * exp(x^2) (relative error 2e-8);
// 4 and above: 1 (erfc(4) = 1.5e-8 is below half an ulp of 1). About 1-2 ulp, sign by symmetry;
// +-inf -> +-1, NaN -> NaN. Vectorises like kw_expf (libm's erff is a call, which kept exact-GELU
// kernels scalar).
static inline float kw_erff(float x) {
    const int32_t sign = __builtin_bit_cast(int32_t, x) & INT32_MIN, nan = -(int32_t)(x != x);
    const float ax = __builtin_bit_cast(float, __builtin_bit_cast(int32_t, x) & INT32_MAX);
    const float t = ax * ax;
    float p = 7.847259258e-05f;
    p = p * t - 8.008189034e-04f;
    p = p * t + 5.188099109e-03f;
    p = p * t - 2.685369179e-02f;
    p = p * t + 1.128358245e-01f;
    p = p * t - 3.761262596e-01f;
    p = p * t + 1.283791661e-01f;
    const float small = ax + ax * p;
    const float s = 1.0f / kw_pick(-(int32_t)(ax > 1.0f), ax, 1.0f);
    float q = 2.967723645e-02f;
    q = q * s - 1.740014404e-01f;
    q = q * s + 4.245884418e-01f;
    q = q * s - 5.183950067e-01f;
    q = q * s + 2.225583047e-01f;
    q = q * s + 2.390853763e-01f;
    q = q * s - 3.789607584e-01f;
    q = q * s + 2.122417279e-02f;
    q = q * s + 5.616815090e-01f;
    q = q * s + 1.257577824e-04f;
    const float mid = 1.0f - kw_expf(-t) * q;
    const float r = kw_pick(-(int32_t)(ax < 1.0f), small, kw_pick(-(int32_t)(ax < 4.0f), mid, 1.0f));
    return kw_pick(nan, x, __builtin_bit_cast(float, __builtin_bit_cast(int32_t, r) | sign));
}

"""

TAPFOLD_ONE = r"""
// kw_tapfold: a convolution weight composed with an average pool (agent.builtin.poolfold), per plane
// [planes = out_ch * in_ch] and up to 3 spatial dims (unused ones of size 1, alpha 1, beta 0, gamma 0):
//   out[p, t0, t1, t2] = scale * sum_{j < win} w[p, u0, u1, u2],  u_i = alpha_i t_i + beta_i j_i + gamma_i
// where every u_i lies in [0, src_i) (a tap outside the weight adds nothing).
#ifdef __CUDACC__
#define KW_TF_HD __host__ __device__
#else
#define KW_TF_HD
#endif
struct kw_fold3 { int64_t src[3], taps[3], win[3], alpha[3], beta[3], gamma[3]; };

KW_TF_HD static inline float kw_tapfold_one(const float* w, int64_t e, const kw_fold3& f, float scale) {
    const int64_t t2 = e % f.taps[2], t1 = (e / f.taps[2]) % f.taps[1], t0 = (e / (f.taps[2] * f.taps[1])) % f.taps[0];
    const int64_t p = e / (f.taps[2] * f.taps[1] * f.taps[0]);
    const float* wp = w + p * f.src[0] * f.src[1] * f.src[2];
    float acc = 0.0f;
    for (int64_t j0 = 0; j0 < f.win[0]; ++j0) {
        const int64_t u0 = f.alpha[0] * t0 + f.beta[0] * j0 + f.gamma[0];
        if (u0 < 0 || u0 >= f.src[0]) continue;
        for (int64_t j1 = 0; j1 < f.win[1]; ++j1) {
            const int64_t u1 = f.alpha[1] * t1 + f.beta[1] * j1 + f.gamma[1];
            if (u1 < 0 || u1 >= f.src[1]) continue;
            for (int64_t j2 = 0; j2 < f.win[2]; ++j2) {
                const int64_t u2 = f.alpha[2] * t2 + f.beta[2] * j2 + f.gamma[2];
                if (u2 < 0 || u2 >= f.src[2]) continue;
                acc += wp[(u0 * f.src[1] + u1) * f.src[2] + u2];
            }
        }
    }
    return acc * scale;
}

#define KW_TAPFOLD_ARGS const float* w, float* out, int64_t planes, int64_t s0, int64_t s1, int64_t s2, \
    int64_t t0, int64_t t1, int64_t t2, int64_t k0, int64_t k1, int64_t k2, int64_t a0, int64_t a1, int64_t a2, \
    int64_t b0, int64_t b1, int64_t b2, int64_t c0, int64_t c1, int64_t c2, float scale, void* stream
#define KW_TAPFOLD_SPEC {{s0, s1, s2}, {t0, t1, t2}, {k0, k1, k2}, {a0, a1, a2}, {b0, b1, b2}, {c0, c1, c2}}

// kw_tapbox: out[o, i] (+)= sign * sum of the weight over the box of taps [lo, hi) (agent.builtin.meanfold);
// the weight is [O, I, s0, s1, s2], or [I, O, ...] for a transposed convolution.
KW_TF_HD static inline float kw_tapbox_one(const float* w, int64_t e, int64_t O, int64_t I, const int64_t* s,
                                           const int64_t* lo, const int64_t* hi, int64_t transposed) {
    const int64_t o = e / I, i = e % I;
    const float* wp = w + (transposed ? i * O + o : o * I + i) * s[0] * s[1] * s[2];
    float acc = 0.0f;
    for (int64_t t0 = lo[0]; t0 < hi[0]; ++t0)
        for (int64_t t1 = lo[1]; t1 < hi[1]; ++t1)
            for (int64_t t2 = lo[2]; t2 < hi[2]; ++t2) acc += wp[(t0 * s[1] + t1) * s[2] + t2];
    return acc;
}

#define KW_TAPBOX_ARGS const float* w, float* out, int64_t O, int64_t I, int64_t s0, int64_t s1, int64_t s2, \
    int64_t l0, int64_t l1, int64_t l2, int64_t h0, int64_t h1, int64_t h2, float sign, int64_t transposed, \
    int64_t accumulate, void* stream
"""

CPU_DERIVED = (
    r"""
// bn_fold: batch norm (eval) folded into the preceding layer's weights, from the loaded parameters.
//   W'[o, :] = W[o, :] * g[o] / sqrt(var[o] + eps);  b'[o] = (b[o] - mean[o]) * g[o] / sqrt(var[o] + eps) + beta[o]
//   has_* = 0 marks an absent tensor (bias=False, affine=False). Moves |W| twice plus 5 vectors.
extern "C" int bn_fold(const float* w, const float* b, const float* mean, const float* var, const float* gamma,
                       const float* beta, float* w_out, float* b_out, int64_t out_ch, int64_t per_ch, float eps,
                       int64_t has_b, int64_t has_gamma, int64_t has_beta, void* stream) {
    (void)stream;
    #pragma omp parallel for
    for (int64_t o = 0; o < out_ch; ++o) {
        const float s = (has_gamma ? gamma[o] : 1.0f) / sqrtf(var[o] + eps);
        for (int64_t k = 0; k < per_ch; ++k) w_out[o * per_ch + k] = w[o * per_ch + k] * s;
        b_out[o] = ((has_b ? b[o] : 0.0f) - mean[o]) * s + (has_beta ? beta[o] : 0.0f);
    }
    return 0;
}

"""
    + TAPFOLD_ONE
    + r"""
extern "C" int kw_tapfold(KW_TAPFOLD_ARGS) {
    (void)stream;
    const kw_fold3 f = KW_TAPFOLD_SPEC;
    const int64_t n = planes * t0 * t1 * t2;
    #pragma omp parallel for
    for (int64_t e = 0; e < n; ++e) out[e] = kw_tapfold_one(w, e, f, scale);
    return 0;
}

extern "C" int kw_tapbox(KW_TAPBOX_ARGS) {
    (void)stream;
    const int64_t s[3] = {s0, s1, s2}, lo[3] = {l0, l1, l2}, hi[3] = {h0, h1, h2};
    #pragma omp parallel for
    for (int64_t e = 0; e < O * I; ++e) {
        const float v = sign * kw_tapbox_one(w, e, O, I, s, lo, hi, transposed);
        out[e] = accumulate ? out[e] + v : v;
    }
    return 0;
}

// colsum: out[k] = sum_n W[n, k] for a row-major [n_rows, n_cols] matrix (summed rows of a weight).
extern "C" int colsum(const float* w, float* out, int64_t n_rows, int64_t n_cols, void* stream) {
    (void)stream;
    #pragma omp parallel for
    for (int64_t k = 0; k < n_cols; ++k) {
        double acc = 0.0;
        for (int64_t n = 0; n < n_rows; ++n) acc += w[n * n_cols + k];
        out[k] = (float)acc;
    }
    return 0;
}

// kw_gather: dst = src read through sizes s0..s5 and strides t0..t5 (elements; a permuted, sliced
// or expanded view, leading dims padded with size 1), written contiguously. Fused kernels read raw
// pointers, so a strided operand is copied once at the boundary (model_new.py, _kw_contig);
// kw_gather64 does the same for int64 (an expanded or sliced index tensor), kw_gather8 for bool,
// uint8 and int8 (a causal mask sliced from a buffer).
template <typename E>
static int kw_gather_t(const E* src, E* dst, int64_t n, const int64_t* S, const int64_t* T) {
    const int64_t inner = S[5];
    #pragma omp parallel for if (n > (1 << 16))
    for (int64_t o = 0; o < n / (inner > 0 ? inner : 1); ++o) {
        int64_t r = o, off = 0;
        for (int d = 4; d >= 0; --d) {
            off += (r % S[d]) * T[d];
            r /= S[d];
        }
        const E* in = src + off;
        E* out = dst + o * inner;
        for (int64_t c = 0; c < inner; ++c) out[c] = in[c * T[5]];
    }
    return 0;
}
extern "C" int kw_gather(const float* src, float* dst, int64_t n, int64_t s0, int64_t s1, int64_t s2, int64_t s3,
                         int64_t s4, int64_t s5, int64_t t0, int64_t t1, int64_t t2, int64_t t3, int64_t t4,
                         int64_t t5, void* stream) {
    (void)stream;
    const int64_t S[6] = {s0, s1, s2, s3, s4, s5}, T[6] = {t0, t1, t2, t3, t4, t5};
    return kw_gather_t(src, dst, n, S, T);
}
extern "C" int kw_gather64(const int64_t* src, int64_t* dst, int64_t n, int64_t s0, int64_t s1, int64_t s2,
                           int64_t s3, int64_t s4, int64_t s5, int64_t t0, int64_t t1, int64_t t2, int64_t t3,
                           int64_t t4, int64_t t5, void* stream) {
    (void)stream;
    const int64_t S[6] = {s0, s1, s2, s3, s4, s5}, T[6] = {t0, t1, t2, t3, t4, t5};
    return kw_gather_t(src, dst, n, S, T);
}
extern "C" int kw_gather8(const uint8_t* src, uint8_t* dst, int64_t n, int64_t s0, int64_t s1, int64_t s2,
                          int64_t s3, int64_t s4, int64_t s5, int64_t t0, int64_t t1, int64_t t2, int64_t t3,
                          int64_t t4, int64_t t5, void* stream) {
    (void)stream;
    const int64_t S[6] = {s0, s1, s2, s3, s4, s5}, T[6] = {t0, t1, t2, t3, t4, t5};
    return kw_gather_t(src, dst, n, S, T);
}
"""
)

# -------------------------------------------------------------------------------------------- CUDA

CUDA_PRELUDE = r"""// Generated by the Kernelwright built-in policy (cuda backend): plain CUDA + cuBLAS, no torch headers.
// Every exported function is extern "C" and returns 0 or the CUDA/cuBLAS error code.
#include <cstdint>
#include <cmath>
#include <cuda_runtime.h>
#include <cublas_v2.h>

// Reduce v over the TPR consecutive threads that own one row (TPR <= 32: shuffles inside the
// warp; TPR > 32: one row per block, warp partials through shared memory).
// Sums accumulate in double (cheap next to the memory traffic, and it keeps the result within
// rounding of the exact value whatever the row length); max/min stay in float.
template <int TPR, int OP, typename T>  // OP 0: sum, 1: max, 2: min
__device__ __forceinline__ T row_reduce(T v, double* smem) {
    constexpr int W = TPR < 32 ? TPR : 32;
    #pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) {
        const T u = __shfl_xor_sync(0xffffffffu, v, o, W);
        v = OP == 0 ? v + u : (OP == 1 ? (v > u ? v : u) : (v < u ? v : u));
    }
    if constexpr (TPR > 32) {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        __syncthreads();  // smem may still be read by a previous reduction
        if (lane == 0) smem[warp] = v;
        __syncthreads();
        v = lane < TPR / 32 ? (T)smem[lane] : (OP == 0 ? (T)0 : (T)smem[0]);
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const T u = __shfl_xor_sync(0xffffffffu, v, o);
            v = OP == 0 ? v + u : (OP == 1 ? (v > u ? v : u) : (v < u ? v : u));
        }
    }
    return v;
}

static inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

"""

CUDA_DERIVED = (
    r"""
// bn_fold: batch norm (eval) folded into the preceding layer's weights, from the loaded parameters.
//   W'[o, :] = W[o, :] * g[o] / sqrt(var[o] + eps);  b'[o] = (b[o] - mean[o]) * g[o] / sqrt(var[o] + eps) + beta[o]
__global__ void bn_fold_kernel(const float* w, const float* b, const float* mean, const float* var, const float* gamma,
                               const float* beta, float* w_out, float* b_out, int64_t out_ch, int64_t per_ch, float eps,
                               int64_t has_b, int64_t has_gamma, int64_t has_beta) {
    const int64_t o = blockIdx.x;
    const float s = (has_gamma ? gamma[o] : 1.0f) / sqrtf(var[o] + eps);
    for (int64_t k = threadIdx.x; k < per_ch; k += blockDim.x) w_out[o * per_ch + k] = w[o * per_ch + k] * s;
    if (threadIdx.x == 0) b_out[o] = ((has_b ? b[o] : 0.0f) - mean[o]) * s + (has_beta ? beta[o] : 0.0f);
}

extern "C" int bn_fold(const float* w, const float* b, const float* mean, const float* var, const float* gamma,
                       const float* beta, float* w_out, float* b_out, int64_t out_ch, int64_t per_ch, float eps,
                       int64_t has_b, int64_t has_gamma, int64_t has_beta, void* stream) {
    bn_fold_kernel<<<(unsigned)out_ch, 128, 0, (cudaStream_t)stream>>>(w, b, mean, var, gamma, beta, w_out, b_out,
                                                                        out_ch, per_ch, eps, has_b, has_gamma, has_beta);
    return (int)cudaGetLastError();
}

"""
    + TAPFOLD_ONE
    + r"""
__global__ void kw_tapfold_kernel(const float* w, float* out, int64_t n, kw_fold3 f, float scale) {
    const int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (e < n) out[e] = kw_tapfold_one(w, e, f, scale);
}

extern "C" int kw_tapfold(KW_TAPFOLD_ARGS) {
    const kw_fold3 f = KW_TAPFOLD_SPEC;
    const int64_t n = planes * t0 * t1 * t2;
    kw_tapfold_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(w, out, n, f, scale);
    return (int)cudaGetLastError();
}

struct kw_box3 { int64_t s[3], lo[3], hi[3]; };

__global__ void kw_tapbox_kernel(const float* w, float* out, int64_t O, int64_t I, kw_box3 b, float sign,
                                 int64_t transposed, int64_t accumulate) {
    const int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (e >= O * I) return;
    const float v = sign * kw_tapbox_one(w, e, O, I, b.s, b.lo, b.hi, transposed);
    out[e] = accumulate ? out[e] + v : v;
}

extern "C" int kw_tapbox(KW_TAPBOX_ARGS) {
    const kw_box3 b = {{s0, s1, s2}, {l0, l1, l2}, {h0, h1, h2}};
    kw_tapbox_kernel<<<(unsigned)((O * I + 255) / 256), 256, 0, (cudaStream_t)stream>>>(w, out, O, I, b, sign,
                                                                                         transposed, accumulate);
    return (int)cudaGetLastError();
}

// colsum: out[k] = sum_n W[n, k] (summed rows of a weight matrix), one thread per column, coalesced.
__global__ void colsum_kernel(const float* w, float* out, int64_t n_rows, int64_t n_cols) {
    const int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (k >= n_cols) return;
    double acc = 0.0;
    for (int64_t n = 0; n < n_rows; ++n) acc += w[n * n_cols + k];
    out[k] = (float)acc;
}

extern "C" int colsum(const float* w, float* out, int64_t n_rows, int64_t n_cols, void* stream) {
    colsum_kernel<<<(unsigned)((n_cols + 255) / 256), 256, 0, (cudaStream_t)stream>>>(w, out, n_rows, n_cols);
    return (int)cudaGetLastError();
}

// kw_gather: dst = src read through sizes s0..s5 and strides t0..t5 (elements; a permuted, sliced
// or expanded view, leading dims padded with size 1), written contiguously. Fused kernels read raw
// pointers, so a strided operand is copied once at the boundary (model_new.py, _kw_contig).
struct kw_dims6 { int64_t s[6]; int64_t t[6]; };
template <typename E>
__global__ void kw_gather_kernel(const E* __restrict__ src, E* __restrict__ dst, int64_t n, kw_dims6 d) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i, off = 0;
        for (int k = 5; k >= 0; --k) {
            off += (r % d.s[k]) * d.t[k];
            r /= d.s[k];
        }
        dst[i] = src[off];
    }
}
template <typename E>
static int kw_gather_launch(const E* src, E* dst, int64_t n, kw_dims6 d, void* stream) {
    if (n == 0) return 0;
    const int64_t blocks = (n + 255) / 256 < 65535 ? (n + 255) / 256 : 65535;
    kw_gather_kernel<E><<<(unsigned)blocks, 256, 0, (cudaStream_t)stream>>>(src, dst, n, d);
    return (int)cudaGetLastError();
}
extern "C" int kw_gather(const float* src, float* dst, int64_t n, int64_t s0, int64_t s1, int64_t s2, int64_t s3,
                         int64_t s4, int64_t s5, int64_t t0, int64_t t1, int64_t t2, int64_t t3, int64_t t4,
                         int64_t t5, void* stream) {
    return kw_gather_launch(src, dst, n, kw_dims6{{s0, s1, s2, s3, s4, s5}, {t0, t1, t2, t3, t4, t5}}, stream);
}
extern "C" int kw_gather64(const int64_t* src, int64_t* dst, int64_t n, int64_t s0, int64_t s1, int64_t s2,
                           int64_t s3, int64_t s4, int64_t s5, int64_t t0, int64_t t1, int64_t t2, int64_t t3,
                           int64_t t4, int64_t t5, void* stream) {
    return kw_gather_launch(src, dst, n, kw_dims6{{s0, s1, s2, s3, s4, s5}, {t0, t1, t2, t3, t4, t5}}, stream);
}
extern "C" int kw_gather8(const uint8_t* src, uint8_t* dst, int64_t n, int64_t s0, int64_t s1, int64_t s2,
                          int64_t s3, int64_t s4, int64_t s5, int64_t t0, int64_t t1, int64_t t2, int64_t t3,
                          int64_t t4, int64_t t5, void* stream) {
    return kw_gather_launch(src, dst, n, kw_dims6{{s0, s1, s2, s3, s4, s5}, {t0, t1, t2, t3, t4, t5}}, stream);
}

// kw_copy: a stream-ordered device-to-device copy; the CUDA-graph forward copies its inputs into the
// graph's buffers and its result out with it (model_new.py, _graphed).
extern "C" int kw_copy(void* dst, const void* src, int64_t nbytes, void* stream) {
    return (int)cudaMemcpyAsync(dst, src, (size_t)nbytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream);
}

// gemm_nt: out[M, N] = x[M, K] @ W[N, K]^T through cuBLAS (full FP32, no TF32), the handle created
// once per process and bound to the caller's stream. Row-major out^T = W x^T in cuBLAS's column-major.
static cublasHandle_t kw_cublas() {
    static cublasHandle_t h = nullptr;
    if (h == nullptr) {
        if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return nullptr;
        cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
    }
    return h;
}

extern "C" int gemm_nt(const float* x, const float* w, float* out, int64_t M, int64_t N, int64_t K, void* stream) {
    cublasHandle_t h = kw_cublas();
    if (h == nullptr) return 1000;
    cublasSetStream(h, (cudaStream_t)stream);
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t st = cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha, w, (int)K, x,
                                          (int)K, &beta, out, (int)N);
    return st == CUBLAS_STATUS_SUCCESS ? (int)cudaGetLastError() : 1000 + (int)st;
}
"""
)

_OPCODE = {"sum": 0, "mean": 0, "amax": 1, "amin": 2}


def _acc_type(op: str) -> str:
    return "double" if op in ("sum", "mean") else "float"


def cuda_kernel(plan: Plan, grp: Group, config: dict) -> tuple[str, KernelSig]:
    sig = signature(plan, grp)
    body = _Body(plan, grp, cuda=True)
    if grp.reductions:
        return _cuda_rows(plan, grp, body, sig, config), sig
    return _cuda_elementwise(plan, grp, body, sig, config), sig


def _lane_body(
    body: _Body,
    nodes: list[Node],
    ks: list[int],
    vec: int,
    vector_kinds: tuple,
    cached: tuple[set[int], set[int]] = (set(), set()),
) -> list[str]:
    """Statements for `vec` consecutive elements (lanes .x .y .z .w) starting at i0 / c0.
    cached (register-cached rows): operands read from their register copy ra{k}[j], and operands
    loaded here and stored there for a later phase."""
    L = []
    comps = "xyzw"
    from_regs, to_regs = cached
    for k in ks:
        o = body.grp.operands[k]
        if vec == 4 and k in from_regs:
            L.append(f"const float4 a{k}v = ra{k}[j];")
            for ln in range(4):
                L.append(f"const float a{k}_{ln} = a{k}v.{comps[ln]};")
        elif vec == 4 and o.kind in vector_kinds:
            idx = "i0" if o.kind == FULL else "c0"
            L.append(f"const float4 a{k}v = *reinterpret_cast<const float4*>(in{k} + {idx});")
            if k in to_regs:
                L.append(f"ra{k}[j] = a{k}v;")
            for ln in range(4):
                L.append(f"const float a{k}_{ln} = a{k}v.{comps[ln]};")
        else:
            for ln in range(vec):
                L.append(f"const float a{k}_{ln} = {body.load(k, f'(i0 + {ln})', f'(c0 + {ln})')};")
    for ln in range(vec):
        L += body.compute(nodes, f"_{ln}")
    return L


def _cuda_elementwise(plan: Plan, grp: Group, body: _Body, sig: KernelSig, config: dict) -> str:
    block = int(config.get("block", 256))
    full_out, row_out = _final_targets(grp)
    nodes = body.cone(full_out)
    ks = body.operands_of(nodes)
    row_ks = [k for k, o in enumerate(grp.operands) if o.kind in (ROW, ROWGEN, SCALAR)]
    out_index = {o: k for k, o in enumerate(grp.outputs)}
    L = [
        _header_comment(plan, grp, sig),
        f"//   launch: {block} threads per block, grid-stride, VEC=4 (float4) when aligned else scalar",
        "//   index math in 32 bits when the tensor allows it (64-bit division is slow on the GPU)",
        "template <int VEC, typename IT>",
        f"__global__ void __launch_bounds__({block}) {grp.name}_kernel({_params(grp, sig).replace('int64_t', 'IT')}) {{",
        "    const IT n = rows * cols;",
        "    const IT stride = (IT)gridDim.x * blockDim.x;",
        "    for (IT q = blockIdx.x * (IT)blockDim.x + threadIdx.x; q < n / VEC; q += stride) {",
        "        const IT i0 = q * VEC;",
        "        const IT r = i0 / cols, c0 = i0 - r * cols; (void)r; (void)c0;",
    ]
    for k in row_ks:
        L.append(f"        const float a{k} = {body.row_load(k)};")
    # per-row values (batch norm's rsqrt(var + eps) per channel): once per element group, not per lane
    L += ["        " + s for s in body.compute(body.row_nodes_ready(set()), "")]
    # a per-row output (a 0-d tensor's log, a per-head scale): written by the row's first element
    L += [f"        if (c0 == 0) out{out_index[o]}[r] = v_{o};" for o in row_out]
    L.append("        if constexpr (VEC == 4) {")
    L += ["            " + s for s in _lane_body(body, nodes, ks, 4, (FULL, COL))]
    for o in full_out:
        vals = ", ".join(f"{body.arg(Ref(o), f'_{ln}')}" for ln in range(4))
        L.append(f"            *reinterpret_cast<float4*>(out{out_index[o]} + i0) = make_float4({vals});")
    L.append("        } else {")
    L += ["            " + s for s in _lane_body(body, nodes, ks, 1, ())]
    for o in full_out:
        L.append(f"            out{out_index[o]}[i0] = {body.arg(Ref(o), '_0')};")
    L += ["        }", "    }", "}", ""]
    vec_ptrs = [f"in{k}" for k, o in enumerate(grp.operands) if o.kind in (FULL, COL)] + [
        f"out{out_index[o]}" for o in full_out
    ]
    cond = " && ".join(["(rows * cols) % 4 == 0", "cols % 4 == 0"] + [f"aligned16({p})" for p in vec_ptrs])
    L += [
        f'extern "C" int {grp.name}({_params(grp, sig)}, void* stream) {{',
        "    const int64_t n = rows * cols;",
        "    if (n == 0) return 0;",
        f"    const bool vec = {cond};",
        "    const int64_t work = vec ? n / 4 : n;",
        f"    const int64_t blocks = (work + {block} - 1) / {block};",
        "    const unsigned grid = (unsigned)(blocks < 65536 * 8 ? blocks : 65536 * 8);",
        "    const bool small = n < (int64_t)1 << 31;",
        "    if (vec && small)",
        f"        {grp.name}_kernel<4, uint32_t><<<grid, {block}, 0, (cudaStream_t)stream>>>({_call_args(grp, sig)});",
        "    else if (vec)",
        f"        {grp.name}_kernel<4, int64_t><<<grid, {block}, 0, (cudaStream_t)stream>>>({_call_args(grp, sig)});",
        "    else if (small)",
        f"        {grp.name}_kernel<1, uint32_t><<<grid, {block}, 0, (cudaStream_t)stream>>>({_call_args(grp, sig)});",
        "    else",
        f"        {grp.name}_kernel<1, int64_t><<<grid, {block}, 0, (cudaStream_t)stream>>>({_call_args(grp, sig)});",
        "    return (int)cudaGetLastError();",
        "}",
    ]
    return "\n".join(L)


ROW_UNROLL = 4  # unroll factor of the float4 loops of row kernels (benchmarks.timer_check --ab-unroll compares 1)


def _register_plan(body: _Body, phases: list, full_out: list[str]) -> list[dict]:
    """Register-cached rows: per loop (each reduction's, then the final one) the nodes it still
    computes, the kept values it reads (`used`) and stores for later loops (`stores`), and the
    row operands it reads from registers (`from_regs`) or loads and keeps (`to_regs`)."""
    loops: list[dict] = []
    computed: set[str] = set()
    for red, _, _ in phases:
        if red is None:
            continue
        nodes, used = body.cone_avail([red.args[0].name], computed)
        loops.append({"nodes": nodes, "used": used, "extra": (red.args[0].name,)})
        computed |= {n.name for n in nodes}
    if full_out:
        nodes, used = body.cone_avail(full_out, computed)
        loops.append({"nodes": nodes, "used": used, "extra": ()})
    kept = set().union(*(lp["used"] for lp in loops)) if loops else set()
    first: dict[int, int] = {}
    uses: dict[int, int] = {}
    for i, lp in enumerate(loops):
        lp["stores"] = [n.name for n in lp["nodes"] if n.name in kept]
        lp["ks"] = body.operands_of(lp["nodes"], lp["extra"])
        for k in lp["ks"]:
            if body.grp.operands[k].kind == FULL:
                first.setdefault(k, i)
                uses[k] = uses.get(k, 0) + 1
    for i, lp in enumerate(loops):
        lp["from_regs"] = {k for k in lp["ks"] if k in first and first[k] < i}
        lp["to_regs"] = {k for k in lp["ks"] if first.get(k) == i and uses[k] > 1}
    return loops


def _cuda_rows(plan: Plan, grp: Group, body: _Body, sig: KernelSig, config: dict) -> str:
    tpr = int(config.get("tpr", 256))
    nc = int(config.get("cache", 0))  # float4 chunks of a row per thread kept in registers (0: none)
    block = max(tpr, 128) if tpr <= 32 else tpr
    rows_per_block = block // tpr
    full_out, row_out = _final_targets(grp)
    final_nodes = body.cone(full_out)
    out_index = {o: k for k, o in enumerate(grp.outputs)}
    row_ks = [k for k, o in enumerate(grp.operands) if o.kind in (ROW, ROWGEN, SCALAR)]
    L = [
        _header_comment(plan, grp, sig),
        f"//   launch: {tpr} threads per row ({'one warp' if tpr == 32 else 'sub-warp' if tpr < 32 else 'one block'}"
        f" per row), {rows_per_block} row(s) per block of {block}; float4 loads when cols % 4 == 0 and aligned",
    ]
    phases = _phases(body)
    regs = _register_plan(body, phases, full_out) if nc else []
    if nc:
        kept = sorted({n for lp in regs for n in lp["stores"]})
        held = sorted({k for lp in regs for k in lp["to_regs"]})
        L += [
            f"//   register-cached rows (rows of at most {nc * 4 * tpr} columns): each thread loads its {nc} float4",
            f"//   chunks of a row once and keeps them, and the values later loops reuse ({', '.join(kept) or 'none'}),",
            "//   in registers, so the reduction loops after the first read no memory and recompute nothing;",
            "//   longer rows take the uncached loops",
        ]
    L += [
        "template <int VEC, int NC>" if nc else "template <int VEC>",
        f"__global__ void __launch_bounds__({block}) {grp.name}_kernel({_params(grp, sig)}) {{",
        f"    constexpr int TPR = {tpr};",
        "    __shared__ double smem[32];",
        "    const int t = threadIdx.x % TPR;",
        f"    const int64_t r = (int64_t)blockIdx.x * {rows_per_block} + threadIdx.x / TPR;",
        "    const bool valid = r < rows;",
        "    const int64_t ncols = valid ? cols : 0;  // idle rows still take part in the shuffles",
        "    const int64_t base = r * cols; (void)base;",
    ]
    for k in row_ks:
        L.append(f"    const float a{k} = valid ? {body.row_load(k)} : 0.0f;")
    if nc:
        for k in held:
            L.append(f"    float4 ra{k}[NC > 0 ? NC : 1]; (void)ra{k};")
        for n in kept:
            L.append(f"    float4 kv_{n}[NC > 0 ? NC : 1]; (void)kv_{n};")
    reg_loops = iter(regs)  # one plan per loop() below, in its call order: each reduction's loop, then the final one

    def cached_loop(lp: dict[str, Any], emit_tail: Callable[[int], list[str]]) -> list[str]:
        comps = "xyzw"
        inner = [f"const float v_{n}_{ln} = kv_{n}[j].{comps[ln]};" for n in sorted(lp["used"]) for ln in range(4)]
        inner += _lane_body(body, lp["nodes"], lp["ks"], 4, (FULL, COL), (lp["from_regs"], lp["to_regs"]))
        inner += [f"kv_{n}[j] = make_float4({', '.join(f'v_{n}_{ln}' for ln in range(4))});" for n in lp["stores"]]
        inner += emit_tail(4)
        return (
            [
                "    if constexpr (VEC == 4 && NC > 0) {",
                "        #pragma unroll",
                "        for (int j = 0; j < NC; ++j) {",
                "            const int64_t c4 = t + (int64_t)j * TPR;",
                "            if (c4 < ncols / 4) {",
                "                const int64_t c0 = c4 * 4, i0 = base + c0; (void)i0;",
            ]
            + ["                " + x for x in inner]
            + ["            }", "        }", "    } else"]
        )

    def loop(nodes: list[Node], emit_tail: Callable[[int], list[str]], extra: tuple[str, ...] = ()) -> list[str]:
        ks = body.operands_of(nodes, extra)
        # unrolled: a thread issues several row loads before it waits for the first (a row of
        # 4096 floats is 4 float4 loads per thread at 256 threads per row)
        out = cached_loop(next(reg_loops), emit_tail) if nc else []
        out += (
            ["    if constexpr (VEC == 4) {"]
            + ([f"        #pragma unroll {ROW_UNROLL}"] if ROW_UNROLL > 1 else [])
            + [
                "        for (int64_t c4 = t; c4 < ncols / 4; c4 += TPR) {",
                "            const int64_t c0 = c4 * 4, i0 = base + c0; (void)i0;",
            ]
        )
        out += ["            " + s for s in _lane_body(body, nodes, ks, 4, (FULL, COL))]
        out += ["            " + s for s in emit_tail(4)]
        out += [
            "        }",
            "    } else {",
            "        for (int64_t c0 = t; c0 < ncols; c0 += TPR) {",
            "            const int64_t i0 = base + c0; (void)i0;",
        ]
        out += ["            " + s for s in _lane_body(body, nodes, ks, 1, ())]
        out += ["            " + s for s in emit_tail(1)]
        out += ["        }", "    }"]
        return out

    for red, nodes, after in phases:
        if red is not None:
            acc = f"acc_{red.name}"
            L.append(f"    {_acc_type(red.op)} {acc} = {REDUCE_INIT[red.op]};")

            def tail(vec: int, red: Node = red, acc: str = acc) -> list[str]:
                return [c_accumulate(red.op, acc, _src_expr(body, red, f"_{ln}")) for ln in range(vec)]

            L += loop(nodes, tail, (red.args[0].name,))
            L.append(f"    {acc} = row_reduce<TPR, {_OPCODE[red.op]}>({acc}, smem);")
            val = f"(float)({acc} / (double)cols)" if red.op == "mean" else f"(float){acc}"
            L.append(f"    const float v_{red.name} = {val};")
        L += ["    " + s for s in body.compute(after, "")]
    if full_out:

        def store(vec: int) -> list[str]:
            if vec == 4:
                return [
                    f"*reinterpret_cast<float4*>(out{out_index[o]} + i0) = make_float4("
                    + ", ".join(body.value(Ref(o), f"_{ln}") for ln in range(4))
                    + ");"
                    for o in full_out
                ]
            return [f"out{out_index[o]}[i0] = {body.arg(Ref(o), '_0')};" for o in full_out]

        L += loop(final_nodes, store)
    for o in row_out:
        L.append(f"    if (valid && t == 0) out{out_index[o]}[r] = v_{o};")
    L += ["}", ""]
    vec_ptrs = [f"in{k}" for k, o in enumerate(grp.operands) if o.kind in (FULL, COL)] + [
        f"out{out_index[o]}" for o in full_out
    ]
    cond = " && ".join(["cols % 4 == 0"] + [f"aligned16({p})" for p in vec_ptrs])
    L += [
        f'extern "C" int {grp.name}({_params(grp, sig)}, void* stream) {{',
        "    if (rows == 0) return 0;",
        f"    const bool vec = {cond};",
        f"    const unsigned grid = (unsigned)((rows + {rows_per_block} - 1) / {rows_per_block});",
    ]
    launch = f"<<<grid, {block}, 0, (cudaStream_t)stream>>>({_call_args(grp, sig)});"
    if nc:
        L += [
            f"    if (vec && cols <= {nc * 4 * tpr}) {grp.name}_kernel<4, {nc}>{launch}",
            f"    else if (vec) {grp.name}_kernel<4, 0>{launch}",
            f"    else {grp.name}_kernel<1, 0>{launch}",
        ]
    else:
        L += [f"    if (vec) {grp.name}_kernel<4>{launch}", f"    else {grp.name}_kernel<1>{launch}"]
    L += ["    return (int)cudaGetLastError();", "}"]
    return "\n".join(L)


def _kernel_key(src: str, name: str) -> str:
    """A group's source up to its name, its comments and the names of its values (v_<node>,
    renamed in order of appearance): two groups with the same key compute the same function of
    their arguments, so one compiled copy serves both (DenseNet-121's 120 batch-norm + ReLU groups
    were 390 KB of CUDA, over the workspace's limit per file, and as many copies to compile)."""
    body = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith("//"))
    body = re.sub(rf"\b{re.escape(name)}(?![0-9])", "@", body)
    names: dict[str, str] = {}
    return re.sub(r"\bv_\w+", lambda m: names.setdefault(m.group(0), f"v{len(names)}"), body)


def generate(
    plan: Plan, backend: str, configs: dict[str, dict], gemm: str = "cublas", limit: int | None = None
) -> tuple[dict[str, str], list[KernelSig]]:
    """The kernel source for a plan as files (path -> text); configs maps group name -> launch
    configuration; gemm "3xtf32" (cuda) adds the split and the TF32 GEMM (agent.builtin.tf32x3).
    limit: the most bytes one file may hold (agent.workspace.MAX_FILE_BYTES); see kernel_files."""
    head = CUDA_PRELUDE if backend == "cuda" else CPU_PRELUDE
    bodies = []
    sigs = []
    seen: dict[str, str] = {}  # a group's source with its own name blanked -> the group that emitted it
    for grp in plan.groups:
        fn = cuda_kernel if backend == "cuda" else cpu_kernel
        src, sig = fn(plan, grp, configs.get(grp.name, {}))
        key = _kernel_key(src, grp.name)
        if key in seen:  # the same kernel (a network's repeated layers): one copy to compile, called by both
            sig.symbol = seen[key]
        else:
            seen[key] = grp.name
            bodies.append(src + "\n")
        sigs.append(sig)
    tail = [CUDA_DERIVED if backend == "cuda" else CPU_DERIVED]
    if backend == "cuda" and gemm == "3xtf32":  # after CUDA_DERIVED: it uses kw_cublas()
        tail.append(tf32x3.CUDA)
    if any(own_call(st.node, plan.graph) for st in plan.steps if st.node is not None):
        tail.append(OWN_CUDA if backend == "cuda" else OWN_CPU)
    return kernel_files(backend, head, bodies, "\n".join(tail), limit), sigs


def kernel_files(backend: str, head: str, bodies: list[str], tail: str, limit: int | None) -> dict[str, str]:
    """One translation unit, kernels/fused.cu (.cpp on cpu), in as many files as the limit per
    file needs: where head + bodies + tail is over it, the bodies go into headers
    kernels/fused_partN.cuh (.h) that fused.cu includes between its head and its tail. Headers,
    because the build compiles every kernels/*.cu: a part a later, smaller candidate no longer
    includes stays in the workspace (no tool deletes a file) and must then be inert, which an
    unincluded header is and a second .cu defining the same kernels is not. A body over the limit
    on its own stays in its part; the size check then names it (pipeline.check_sizes)."""
    main, ext = ("kernels/fused.cu", ".cuh") if backend == "cuda" else ("kernels/fused.cpp", ".h")
    whole = "\n".join([head, *bodies, tail])
    if limit is None or len(whole.encode()) <= limit:
        return {main: whole}
    parts: list[list[str]] = [[]]
    size = 0
    budget = limit - 256  # the part's comment line
    for body in bodies:
        n = len(body.encode()) + 1
        if parts[-1] and size + n > budget:
            parts.append([])
            size = 0
        parts[-1].append(body)
        size += n
    names = [f"fused_part{i + 1}{ext}" for i in range(len(parts))]
    files = {}
    for name, chunk in zip(names, parts, strict=True):
        note = f"// Part of {main.removeprefix('kernels/')}, which includes it (one translation unit).\n"
        files[f"kernels/{name}"] = note + "\n".join(chunk)
    includes = "\n".join(f'#include "{n}"' for n in names)
    return {main: "\n".join([head, includes, "", tail]), **files}


def default_config(grp: Group, backend: str) -> dict:
    if backend == "cpu":
        return {"schedule": "static", "parallel_min": 1 << 20}
    if grp.reductions:
        cols = math.prod(grp.full[grp.split :])
        return {"tpr": 32 if cols <= 1024 else 256}
    return {"block": 256}


def _cached_variant(grp: Group, cols: int, first: int) -> list[dict]:
    """The register-cached row kernel ({"tpr", "cache": float4 chunks per thread}) where a row fits:
    about one float4 per chunk for each row operand and each value a later loop reuses, within
    64 floats per thread (32 at 1024 threads per block, where a thread has at most 64 registers)."""
    if cols % 4:
        return []
    slots = sum(1 for o in grp.operands if o.kind == FULL) + len(grp.reductions)
    for tpr in dict.fromkeys((first, 512, 1024)):
        nc = -(-cols // (4 * tpr))
        if nc * 4 * slots <= (32 if tpr == 1024 else 64):
            return [{"tpr": tpr, "cache": nc}]
    return []


def config_variants(grp: Group, backend: str) -> list[dict]:
    """A few launch configurations worth timing for this group (the default first)."""
    if backend == "cpu":
        # OpenMP pays a fork/join and a barrier per call: worth it only above some work size
        # (and a second OpenMP runtime next to PyTorch's competes for the same cores)
        return [
            {"schedule": "static", "parallel_min": 1 << 20},
            {"schedule": "static", "parallel_min": 1 << 15},
            {"schedule": "static", "parallel_min": 1 << 62},
        ]
    if grp.reductions:
        cols = math.prod(grp.full[grp.split :])
        rows = math.prod(grp.full[: grp.split])
        opts = [32, 128, 256] if cols <= 2048 else [256, 512, 1024]
        if rows < 264 and cols > 4096:
            opts = [1024, 512]
        first = default_config(grp, backend)["tpr"]
        return [{"tpr": first}] + _cached_variant(grp, cols, first) + [{"tpr": t} for t in opts if t != first]
    return [{"block": 256}, {"block": 128}, {"block": 512}]
