"""The parent's output comparison (sandbox.compare), rule by rule, on small tensors."""

from __future__ import annotations

import math

import pytest
import torch

from sandbox import harness
from sandbox.compare import compare_outputs
from sandbox.options import EvalOptions

T = {"t": "tensor"}
OPTS = EvalOptions(backend="cpu")
TOL = OPTS.tolerance("float32")


def cmp(expected: torch.Tensor, got: torch.Tensor):
    return compare_outputs(T, [expected], T, [got], OPTS)


def ref(n: int = 1000) -> torch.Tensor:
    return torch.linspace(-3, 5, n)


def test_within_tolerance_passes_and_reports_the_worst_errors():
    e = ref()
    g = e + TOL.atol * 0.5
    c = cmp(e, g)
    assert c.passed and c.mismatched == 0 and c.total == e.numel()
    assert c.max_abs_error == pytest.approx(TOL.atol * 0.5, rel=0.01)  # float32 rounding of e + d
    assert c.max_rel_error > 0


def test_outside_tolerance_fails_naming_the_worst_element_and_counting_all():
    e = ref()
    g = e.clone()
    g[10] += 1.0
    g[700] += 0.5
    c = cmp(e, g)
    assert not c.passed and c.values_only and c.mismatched == 2
    assert f"expected {float(e[10]):.6g}" in c.message and "2 of 1000" in c.message


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_candidate_fails_where_the_reference_is_finite(bad):
    e = ref()
    g = e.clone()
    g[3] = bad
    c = cmp(e, g)
    assert not c.passed and "NaN/Inf at 1 positions" in c.message and not c.values_only


def test_reference_nan_and_inf_must_be_reproduced_exactly():
    e = ref()
    e[5], e[6] = math.nan, math.inf
    g = e.clone()
    assert cmp(e, g).passed
    g2 = e.clone()
    g2[6] = -math.inf
    assert "non-finite reference values not reproduced" in cmp(e, g2).message
    g3 = e.clone()
    g3[7] = math.nan
    assert "where the reference is finite" in cmp(e, g3).message
    g4 = e.clone()
    g4[8] += 1.0  # a finite element wrong, next to the reference's non-finite ones
    assert not cmp(e, g4).passed and cmp(e, g4).values_only


def test_constant_and_near_zero_outputs_never_pass_whatever_the_tolerance():
    e = ref() * 1e-4  # every value is within a huge tolerance of zero
    loose = EvalOptions(backend="cpu", atol=1.0, rtol=1.0)
    c = compare_outputs(T, [e], T, [torch.full_like(e, float(e[0]))], loose)
    assert not c.passed and "constant" in c.message
    c = compare_outputs(T, [e], T, [torch.zeros_like(e).index_fill_(0, torch.tensor([0]), 1e-12)], loose)
    assert not c.passed and "(near) zero" in c.message


def test_structure_shape_dtype_and_integer_mismatches():
    e = ref(12)
    assert "shape" in cmp(e, e.reshape(3, 4)).message
    assert "dtype" in cmp(e, e.double()).message
    assert "structure" in compare_outputs(T, [e], {"t": "tuple", "items": [T]}, [e], OPTS).message
    i = torch.arange(10)
    j = i.clone()
    j[4] = 0
    c = cmp(i, j)
    assert not c.passed and "1 of 10 integer elements differ" in c.message
    assert cmp(torch.empty(0), torch.empty(0)).passed


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_chunked_values_give_the_whole_outputs_verdict(monkeypatch, dtype):
    """The value check runs CHUNK elements at a time (its temporaries stay small for a 4 GiB
    output): with chunks of 7 elements it counts, measures and names the worst element exactly
    as one pass over everything does, a NaN the reference shares included."""
    e = torch.linspace(-3, 5, 1000).to(dtype)
    e[3] = float("nan")
    g = e.clone()
    g[10] += 1.0
    g[701] -= 2.0  # the worst, in a later chunk than the first bad element
    g[702] += 0.5
    whole = cmp(e, g)
    monkeypatch.setattr(harness, "CHUNK", 7)
    chunked = cmp(e, g)
    assert not whole.passed and whole.mismatched == 3
    assert (chunked.message, chunked.mismatched, chunked.max_abs_error, chunked.max_rel_error) == (
        whole.message,
        whole.mismatched,
        whole.max_abs_error,
        whole.max_rel_error,
    )
    assert f"expected {float(e[701]):.6g}" in chunked.message


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_projections_in_chunks_match_the_whole_and_leave_the_output_alone(monkeypatch, dtype):
    """The timed-call fingerprint and its bound are computed harness.CHUNK elements at a time
    (a float64 copy of a 4 GiB output ran a child out of device memory): with chunks of 7 they
    agree with the formulas over the whole output, and a float64 output (whose chunks are views
    of it) is not changed by computing them."""
    from sandbox.compare import fingerprint_bound

    e = torch.linspace(-3, 5, 1000, dtype=dtype).reshape(20, 50).t()  # a strided output
    w = torch.randn(50, 20)
    kept = e.clone()
    monkeypatch.setattr(harness, "CHUNK", 7)
    value, bound = fingerprint_bound([e], [w], OPTS)
    tol = OPTS.tolerance(str(dtype).replace("torch.", ""))
    ed = e.double()
    assert value == pytest.approx(float((ed * w).sum()), rel=1e-12)
    whole = 8.0 * math.sqrt(float((tol.atol + tol.rtol * ed.abs()).pow(2).sum())) + 1e-9 * float(
        (w.abs() * ed.abs()).sum()
    )
    assert bound == pytest.approx(whole, rel=1e-12)
    assert harness.fingerprint([e], [w]) == pytest.approx(value, rel=1e-12)
    assert torch.equal(e, kept)


def test_the_float64_second_look_in_chunks_gives_the_whole_outputs_verdict(monkeypatch):
    """The float64 second look (within_reference_error) also runs a chunk at a time (three float64
    copies of a 4 GiB output would not fit beside the task): with chunks of 7 elements its
    verdict and its widening are those of one pass, the worst element in a later chunk counts,
    and a NaN of the candidate's in any chunk fails it."""
    from sandbox.compare import within_reference_error

    x = torch.linspace(-3, 5, 1000, dtype=torch.float64)
    e = x.float()
    e[500] += 1e-3  # the float32 reference's own error
    g = x.float()
    g[701] += 1.5e-3  # within twice the reference's own
    whole = within_reference_error([e], [g], [x], OPTS)
    monkeypatch.setattr(harness, "CHUNK", 7)
    assert within_reference_error([e], [g], [x], OPTS) == whole and whole[0], whole
    far = g.clone()
    far[702] += 5e-2  # many times the reference's own error, in a later chunk
    assert not within_reference_error([e], [far], [x], OPTS)[0]
    nan = g.clone()
    nan[900] = float("nan")  # a later chunk: the earlier chunks' finite errors must not hide it
    ok, text, _ = within_reference_error([e], [nan], [x], OPTS)
    assert not ok and "nan" in text, text
