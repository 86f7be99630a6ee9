"""Child process entry point: `python -m sandbox.worker ROLE` (started only by isolation.Child).

Roles:
- reference: imports the TASK, draws every input from the secret seeds the parent sends (one
  trial at a time), computes the expected outputs, compares the candidate's outputs with them
  and times the eager / torch.compile baselines. The expected outputs never leave it: the parent
  gets comparison summaries and fingerprints; the candidate never sees seeds or expected outputs.
- candidate: imports the CANDIDATE, runs the trials it is given (inputs only, mapped read-only),
  records what its forward dispatched, checks materialisation / aliasing / input mutation /
  flags / tampering, returns its outputs by sealed memfd, and runs the timing loop.
- prebuild: imports the candidate once so load_inline builds its extension (compile step).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from . import channel
from .devlock import device_lock_name
from .options import SIZE_BLOCKLIST
from .wide_trial import widen

WORKDIR = Path(".")
SOCK_IN: Any = None
SOCK_OUT: Any = None


def configure_from_env() -> None:
    """Read the channel's socket fds and the folder (also called after a zygote fork)."""
    import socket

    global WORKDIR, SOCK_IN, SOCK_OUT
    WORKDIR = Path(os.environ.get("KW_WORKDIR", "."))
    if "KW_FD_IN" in os.environ:
        SOCK_IN = socket.socket(fileno=int(os.environ["KW_FD_IN"]))
        out = int(os.environ["KW_FD_OUT"])
        SOCK_OUT = SOCK_IN if out == SOCK_IN.fileno() else socket.socket(fileno=out)


configure_from_env()


_T0 = time.perf_counter()


def trace(label: str) -> None:
    """Phase timestamps in the child's log when KW_TRACE is set (for the bench and debugging)."""
    if os.environ.get("KW_TRACE"):
        print(f"[trace {time.perf_counter() - _T0:7.3f}s] {label}", file=sys.stderr, flush=True)


# Messages that arrived while a send waited for its memfd (channel.request_memfd), in order.
_INBOX: list = []


def send(obj: Any) -> None:
    """To the parent; the memfd for large tensors comes from the parent (shared.new_memfd)."""
    channel.send(SOCK_OUT, obj, alloc=lambda size: channel.request_memfd(SOCK_OUT, size, _INBOX))


def recv() -> Any:
    """The parent's next message, its shared tensors mapped read-only (sandbox.shared)."""
    if _INBOX:
        return _INBOX.pop(0)
    return channel.recv(SOCK_IN, map=True)


def early_device_init() -> None:
    """A CUDA child creates its context before its setup arrives: started ahead as a spare
    (isolation.Spares), it has done so by the time an evaluation takes it. Its parent holds the
    device lock shared meanwhile (isolation.Child.START_HOLD_S), so never while another
    evaluation's timed loop holds the GPU: with two evaluations per GPU a context created during
    the other's timing raised a 17 µs candidate's median by about 30% on the two-H200 host
    (docs/gpu-pool.md)."""
    if os.environ.get("KW_BACKEND") == "cuda":
        import torch

        try:
            torch.cuda.init()
            torch.cuda.set_device(0)  # creates the primary context (CUDA 12 and later)
        except Exception:  # reported by setup_process, where the evaluation expects it
            pass
        trace("device initialised")


def setup_process(options: dict, backend: str) -> str:
    """Identical numerics and allocator behaviour for every process: thread count, precision
    flags, malloc thresholds (sandbox.allocator)."""
    import torch

    from .allocator import steady

    steady()
    torch.set_num_threads(int(options["_threads"]))
    allow = bool(options.get("allow_tf32", False))
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow
    torch.set_float32_matmul_precision("high" if allow else "highest")
    device = "cpu"
    if backend == "cuda":
        torch.cuda.init()
        torch.cuda.set_device(0)
        device = "cuda"
        if os.environ.get("KW_DEVICE_SHARE") != "0":
            channel.share_device_tensors()  # trial tensors stay on the device (sandbox.device_share)
    return device


def sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _error(stage: str, exc: BaseException, roots: list[str], prefix: str = "") -> dict:
    from .harness import where

    file, line, text = where(exc, roots)
    return {"ok": False, "stage": stage, "error": (prefix + text) if prefix else text, "file": file, "line": line}


# ---- reference -------------------------------------------------------------------------


def _finite(leaves: list[Any]) -> bool:
    import torch

    for x in leaves:
        if isinstance(x, torch.Tensor) and x.is_floating_point() and not bool(torch.isfinite(x).all()):
            return False
    return True


def role_reference() -> None:
    import torch

    from .harness import cast_floating, flatten, load_module_from_source, to_device

    early_device_init()
    trace("reference: waiting for setup")
    msg = recv()
    trace("reference: got setup")
    options, backend, seeds = msg["options"], msg["backend"], msg["seeds"]
    device = setup_process(options, backend)
    trace("reference: process set up")
    roots = [str(WORKDIR) + "/"]
    task_path = WORKDIR / "task.py"
    try:
        task = load_module_from_source("reference_task", task_path)
    except BaseException as exc:
        send(_error("task", exc, roots, "the task file does not import: "))
        return
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not callable(getattr(task, attr, None)):
            send(
                {
                    "ok": False,
                    "stage": "task",
                    "error": f"the task file defines no {attr} (KernelBench format needs Model, get_inputs, get_init_inputs)",
                    "file": "task.py",
                    "line": None,
                }
            )
            return

    # Built under the device context, so parameters and inputs are drawn on the device itself:
    # drawing a 67 MB input on the CPU and copying it over took longer than all the GPU work.
    precision = options.get("precision", "task")

    def make_model(init: list, seed: int) -> Any:
        torch.manual_seed(seed)
        with torch.device(device):
            return cast_floating(task.Model(*init).eval().to(device), precision)

    def make_inputs(seed: int) -> list:
        torch.manual_seed(seed)
        with torch.device(device):
            return cast_floating(to_device(list(task.get_inputs()), device), precision)

    def run(model: Any, inputs: list) -> tuple[Any, list]:
        with torch.no_grad():
            out = model(*inputs)
        sync(device)
        leaves: list = []
        spec = flatten(out, leaves)
        return spec, leaves

    stage = "init"
    try:
        base_init = list(task.get_init_inputs())
        stage = "model"
        base = make_model(base_init, seeds["weights"])
        stage = "inputs"
        first_inputs = make_inputs(seeds["random"][0])
        stage = "forward"
        roof = _roofline_counts(base, first_inputs, run)
        stage = "size"
        _require_memory(roof, device)
    except BaseException as exc:
        what = {
            "init": "get_init_inputs() failed: ",
            "model": "Model(*get_init_inputs()) failed: ",
            "inputs": "get_inputs() failed: ",
            "forward": "Model.forward failed on get_inputs(): ",
            "size": "",
        }[stage]
        send(_error("task", exc, roots, what))
        return
    trace("reference: model built, first forward done")
    meta = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in first_inputs]  # shapes and sizes only
    ctx = _RefContext(task, make_model, make_inputs, run, seeds, msg, base, base_init, meta, device, options)
    del first_inputs
    send(
        {
            "ok": True,
            "variants": [ctx.variants[0]],
            "planned": ctx.planned(),
            "roofline": roof,
            "device_name": _device_name(device),
            "device_id": device_lock_name(device),
            "memory": _device_memory(device),
        }
    )
    trace("reference: set-up sent")
    _reference_loop(ctx, roots)


