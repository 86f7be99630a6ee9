"""The built-in expert policy: analyse, rewrite, generate, check, time, keep the best.

It needs no model. Every turn goes through the same tools a model uses (write_file,
compile, evaluate, profile, finish), so its trajectories have the same shape as a model's:

1. analyse: capture the forward (torch.fx + ShapeProp, in a child process), show the graph,
   the eager per-op breakdown and the speed-of-light floor; profile the reference;
2. fuse the captured graph as it is (one kernel per group of elementwise ops and row
   reductions, library GEMM/convolution), compile and evaluate it;
3. one turn per exact rewrite (diagonal products, linear+sum, scalar chains, identities,
   batch-norm folding), each regenerated, compiled and evaluated;
4. a few launch configurations of the final kernels, the fastest kept;
5. back to the best verified candidate, and finish, saying plainly when nothing beat the
   baselines.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from agent.builtin.attention import attention_to_sdpa
from agent.builtin.convsearch import TAG, has_convolutions, with_search
from agent.builtin.cudagraph import TAG as GRAPH_TAG
from agent.builtin.fallback import fallback_model
from agent.builtin.fusion import Plan
from agent.builtin.generalise import (
    MAX_PROBES,
    PROBE_ATTEMPTS,
    NeedsInputs,
    NotGeneral,
    atoms,
    bind_scalars,
    form,
    generalise,
    ints_as_literals,
    moving_scalars,
    odd_neighbour,
    probe_source,
    probe_values,
    same_structure,
    scalars_as_arguments,
    size_constants,
)
from agent.builtin.graph import LIBRARY, Analysis, Graph, Node, analyze_source
from agent.builtin.kernelgen import config_variants
from agent.builtin.modelgen import speed_of_light
from agent.builtin.ownkernels import op_label
from agent.builtin.pipeline import (
    Candidate,
    GenerationError,
    build_candidate,
    library_parts,
    make_plan,
    own_parts,
    strided_operands,
)
from agent.builtin.rewrites import Rewrite, all_rewrites, channels_last_convs
from agent.builtin.tf32x3 import LINE as TF32X3_LINE
from agent.builtin.tf32x3 import TITLE as TF32X3_TITLE
from agent.builtin.tf32x3 import pays_off as tf32x3_pays_off
from agent.events import BestChanged, EvaluationEvent, Event, TurnStarted
from agent.policy import Action, Observation, Policy, TaskInfo, ToolInvocation
from sandbox.options import PRESETS

FALLBACK_TITLE = "The reference's own computation (library/ATen calls)"
REFERENCE_GRAPH_TITLE = "Replay the reference's forward as one CUDA graph"

# Nominal peaks used only for the first, pre-measurement estimate (the sandbox's profile
# reports measured ceilings, which the later turns quote instead).
_NOMINAL: dict[str, dict[str, Any]] = {
    "cuda": {"bandwidth_gbs": 4800.0, "tflops": 60.0, "device": "H200 (nominal: 4.8 TB/s, 60 TFLOP/s fp32)"}
}


@dataclass
class _Tried:
    label: str
    files: dict[str, str]
    status: str = ""
    reward: int = -1
    median_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    fraction_of_sol: float | None = None
    reasons: list[str] = field(default_factory=list)
    graph: Graph | None = None  # the graph this candidate was generated from
    gemm: str = "cublas"
    host_ms: float | None = None  # host time of one timed call (the timer's host median)
    device_ms: float | None = None  # device time of one timed call
    noisy: str = ""  # the sandbox's milestone line when the window was noisy (judged on its worst pairing)
    memory: str = ""  # the sandbox's device-memory findings: the share held, a retry with the whole device

    @property
    def correct(self) -> bool:
        return self.status == "ok" and self.reward >= 1

    def key(self) -> tuple:
        """As the loop ranks candidates (agent.loop.BestCandidate.beats): reward, then the speedup
        vs eager measured in each candidate's own paired window, then the median."""
        vs = self.speedup_vs_eager if self.speedup_vs_eager is not None else -math.inf
        return (self.reward, vs, -(self.median_ms if self.median_ms is not None else math.inf))


@dataclass
class _Step:
    kind: str  # "analyse", "candidate", "variant", "graph", "restore", "finish"
    title: str = ""
    graph: Graph | None = None
    rewrite: Rewrite | None = None
    variant: int = 0
    gemm: str = "cublas"  # cuda: "cublas" (the .cu's gemm_nt) or "aten" (torch.mm)


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4g} ms"


