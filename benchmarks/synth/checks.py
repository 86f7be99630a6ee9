"""Whether a synthesised task is worth keeping, cheapest check first; the first failure is its reason.

1. it builds and runs under eager, and its output is a finite float tensor;
2. deterministic: the same model on the same inputs twice gives the same bits (a random
   operator does not), and its output depends on its inputs and is not constant (zeros_like does not);
3. a useful runtime: the eager median (single-threaded on the cpu) within [min_ms, max_ms];
4. torch.compile builds it and agrees with eager (rtol/atol COMPILE_TOL).
The near-duplicate check against KernelBench (benchmarks.synth.similarity) runs before all of
these, since it needs no execution.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any

COMPILE_TOL = 1e-3


@dataclass
class Verdict:
    kept: bool = False
    reason: str = ""  # the check that dropped it, e.g. "nondeterministic: ..."
    check: str = ""  # its short name, for the report's counts
    eager_ms: float | None = None
    compile_s: float | None = None
    details: dict[str, Any] = field(default_factory=dict)


class Dropped(Exception):
    def __init__(self, check: str, reason: str) -> None:
        super().__init__(reason)
        self.check, self.reason = check, reason


def load(source: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "synthesised_task"}
    exec(compile(source, "<synthesised task>", "exec"), namespace)  # our own generated code
    return namespace


def _build(ns: dict[str, Any], device: str, seed: int = 0):
    import torch

    torch.manual_seed(seed)
    model = ns["Model"](*ns["get_init_inputs"]()).to(device)
    inputs = [t.to(device) if isinstance(t, torch.Tensor) else t for t in ns["get_inputs"]()]
    return model, inputs


def _run_eager(source: str, device: str):
    import torch

    try:
        ns = load(source)
        model, inputs = _build(ns, device)
        with torch.no_grad():
            out = model(*inputs)
    except Exception as exc:  # a task that does not run is dropped, saying why
        raise Dropped("eager", f"eager failed: {type(exc).__name__}: {str(exc)[:200]}") from exc
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        raise Dropped("eager", f"eager output is not a float tensor ({type(out).__name__})")
    if not torch.isfinite(out).all():
        raise Dropped("finite", "non-finite output (nan or inf) on normal inputs")
    return ns, model, inputs, out


def _check_determinism(ns, model, inputs, out, device: str) -> None:
    import torch

    with torch.no_grad():
        again = model(*inputs)
        if not torch.equal(out, again):
            raise Dropped("deterministic", "nondeterministic: two calls on the same inputs differ")
        _, other = _build(ns, device, seed=1)
        moved = model(*other)
    if out.numel() < 2 or float(out.float().std()) == 0.0:
        raise Dropped("trivial", "trivial: the output is constant")
    if torch.equal(out, moved):
        raise Dropped("trivial", "trivial: the output does not depend on the inputs")


def eager_ms(model, inputs, device: str, budget_s: float = 0.3, most: int = 200) -> float:
    import torch

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    times: list[float] = []
    with torch.no_grad():
        for _ in range(2):
            model(*inputs)
        sync()
        end = time.perf_counter() + budget_s
        while len(times) < most and (len(times) < 5 or time.perf_counter() < end):
            t0 = time.perf_counter()
            model(*inputs)
            sync()
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def _check_compile(model, inputs, out) -> float:
    import torch

    torch._dynamo.reset()
    t0 = time.perf_counter()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = torch.compile(model)(*inputs)
    except Exception as exc:
        raise Dropped(
            "compile", f"torch.compile failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        ) from exc
    seconds = time.perf_counter() - t0
    if not torch.allclose(compiled, out, rtol=COMPILE_TOL, atol=COMPILE_TOL):
        err = float((compiled - out).abs().max())
        raise Dropped("compile", f"torch.compile disagrees with eager (max abs error {err:.3g})")
    return seconds


def check(
    source: str, device: str = "cpu", min_ms: float = 0.02, max_ms: float = 50.0, with_compile: bool = True
) -> Verdict:
    verdict = Verdict()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ns, model, inputs, out = _run_eager(source, device)
            _check_determinism(ns, model, inputs, out, device)
            verdict.eager_ms = round(eager_ms(model, inputs, device), 4)
        if not min_ms <= verdict.eager_ms <= max_ms:
            raise Dropped("runtime", f"eager median {verdict.eager_ms:.3g} ms outside [{min_ms}, {max_ms}] ms")
        if with_compile:
            verdict.compile_s = round(_check_compile(model, inputs, out), 2)
    except Dropped as d:
        verdict.check, verdict.reason = d.check, d.reason
        return verdict
    verdict.kept = True
    return verdict