def _device_memory(device: str) -> dict:
    """What the parent sizes this evaluation's share of the GPU's memory by (sandbox.devmem),
    beside the roofline's byte counts: the device's bytes and the set-up's peak (model, first
    inputs, first forward). Empty on the cpu, whose limits are the children's own."""
    if device != "cuda":
        return {}
    import torch

    return {"total": int(torch.cuda.mem_get_info()[1]), "peak": int(torch.cuda.max_memory_allocated())}


def _require_memory(roof: dict, device: str) -> None:
    """A trial holds its inputs and expected outputs here, the candidate's copies of them and its
    outputs (and, on the cpu, the comparison's temporaries): about 2 x inputs + 4 x outputs of host
    memory on the cpu backend; on cuda inputs + outputs of memfds, which is what a message needs
    when its device export falls back to one (one trial at a time)."""
    from . import shared

    i, o, p = roof["input_bytes"], roof["output_bytes"], roof["param_bytes"]
    needed = 2 * i + 4 * o + 2 * p if device == "cpu" else i + o + p
    shared.require_host(needed, f"one trial ({i / 1e9:.2f} GB of inputs, {o / 1e9:.2f} GB of outputs)")


class _RefContext:
    """What the reference keeps between commands: its models per variant, the trial being
    judged (its inputs and expected outputs never leave this process), the timing sets."""

    RELEASE_AFTER = ("trial", "compare", "timing_set")  # then freed device memory goes back to the driver
    ended = False  # set by a failed command: its error is the last reply

    def __init__(
        self,
        task: Any,
        make_model: Any,
        make_inputs: Any,
        run: Any,
        seeds: dict,
        msg: dict,
        base: Any,
        base_init: list,
        first_inputs: list,
        device: str,
        options: dict,
    ):
        self.task, self.make_model, self.make_inputs, self.run = task, make_model, make_inputs, run
        self.seeds, self.msg, self.base, self.base_init = seeds, msg, base, base_init
        self.device, self.options = device, options
        self.eval_options = _eval_options(options)
        self.variants = [_variant(base_init, base, "base")]
        self.models = [base]
        self.notes: list[str] = []
        self.pending: dict[int, dict] = {}  # drawn trials awaiting their comparison, by index
        self.trials = self._trials(first_inputs)
        self.drawn = 0
        self.sets: list = []
        self.shapes: list = []  # the expected outputs' shapes, from the first timing set
        self.returned: list = []  # which of them are inputs returned as they are (harness.passthrough)
        self.weights: list = []

    def planned(self) -> int:
        """How many trials `_trials` will yield, as far as known before drawing them (a wide or
        shape trial the reference cannot run is skipped later)."""
        msg = self.msg
        return (
            len(self.seeds["random"])
            + int(bool(msg["reinit"] and self.variants[0]["state_dict"]))
            + int(bool(msg["wide"]))
            + (2 if msg["shape"] and _size_consts(self.task) else 0)
        )

    def add_variant(self, init: list, model: Any, kind: str, constants: dict | None = None) -> int:
        """`constants` (a shape variant): the task's module-level sizes it changed, name -> [old, new]."""
        spec = _variant(init, model, kind)
        if constants:
            spec["constants"] = constants
        self.variants.append(spec)
        self.models.append(model)
        return len(self.variants) - 1

    def _trials(self, first_inputs: list) -> Any:
        """Yields (kind, variant, inputs, note, (spec, outputs) or None) one trial at a time: random x N, reinit, wide, the
        smaller and larger shape (docs/evaluation.md section 4). One trial's tensors at a time."""
        import torch

        seeds, msg = self.seeds, self.msg
        for s in seeds["random"]:
            yield "random", 0, self.make_inputs(s), "", None
        trace("reference: random trials computed")
        if msg["reinit"]:
            if len(self.variants[0]["state_dict"]) == 0:
                self.notes.append("reinit trial skipped: the model has no parameters or buffers")
            else:
                v = self.add_variant(self.base_init, self.make_model(self.base_init, seeds["reinit"]), "reinit")
                yield "reinit", v, self.make_inputs(seeds["reinit_inputs"]), "", None
        if msg["wide"]:
            inputs = widen(self.make_inputs(seeds["wide"]), seeds["wide"])
            outcome = self.run(self.base, inputs)
            if not _finite(outcome[1]):
                del outcome  # its outputs go before the second run makes new ones
                with torch.no_grad():  # the widened inputs are this trial's own
                    for x in inputs:
                        if isinstance(x, torch.Tensor) and x.is_floating_point():
                            x.abs_()
                outcome = self.run(self.base, inputs)
            if _finite(outcome[1]):
                yield "wide", 0, inputs, "", outcome
            else:
                self.notes.append("wide-distribution trial skipped: the reference is not finite on such inputs")
            del inputs, outcome
        if msg["shape"]:
            checked = [_size_note(self.task, first_inputs)]
            for direction in ("smaller", "larger"):
                shaped = _shape_trial(
                    self.task,
                    self.make_model,
                    self.make_inputs,
                    self.run,
                    seeds,
                    self.base_init,
                    first_inputs,
                    self.device,
                    direction,
                    module_structure(self.base),
                )
                if isinstance(shaped, str):
                    self.notes.append(shaped)
                    continue
                init, model, inputs, spec, leaves, changed, constants = shaped
                del shaped
                v = self.add_variant(init, model, "shape", constants)
                checked.append(changed)
                yield "shape", v, inputs, changed, (spec, leaves)
                del inputs, spec, leaves
            self.notes.append("shapes checked: " + "; ".join(checked))
        trace("reference: trials computed")

    def next_trial(self) -> dict:
        """The next trial's inputs (and a new variant's weights) for the candidate; its expected
        outputs stay here until `compare` (the parent learns their size only)."""
        import torch

        from .harness import passthrough

        got = next(self.trials, None)
        if got is None:
            return {"ok": True, "done": True, "notes": self.notes}
        kind, v, inputs, note, outcome = got
        spec, leaves = outcome if outcome is not None else self.run(self.models[v], inputs)
        del got, outcome
        index, self.drawn = self.drawn, self.drawn + 1
        self.pending[index] = {"variant": v, "inputs": inputs, "spec": spec, "expected": leaves}
        new = self.variants[v] if v > 0 and v == len(self.variants) - 1 else None
        nbytes = sum(x.numel() * x.element_size() for x in leaves if isinstance(x, torch.Tensor))
        return {
            "ok": True,
            "index": index,
            "kind": kind,
            "variant": v,
            "note": note,
            "inputs": inputs,
            "variant_spec": new,
            "output_bytes": nbytes,
            "passthrough": passthrough(inputs, leaves),
        }

    def compare(self, cmd: dict) -> dict:
        """The candidate's outputs of trial `index` (read-only maps of its sealed memfd)
        against the expected ones, on the device; a value-only failure of an otherwise clean
        trial is also judged against the task in float64 (compare.within_reference_error)."""
        import torch

        from .compare import compare_outputs, within_reference_error
        from .harness import to_device

        cur = self.pending.pop(int(cmd["index"]), None)
        if cur is None:
            return {"ok": False, "error": f"no trial {cmd['index']} to compare"}
        got = [to_device(x, self.device) if isinstance(x, torch.Tensor) else x for x in cmd["outputs"]]
        cmp = compare_outputs(cur["spec"], cur["expected"], cmd["spec"], got, self.eval_options)
        reply = {
            "ok": True,
            "passed": cmp.passed,
            "message": cmp.message,
            "max_abs_error": cmp.max_abs_error,
            "max_rel_error": cmp.max_rel_error,
            "mismatched": cmp.mismatched,
            "total": cmp.total,
            "values_only": cmp.values_only,
            "exact": None,
        }
        exact_possible = not any(isinstance(x, torch.Tensor) and x.dtype == torch.float64 for x in cur["expected"])
        if not cmp.passed and cmp.values_only and cmd.get("clean") and exact_possible:
            exact = _exact(self.models[cur["variant"]], cur["inputs"], self.run)
            if exact.get("ok"):
                ok, text, units = within_reference_error(cur["expected"], got, exact["outputs"], self.eval_options)
                reply["exact"] = {"ok": ok, "text": text, "units": units}
            else:
                reply["exact"] = {"ok": False, "error": exact["error"]}
        elif not cmp.passed and cmp.values_only and cmd.get("clean"):
            reply["exact"] = {"ok": False, "float64": True}
        self._drop_variant(cur["variant"])
        return reply

    def _drop_variant(self, v: int) -> None:
        """A reinit or shape variant serves one trial: once it is compared, its model and weights
        go back to the device (the base stays for the timing sets and spot checks)."""
        if v > 0 and not any(p["variant"] == v for p in self.pending.values()):
            self.models[v] = None
            self.variants[v] = {**self.variants[v], "state_dict": {}, "buffers": {}}

    def spot_compare(self, cmd: dict) -> dict:
        """A timed call's output that the candidate's harness kept at random
        (timed_checks.SpotSample), compared in full with its timing set's expected output,
        as a trial's is (compare: the same rules and the float64 second look)."""
        k = int(cmd["set"])
        spec, leaves = self.run(self.base, self.sets[k])
        index = -1 - len(self.pending)  # trial indices are >= 0
        self.pending[index] = {"variant": 0, "inputs": self.sets[k], "spec": spec, "expected": leaves}
        return self.compare({"index": index, "spec": cmd["spec"], "outputs": cmd["outputs"], "clean": True})

    def timing_set(self) -> dict:
        """One more timing input set: kept here on the device, its inputs for the candidate, the
        fingerprint of its expected outputs for the parent."""
        import torch

        from .harness import fingerprint_weights, passthrough

        inputs = self.make_inputs(self.seeds["timing"][len(self.sets)])
        spec, leaves = self.run(self.base, inputs)
        if not self.sets:
            self.shapes = [tuple(x.shape) if isinstance(x, torch.Tensor) else None for x in leaves]
            self.weights = fingerprint_weights(self.shapes, self.msg["fingerprint_seed"], self.device)
            self.returned = passthrough(inputs, leaves)
        self.sets.append(inputs)
        return {
            "ok": True,
            "inputs": inputs,
            "shapes": self.shapes,
            "passthrough": self.returned,
            "fingerprint": _expected_fingerprint(leaves, self.weights, self.eval_options),
        }