class BuiltinPolicy(Policy):
    """Offline expert policy (name "builtin"); options: profile_best (profile the best candidate
    before finishing: per-kernel table and fraction of speed of light), max_variants (launch
    configurations tried per run, the default included), try_unrewritten (also fuse the graph
    before the rewrites, to show what each rewrite buys), analysis_timeout_s, first_correct
    (finish at the first correct candidate: the coverage benchmark asks whether one exists, not how
    fast it is), profile_reference (the eager per-op breakdown in the analysis)."""

    name = "builtin"

    def __init__(
        self,
        profile_best: bool = True,
        max_variants: int = 3,
        analysis_timeout_s: float = 300.0,
        try_unrewritten: bool = True,
        first_correct: bool = False,
        profile_reference: bool = True,
        probe: bool = False,
    ):
        self.probe = probe  # a capture at other sizes for agent.builtin.generalise: plans, never probes
        self.profile_best = profile_best
        self.first_correct = first_correct
        self.profile_reference = profile_reference
        self.max_variants = max(1, max_variants)
        self.analysis_timeout_s = analysis_timeout_s
        self.try_unrewritten = try_unrewritten
        self._reset_state()

    def describe(self) -> str:
        return "builtin"

    def _reset_state(self) -> None:
        self.task: TaskInfo | None = None
        self.analysis: Analysis | None = None
        self.steps: list[_Step] = []
        self.pos = 0
        self.call_no = 0
        self.tried: list[_Tried] = []
        self.pending: _Tried | None = None
        self.final_graph: Graph | None = None
        self.final_plan: Plan | None = None
        self.final_candidate: Candidate | None = None
        self.roofline: dict[str, Any] | None = None
        self.ref_profile_text = ""
        self.rewrites: list[Rewrite] = []
        self.notes: list[str] = []
        self.torch_ops = "forbid"
        self.library_parts: list[str] = []  # what stays a library/ATen call in the final plan, and why
        self.own_parts: list[str] = []  # ATen ops of the final plan that kernels of our own compute
        self.blockers: list[str] = []  # under torch-ops=forbid: what keeps a candidate from being accepted
        self.failures: list[str] = []  # one line per step that did not give a correct candidate, in order
        self.probes: list[BuiltinPolicy] = []  # the same plan at other sizes (agent.builtin.generalise)
        self.probe_values: dict[str, list[int]] = {}  # each size constant's probe values, in order
        self.check_captures: dict[str, BuiltinPolicy | None] = {}  # per constant, at its check value (_checks)
        self.probe_timeout_s = self.analysis_timeout_s  # a probe's capture: 4x the task's own, 60 s at least
        self.probe_of: tuple[str, int] | None = None  # a probe's constant and the index of its value
        self.general_note = ""  # why candidates stay specialised to the captured shapes, when they do

    # -- Policy interface ------------------------------------------------------------------
    def reset(self, task: TaskInfo, tool_specs: list[dict[str, Any]], history: list[Event]) -> None:
        self._reset_state()
        self.task = task
        self._plan_steps()
        if history:
            self._resume(history)

    def next_action(self, observations: list[Observation]) -> Action:
        self._absorb(observations)
        self._reference_next()
        if self.pos >= len(self.steps) or (self.first_correct and self._best() is not None):
            return self._finish_action()
        step = self.steps[self.pos]
        self.pos += 1
        if step.kind in ("analyse", "finish"):
            return self._analyse_action() if step.kind == "analyse" else self._finish_action()
        try:
            return self._step_action(step)
        except Exception as exc:  # a bug in one step's generation must not end the run before the fallback
            head = f"Step {step.kind} failed inside the built-in policy ({type(exc).__name__}: {exc}); moving on.\n\n"
            return self._next_or_finish(head)

    def _step_action(self, step: _Step) -> Action:
        if step.kind == "candidate":
            return self._candidate_action(step)
        if step.kind == "variant":
            return self._variant_action(step)
        if step.kind == "graph":
            return self._graph_action()
        if step.kind == "restore":
            return self._restore_action()
        if step.kind == "fallback":
            return self._fallback_action()
        if step.kind == "refgraph":
            return self._reference_graph_action()
        if step.kind == "search":
            return self._search_action()
        return self._finish_action()

    # -- planning --------------------------------------------------------------------------
    def _plan_steps(self) -> None:
        assert self.task is not None
        backend = self.task.backend if self.task.backend in ("cpu", "cuda") else "cpu"
        self.backend = backend
        self.torch_ops = str((self.task.options or {}).get("torch_ops", "forbid"))
        t0 = time.monotonic()
        self.analysis = analyze_source(
            self.task.source,
            device=backend,
            profile=self.profile_reference,
            timeout=self.analysis_timeout_s,
            write_out_attention=self.torch_ops != "allow",  # one SDPA call is an ATen op forbid rejects
        )
        self.analysis_s = time.monotonic() - t0  # where a problem's time goes (benchmarks.kernelbench rows)
        self.steps = [_Step("analyse")]
        if not self.analysis.ok:
            self.blockers = [f"the forward could not be captured ({_headline(self.analysis.error)})"]
            self.failures.append(
                ("the reference raises: " if self.analysis.data.get("task_fails") else "not captured: ")
                + _headline(self.analysis.error)
            )
            self._plan_without_graph()
            return
        g = self.analysis.graph
        assert g is not None, "a capture that succeeded has its graph"
        self._plan_probes()
        try:
            self._plan_generated(g)
        except Exception as exc:  # a bug in the rewrites or the planner must not cost the fallback
            why = f"planning failed inside the built-in policy ({type(exc).__name__}: {exc})"
            self.steps = [_Step("analyse")]
            self.final_graph = self.final_plan = None
            self.rewrites, self.library_parts, self.own_parts = [], [], []
            self.blockers.append(why)
            self.failures.append(f"not planned: {_headline(why)}")
            self._plan_without_graph()

    def _plan_probes(self) -> None:
        """An exported graph under forbid, where the sandbox runs its shape trial: the same plan
        made from one capture per size constant with that constant changed, so that each
        candidate's sizes can follow its inputs (agent.builtin.generalise) instead of falling back
        to the reference's forward. A value where the reference fails or builds another module
        (as the sandbox's trial passes over it) is followed by the constant's next probe value."""
        assert self.task is not None and self.analysis is not None
        preset = str((self.task.options or {}).get("preset", "default"))
        if (
            self.probe
            or self.analysis.data.get("capture") != "export"
            or self.torch_ops == "allow"
            or not PRESETS.get(preset, PRESETS["default"]).get("shape_trial")
        ):
            return
        consts = size_constants(self.task.source)
        if not consts:  # the shape trial finds nothing to change either: the specialised forward passes it
            return
        if len(consts) > MAX_PROBES:
            self.general_note = f"{len(consts)} size constants, more than the {MAX_PROBES} the probes vary"
            return
        self.probe_values = {name: probe_values(v) for name, (v, _) in consts.items()}
        self.probe_timeout_s = min(self.analysis_timeout_s, max(60.0, 4 * self.analysis_s))  # the task's own capture's
        pending = list(consts)  # a constant the reference cannot run without stays fixed (the guard keeps it)
        for attempt in range(PROBE_ATTEMPTS):
            tries = [(n, attempt) for n in pending if attempt < len(self.probe_values[n])]
            # the captures are sandboxed child processes: two at a time (a CPU host's cores, a
            # GPU's analysis admission decides the rest)
            with ThreadPoolExecutor(max_workers=2) as pool:
                subs = list(pool.map(lambda t: self._probe(*t), tries))
            for (name, _), sub in zip(tries, subs, strict=True):
                self.analysis_s += sub.analysis_s  # the probes' captures count as analysis time
                if self._same_module(sub):
                    self.probes.append(sub)
                    pending.remove(name)
        if not self.probes:
            self.general_note = "the task could not be captured the same way at other sizes"

    def _probe(self, name: str, attempt: int) -> BuiltinPolicy:
        """The plan captured with the size constant `name` at its probe value number `attempt`."""
        assert self.task is not None and self.analysis is not None
        task = self.task
        sub = BuiltinPolicy(
            profile_best=False,
            max_variants=self.max_variants,
            analysis_timeout_s=self.probe_timeout_s,
            try_unrewritten=self.try_unrewritten,
            profile_reference=False,
            probe=True,
        )
        value = self.probe_values[name][attempt] if attempt >= 0 else self._check_value(name)
        src = probe_source(ints_as_literals(task.source), name, value)
        sub.reset(TaskInfo(task.name, src, task.backend, dict(task.options or {})), [], [])
        sub.probe_of = (name, attempt)
        return sub

    def _check_value(self, name: str) -> int:
        """`name`'s value in a check capture: odd (a half of it does not divide), near the task's,
        and none of its probes' values."""
        assert self.task is not None
        used = {self.probe_values[name][p.probe_of[1]] for p in self.probes if p.probe_of and p.probe_of[0] == name}
        return odd_neighbour(size_constants(self.task.source)[name][0], used)

    def _check_capture(self, name: str) -> BuiltinPolicy | None:
        """The task captured with `name` at its check value, once per constant for every step
        (None where that is not this module)."""
        if name not in self.check_captures:
            sub = self._probe(name, -1)
            self.analysis_s += sub.analysis_s
            self.check_captures[name] = sub if self._same_module(sub) else None
        return self.check_captures[name]

    def _checks(self, step: _Step, probes: list[BuiltinPolicy], hoist: bool) -> Any:
        """generalise's `checks`: the candidate for `step` captured once more per probed constant,
        at a size no binding was fitted on (`_check_value`, attempt -1), with its atoms; only those
        of this module. Run when generalise asks (a size bound as a half)."""

        def run() -> list[tuple[dict[str, str], dict[str, int]]]:
            assert self.analysis is not None and self.analysis.graph is not None
            names = [n.name for n in self.analysis.graph.inputs()]
            out = []
            for name in dict.fromkeys(p.probe_of[0] for p in probes if p.probe_of):
                sub = self._check_capture(name)
                graph = _step_graph(sub, step) if sub is not None else None
                if sub is None or sub.analysis is None or graph is None:
                    continue
                try:  # generalise compares its form with the fitted candidates'
                    files = sub._build(graph, note=f"Step: {step.title}.", gemm=step.gemm, hoist=hoist).files
                except GenerationError:
                    continue
                out.append((files, atoms(names, sub.analysis.data.get("guard") or {})))
            return out

        return run

    def _same_module(self, sub: BuiltinPolicy) -> bool:
        """Whether a probe's capture is an export of this module at other sizes (not where the
        reference fails, or builds another module)."""
        assert self.analysis is not None
        data = sub.analysis.data if sub.analysis is not None and sub.analysis.ok else {}
        parts = (self.analysis.data.get("guard") or {}).get("parts")
        sub_parts = (data.get("guard") or {}).get("parts")
        same = parts is None or sub_parts is None or same_structure(parts, sub_parts)
        return data.get("capture") == "export" and same

    def _generalised(self, step: _Step, cand: Candidate) -> str:
        """cand's files made to follow the input sizes where the probes allow (in place); returns
        a line for the turn's message."""
        if not self.probes:
            return ""
        assert self.analysis is not None and self.analysis.graph is not None
        probes = self._probes_of_this_form(step)
        if not probes:
            return self._specialised("the captured graph differs at every size probed")
        theirs = [_step_graph(p, step) for p in probes]
        if any(g is None for g in theirs):
            return self._specialised("the plan differs at other sizes")
        names = [n.name for n in self.analysis.graph.inputs()]
        pols = [self, *probes]
        captures = [atoms(names, p.analysis.data.get("guard") or {}) for p in pols if p.analysis]
        guards = [p.analysis.data.get("guard") or {} for p in pols if p.analysis]
        graphs = [g for g in [step.graph, *theirs] if g is not None]
        try:
            moving = bool(moving_scalars(graphs))  # floats bound at run time: a check capture would need them too
            bind_scalars(graphs, captures)
        except NotGeneral as e:
            return self._specialised(str(e))
        for hoist in (True, False):  # _kw_consts is given the inputs (their shapes key its cache)
            try:
                files = [
                    p._build(gr, note=f"Step: {step.title}.", gemm=step.gemm, hoist=hoist).files
                    for p, gr in zip(pols, graphs, strict=True)
                ]
                checks = None if moving else self._checks(step, probes, hoist)
                cand.files = generalise(files, captures, guards, checks)
                return (
                    "Sizes follow the inputs: the literals of the exported graph that moved with the task's size "
                    "constants (captured again with each constant changed) are written as expressions of the "
                    "input and module sizes, so other shapes run these kernels too.\n"
                )
            except NeedsInputs:
                continue
            except (NotGeneral, GenerationError) as e:
                return self._specialised(str(e))
        return self._specialised("a size hoisted out of forward follows the inputs")

    def _probes_of_this_form(self, step: _Step) -> list[BuiltinPolicy]:
        """The probes whose candidate for `step` has this one's form (`_same_form`). A probe
        value can make a size degenerate (GroupNorm's channels per group, 64 / 32 = 2, is 1 at 32
        channels; a pyramid's last level, half of 4 / 2, is 1 x 1) and so another kernel or
        forward, where the shape trial's sizes would still run this one: such a probe gives way
        to its constant's next value whose candidate has this form, where one of the
        PROBE_ATTEMPTS values does (RetinaNet's head). A constant that changes the graph at every
        value (NeRF's number of frequencies, a layer count) is left out: it stays as captured,
        and what moved with it stays in the guard, so at another value the reference runs."""
        kept = []
        for i, sub in enumerate(self.probes):
            if sub.probe_of is None or self._same_form(sub, step) is not False:
                kept.append(sub)
                continue
            name, attempt = sub.probe_of
            for later in range(attempt + 1, min(PROBE_ATTEMPTS, len(self.probe_values[name]))):
                other = self._probe(name, later)
                self.analysis_s += other.analysis_s
                if self._same_module(other) and self._same_form(other, step):
                    self.probes[i] = other
                    kept.append(other)
                    break
        return kept

    def _same_form(self, sub: BuiltinPolicy, step: _Step) -> bool | None:
        """Whether `sub`'s candidate for `step` is this one's but for its sizes, as `generalise`
        compares them (generalise.form), after the floats that move between the two become run-time
        scalars as `bind_scalars` makes them (a scale of 1 / sqrt(head size) is a literal of the
        kernels until then); None where either has no candidate for the step. On copies."""
        mine, theirs = _step_graph(self, step), _step_graph(sub, step)
        if mine is None or theirs is None:
            return None
        pols = (self, sub)
        graphs = [copy.deepcopy(mine), copy.deepcopy(theirs)]
        try:
            scalars_as_arguments(graphs)
            forms = [form(pol._build(g, note="", gemm=step.gemm).files) for pol, g in zip(pols, graphs, strict=True)]
        except NotGeneral:
            return False
        except GenerationError:
            return None
        return forms[0] == forms[1]

    def _specialised(self, why: str) -> str:
        self.general_note = why
        self.failures.append(f"specialised to the captured shapes: {_headline(why)}")
        return (
            f"This candidate stays specialised to the captured shapes ({why}): at other shapes it runs the "
            "reference's forward, which torch-ops=forbid rejects in the sandbox's shape trial.\n"
        )

    def _plan_without_graph(self) -> None:
        """No graph to generate from: under torch-ops=allow the reference's own computation (and
        cuDNN's search on it), unless the reference itself raises."""
        assert self.analysis is not None
        if self.torch_ops == "allow" and not self.analysis.data.get("task_fails"):
            self._plan_reference()
            self._plan_search(None)
        self.steps.append(_Step("finish"))

    def _plan_reference(self) -> None:
        """Under torch-ops=allow: the reference's own computation, taken unless a generated
        candidate is already more than 5% faster than eager, and on cuda that computation replayed
        as one CUDA graph, taken only if it ran correct and launch-bound (both decided when their
        turn comes)."""
        self.steps.append(_Step("fallback", FALLBACK_TITLE))
        if self.backend == "cuda":
            self.steps.append(_Step("refgraph", REFERENCE_GRAPH_TITLE))

    def _plan_generated(self, g: Graph) -> None:
        assert self.task is not None and self.analysis is not None
        backend = self.backend
        self.rewrites = all_rewrites(g)
        if self.try_unrewritten or not self.rewrites:
            self.steps.append(_Step("candidate", "Fuse the captured graph as it is", graph=g))
        for r in self.rewrites:
            self.steps.append(_Step("candidate", r.title, graph=r.graph, rewrite=r))
        self.final_graph = self.rewrites[-1].graph if self.rewrites else g
        written_out = self._plan_attention()
        layout = (
            channels_last_convs(self.final_graph)
            if _layout_may_pay(backend, self.analysis.data, self.task.options)
            else None
        )
        if layout is not None:  # measured as one more candidate; the launch variants tune final_graph
            self.steps.append(_Step("candidate", layout.title, graph=layout.graph, rewrite=layout))
        try:
            self.final_plan = make_plan(self.final_graph)
            n_variants = (
                max(len(config_variants(grp, backend)) for grp in self.final_plan.groups)
                if self.final_plan.groups
                else 1
            )
        except GenerationError as e:
            self.final_plan, n_variants = None, 1
            self.blockers.append(f"the graph could not be planned: {e}")
            self.failures.append(f"not planned: {_headline(str(e))}")
        if self.general_note and not self.probes:
            if not self.probe:
                self.blockers.append(
                    "the exported graph is specialised to the shapes of get_inputs and its sizes could not be "
                    f"made to follow the inputs ({self.general_note}): at other shapes (the sandbox's shape "
                    "trial) the candidate runs the reference's own forward, which torch-ops=forbid rejects "
                    "(the kernelbench preset runs no shape trial)"
                )
        if self.final_plan is not None:
            plan, ops = self.final_plan, self.torch_ops
            self.library_parts = [_library_line(n, backend, plan) for n in library_parts(plan, ops)]
            self.own_parts = [_own_line(n, k) for n, k in own_parts(plan, ops)]
            self.blockers += _forbid_blockers(self.final_plan)
            if not self.final_plan.groups and not self.own_parts:
                self.blockers.append(
                    "no custom kernel is left: the forward is only library calls, and torch-ops=forbid "
                    "needs at least one kernel of the candidate's own"
                )
        if (
            backend == "cuda"
            and self.final_plan is not None
            and any(st.node is not None and st.node.op == "matmul_nt" for st in self.final_plan.steps)
        ):
            # which GEMM is faster depends on the shape: measure both, keep the faster
            self.steps.append(
                _Step(
                    "candidate",
                    "The same kernels with the GEMM through ATen (torch.mm)",
                    graph=self.final_graph,
                    gemm="aten",
                )
            )
        if backend == "cuda" and self.final_plan is not None and tf32x3_pays_off(self.final_graph):
            # float32 GEMMs bound by the CUDA cores: tensor cores at float32's accuracy, judged by its error
            self.steps.append(_Step("candidate", TF32X3_TITLE, graph=self.final_graph, gemm="3xtf32"))
        if backend == "cuda" and written_out is not None and tf32x3_pays_off(written_out):
            # the SDPA kernel may lose to the written-out form in float32: its GEMMs get 3xTF32 too
            title = f"{TF32X3_TITLE}, attention written out"
            self.steps.append(_Step("candidate", title, graph=written_out, gemm="3xtf32"))
        for v in range(1, min(n_variants, self.max_variants)):
            self.steps.append(_Step("variant", f"launch configuration {v + 1}", graph=self.final_graph, variant=v))
        if backend == "cuda" and self.final_plan is not None and self.final_plan.groups:
            # taken only if the best candidate turns out host-bound (decided when its turn comes)
            self.steps.append(_Step("graph", "Replay the forward as one CUDA graph"))
        if self.torch_ops == "allow":
            self._plan_reference()
        self._plan_search(self.final_graph)
        self.steps.append(_Step("restore"))
        self.steps.append(_Step("finish"))

    def _plan_attention(self) -> Graph | None:
        """Under torch-ops=allow, written-out attention as one SDPA call (agent.builtin.attention):
        one more candidate, and the graph the later steps tune. Returns the graph before it."""
        if self.torch_ops != "allow" or self.final_graph is None:
            return None
        r = attention_to_sdpa(self.final_graph)
        if r is None:
            return None
        r.graph.toposort()
        self.steps.append(_Step("candidate", r.title, graph=r.graph, rewrite=r))
        self.rewrites.append(r)
        before, self.final_graph = self.final_graph, r.graph
        return before

    def _plan_search(self, graph: Graph | None) -> None:
        """On a GPU, a forward that convolves gets one more candidate: the best so far with
        cuDNN's algorithm search (agent.builtin.convsearch)."""
        assert self.task is not None
        if self.backend == "cuda" and has_convolutions(graph, self.task.source):
            self.steps.append(_Step("search", "The best candidate with cuDNN's algorithm search"))

    def _build(self, g: Graph, configs: dict[str, dict] | None = None, hoist: bool = True, **kw: Any) -> Candidate:
        assert self.analysis is not None
        meta = self.analysis.data if hoist else {**self.analysis.data, "hoist": False}
        return build_candidate(g, meta, self.backend, configs, torch_ops=self.torch_ops, **kw)

    def _rebuild(self, best: _Tried, configs: dict[str, dict] | None = None, **kw: Any) -> Candidate:
        """The best's graph built again with the best's GEMM: a variant keeps the best's model_new.py,
        which calls that GEMM's kernels (a 3xTF32 forward calls kw_split3_tf32)."""
        assert best.graph is not None
        return self._build(best.graph, configs, gemm=best.gemm, **kw)

    def _resume(self, history: list[Event]) -> None:
        """Skip the turns already taken and recover what they measured (the steps are a pure
        function of the task and of what was measured, so turn k of the old run is step k here)."""
        turns = sum(1 for e in history if isinstance(e, TurnStarted))
        best: dict[str, str] | None = None
        for e in history:
            if isinstance(e, BestChanged):
                best = dict(e.files)
            if isinstance(e, EvaluationEvent):
                r = e.result
                step = self.steps[e.turn - 1] if 0 < e.turn <= len(self.steps) else None
                label = step.title if step is not None and step.title else f"turn {e.turn}"
                t = _Tried(
                    label,
                    {},
                    str(r.get("status")),
                    int(r.get("reward", -1)),
                    _median(r),
                    r.get("speedup_vs_eager"),
                    r.get("speedup_vs_compile"),
                    graph=step.graph if step is not None else None,
                    gemm=step.gemm if step is not None else "cublas",
                )
                _host_and_device(t, r)
                t.memory = _memory_findings(r)
                self.tried.append(t)
                self.pos = min(e.turn, len(self.steps) - 1)
                self._reference_next()  # as the run did after this evaluation
        self.pos = min(turns, len(self.steps) - 1)
        if best is not None:
            ok = [t for t in self.tried if t.correct]
            if ok:
                max(ok, key=lambda t: t.key()).files = best
        self.notes.append(f"resumed after {turns} turn(s)")

    # -- observations ------------------------------------------------------------------------
    def _absorb(self, observations: list[Observation]) -> None:
        for ob in observations:
            data = ob.data or {}
            if ob.name == "profile" and "profile" in data:
                res = data["profile"]
                self.roofline = res.get("roofline") or self.roofline
                self.ref_profile_text = ob.content
            if ob.name == "evaluate" and self.pending is not None:
                res = data.get("evaluation")
                t = self.pending
                if res is None:
                    t.status, t.reasons = "error", [ob.content[:300]]
                else:
                    t.status = str(res.get("status"))
                    t.reward = int(res.get("reward", -1))
                    t.median_ms = _median(res)
                    t.speedup_vs_eager = res.get("speedup_vs_eager")
                    t.speedup_vs_compile = res.get("speedup_vs_compile")
                    tim = res.get("timing") or {}
                    t.eager_ms = (tim.get("eager") or {}).get("median_ms")
                    t.compile_ms = (tim.get("compile") or {}).get("median_ms")
                    t.fraction_of_sol = (res.get("roofline") or {}).get("fraction_of_sol")
                    t.reasons = list(res.get("reasons") or [])
                    speed = res.get("speed") or {}
                    t.noisy = str(speed.get("milestone") or "") if speed.get("noisy") else ""
                    _host_and_device(t, res)
                    t.memory = _memory_findings(res)
                    if res.get("roofline"):
                        self.roofline = res["roofline"]
                self.tried.append(t)
                self.pending = None
                if not t.correct:
                    self.failures.append(
                        f"{'fallback' if t.graph is None else 'candidate'} {t.status}: "
                        + _headline("; ".join(t.reasons[:1]) or t.status)
                    )

    def _reference_next(self) -> None:
        """Once an evaluation leaves no correct candidate faster than eager by more than 5%, the
        reference's own computation (torch-ops=allow) and its CUDA graph are the next steps rather
        than the plan's last: a run whose turns or wall time end first (DenseNet-121 after 4
        evaluations, 2026-12-07) still ends with at least the reference's speed, never a slower
        generated kernel as its best, and a launch-bound reference (a recurrent layer's steps) gets
        its graph. A pure function of what was measured, so a resumed run replays it (`_resume`)."""
        if not self.tried or self.pending is not None or any(t.correct and t.reward >= 2 for t in self.tried):
            return
        for kind in ("refgraph", "fallback"):  # each inserted at pos: the fallback ends up first
            at = next((i for i in range(self.pos, len(self.steps)) if self.steps[i].kind == kind), None)
            if at is not None and at != self.pos:
                self.steps.insert(self.pos, self.steps.pop(at))

    # -- helpers ---------------------------------------------------------------------------
    def _call(self, name: str, **arguments: Any) -> ToolInvocation:
        self.call_no += 1
        return ToolInvocation(name, arguments, f"builtin-{self.call_no}")

    def _best(self, generated: bool = False) -> _Tried | None:
        """The best correct candidate; `generated`: among those generated from a graph (the ones
        launch variants and a CUDA graph of our kernels tune), not the reference's own computation."""
        ok = [t for t in self.tried if t.correct and t.files and (t.graph is not None or not generated)]
        return max(ok, key=lambda t: t.key()) if ok else None

    def label_of(self, files: dict[str, str]) -> str | None:
        """This policy's name for a candidate the loop kept (agent.loop.BestCandidate.files): the
        loop knows the best whatever turn the budget ended on, even one whose result this policy
        never read."""
        for t in [*([self.pending] if self.pending else []), *reversed(self.tried)]:
            if t.files and all(files.get(name) == text for name, text in t.files.items()):
                return t.label
        return None

    def planned_candidates(self) -> Iterator[tuple[str, dict[str, str]]]:
        """(title, files) of each candidate the plan of the task given to reset() writes, built
        without evaluating any: the launch variants are taken on the final graph (in a run they
        tune the best correct one), and a step whose graph cannot be generated is left out, as a
        run moves on from it. Lets benchmarks.cuda_compile and the `nvcc` tests compile every
        CUDA candidate the policy would write on a machine without a GPU."""
        for step in self.steps:
            try:
                if step.kind == "candidate" and step.graph is not None:
                    yield step.title, self._build(step.graph, gemm=step.gemm).files
                elif step.kind == "variant" and self.final_plan is not None and self.final_graph is not None:
                    cfgs = {
                        g.name: vs[step.variant]
                        for g in self.final_plan.groups
                        if step.variant < len(vs := config_variants(g, self.backend))
                    }
                    if cfgs:
                        yield step.title, self._build(self.final_graph, cfgs).files
            except GenerationError:
                continue

    def _last(self) -> _Tried | None:
        return self.tried[-1] if self.tried else None

    def _report_last(self) -> str:
        t = self._last()
        if t is None:
            return ""
        if t.correct:
            s = (
                f"Result of the previous step ({t.label}): correct, {_ms(t.median_ms)}, {_x(t.speedup_vs_eager)} vs "
                f"eager, {_x(t.speedup_vs_compile)} vs torch.compile (reward {t.reward})"
            )
            if t.fraction_of_sol is not None:
                s += f", {t.fraction_of_sol:.1%} of speed of light"
            return s + ".\n\n"
        why = "; ".join(t.reasons[:2]) or t.status
        return f"Result of the previous step ({t.label}): {t.status} — {why[:600]}\n\n"

    def _write(self, files: dict[str, str]) -> list[ToolInvocation]:
        """Every file of the candidate, changed or not: the workspace holds what the last candidate
        wrote, which need not be the best a variant or search starts from."""
        return [self._call("write_file", path=p, content=c) for p, c in sorted(files.items())]

    # -- turns -------------------------------------------------------------------------------
    def _analyse_action(self) -> Action:
        assert self.task is not None and self.analysis is not None
        an = self.analysis
        if not an.ok and an.data.get("task_fails"):
            msg = (
                f"Analysis of {self.task.name}: {_headline(an.error)}.\n\nThe task itself has to be fixed first: "
                "every candidate is checked against the reference's output, and the reference raises. Nothing was "
                "changed."
            )
            return Action(message=msg, tool_calls=[self._call("read_file", path="reference.py")])
        if not an.ok:
            msg = (
                f"Analysis of {self.task.name}: the forward could not be captured as a graph (neither torch.fx nor "
                f"torch.export), so the built-in policy cannot generate kernels for it.\n\nReason: {an.error}\n\n"
            )
            if self.torch_ops == "allow":
                msg += (
                    "Plan: the reference's own computation as the candidate (a ModelNew that subclasses a verbatim "
                    "copy of Model: every op stays the library/ATen call the reference makes), checked by the "
                    "sandbox like any candidate. A model-driven run (an OpenAI-compatible endpoint) can still try "
                    "to write kernels for this task."
                )
            else:
                msg += (
                    "Under torch-ops=forbid a candidate must compute with its own kernels (library GEMM/convolution "
                    "allowed), and without a graph there is nothing to generate them from: blocked by the capture. "
                    "Nothing was changed. Under torch-ops=allow the policy would submit the reference's own "
                    "computation; a model-driven run can still try this task."
                )
            return Action(message=msg, tool_calls=[self._call("read_file", path="reference.py")])
        g = an.graph
        assert g is not None, "a capture that succeeded has its graph"
        d = an.data
        how = (
            "Captured the forward with torch.fx symbolic tracing (sizes stay symbolic); shapes and dtypes from "
            "ShapeProp on the task's own inputs"
            if d.get("capture", "fx") == "fx"
            else "Captured the forward with torch.export (torch.fx could not: "
            + str(d.get("fx_error", "")).rstrip(".")
            + "): an ATen graph specialised to the task's own inputs; the candidate checks the input shapes and the "
            "model's sizes before its generated path and runs the reference's own forward for any other"
        )
        lines = [
            f"Analysis of {self.task.name} ({self.backend} backend).",
            "",
            f"{how} ({', '.join(_fmt_in(i) for i in d.get('inputs', []))}):",
            "",
            g.summary(),
            "",
        ]
        prof = d.get("eager_profile") or {}
        if prof.get("rows"):
            lines.append(
                f"Eager per-op breakdown ({prof.get('device_name')}, forward {prof.get('forward_ms', 0):.3f} ms):"
            )
            for r in prof["rows"][:8]:
                lines.append(f"  {r['name']:<34} {r['calls']:>3} call(s) {r['ms']:>9.4f} ms {r['share']:>6.1%}")
            lines.append("")
        sol = speed_of_light(g)
        lines.append(
            f"Speed of light of the task as written: {sol['flops'] / 1e6:.3g} MFLOP, at least "
            f"{sol['bytes'] / 1e6:.3g} MB of memory traffic (inputs, parameters and outputs once)."
        )
        nominal = _NOMINAL.get(self.backend)
        if nominal:
            floor = (
                max(sol["flops"] / (nominal["tflops"] * 1e12), sol["bytes"] / (nominal["bandwidth_gbs"] * 1e9)) * 1e3
            )
            lines.append(
                f"On the {nominal['device']} that is a floor of {floor:.4f} ms; the sandbox's measured "
                "ceilings follow from the profile."
            )
        if self.final_graph is not None and self.rewrites:
            sol2 = speed_of_light(self.final_graph)
            lines.append(f"After the exact rewrites planned below the work drops to {sol2['flops'] / 1e6:.3g} MFLOP.")
        lines.append("")
        notes = [x for x in d.get("notes", []) if not x.startswith("torch.fx could not capture")]
        if notes:
            lines += ["Notes: " + "; ".join(notes), ""]
        lines.append("Plan:")
        if self.rewrites:
            for r in self.rewrites:
                lines.append(f"  - rewrite: {r.title}")
        else:
            lines.append(
                "  - no algebraic rewrite applies; the win is fusion"
                if self.final_plan is None or self.final_plan.groups
                else "  - no algebraic rewrite applies, and nothing is left to fuse: the forward is library calls"
            )
        if self.final_plan is not None:
            for grp in self.final_plan.groups:
                lines.append(f"  - kernel {grp.name}: fuse [{grp.describe()}] over {grp.full}")
            for line in self.own_parts:
                lines.append(f"  - {line} (no fusion: one pass of its own)")
            for line in self.library_parts:
                lines.append(f"  - {line}")
            for kname, value in strided_operands(self.final_plan):
                how = "x.contiguous()" if self.torch_ops == "allow" else "our kw_gather kernel"
                lines.append(
                    f"  - {value} may be strided (a {self.final_plan.graph.node(value).op}): copied to contiguous "
                    f"memory at the boundary of {kname} ({how}), which reads raw pointers"
                )
        if self.torch_ops != "allow" and self.blockers:
            lines.append(
                "  - under torch-ops=forbid these keep a candidate from being accepted: " + "; ".join(self.blockers)
            )
        if self.torch_ops == "allow":
            lines.append(
                "  - if no generated candidate is correct: the reference's own computation (library/ATen calls)"
            )
        if self.final_plan is not None and self.final_plan.groups:
            lines.append("  - then a few launch configurations, keeping the fastest correct candidate")
        calls = [self._call("read_file", path="reference.py")]
        return Action(message="\n".join(lines), tool_calls=calls)

    def _sol_line(self) -> str:
        rf = self.roofline
        if not rf or not rf.get("floor_ms"):
            return ""
        return (
            f"Measured ceilings ({rf.get('device')}): {rf.get('peak_bandwidth_gbs', 0):.0f} GB/s, "
            f"{rf.get('peak_tflops', 0):.2f} TFLOP/s; the task is {rf.get('bound')}-bound with a floor of "
            f"{rf.get('floor_ms', 0):.4f} ms.\n\n"
        )

    def _candidate_action(self, step: _Step, head: str | None = None) -> Action:
        assert self.analysis is not None
        assert step.graph is not None, "a candidate step carries the graph it generates from"
        head = self._report_last() if head is None else head
        if self.pos == 2:
            head += self._sol_line()
        try:
            cand = self._build(step.graph, note=f"Step: {step.title}.", gemm=step.gemm)
        except GenerationError as e:
            self.failures.append(f"not generated: {_headline(str(e))}")
            msg = (
                head
                + f"{step.title}: "
                + (step.rewrite.detail + "\n\n" if step.rewrite else "")
                + f"This graph cannot be generated yet: {e}. Moving on."
            )
            return Action(message=msg, tool_calls=[self._call("list_files")])
        if self.torch_ops != "allow":
            blocked = _forbid_blockers(cand.plan)
            if blocked:
                self.failures.append("blocked under forbid: " + "; ".join(blocked))
                msg = head + (
                    f"{step.title}: not evaluated. Under torch-ops=forbid the candidate may run only its own "
                    "kernels and library GEMM/convolution, and these parts of the graph have no generator: "
                    + "; ".join(blocked)
                    + "."
                )
                return Action(message=msg, tool_calls=[self._call("list_files")])
        general = self._generalised(step, cand)
        if step.graph is self.final_graph and step.gemm == "cublas":
            self.final_candidate = cand
        self.pending = _Tried(step.title, cand.files, graph=step.graph, gemm=step.gemm)
        parts = [head]
        if step.rewrite is not None:
            parts.append(
                f"Rewrite: {step.rewrite.title}.\n{step.rewrite.detail}\n\nGraph after the rewrite:\n"
                f"{step.graph.summary()}\n"
            )
        elif step.gemm == "3xtf32":
            parts.append(
                f"{step.title}: each large float32 GEMM is bound by the CUDA cores (about 51 TFLOP/s on the H200; "
                "TF32 tensor cores: about 411). One TF32 product keeps 11 bits of each operand and would fail the "
                "float32 tolerances, so each operand is split into hi + lo, both exact in TF32, and one tensor-core "
                "GEMM per chunk of K computes lo*hi + hi*lo + hi*hi (3xTF32): the dropped lo*lo and the split's "
                "residue are below 2^-21 of each product, and the chunks (summed in double) keep the tensor cores' "
                "rounding towards zero from growing with K. The correctness check judges its error like any other; "
                "a weight's split is kept while the weight is unchanged.\n"
            )
        elif step.gemm == "aten":
            parts.append(
                f"{step.title}: our GEMM calls cublasSgemm with cuBLAS's default workspace and heuristics; "
                "torch.mm reaches cuBLAS (or cuBLASLt) with PyTorch's workspace and its own algorithm choice, "
                "which is faster for some shapes. The fused epilogue kernels stay the same; the timing decides.\n"
            )
        elif not cand.plan.groups and not own_parts(cand.plan, self.torch_ops):
            parts.append(
                f"{step.title}: nothing in this graph is left for a kernel of our own: the forward is library "
                "calls only (torch-ops=allow accepts that), so the candidate is the captured graph called op by "
                "op, without the reference's Python around it.\n"
            )
        else:
            parts.append(f"{step.title}: generate one kernel per fusable group straight from the captured graph.\n")
        parts.append(_describe_candidate(cand, self.backend, step.gemm))
        if general:
            parts.append(general)
        parts.append("Compile, then check correctness and time it against eager and torch.compile.")
        calls = self._write(cand.files) + [self._call("compile"), self._call("evaluate")]
        return Action(message="\n".join(parts), tool_calls=calls)

    def _variant_action(self, step: _Step) -> Action:
        assert self.analysis is not None
        head = self._report_last()
        best = self._best(generated=True)
        if best is None:
            return self._next_or_finish(head)
        # tune the best correct graph (a rewrite that failed the check is not tuned)
        try:
            base = self._rebuild(best)
        except GenerationError:
            return self._next_or_finish(head)
        cfgs = {}
        desc = []
        for grp in base.plan.groups:
            vs = config_variants(grp, self.backend)
            if step.variant < len(vs):
                cfgs[grp.name] = vs[step.variant]
                desc.append(f"{grp.name}: {_fmt_cfg(vs[step.variant])}")
        try:
            cand = self._rebuild(best, cfgs, note=f"Launch configuration: {'; '.join(desc)}.")
        except GenerationError as e:  # pragma: no cover - the same graph generated before
            return Action(message=head + f"cannot generate the variant: {e}", tool_calls=[self._call("list_files")])
        if not desc:
            return self._next_or_finish(head)
        if "model_new.py" in best.files:  # the forward does not depend on launch parameters
            cand.files["model_new.py"] = best.files["model_new.py"]
        self.pending = _Tried(
            f"{best.label.split(' [')[0]} [configuration {step.variant + 1}]",
            cand.files,
            graph=best.graph,
            gemm=best.gemm,
        )
        msg = (
            head
            + f"Try {step.title}: "
            + "; ".join(desc)
            + ". Same arithmetic, different launch parameters: only the kernel file changes."
        )
        calls = self._write(cand.files) + [self._call("compile"), self._call("evaluate")]
        return Action(message=msg, tool_calls=calls)

    def _graph_action(self, head: str | None = None) -> Action:
        """A CUDA graph of the best candidate's forward, if launches dominate its time."""
        assert self.analysis is not None
        head = self._report_last() if head is None else head
        best = self._best(generated=True)
        if best is None:
            return self._next_or_finish(head)
        try:
            cand = self._rebuild(best, graph=True, note="The forward replays one CUDA graph of the generated kernels.")
        except GenerationError as e:
            return self._next_or_finish(head + f"No CUDA graph: {e}.\n\n")
        launches = len(cand.plan.groups) + len(_library_calls(cand.plan))
        why = _graph_skip_reason(best, launches)
        if why:
            return self._next_or_finish(head + why + "\n\n")
        if "kw_copy" in best.files.get(
            cand.kernel_path, ""
        ):  # the best's launch configuration: only the forward changes
            cand.files.update({p: t for p, t in best.files.items() if p.startswith("kernels/")})
        self.pending = _Tried(f"{best.label.split(' [')[0]} {GRAPH_TAG}", cand.files, graph=best.graph, gemm=best.gemm)
        msg = (
            head + f"{self.steps[self.pos - 1].title}: the best candidate ('{best.label}') is host-bound: each call "
            f"spends {_ms(best.host_ms)} on the host (Python, allocations and {launches} launches) against "
            f"{_ms(best.device_ms)} of device work. Capture its forward once as a CUDA graph and replay it: one "
            "launch per call, plus a copy into the graph's buffers per input and a copy of the result out, so every "
            "call still computes afresh and returns a new tensor. The kernels are the same; the timing decides."
        )
        calls = self._write(cand.files)
        return Action(message=msg, tool_calls=calls + [self._call("compile"), self._call("evaluate")])

    def _fallback_action(self, head: str | None = None) -> Action:
        """The reference's own computation (torch-ops=allow), evaluated when nothing generated was
        correct AND faster than eager by more than 5%: the loop keeps the best verified candidate, so
        a correct generated candidate that is slower than the reference (per-call overhead at small
        sizes, a library op called through ATen) loses to the reference itself, and every run ends
        with a correct candidate that says which parts stayed library calls."""
        assert self.task is not None
        head = self._report_last() if head is None else head
        best = self._best()
        if best is not None and best.reward >= 2:
            return self._next_or_finish(head)
        why = []
        an = self.analysis
        if an is not None and not an.ok:
            why.append(f"the forward could not be captured: {_headline(an.error)}")
        elif best is not None:
            why.append(
                f"the generated candidates are correct but not faster than eager by more than 5% (best: "
                f"'{best.label}', {_x(best.speedup_vs_eager)}), so the reference's own computation is "
                "timed too and the faster of the two is kept"
            )
        else:
            fails = [t for t in self.tried if not t.correct]
            if fails:
                why.append(
                    f"no generated candidate was correct (last: {fails[-1].label}: "
                    f"{'; '.join(fails[-1].reasons[:1]) or fails[-1].status})"
                )
            else:
                why.append("no candidate could be generated from the graph")
            why += self.library_parts
        try:
            files = {"model_new.py": fallback_model(self.task.source, [w[:300] for w in why])}
        except (ValueError, SyntaxError) as e:
            return self._next_or_finish(head + f"No fallback candidate: {e}.\n\n")
        self.pending = _Tried(self.steps[self.pos - 1].title, files)
        msg = (
            head + "Fallback: the reference's own computation as the candidate (ModelNew subclasses a verbatim copy "
            "of Model, so every op stays the library/ATen call the reference makes), because "
            + "; ".join(why[:1])
            + ". It is checked and timed like any candidate: the run ends with a verified candidate and an "
            "honest account of what was not generated."
        )
        calls = self._write(files) + [self._call("compile"), self._call("evaluate")]
        return Action(message=msg, tool_calls=calls)

    def _reference_graph_action(self, head: str | None = None) -> Action:
        """The reference's own computation replayed as one CUDA graph, when it ran correct and
        launching its ops costs at least half its device time (many small ops, a recurrent layer's
        per-step kernels): what torch.compile's reduce-overhead mode does, without compiling. It
        need not be the best: a generated candidate that keeps the same library calls (an LSTM
        island) can edge it within noise, and the graph then competes with both."""
        assert self.task is not None
        head = self._report_last() if head is None else head
        ref = next((t for t in self.tried if t.label == FALLBACK_TITLE and t.correct), None)
        if ref is None:
            return self._next_or_finish(head)
        if ref.host_ms is None or ref.device_ms is None or ref.host_ms < 0.5 * ref.device_ms:
            host = "not measured" if ref.host_ms is None else _ms(ref.host_ms)
            why = f"the reference's forward is not launch-bound ({host} of host time per call"
            return self._next_or_finish(
                head + f"No CUDA graph of the reference: {why}, {_ms(ref.device_ms)} on the device).\n\n"
            )
        files = {"model_new.py": fallback_model(self.task.source, [REFERENCE_GRAPH_TITLE], graphed=True)}
        self.pending = _Tried(f"{FALLBACK_TITLE} {GRAPH_TAG}", files)
        msg = (
            head + f"The reference's own computation is correct, and launching it is a large part of its "
            f"time ({_ms(ref.host_ms)} of host time per call against {_ms(ref.device_ms)} on the device). "
            "Replay its forward as one CUDA graph per input shape: the same ops and kernels, one launch per call; "
            "each call copies its inputs into the graph's buffers and returns a copy of the result, and a changed "
            "parameter or buffer recaptures. The timing decides."
        )
        calls = self._write(files) + [self._call("compile"), self._call("evaluate")]
        return Action(message=msg, tool_calls=calls)

    def _search_action(self, head: str | None = None) -> Action:
        """The best correct candidate (generated, or the reference's own computation) again, with
        cuDNN timing its convolution algorithms; kept only if the paired timing says it is faster."""
        head = self._report_last() if head is None else head
        best = self._best()
        if best is None or "model_new.py" not in best.files or TAG in best.label:
            return self._next_or_finish(head)
        files = dict(best.files)
        files["model_new.py"] = with_search(files["model_new.py"])
        self.pending = _Tried(f"{best.label.split(' [')[0]} {TAG}", files, graph=best.graph, gemm=best.gemm)
        msg = (
            head + f"Try the best candidate ('{best.label}') with cuDNN's algorithm search: PyTorch picks each "
            "convolution's algorithm by cuDNN's heuristics; asked through kwrt.search_conv_algorithms(), cuDNN "
            "times the applicable algorithms on the first call of each shape and keeps the fastest. The kernels "
            "are the same; the evaluation records the setting, and the eager and torch.compile baselines keep "
            "the default."
        )
        # every file of the best again: a later candidate may have rewritten one of them in the workspace
        calls = self._write(files) + [self._call("compile"), self._call("evaluate")]
        return Action(message=msg, tool_calls=calls)

    def _next_or_finish(self, head: str) -> Action:
        """The step after one that had nothing to do, in the same turn: the remaining launch
        variants are skipped (none has that many configurations, or no generated candidate is
        correct to tune), any other step runs with `head` in front of its message."""
        while self.pos < len(self.steps) and self.steps[self.pos].kind == "variant":
            self.pos += 1
        if self.pos >= len(self.steps) or self.steps[self.pos].kind == "finish":
            return self._finish_action(head)
        step = self.steps[self.pos]
        self.pos += 1
        handlers: dict[str, Callable[[str], Action]] = {
            "candidate": lambda h: self._candidate_action(step, h),
            "graph": self._graph_action,
            "fallback": self._fallback_action,
            "refgraph": self._reference_graph_action,
            "search": self._search_action,
            "restore": self._restore_action,
        }
        return handlers[step.kind](head) if step.kind in handlers else self._finish_action(head)

    def _restore_action(self, head: str | None = None) -> Action:
        head = self._report_last() if head is None else head
        best = self._best()
        last = self._last()
        in_place = best is not None and last is not None and (best is last or best.files == last.files)
        if best is None or (in_place and not self.profile_best):
            # the workspace already holds the best (or there is none): go straight to finish
            self.pos = len(self.steps) - 1
            return self._finish_action(head)
        calls: list[ToolInvocation] = []
        msg = (
            head
            + f"The best verified candidate is '{best.label}' ({_ms(best.median_ms)}, {_x(best.speedup_vs_eager)} vs eager)"
        )
        if not in_place:
            msg += "; writing it back so the workspace ends on it"
            calls = self._write(best.files)
        if self.profile_best:
            msg += ". Profile it: where does the time go, and how far is it from the speed-of-light floor?"
            calls.append(self._call("profile"))
        self.restored = True
        return Action(message=msg if msg.endswith("?") else msg + ".", tool_calls=calls)

    def _finish_action(self, head: str | None = None) -> Action:
        self.pos = len(self.steps)
        if head is None:
            head = (
                self._report_last()
                if self.pending is None and self.tried and not getattr(self, "restored", False)
                else ""
            )
        best = self._best()
        an = self.analysis
        fallback = best is not None and best.graph is None
        generated = [t for t in self.tried if t.correct and t.graph is not None]
        if an is not None and not an.ok and an.data.get("task_fails"):
            summary = f"Not optimised: {_headline(an.error)}; fix the task (the reference raises, so no candidate can be checked)."
            return Action(message=head + summary, tool_calls=[self._call("finish", summary=summary)])
        if an is not None and not an.ok and best is None:
            summary = f"Not optimised: the forward could not be captured ({_headline(an.error)})."
            if self.torch_ops != "allow":
                summary += (
                    " Under torch-ops=forbid that blocks it: without a graph no kernel can be generated "
                    "(under torch-ops=allow the reference's own computation would be the candidate)."
                )
            elif self.tried:
                summary += " The reference's own computation failed the check too: " + (
                    "; ".join(self.tried[-1].reasons[:1]) or self.tried[-1].status
                )
            return Action(message=head + summary, tool_calls=[self._call("finish", summary=summary)])
        if best is None:
            summary = "No correct candidate was found; the reference (eager PyTorch) remains the best version. " + (
                "Last failure: " + "; ".join(self.tried[-1].reasons[:1]) if self.tried else ""
            )
            if self.torch_ops != "allow" and self.blockers:
                summary += " Under torch-ops=forbid, blocked by: " + "; ".join(self.blockers) + "."
        else:
            summary = (
                f"Best: '{best.label}', {_ms(best.median_ms)} — {_x(best.speedup_vs_eager)} vs eager"
                f" ({_ms(best.eager_ms)}), {_x(best.speedup_vs_compile)} vs torch.compile"
                f" ({_ms(best.compile_ms)}), reward {best.reward}."
            )
            if fallback:
                g_best = max(generated, key=lambda t: t.key()) if generated else None
                why = (
                    f"the forward could not be captured ({_headline(an.error)})"
                    if an is not None and not an.ok
                    else f"the generated candidates were correct but slower than the reference's own computation "
                    f"(best generated: '{g_best.label}', {_x(g_best.speedup_vs_eager)} vs eager)"
                    if g_best is not None
                    else "no generated candidate was correct"
                )
                summary = (
                    "Not optimised: " + why + ". The candidate is the reference's own computation (every op "
                    "the library/ATen call the reference makes), verified correct. " + summary
                )
                if best.label.endswith(GRAPH_TAG):
                    summary += (
                        " Its speed is the reference's own ops replayed as one CUDA graph (one launch per call, as "
                        "torch.compile's reduce-overhead mode does): no kernel was generated for it."
                    )
            if TAG in best.label:
                summary += (
                    " Its speed includes cuDNN's algorithm search (torch.backends.cudnn.benchmark = True in the "
                    "candidate's process; the eager and torch.compile baselines ran with PyTorch's default "
                    "heuristics): set it in your own code and eager gains that part too."
                )
            if best.fraction_of_sol is not None:
                summary += f" {best.fraction_of_sol:.1%} of speed of light."
            if best.reward < 2 and not fallback and best.noisy:
                summary += (
                    f" No speed claim: {best.noisy}. The speedups above are point estimates from noisy "
                    "windows; measure again on a quiet machine before relying on them."
                )
            elif best.reward < 2 and not fallback:
                summary += (
                    " Nothing beat the eager baseline by more than 5%: the verified kernels are correct but "
                    "not faster, so keep using the reference for speed."
                )
            elif best.reward < 3 and best.speedup_vs_compile is None and not fallback:
                summary += " Faster than eager; the torch.compile baseline was not measured in this run."
            elif best.reward < 3 and not fallback:
                summary += " Faster than eager, but not faster than torch.compile by more than 5%."
            if self.library_parts and not fallback:
                summary += " Library/ATen calls kept: " + "; ".join(self.library_parts) + "."
        if best is not None and best.fraction_of_sol is None and self.roofline and self.roofline.get("fraction_of_sol"):
            summary += (
                f" {self.roofline['fraction_of_sol']:.1%} of speed of light ({self.roofline.get('bound')}-bound)."
            )
        if self.ref_profile_text:
            head += "Profile of the best candidate:\n" + self.ref_profile_text.split("\nbest verified")[0] + "\n\n"
        steps = [t for t in self.tried]
        table = "\n".join(
            f"  {t.label:<48} {t.status:<14} {_ms(t.median_ms):>12} {_x(t.speedup_vs_eager):>8}" for t in steps
        )
        msg = head + "Summary of the candidates:\n" + table + "\n\n" + summary
        return Action(message=msg, tool_calls=[self._call("finish", summary=summary)])


