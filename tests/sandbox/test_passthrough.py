"""A module that returns one of its inputs as an output (torchaudio's Conformer returns its
`lengths`; masks and caches go through many blocks the same way) is honest: the candidate may
return that input too, exactly where the reference does. Anywhere else an output sharing an
input's memory stays rejected (`hacks/input_view`)."""

from __future__ import annotations

from sandbox import evaluate

TASK = """
import torch


class Model(torch.nn.Module):
    def forward(self, x, lengths):
        return torch.relu(x) * 2, {returned}


N = 64


def get_inputs():
    return [torch.randn(8, N), torch.randint(1, N, (8,))]


def get_init_inputs():
    return []
"""

COPY = """
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x, lengths):
        return torch.relu(x) * 2, {returned}
"""


def _run(quick, reference: str, candidate: str):
    files = {"model_new.py": COPY.format(returned=candidate)}
    return evaluate(TASK.format(returned=reference), files, quick(torch_ops="allow"))


def test_an_input_returned_where_the_reference_returns_it_is_correct(quick):
    res = _run(quick, "lengths", "lengths")
    text = "\n".join(res.reasons + [t.message for t in res.trials])
    assert res.status.value == "ok", text
    assert res.verdict.value == "pass" and res.reward >= 1
    assert res.timing.candidate.trials >= 20  # every timed call's output checked, the input's too


def test_an_input_returned_where_the_reference_returns_a_copy_is_rejected(quick):
    res = _run(quick, "lengths.clone()", "lengths")
    text = "\n".join(res.reasons + [t.message for t in res.trials])
    assert res.status.value == "rejected", text
    assert "shares memory with input 1" in text


def test_another_view_of_the_returned_input_is_rejected(quick):
    """Only the very tensor the reference returns: a view of another part of it is not that."""
    res = _run(quick, "lengths", "lengths[1:]")
    text = "\n".join(res.reasons + [t.message for t in res.trials])
    assert res.status.value != "ok", text
    assert res.reward == -1