def _release_device_cache(device: str) -> None:
    """Give a trial's freed device memory back to the driver: the two children share one GPU, and
    a 6.4 GB task's trial leaves tens of GB in the caching allocator of each."""
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def _variant(init: list, model: Any, kind: str) -> dict:
    """What the candidate builds a trial's ModelNew from: the init inputs, the reference's
    state_dict, and its buffers registered with persistent=False (no state_dict holds them, so a
    candidate computed its own in __init__: a LLaMA-style cos table of 2048 positions came out up to
    1.5e-4 off in about one sandboxed process in three, failing an exact copy of the reference)."""
    saved = model.state_dict()
    unsaved = {k: v.detach() for k, v in model.named_buffers() if k not in saved}
    return {
        "init_inputs": init,
        "state_dict": {k: v.detach() for k, v in saved.items()},
        "buffers": unsaved,
        "kind": kind,
    }


def _reference_loop(ctx: _RefContext, roots: list[str]) -> None:
    """The reference's commands after its set-up (`_RefCommands.handlers`)."""
    _serve(_RefCommands(ctx, roots).handlers(), ctx)


class _RefCommands:
    """The reference's handlers, each working under the device lock held shared; a failure while
    preparing or comparing trials is the last reply (`ctx.ended`)."""

    def __init__(self, ctx: _RefContext, roots: list[str]):
        self.ctx, self.roots = ctx, roots
        self.paced: _Paced | None = None

    def handlers(self) -> dict[str, Any]:
        ctx = self.ctx
        return {
            "trial": self._guarded(lambda cmd: ctx.next_trial()),
            "compare": self._guarded(ctx.compare),
            "timing_set": self._guarded(lambda cmd: ctx.timing_set()),
            "spot_compare": self._guarded(ctx.spot_compare),
            "timing_setup": self.on_timing_setup,
            "warm": self.on_paced,
            "block": self.on_paced,
            "timing_end": self.on_timing_end,
            "ceilings": lambda cmd: _measure_ceilings(ctx.device, cmd.get("dtype", "float32")),
        }

    def _guarded(self, fn: Any) -> Any:
        def handler(cmd: dict) -> dict:
            try:
                return fn(cmd)
            except BaseException as exc:
                self.ctx.ended = True
                return _error("task", exc, self.roots, "the reference failed while preparing trials: ")

        return handler

    def on_timing_setup(self, cmd: dict) -> dict:
        """The baselines' side of the window (nothing is timed yet): eager, and torch.compile
        compiled here by its first call (minutes of CPU for some tasks, never timed)."""
        import torch

        ctx = self.ctx
        hook = _fingerprint_hook(ctx.shapes, cmd["fingerprint_seed"], ctx.device)
        paced = self.paced = _Paced(ctx.device, cmd, ctx.sets, self.roots)
        paced.add("eager", ctx.base, hook, "the task's Model.forward")
        result: dict[str, Any] = {"ok": True, "compile_error": None, "compile_infra": False}
        if cmd["compile"]:
            try:
                _configure_inductor()
                compiled = torch.compile(ctx.base)
                with torch.no_grad():
                    compiled(*ctx.sets[0])
                    sync(ctx.device)
                paced.add("compile", compiled, hook, "torch.compile(Model)")
            except BaseException as exc:
                result["compile_error"], result["compile_infra"] = _compile_failure(exc)
        result["callables"] = list(paced.fns)
        result["clock"] = paced.timer.clock
        return result

    def on_paced(self, cmd: dict) -> dict:
        return self.paced.command(cmd) if self.paced else {"ok": False, "error": "no timing set-up"}

    def on_timing_end(self, cmd: dict) -> dict:
        paced = self.paced
        stats = {n: se.stats(paced.timer.pinned_cpu) for n, se in paced.series.items() if se.times} if paced else {}
        return {"ok": True, "stats": stats}


def _exact(model: Any, inputs: list, run: Any) -> dict:
    """The task's outputs computed in float64 (a copy of the model and the trial's inputs cast
    up), to tell a candidate that is more exact than the float32 reference from a wrong one."""
    import copy

    import torch

    try:
        m = copy.deepcopy(model).double()
        xs = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
        _, leaves = run(m, xs)
        return {"ok": True, "outputs": leaves}
    except BaseException as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}