def _step_graph(pol: BuiltinPolicy, step: _Step) -> Graph | None:
    """The graph `pol` generates its version of `step` from (None: it has none)."""
    key = (step.kind, step.title, step.gemm)
    return next((s.graph for s in pol.steps if (s.kind, s.title, s.gemm) == key and s.graph), None)


def _headline(error: str, limit: int = 400) -> str:
    """An error as one line for a plan or a summary: its first line (a traceback or a dump of
    the failing node stays in the analysis data), at most `limit` characters."""
    line = (error.strip().splitlines() or [""])[0].rstrip(" .:")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _layout_may_pay(backend: str, analysis: dict, options: dict | None) -> bool:
    """Whether the channels-last candidate is worth an evaluation. On the CPU, oneDNN's NHWC
    kernels win (KernelBench L2/50: 36.5x with the pool fold against 12.3x without, docs/benchmarks.md).
    On a GPU, cuDNN's NHWC kernels are its tensor-core ones, used in 16-bit; in float32 with TF32
    off (the evaluation's rule) they lost on every H200 convolution measured: level 1 0.57-0.99x,
    level 2 no win, level 3 0.63-1.02x apart from a tie with the pool fold (thirteenth session)."""
    if backend != "cuda":
        return True
    precision = str((options or {}).get("precision", "task"))
    if precision in ("bfloat16", "float16"):
        return True
    return precision == "task" and any(i.get("dtype") in ("bfloat16", "float16") for i in analysis.get("inputs", []))


