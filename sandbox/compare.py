"""Output comparison in the trusted parent: structure, shape, dtype, values.

Rules, in order: the structure (tuple/list/tensor/number) must match; each tensor must have
the reference's shape and dtype; NaN/Inf where the reference is finite never passes; an output
that is constant, or (near) zero, where the reference is not never passes, whatever the
tolerance; then every element must satisfy |c - r| <= atol + rtol * |r| (NaN matches NaN and
+-Inf matches the same Inf only where the reference has them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .options import EvalOptions

NEAR_ZERO = 1e-3  # candidate max |x| below this fraction of the reference's -> "(near) zero"


@dataclass
class Comparison:
    passed: bool
    message: str = ""
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatched: int | None = None
    total: int | None = None
    values_only: bool = False  # failed only because values were outside the tolerance


def describe(spec: Any) -> str:
    t = spec.get("t")
    if t == "tensor":
        return "a tensor"
    if t == "scalar":
        return "a number"
    if t in ("tuple", "list"):
        return f"a {t} of {len(spec['items'])} ({', '.join(describe(s) for s in spec['items'])})"
    if t == "dict":
        return f"a dict with keys {spec['keys']}"
    return t


def compare_outputs(
    expected_spec: Any, expected: list[Any], got_spec: Any, got: list[Any], options: EvalOptions
) -> Comparison:
    import torch

    if expected_spec != got_spec:
        return Comparison(
            False, f"output structure differs: expected {describe(expected_spec)}, got {describe(got_spec)}"
        )
    worst_abs = worst_rel = 0.0
    mismatched = total = 0
    messages = []
    for i, (e, g) in enumerate(zip(expected, got, strict=True)):
        if not isinstance(e, torch.Tensor):
            if g is None or isinstance(g, torch.Tensor):
                return Comparison(False, f"output {i}: expected a number, got {type(g).__name__}")
            if e is None or isinstance(e, bool):
                if e != g:
                    return Comparison(False, f"output {i}: expected {e!r}, got {g!r}")
                continue
            tol = options.tolerance("float64")
            if not math.isclose(float(g), float(e), rel_tol=tol.rtol, abs_tol=tol.atol):
                return Comparison(False, f"output {i}: expected {e!r}, got {g!r}")
            continue
        if not isinstance(g, torch.Tensor):
            return Comparison(False, f"output {i}: expected a tensor, got {type(g).__name__}")
        if tuple(g.shape) != tuple(e.shape):
            return Comparison(False, f"output {i}: shape {tuple(g.shape)}, expected {tuple(e.shape)}")
        if g.dtype != e.dtype:
            return Comparison(
                False,
                f"output {i}: dtype {str(g.dtype).replace('torch.', '')}, expected {str(e.dtype).replace('torch.', '')}",
            )
        n = e.numel()
        total += n
        if n == 0:
            continue
        if not e.is_floating_point() and not e.is_complex():
            bad = int((g != e).sum())
            if bad:
                mismatched += bad
                messages.append(f"output {i}: {bad} of {n} integer elements differ")
            continue
        # Few passes over the data: the extremes say whether everything is finite (min/max
        # propagate NaN) and give the scales; the values are compared in float32 (or float64)
        # chunk by chunk (_outside_tolerance).
        ef, gf = e.reshape(-1), g.reshape(-1)
        emin, emax = (float(v) for v in torch.aminmax(ef))
        gmin, gmax = (float(v) for v in torch.aminmax(gf))
        if not (math.isfinite(emin) and math.isfinite(emax)):
            e_fin, g_fin = torch.isfinite(ef), torch.isfinite(gf)
            nonfinite_new = int((e_fin & ~g_fin).sum())
            if nonfinite_new:
                return Comparison(
                    False,
                    f"output {i}: NaN/Inf at {nonfinite_new} positions where the reference is finite",
                    mismatched=nonfinite_new,
                    total=total,
                )
            same_nan = torch.isnan(ef) & torch.isnan(gf)
            same_inf = torch.isinf(ef) & (ef == gf)
            bad_special = int((~e_fin & ~(same_nan | same_inf)).sum())
            if bad_special:
                return Comparison(
                    False,
                    f"output {i}: {bad_special} non-finite reference values not reproduced",
                    mismatched=bad_special,
                    total=total,
                )
            ef, gf = ef[e_fin], gf[e_fin]
            if ef.numel():
                emin, emax = (float(v) for v in torch.aminmax(ef))
                gmin, gmax = (float(v) for v in torch.aminmax(gf))
        elif not (math.isfinite(gmin) and math.isfinite(gmax)):
            bad_n = int((~torch.isfinite(gf)).sum())
            return Comparison(
                False,
                f"output {i}: NaN/Inf at {bad_n} positions where the reference is finite",
                mismatched=bad_n,
                total=total,
            )
        if ef.numel() > 1 and emax - emin > 0 and gmax - gmin == 0.0:
            return Comparison(False, f"output {i} is constant ({gmin:.6g}) but the reference is not", total=total)
        if ef.numel() > 0:
            ref_scale = max(abs(emin), abs(emax))
            got_scale = max(abs(gmin), abs(gmax))
            if ref_scale > 1e-6 and got_scale < NEAR_ZERO * ref_scale:
                return Comparison(
                    False,
                    f"output {i} is (near) zero (max |x| = {got_scale:.3g}) but the reference reaches {ref_scale:.3g}",
                    total=total,
                )
        if not ef.numel():
            continue
        tol = options.tolerance(str(e.dtype).replace("torch.", ""))
        nbad, chunk_abs, chunk_rel, idx = _outside_tolerance(ef, gf, tol.rtol, tol.atol)
        worst_abs, worst_rel = max(worst_abs, chunk_abs), max(worst_rel, chunk_rel)
        if nbad:
            mismatched += nbad
            messages.append(
                f"output {i}: {nbad} of {n} elements outside atol={tol.atol:g} rtol={tol.rtol:g} "
                f"(worst: got {float(gf[idx]):.6g}, expected {float(ef[idx]):.6g})"
            )
    return Comparison(
        not messages, "; ".join(messages), worst_abs, worst_rel, mismatched, total, values_only=bool(messages)
    )


def _outside_tolerance(ef: Any, gf: Any, rtol: float, atol: float) -> tuple[int, float, float, int]:
    """How many elements of the flat outputs lie outside atol + rtol * |expected|, the worst
    absolute and relative errors, and where the tolerance is exceeded most: a chunk at a time
    (harness.flat_chunks) in float32 (float64 outputs in float64); made at once, five temporaries
    as large as a 4 GiB output ran the reference out of memory on an 80 GB device."""
    import torch

    from .harness import flat_chunks

    work = torch.float64 if ef.dtype == torch.float64 else torch.float32
    nbad, worst_abs, worst_rel, worst_excess, worst_idx = 0, 0.0, 0.0, -math.inf, 0
    for start, e_part, g_part in flat_chunks(ef, gf):
        e, g = e_part.to(work), g_part.to(work)
        mag = e.abs()
        diff = g.sub(e).abs_()
        allowed = mag.mul(rtol).add_(atol)
        bad = int((diff > allowed).sum())
        worst_abs = max(worst_abs, float(diff.max()))
        if bad:
            nbad += bad
            excess = diff - allowed
            k = int(torch.argmax(excess))
            if float(excess[k]) > worst_excess:
                worst_excess, worst_idx = float(excess[k]), start + k
        worst_rel = max(worst_rel, float(diff.div_(mag.clamp_min_(1e-12)).max()))
    return nbad, worst_abs, worst_rel, worst_idx


REFERENCE_ERROR_FACTOR = 2.0


def within_reference_error(
    expected: list[Any], got: list[Any], exact: list[Any], options: EvalOptions
) -> tuple[bool, str, float]:
    """Second look at a value-only mismatch, against the task computed in float64 (`exact`).

    A float32 reference is itself inexact: a sum of 4096 products is off by ~1e-4 relative where
    terms cancel, and a candidate that computes the same function more exactly (a rewrite that
    sums fewer terms) then differs from it by more than the tolerance. The candidate passes if,
    in units of the tolerance (atol + rtol * |exact|), its worst error against the float64 result
    is at most REFERENCE_ERROR_FACTOR times the float32 reference's own worst error (and at most
    1 unit when the reference is within tolerance everywhere): as accurate as the reference, up
    to a factor of two, on every output of the trial. The third value bounds the candidate's
    distance from the float32 reference in tolerance units (for the timed-call fingerprints)."""
    import torch

    notes = []
    widen = 1.0
    for i, (e, g, x) in enumerate(zip(expected, got, exact, strict=False)):
        if not isinstance(e, torch.Tensor) or not e.is_floating_point():
            continue
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != tuple(e.shape) or not isinstance(g, torch.Tensor):
            return False, f"output {i}: no float64 reference to compare with", 1.0
        errors = _errors_in_tolerance_units(e, g, x, options.tolerance(str(e.dtype).replace("torch.", "")))
        if errors is None:
            continue
        ref_err, cand_err = errors
        limit = max(1.0, REFERENCE_ERROR_FACTOR * ref_err)
        if not cand_err <= limit:
            return (
                False,
                (
                    f"output {i}: against the float64 result the candidate's worst error is {cand_err:.3g} tolerance units, "
                    f"the float32 reference's own {ref_err:.3g} (allowed {limit:.3g})"
                ),
                1.0,
            )
        widen = max(widen, limit + ref_err)
        notes.append(f"output {i}: {cand_err:.3g} vs the reference's own {ref_err:.3g} tolerance units")
    return True, "within the float32 reference's own error of the float64 result (" + "; ".join(notes) + ")", widen


def _errors_in_tolerance_units(e: Any, g: Any, x: Any, tol: Any) -> tuple[float, float] | None:
    """The float32 reference's (e) and the candidate's (g) worst errors against the float64 result
    (x), in units of atol + rtol * |x|, over the elements where x and e are finite (None: there are
    none); a chunk at a time, as the first comparison (three float64 copies of a 4 GiB output
    would not fit beside the task). A NaN error anywhere makes that worst error NaN."""
    import torch

    from .harness import flat_chunks

    worst: list[float] | None = None
    for _, ec, gc, xc in flat_chunks(e, g, x):
        xd, ed = xc.double(), ec.double()
        mask = torch.isfinite(xd) & torch.isfinite(ed)
        if not bool(mask.any()):
            continue
        xs = xd[mask]
        unit = xs.abs().mul_(tol.rtol).add_(tol.atol)
        errs = [float((ed[mask] - xs).abs_().div_(unit).max()), float((gc.double()[mask] - xs).abs_().div_(unit).max())]
        worst = (
            errs if worst is None else [b if math.isnan(b) or b > a else a for a, b in zip(worst, errs, strict=True)]
        )
    return None if worst is None else (worst[0], worst[1])


def fingerprint_bound(expected: list[Any], weights: list[Any], options: EvalOptions) -> tuple[float, float]:
    """(expected fingerprint, allowed deviation) for the timed-call output check.

    The weights w are standard normal and independent of the candidate's per-element error e
    (which it cannot tailor: it never sees the expected values), so sum(w * e) ~ N(0, |e|^2).
    An honest output has |e_i| <= tol_i, hence the 8-sigma bound 8 * |tol|_2 (false alarm
    < 1e-15 per call); a replayed or skipped output has |e| of the order of the output itself
    and lands far outside it."""
    import torch

    from .harness import flat_chunks

    value = 0.0
    bound = 0.0
    for e, w in zip(expected, weights, strict=False):
        if isinstance(e, torch.Tensor) and w is not None:
            tol = options.tolerance(str(e.dtype).replace("torch.", ""))
            squares = scaled = 0.0
            for _, ec, wc in flat_chunks(e, w):
                ed = ec.double()
                value += float((ed * wc).sum())
                mag = ed.abs()  # not in place: a float64 output's chunk is a view of it
                scaled += float((wc.abs() * mag).sum())
                squares += float(mag.mul_(tol.rtol).add_(tol.atol).pow_(2).sum())
            bound += 8.0 * math.sqrt(squares) + 1e-9 * scaled
        elif isinstance(e, int | float) and not isinstance(e, bool):
            value += float(e)
            bound += 1e-6 * (abs(float(e)) + 1)
    return value, bound