def _configure_inductor() -> None:
    """Inductor settings for the torch.compile baseline, set in-process: a child forked from
    the zygote inherits a torch._inductor.config that read its environment variables in the
    zygote, so TORCHINDUCTOR_* variables set for the child have no effect.
    - precompiled headers off: inductor's C++ backend precompiles torch's headers into a .gch
      of more than 64 MB, which the child's RLIMIT_FSIZE (output_limit_mb) cuts off (g++ dies
      with SIGXFSZ: "File size limit exceeded"); a PCH only speeds up the build, the generated
      code and its flags are the same;
    - one compile thread: no sidecar pool of N python workers (each importing torch) under the
      child's process and memory limits; one compile per task is cached anyway."""
    import torch._inductor.config as cfg

    cfg.compile_threads = 1
    cfg.cpp_cache_precompile_headers = False


# Messages of failures caused by the sandbox's limits or the host, not by the task.
_INFRA_MARKERS = (
    ("File size limit exceeded", "the child's file-size limit (output_limit_mb)"),
    ("CPU time limit exceeded", "the child's CPU-time limit"),
    ("Resource temporarily unavailable", "the child's process limit (max_processes) or the host's"),
    ("Cannot allocate memory", "the child's address-space limit (memory_limit_mb) or the host's memory"),
    ("std::bad_alloc", "the child's address-space limit (memory_limit_mb) or the host's memory"),
    ("out of memory", "memory"),
    ("Killed (program cc1plus)", "the host killed the compiler (memory)"),
    ("No space left on device", "disk space"),
    ("Permission denied", "file permissions of the sandbox's folders"),
)


def _compile_failure(exc: BaseException) -> tuple[str, bool]:
    """The torch.compile failure in words, with the lines that say why (compiler errors are
    long: the head is the command line, the cause sits in the middle), and whether a sandbox
    limit or the host caused it (then the result says so and the failure is not cached)."""
    text = str(exc)
    lines = [ln.strip() for ln in text.splitlines()]
    key = [
        ln
        for ln in lines
        if ("error" in ln.lower() or "limit exceeded" in ln) and not ln.startswith(("g++ ", "c++ ", "gcc ", "Command"))
    ]
    infra = [why for marker, why in _INFRA_MARKERS if marker in text]
    summary = text if len(text) < 1600 else text[:300] + " ... " + text[-600:]
    if key:
        summary += "\nkey lines: " + " | ".join(dict.fromkeys(k[:300] for k in key[:6]))
    head = f"torch.compile baseline failed: {type(exc).__name__}: "
    if infra:
        head = f"torch.compile baseline failed because of a resource limit or the host ({infra[0]}), not the task: {type(exc).__name__}: "
    return head + summary, bool(infra)


def _eval_options(options: dict) -> Any:
    from .options import EvalOptions

    return EvalOptions.from_dict({k: v for k, v in options.items() if not k.startswith("_")})


def _expected_fingerprint(leaves: list, weights: list, options: Any) -> tuple[float, float] | None:
    """(value, allowed deviation) of the projection of one expected output, or None when the
    reference output is not finite (that set's calls are then not fingerprint-checked)."""
    import torch

    from .compare import fingerprint_bound

    for x in leaves:
        if isinstance(x, torch.Tensor) and x.is_floating_point() and not bool(torch.isfinite(x).all()):
            return None
    return fingerprint_bound(leaves, weights, options)


class _Paced:
    """The callables one child times in a paired window (reference: eager and torch.compile;
    candidate: ModelNew) and their series (sandbox.timing). The parent sends "warm" once per
    callable and then "block" per callable per round; it holds the device lock exclusively for
    the whole window, so the timer here takes no lock (a child asking for the lock then would
    wait for its own parent). Autograd is off for each whole warm-up and block (one no_grad per
    block, not per call: entering one costs 1-3 us of host time)."""

    def __init__(self, device: str, cmd: dict, sets: list, roots: list[str]):
        from .timed_checks import Exchange
        from .timing import Timer

        self.timer = Timer(device, None, cpu=cmd.get("cpu"), strict_cpu=cmd.get("strict_cpu", True))
        self.sets, self.roots = sets, roots
        self.exchange = Exchange(sets)
        self.fns: dict[str, Any] = {}
        self.hooks: dict[str, Any] = {}
        self.labels: dict[str, str] = {}
        self.series: dict[str, Any] = {}

    def add(self, name: str, fn: Any, hook: Any, label: str) -> None:
        from .timing import Series

        self.fns[name], self.hooks[name], self.labels[name], self.series[name] = fn, hook, label, Series()

    def command(self, cmd: dict) -> dict:
        import torch

        from .harness import where

        name = cmd["which"]
        if name not in self.fns:
            return {"ok": False, "error": f"nothing called {name!r} to time"}
        try:
            with torch.no_grad():
                if cmd["cmd"] == "warm":
                    return {
                        "ok": True,
                        "est_ms": self.timer.warm(
                            self.fns[name],
                            self.sets,
                            cmd["budget_s"],
                            cmd["warmup"],
                            cmd["max_calls"],
                            self.hooks[name],
                        ),
                    }
                median = self.timer.block(
                    self.fns[name],
                    self.sets,
                    cmd["calls"],
                    self.series[name],
                    self.hooks[name],
                    rewarm=cmd.get("rewarm", 0),
                    exchange=self.exchange,
                )
                return {"ok": True, "median_ms": median, **self.series[name].last_block}
        except BaseException as exc:
            _, _, text = where(exc, self.roots)
            return {"ok": False, "error": f"{self.labels[name]} raised during timing: {text}"}


def _fingerprint_hook(shapes: list, seed: int, device: str) -> Any:
    """The baselines run the same per-call hook as the candidate, so timing conditions match."""

    from .harness import fingerprint, fingerprint_weights, flatten
    from .timed_checks import FaultWatch

    weights = fingerprint_weights(shapes, seed, device)

    faults = FaultWatch(-1)  # read as the candidate's is, for the same cost; never judged

    def hook(out: Any, k: int) -> None:
        faults.check()
        leaves: list = []
        flatten(out, leaves)
        fingerprint(leaves, weights)

    return hook


def _device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "cpu"


# The larger shape trial's inputs stay within this many times the benchmark's input bytes, and
# within SHAPE_MAX_BYTES: the trial's inputs, outputs and the candidate's copies are alive at once.
SHAPE_GROWTH = 8
SHAPE_MAX_BYTES = 1 << 30


def _size_consts(task: Any) -> dict[str, int]:
    """The task's module-level int constants that get_inputs/get_init_inputs read (sizes)."""
    names = set(task.get_inputs.__code__.co_names) | set(task.get_init_inputs.__code__.co_names)
    return {
        n: getattr(task, n)
        for n in sorted(names)
        if type(getattr(task, n, None)) is int
        and getattr(task, n) >= 2
        and not any(b in n.lower() for b in SIZE_BLOCKLIST)
    }


def _size_note(task: Any, inputs: list) -> str:
    import torch

    consts = ", ".join(f"{n}={v}" for n, v in _size_consts(task).items())
    shapes = ", ".join("x".join(map(str, x.shape)) for x in inputs if isinstance(x, torch.Tensor))
    return f"{consts or 'no size constants'} (benchmark, inputs {shapes})"