def _library_line(n: Node, backend: str, plan: Plan | None = None) -> str:
    """One line of the plan for a node that stays a library/ATen call, and why."""
    lib = "cuDNN" if backend == "cuda" else "oneDNN"
    blas = "cuBLAS" if backend == "cuda" else "oneDNN/MKL"
    if n.op == "aten":
        op = n.attrs["target"].split(".")[1]
        where = (
            f"a {lib}/ATen call"
            if "conv" in op
            else f"a {blas}/ATen call"
            if op in ("mm", "bmm", "addmm", "baddbmm")
            else "an ATen call"
        )
        why = str(n.attrs.get("island") or "no generator for it")[:160]
        return f"{n.name}: {op} stays {where} ({why})"
    if n.attrs.get("island"):
        return f"{n.name}: {n.op} stays a torch call ({str(n.attrs['island'])[:160]})"
    fused = plan is not None and any(o.value == n.name for grp in plan.groups for o in grp.operands)
    tail = ", its epilogue fused into the next kernel" if fused else ""
    if n.op in ("matmul", "matmul_nt"):
        return f"{n.name}: GEMM through {blas}{tail}"
    return f"{n.name}: convolution through {lib}{tail}"


def _own_line(n: Node, kernel: str) -> str:
    if kernel == "alias":  # typed_elementwise: a cast to the dtype the tensor has
        return f"{n.name}: {op_label(n)} to the dtype it has is its input (no kernel)"
    return f"{n.name}: {op_label(n)} by our own kernel {kernel}"


def _forbid_blockers(plan: Plan) -> list[str]:
    """The plan's library/ATen calls that torch-ops=forbid rejects (compute outside cuBLAS/cuDNN GEMM
    and convolution, allocation and views)."""
    try:
        from sandbox.audit import classify
    except ImportError:  # pragma: no cover - the sandbox is part of this repository

        def classify(op: str) -> str:
            return "compute"

    out = []
    for n in library_parts(plan):
        if n.op == "aten":
            op = n.attrs["target"].split(".")[1]
        elif n.op in ("matmul", "matmul_nt", "linear", "conv2d"):
            op = "matmul" if n.op != "conv2d" else "conv2d"
        else:
            op = n.op
        if classify(f"aten::{op}") == "compute":
            out.append(f"{n.name} ({op})")
    return out


def _library_calls(plan: Plan) -> list[Node]:
    """The plan's GEMM and convolution calls (each one launch or more, outside the fused kernels)."""
    return [st.node for st in plan.steps if st.node is not None and st.node.op in LIBRARY]


def _memory_findings(res: dict[str, Any]) -> str:
    """The evaluation's device-memory findings (sandbox.devmem): its share, and whether it ran again
    with the whole device after running out beside other evaluations."""
    return "; ".join(f for f in (res.get("audit") or {}).get("findings", []) if f.startswith("memory: "))