def _meta_bytes(task: Any, init: list, nbytes: Any) -> int:
    """The bytes of get_inputs() and of the model's parameters at the task's current constants,
    built on the meta device (no memory); 0 when the task cannot be built there."""
    import torch

    try:
        with torch.device("meta"):
            inputs = task.get_inputs()
            model = task.Model(*init)
        return max(nbytes(list(inputs)), nbytes(list(model.parameters()) + list(model.buffers())))
    except Exception:
        return 0


def _smaller(v: int) -> int:
    return max(8, (v * 3 // 4) // 8 * 8) if v >= 32 else v + 1


def _larger(v: int, factor: float) -> int:
    """v scaled up: to a multiple of 8 from 32 on (2x: 512 -> 1024, where a kernel written for
    the benchmark's 512 covers a quarter of the output), at least v + 1 below."""
    w = int(v * factor)
    return (w + 7) // 8 * 8 if v >= 32 else max(v + 1, w)


def module_structure(model: Any) -> tuple:
    """What makes two builds of a Model the same program at other sizes: its submodules (name and
    class) and its parameters and buffers (name and rank). A size change that alters it (torchvision's
    bottleneck gains a projection when inplanes != 4 * planes; a block keeps its residual only
    when its input and output channels agree) tests another program, not this one at another size."""
    modules = tuple((n, type(m).__qualname__) for n, m in model.named_modules())
    tensors = tuple((n, t.dim()) for n, t in [*model.named_parameters(), *model.named_buffers()])
    return modules + tensors


def _shape_trial(
    task: Any,
    make_model: Any,
    make_inputs: Any,
    run: Any,
    seeds: dict,
    base_init: list,
    first_inputs: list,
    device: str,
    direction: str = "smaller",
    structure: tuple | None = None,
) -> Any:
    """Change the task's module-level size constants (those get_inputs/get_init_inputs read)
    and build the reference at that shape; returns a note string when not applicable.
    `smaller`: 3/4 of each constant (v + 1 below 32), all at once, else one at a time. `larger`
    (a kernel that hard-codes the benchmark's size, or covers only that much of the output, is
    right at any smaller size): 2x, then 1.5x, all at once, else one at a time, while the inputs
    stay within SHAPE_GROWTH times the benchmark's bytes and SHAPE_MAX_BYTES. A change whose
    reference has another `module_structure` than `structure` (the benchmark's) is passed over."""
    import torch

    consts = _size_consts(task)
    if not consts:
        return f"{direction} shape trial skipped: the task has no module-level size constants used by get_inputs()"

    def nbytes(xs: list) -> int:
        return sum(x.numel() * x.element_size() for x in xs if isinstance(x, torch.Tensor))

    base_shapes = [tuple(x.shape) for x in first_inputs if isinstance(x, torch.Tensor)]
    budget = min(SHAPE_GROWTH * max(1, nbytes(first_inputs)), SHAPE_MAX_BYTES)
    if direction == "smaller":
        changes = [{n: _smaller(v) for n, v in consts.items()}] + [{n: _smaller(v)} for n, v in consts.items()]
    else:
        changes = [{n: _larger(v, f) for n, v in consts.items()} for f in (2.0, 1.5)]
        changes += [{n: _larger(v, f)} for f in (2.0, 1.5) for n, v in consts.items()]
    restructured = 0  # changes passed over because the reference became another program
    for new in changes:
        for n, v in new.items():
            setattr(task, n, v)
        try:
            init = list(task.get_init_inputs())
            if direction == "larger" and _meta_bytes(task, init, nbytes) > budget:  # before anything is allocated
                raise ValueError("too large")
            inputs = make_inputs(seeds["shape_inputs"] + (direction == "larger"))
            if [tuple(x.shape) for x in inputs if isinstance(x, torch.Tensor)] == base_shapes and init == base_init:
                raise ValueError("shapes unchanged")
            if direction == "larger" and nbytes(inputs) > budget:
                raise ValueError("too large")
            model = make_model(init, seeds["shape"] + (direction == "larger"))
            if structure is not None and module_structure(model) != structure:
                restructured += 1
                raise ValueError("another module structure")
            spec, leaves = run(model, inputs)
            if not _finite(leaves):
                raise ValueError("reference not finite")
            note = ", ".join(f"{n}={consts[n]}->{v}" for n, v in new.items())
            if restructured:
                note += f" ({restructured} {direction} change(s) passed over: another module structure)"
            return init, model, inputs, spec, leaves, note, {n: [consts[n], v] for n, v in new.items()}
        except Exception:
            continue
        finally:
            for n in new:
                setattr(task, n, consts[n])
    return (
        f"{direction} shape trial skipped: the reference does not run with changed size constants"
        + (f" within {SHAPE_GROWTH}x the benchmark's input bytes" if direction == "larger" else "")
        + (f" ({restructured} built another module structure)" if restructured else "")
    )


def _roofline_counts(model: Any, inputs: list, run: Any) -> dict:
    import torch

    flops = 0.0
    try:
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            _, leaves = run(model, inputs)
        flops = float(counter.get_total_flops())
    except Exception:
        _, leaves = run(model, inputs)

    def nbytes(xs: Any) -> int:
        return sum(x.numel() * x.element_size() for x in xs if isinstance(x, torch.Tensor))

    params = list(model.parameters()) + list(model.buffers())
    dtypes = sorted(
        {str(x.dtype).replace("torch.", "") for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()}
    )
    i, o, p = nbytes(inputs), nbytes(leaves), nbytes(params)
    return {
        "flops": flops,
        "min_bytes": float(i + o + p),
        "dtypes": dtypes,
        "input_bytes": i,
        "output_bytes": o,
        "param_bytes": p,
    }


def _measure_ceilings(device: str, dtype_name: str = "float32") -> dict:
    """Copy bandwidth and the GEMM rate of this device for the task's dtype, measured, not
    taken from a datasheet."""
    import torch

    from .timing import Timer

    timer = Timer(device)  # the parent holds the device exclusively for this command (devlock.ChildHold)
    n = (256 << 20) // 4 if device == "cuda" else (64 << 20) // 4
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    stats, _ = timer.run(lambda a, b: b.copy_(a), [[src, dst]], 0.5, 10, 200, 3)
    bandwidth = 2 * n * 4 / (stats["min_ms"] / 1000) / 1e9
    m = 8192 if device == "cuda" else 1024
    dtype = getattr(torch, dtype_name, torch.float32)
    a = torch.randn(m, m, device=device, dtype=dtype)
    b = torch.randn(m, m, device=device, dtype=dtype)
    c = torch.empty(m, m, device=device, dtype=dtype)
    stats, _ = timer.run(lambda x, y, z: torch.mm(x, y, out=z), [[a, b, c]], 0.5, 5, 100, 2)
    tflops = 2 * m**3 / (stats["min_ms"] / 1000) / 1e12
    return {"bandwidth_gbs": bandwidth, "tflops": tflops, "dtype": dtype_name}


# ---- candidate ---------------------------------------------------------------------------


class _Forward:
    """Everything the candidate process knows about one forward call and what it did."""


def role_candidate() -> None:
    """Set up (import ModelNew once the reference has built its model, build the base variant),
    then answer the parent's commands (`_Candidate.handlers`) until it says exit or a trial fails."""
    from .timing import Timer  # noqa: F401  binds time.perf_counter before any candidate code runs

    early_device_init()
    trace("candidate: waiting for setup")
    msg = recv()
    trace("candidate: got setup")
    device = setup_process(msg["options"], msg["backend"])
    cand = _Candidate(msg, device)
    # The parent sends the setup once the reference has built its model (sandbox.protocol: memory
    # before the device); a failure is reported once the variants arrive, where the parent reads it.
    failure = cand.import_model()
    cand.variants = dict(enumerate(recv()["variants"]))  # later ones (shape trials) arrive with their trial
    if failure is not None:
        send(failure)
        return
    try:
        cand.model_for(0)
    except _Stage as st:
        send(_error(st.stage, st.exc, cand.roots, st.prefix))
        return
    trace("candidate: ready")
    send({"ok": True, "stage": "ready"})
    cand.start_findings()
    _serve(cand.handlers(), cand)


def _serve(handlers: dict[str, Any], role: Any) -> None:
    """A child's command loop: one reply per command from its handler (unknown commands get
    none); it ends at "exit", or after a reply once `role.ended` (a failed trial's error)."""
    while True:
        cmd = recv()
        name = cmd["cmd"]
        if name == "exit":
            return
        handler = handlers.get(name)
        if handler is None:
            continue
        reply = handler(cmd)
        send(reply)
        if role.ended:
            return
        del reply, cmd  # a trial's tensors go before the device cache is emptied
        if name in role.RELEASE_AFTER:
            _release_device_cache(role.device)


class _Candidate:
    """The candidate child's state between commands: its module and models per variant, the
    custom-kernel counters, the op and integrity records of the trials, its timing sets."""

    RELEASE_AFTER = ("trial",)  # commands after which freed device memory goes back to the driver

    def __init__(self, msg: dict, device: str):
        from . import audit, audit_hook

        self.options, self.device = msg["options"], device
        self.cand_dir = WORKDIR / "cand"
        self.roots = [str(self.cand_dir) + "/"]
        if msg.get("library"):
            os.environ["KWRT_LIB"] = msg["library"]
        sys.path.insert(0, str(Path(__file__).parent / "runtime"))
        sys.path.insert(0, str(self.cand_dir))
        import kwrt  # type: ignore[import-not-found]  # sandbox/runtime/kwrt.py by its name inside the candidate

        from .harness import install_inline_loader

        self.kwrt = kwrt
        install_inline_loader(msg.get("inline_manifest") or [], msg.get("inline_dir"))
        libraries = [x for x in (msg.get("library"), msg.get("inline_dir")) if x]
        from .timed_checks import caught_faults

        self.faults_before = caught_faults()  # before any code of the candidate's ran (timed_checks.FaultWatch)
        # from here on the runtime refusals (sandbox.audit_hook), read by every Integrity check
        self.refusals = audit_hook.install(self.roots, libraries) if msg.get("refuse", True) else None
        self.integrity = audit.Integrity(self.refusals)
        self.ModelNew: Any = None
        self.module: Any = None
        self.variants: dict[int, Any] = {}
        self.models: dict[int, Any] = {}
        self.findings: list[tuple[str, str]] = []
        self.timing: _CandidateTiming | None = None
        self.timing_sets: list = []
        self.ops: dict[str, int] = {}
        self.calls_per_forward: list[int] = []
        self.ended = False  # the last reply was an error: the process ends after sending it

    def handlers(self) -> dict[str, Any]:
        return {
            "trial": self.on_trial,
            "trials_end": self.on_trials_end,
            "timing_set": self.on_timing_set,
            "timing_setup": self.on_timing_setup,
            "warm": self.on_paced,
            "block": self.on_paced,
            "timing_end": self.on_timing_end,
            "profile": self.on_profile,
        }

    def custom_calls(self) -> dict[str, int]:
        from .harness import inline_calls

        calls = dict(self.kwrt.calls())
        calls.update(inline_calls())
        return calls

    def import_model(self) -> dict | None:
        """Import model_new.py; the error reply if it does not define ModelNew(nn.Module)."""
        import torch

        from . import audit
        from .harness import load_module_from_source

        trace("candidate: importing model_new")
        failure: dict | None = None
        try:
            mod = self.module = load_module_from_source("model_new", self.cand_dir / "model_new.py")
            self.ModelNew = getattr(mod, "ModelNew", None)
            if not isinstance(self.ModelNew, type) or not issubclass(self.ModelNew, torch.nn.Module):
                failure = {
                    "ok": False,
                    "stage": "import",
                    "error": "model_new.py defines no class ModelNew(nn.Module)",
                    "file": "model_new.py",
                    "line": None,
                }
        except BaseException as exc:
            failure = _error("import", exc, self.roots, "model_new.py does not import: ")
        if failure is None:
            _prewarm(audit, self.device)
        trace("candidate: imported")
        return failure

    def model_for(self, v: int) -> Any:
        import torch

        from .harness import cast_floating

        if v not in self.models:
            spec = self.variants[v]
            try:
                with torch.device(self.device):  # as the reference's Model: parameters initialised on the device
                    m = cast_floating(self.ModelNew(*spec["init_inputs"]), self.options.get("precision", "task"))
            except BaseException as exc:
                raise _Stage("init", exc, "ModelNew(*get_init_inputs()) failed: ") from exc
            try:
                m.load_state_dict(spec["state_dict"], strict=True)
            except RuntimeError as exc:
                raise _Stage(
                    "init",
                    exc,
                    "ModelNew's parameters/buffers do not match Model's (loaded with strict=True; "
                    "keep the same names and shapes): ",
                ) from exc
            _load_unsaved_buffers(m, spec.get("buffers") or {})
            self.models[v] = m.eval().to(self.device)
            # the model holds its own copies now: the received ones go back to the device (an 8 GiB
            # MLP's base and reinit copies, kept, ran an 80 GB GPU out of memory, 2026-12-07)
            spec["state_dict"], spec["buffers"] = {}, {}
        return self.models[v]

    def start_findings(self) -> None:
        """What the import changed (integrity), reported with the trials; watching starts afresh."""
        from . import audit

        self.findings = [(k, f"at import: {t}") for k, t in self.integrity.check()]
        if self.findings:
            self.integrity = audit.Integrity(self.refusals)

    def on_trial(self, cmd: dict) -> dict:
        if cmd.get("variant_spec") is not None:
            self.variants[int(cmd["variant"])] = cmd["variant_spec"]
        restore = self._sizes_of(self.variants.get(int(cmd["variant"])) or {})
        try:
            return self._trial(cmd)
        finally:
            for name, value in restore.items():
                setattr(self.module, name, value)

    def _sizes_of(self, variant: dict) -> dict[str, int]:
        """A shape variant changes the task's module-level sizes in the reference's module, where
        its Model reads them; model_new.py's own constants of the same name and value (a module
        written after the task's) take the new values for that trial as well. Returns what to
        restore afterwards."""
        restore: dict[str, int] = {}
        for name, (old, new) in (variant.get("constants") or {}).items():
            current = getattr(self.module, name, None)
            if type(current) is int and current == old and type(new) is int:
                restore[name] = current
                setattr(self.module, name, new)
        return restore

    def _trial(self, cmd: dict) -> dict:
        """One correctness trial: the forward, recorded, then the checks of docs/evaluation.md
        section 6; the outputs go back by sealed memfd (cuda: exported allocation), to be
        compared in the reference."""
        import torch

        from . import audit
        from .harness import flatten, same_bits, storage_span, to_device
        from .shared import is_mapped_read_only
        from .timed_checks import FAULT_HANDLER_WHY, FaultWatch

        i, v, device = int(cmd["index"]), int(cmd["variant"]), self.device
        try:
            model = self.model_for(v)
            inputs = to_device(cmd["inputs"], device)
            # an input mapped read-only (the cpu backend's memfd) cannot change: writing to it faults
            before = [x.clone() if isinstance(x, torch.Tensor) and not is_mapped_read_only(x) else None for x in inputs]
            calls0 = self.custom_calls()
            recorder = audit.make_recorder()
            with torch.no_grad(), recorder:
                out = model(*inputs)
            self.findings.extend(f for f in self.integrity.left_active() if f not in self.findings)
            with torch._C.DisableTorchFunction():  # no mode of the candidate's sees the checks
                leaves: list = []
                spec = flatten(out, leaves)
                handler = FaultWatch(self.faults_before).check()  # before the first read of the outputs
                snapshot = [x.clone() if type(x) is torch.Tensor else None for x in leaves]
                sync(device)
                if device == "cpu":
                    time.sleep(0.01)  # a background thread still writing would show now
        except _Stage as st:
            self.ended = True
            return _error(st.stage, st.exc, self.roots, st.prefix) | {"trial": i}
        except BaseException as exc:
            self.ended = True
            return _error("forward", exc, self.roots, f"ModelNew.forward raised in trial {i + 1}: ") | {"trial": i}
        with torch._C.DisableTorchFunction():
            returned = cmd.get("passthrough") or []
            checks = _output_checks(leaves, snapshot, inputs, model, device, same_bits, storage_span, returned)
            if handler and device == "cpu":
                checks.append(("reject", FAULT_HANDLER_WHY))  # cuda: its driver may catch faults
            for j, (a, b) in enumerate(zip(before, inputs, strict=False)):
                if isinstance(a, torch.Tensor) and not same_bits(a, b):
                    checks.append(("incorrect", f"input {j} was modified in place by forward"))
        for name, count in recorder.ops.items():
            self.ops[name] = self.ops.get(name, 0) + count
        self.calls_per_forward.append(sum(self.custom_calls().values()) - sum(calls0.values()))
        if v != 0:
            self.models.pop(v, None)  # a reinit or shape variant serves one trial
        return {"type": "trial", "spec": spec, "outputs": leaves, "checks": checks}

    def on_trials_end(self, cmd: dict) -> dict:
        from . import audit

        self.findings = list(dict.fromkeys(self.findings + self.integrity.check() + audit.settings_in_use()))
        reply = {
            "type": "trials",
            "ops": self.ops,
            "custom_calls": self.custom_calls(),
            "calls_per_forward": self.calls_per_forward,
            "findings": self.findings,
        }
        self.findings = []
        trace("candidate: trials run")
        return reply

    def on_timing_set(self, cmd: dict) -> dict:
        """Kept for the window. Timed on ordinary memory, like the reference's own sets (a memfd's
        shmem pages may be mapped differently, e.g. never as transparent huge pages); fingerprints
        still catch a forward that changes them."""
        import torch

        from .harness import to_device
        from .shared import is_mapped_read_only

        self.timing_sets.append(
            [
                x.clone() if isinstance(x, torch.Tensor) and is_mapped_read_only(x) else x
                for x in to_device(cmd["inputs"], self.device)
            ]
        )
        return {"ok": True}

    def on_timing_setup(self, cmd: dict) -> dict:
        trace("candidate: timing sets received")
        self.timing = _CandidateTiming(
            cmd,
            self.timing_sets,
            self.model_for(0),
            self.device,
            self.custom_calls,
            self.integrity,
            self.roots,
            self.faults_before,
        )
        return {"ok": True}

    def on_paced(self, cmd: dict) -> dict:
        return self.timing.paced.command(cmd) if self.timing else {"ok": False, "error": "no timing set-up"}

    def on_timing_end(self, cmd: dict) -> dict:
        return self.timing.end() if self.timing else {"ok": False, "error": "no timing set-up"}

    def on_profile(self, cmd: dict) -> dict:
        return _profile(cmd, self.timing_sets, self.model_for(0), self.device)


def _output_checks(
    leaves: list,
    snapshot: list,
    inputs: list,
    model: Any,
    device: str,
    same_bits: Any,
    storage_span: Any,
    returned: list | None = None,
) -> list:
    """Plain, strided, on the device, unchanged after return, sharing no memory with an input,
    parameter or buffer, except that an output may be the very input the reference returns in
    its place (`returned`, harness.passthrough). A subclass output is replaced by None (it is
    never sent)."""
    import torch

    from .harness import same_view
    from .timed_checks import FOREIGN_WHY, foreign

    checks: list[tuple[str, str]] = []
    guarded = list(inputs) + list(model.parameters()) + list(model.buffers())
    spans = [(j, storage_span(x)) for j, x in enumerate(guarded) if isinstance(x, torch.Tensor)]
    for j, leaf in enumerate(leaves):
        if not isinstance(leaf, torch.Tensor):
            continue
        if type(leaf) is not torch.Tensor:
            checks.append(
                (
                    "reject",
                    f"output {j} is a {type(leaf).__name__}, not a plain torch.Tensor (lazy or subclass outputs are not allowed)",
                )
            )
            leaves[j] = None
            continue
        if leaf.device.type != device:
            checks.append(("incorrect", f"output {j} is on {leaf.device}, expected {device}"))
        if leaf.layout != torch.strided:
            checks.append(("reject", f"output {j} has layout {leaf.layout}; outputs must be dense strided tensors"))
        if snapshot[j] is not None and not same_bits(snapshot[j], leaf):
            checks.append(
                (
                    "reject",
                    f"output {j} changed after forward returned: work continued on another stream or thread after the call",
                )
            )
        k = (returned or [])[j] if j < len(returned or []) else None
        if k is not None and k < len(inputs) and type(inputs[k]) is torch.Tensor and same_view(leaf, inputs[k]):
            continue
        if foreign(leaf):
            checks.append(("reject", f"output {j} is {FOREIGN_WHY}"))
        span = storage_span(leaf)
        for k, other in spans:
            if span and other and span[0] < other[1] and other[0] < span[1]:
                what = f"input {k}" if k < len(inputs) else "a parameter/buffer"
                checks.append(("reject", f"output {j} shares memory with {what} (outputs must be fresh tensors)"))
                break
    return checks


def _prewarm(audit: Any, device: str) -> None:
    """First use of a dispatch mode imports a lot; do it while the reference is still busy."""
    import torch

    recorder = audit.make_recorder()
    with torch.no_grad(), recorder:
        torch.empty(4, device=device).fill_(1.0).sum()


class _Stage(Exception):
    def __init__(self, stage: str, exc: BaseException, prefix: str):
        super().__init__(prefix)
        self.stage, self.exc, self.prefix = stage, exc, prefix


def _load_unsaved_buffers(model: Any, buffers: dict) -> None:
    """The reference's non-persistent buffers into the candidate's buffers of the same name, shape
    and dtype (a candidate that keeps other buffers, or none, is left as it built itself)."""
    import torch

    own = dict(model.named_buffers())
    with torch.no_grad():
        for name, value in buffers.items():
            mine = own.get(name)
            if mine is not None and mine.shape == value.shape and mine.dtype == value.dtype:
                mine.copy_(value)


def _returned_inputs(leaves: list, returned: list, sets: list, k: int) -> set[int]:
    """The outputs that are a timing set's input returned as it is, where the reference returns
    that input (harness.passthrough). Each is replaced by set k's input, which holds the values
    the call ran on (a call may have run on another set's values, swapped back since:
    timed_checks.Exchange). Returns their positions, which HeldMemory passes over: the same
    input comes back whenever its set is timed again. Another set's input returned there is read
    as this call's too (the hook does not know which set's tensors the call held); it gains
    nothing, as returning its own argument costs nothing."""
    import torch

    from .harness import same_view

    own: set[int] = set()
    for j, m in enumerate(returned[: len(leaves)]):
        leaf = leaves[j]
        if m is None or type(leaf) is not torch.Tensor:
            continue
        if any(m < len(s) and type(s[m]) is torch.Tensor and same_view(leaf, s[m]) for s in sets):
            leaves[j] = sets[k][m]
            own.add(j)
    return own


class _CandidateTiming:
    """The candidate's side of a paired window: its timing sets on the device, the per-call
    output fingerprints (every timed call's, checked by the parent against the reference's), the
    custom-kernel count, and after the window the kernel names and integrity findings."""

    def __init__(
        self,
        cmd: dict,
        sets: list,
        model: Any,
        device: str,
        custom_calls: Any,
        integrity: Any,
        roots: list[str],
        faults_before: int = -1,
    ):
        import torch

        from .harness import fingerprint, fingerprint_weights, flatten
        from .timed_checks import FaultWatch, HeldMemory, SpotSample
        from .timing import HOLD_BYTES

        shapes: list = [tuple(s) if s is not None else None for s in cmd["shapes"]]
        weights = fingerprint_weights(shapes, cmd["fingerprint_seed"], device)
        self.prints: list[tuple[int, float]] = []
        self.held, self.spots = HeldMemory(), SpotSample(HOLD_BYTES.get(device, HOLD_BYTES["cpu"]) // 2)

        self.left: list[tuple[str, str]] = []

        returned = cmd.get("passthrough") or []
        self.faults = FaultWatch(faults_before)

        def hook(out: Any, k: int) -> None:
            if not self.left:  # before any torch call of the harness's on the outputs
                self.left = integrity.left_active()
            self.faults.check()  # before the outputs are read
            with torch._C.DisableTorchFunction():
                leaves: list = []
                spec = flatten(out, leaves)
                own = _returned_inputs(leaves, returned, sets, k)
                self.prints.append((k, fingerprint(leaves, weights)))
                self.held.add([x for j, x in enumerate(leaves) if j not in own])
                self.spots.offer(k, spec, leaves)

        self.model, self.device, self.custom_calls, self.integrity = model, device, custom_calls, integrity
        self.paced = _Paced(device, cmd, sets, roots)
        self.paced.add("candidate", model, hook, "ModelNew.forward")
        self.calls0 = sum(custom_calls().values())

    def end(self) -> dict:
        series = self.paced.series["candidate"]
        calls = sum(self.custom_calls().values()) - self.calls0
        # Kernel names come from the profiler, so only after the window: once CUPTI has been set up,
        # kineto leaves it subscribed (no cuptiFinalize), and every later launch pays its callbacks; the
        # eager and torch.compile baselines are timed in a process that never profiled.
        kernels: list[str] = []
        graphs = 0
        if self.device == "cuda":
            kernels, graphs = _cuda_kernel_names(self.model, self.paced.sets[0])
        findings = list(dict.fromkeys(self.left + self.integrity.check()))
        if series.late_calls:
            findings.append(
                (
                    "timing",
                    f"{series.late_calls} timed calls left work running on the device after their stream's last "
                    "event (other streams or threads); that time was added to theirs",
                )
            )
        return {
            "ok": True,
            "stats": series.stats(self.paced.timer.pinned_cpu),
            "fingerprints": self.prints,
            "held_repeats": self.held.repeats,
            "foreign_outputs": self.held.foreign,
            "attached_outputs": self.held.attached,
            "fault_handler_reads": self.faults.seen if self.device == "cpu" else 0,
            "spot": self.spots.kept,
            "custom_calls": calls,
            "forwards": len(self.prints),
            "kernels": kernels,
            "graph_launches": graphs,
            "clock": self.paced.timer.clock,
            "findings": findings,
        }


def _cuda_kernel_names(model: Any, inputs: list) -> tuple[list[str], int]:
    """The device kernels one forward launched, and how many CUDA graph launches it made (the
    kernels a graph replays are listed too; the dispatcher audit cannot see inside a graph)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with torch.no_grad():
            model(*inputs)
        torch.cuda.synchronize()
    names = []
    graphs = 0
    for evt in prof.events():
        if getattr(evt, "device_type", None) == torch.autograd.DeviceType.CUDA:
            names.append(evt.name)
        elif "GraphLaunch" in evt.name:  # cudaGraphLaunch / cuGraphLaunch (runtime or driver API)
            graphs += 1
    return sorted(set(names)), graphs


def _profile(cmd: dict, sets: list, model: Any, device: str) -> dict:
    import kwrt
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    kwrt._profile = True
    try:
        with profile(activities=activities) as prof:
            for i in range(cmd.get("calls", 5)):
                with torch.no_grad():
                    model(*sets[i % len(sets)])
                sync(device)
    except BaseException as exc:
        return {"ok": False, "error": f"profiling failed: {type(exc).__name__}: {exc}"}
    finally:
        kwrt._profile = False
    rows = []
    for evt in prof.key_averages():
        if device == "cuda":
            total = getattr(evt, "self_device_time_total", None)
            if total is None:
                total = getattr(evt, "self_cuda_time_total", 0)
            if getattr(evt, "device_type", None) != torch.autograd.DeviceType.CUDA and not total:
                continue
        else:
            total = evt.self_cpu_time_total
        if not total or total <= 0:
            continue
        rows.append({"name": evt.key, "calls": int(evt.count), "total_ms": total / 1000.0})
    return {"ok": True, "rows": rows}


# ---- prebuild ------------------------------------------------------------------------------


def role_prebuild() -> None:
    msg = recv()
    cand_dir = WORKDIR / "cand"
    ext_dir = WORKDIR / "ext"
    ext_dir.mkdir(exist_ok=True)
    os.environ["TORCH_EXTENSIONS_DIR"] = str(ext_dir)
    os.environ["MAX_JOBS"] = str(max(1, min(8, os.cpu_count() or 1)))
    setup_process(msg["options"], "cpu")
    from .harness import install_inline_recorder, load_module_from_source

    sys.path.insert(0, str(Path(__file__).parent / "runtime"))
    sys.path.insert(0, str(cand_dir))
    manifest: list[dict] = []
    install_inline_recorder(manifest)
    try:
        load_module_from_source("model_new", cand_dir / "model_new.py")
    except BaseException as exc:
        reply = _error("compile", exc, [str(cand_dir) + "/"])
        reply["log"] = "".join(traceback.format_exception(exc))[-20000:]
        send(reply)
        return
    send({"ok": True, "manifest": manifest, "log": ""})


def main() -> None:
    role = sys.argv[1]
    {"reference": role_reference, "candidate": role_candidate, "prebuild": role_prebuild}[role]()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