def _host_and_device(t: _Tried, res: dict[str, Any]) -> None:
    cand = (res.get("timing") or {}).get("candidate") or {}
    t.host_ms, t.device_ms = cand.get("host_median_ms"), cand.get("device_median_ms")


def _graph_skip_reason(best: _Tried, launches: int) -> str:
    """Why the best candidate gets no CUDA graph ('' when it should try one)."""
    if launches < 2:
        return (
            "One launch per call: a CUDA graph would replace it with a graph launch and add the copies in and "
            "out, so no CUDA graph."
        )
    if best.host_ms is None or best.device_ms is None:
        return "No host and device times were measured for the best candidate, so no CUDA graph."
    if best.host_ms <= best.device_ms:
        return (
            f"Launch overhead does not dominate the best candidate ({_ms(best.host_ms)} of host time per call "
            f"against {_ms(best.device_ms)} on the device), so no CUDA graph."
        )
    return ""


def _median(res: dict[str, Any]) -> float | None:
    try:
        return float(res["timing"]["candidate"]["median_ms"])
    except (TypeError, KeyError, ValueError):
        return None


def _fmt_in(i: dict[str, Any]) -> str:
    if "shape" in i:
        return f"{i['dtype']}[{', '.join(map(str, i['shape']))}]"
    return repr(i.get("value"))


def _fmt_cfg(cfg: dict) -> str:
    if "tpr" in cfg:
        t = cfg["tpr"]
        return (
            f"{t} threads per row"
            + (" (one warp per row)" if t == 32 else " (one block per row)" if t > 32 else "")
            + (f", the row held in registers ({cfg['cache']} float4 per thread)" if cfg.get("cache") else "")
        )
    if "block" in cfg:
        return f"{cfg['block']} threads per block"
    pm = cfg.get("parallel_min", 0)
    return "serial (no OpenMP)" if pm >= 1 << 60 else f"OpenMP from {pm} elements, schedule({cfg.get('schedule')})"


def _describe_candidate(c: Candidate, backend: str, gemm: str = "cublas") -> str:
    shared = sum(1 for s in c.sigs if s.symbol)
    count = f"{len(c.plan.groups)} fused kernel(s)" + (f", {len(c.sigs) - shared} distinct" if shared else "")
    parts = [p for p in c.files if p.startswith("kernels/") and p != c.kernel_path]
    split = f", split into {', '.join(parts)}, which it includes (the workspace's limit per file)" if parts else ""
    lines = [f"Generated {c.kernel_path} ({count}{split}) and model_new.py:"]
    for s in c.sigs:
        grp = next(g for g in c.plan.groups if g.name == s.name)
        red = [n.op for n in grp.reductions]
        lines.append(
            f"  - {s.name}: {len(grp.nodes)} ops [{', '.join(s.ops)}]"
            + (f" with row reduction(s) {red}" if red else " (elementwise)")
            + f", {s.bytes_moved / 1e6:.2f} MB moved, config {_fmt_cfg(c.configs.get(s.name, {}))}"
            + (f", the same kernel as {s.symbol}" if s.symbol else "")
        )
    for st in c.plan.steps:
        if st.node is not None and st.node.op in LIBRARY:
            three = gemm == "3xtf32" and backend == "cuda"
            nt = (
                {"aten": "torch.mm (ATen's cuBLAS)", "3xtf32": TF32X3_LINE}.get(gemm, "cuBLAS gemm_nt from the .cu")
                if backend == "cuda"
                else "torch.matmul (oneDNN/MKL)"
            )
            lib = {
                "matmul_nt": nt,
                "matmul": TF32X3_LINE if three else "torch.matmul (library GEMM)",
                "conv2d": "F.conv2d (cuDNN)" if backend == "cuda" else "F.conv2d (oneDNN)",
            }
            lines.append(f"  - {st.node.name}: {lib[st.node.op]}")
        if st.node is not None and (st.node.op == "aten" or st.node.attrs.get("island")):
            lines.append(f"  - {_library_line(st.node, backend, c.plan)}")
        if st.node is not None and st.node.op == "derived":
            lines.append(
                f"  - {st.node.name}: derived from the weights by a custom kernel ({st.node.attrs['recipe']}), "
                "recomputed when they change"
            )
    return "\n".join(lines) + "\n"


def _reference_as_candidate(source: str) -> str:
    """The reference itself as a candidate, only for the profile of turn 1 (it would be rejected
    by the torch-ops policy as a solution, which is the point: it measures eager PyTorch)."""
    import re

    return '"""The reference module copied as ModelNew, to profile eager PyTorch in the sandbox."""\n' + re.sub(
        r"\bclass Model\(", "class ModelNew(", source
    ).replace("super(Model, self)", "super()")
