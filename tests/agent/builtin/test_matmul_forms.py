"""torch.einsum and torch.baddbmm captured as the matrix products they are
(agent.builtin.matmul_forms), and every other einsum left to PyTorch's decomposition: each exported,
run on fresh inputs, and compared with the op itself."""

from __future__ import annotations

import pytest
import torch

from agent.builtin.capture_export import export_program


class _Einsum(torch.nn.Module):
    def __init__(self, equation: str):
        super().__init__()
        self.equation = equation

    def forward(self, *xs):
        return torch.einsum(self.equation, *xs)


def _exported(equation: str, shapes: list[tuple[int, ...]]) -> list[str]:
    """The exported graph's ATen ops; asserts it computes what torch.einsum does on fresh inputs."""
    torch.manual_seed(0)
    xs = [torch.randn(*s) for s in shapes]
    ep = export_program(_Einsum(equation), xs)
    for seed in (1, 2):
        torch.manual_seed(seed)
        fresh = [torch.randn(*s) for s in shapes]
        torch.testing.assert_close(ep.module()(*fresh), torch.einsum(equation, *fresh), rtol=1e-5, atol=1e-5)
    return [n.target._opname for n in ep.graph.nodes if n.op == "call_function"]


AS_MATMUL = {
    # (equation, shapes): the ops the graph holds
    "scores, lucidrains' spacing": (
        "b h i d, b h j d -> b h i j",
        [(2, 3, 8, 4), (2, 3, 6, 4)],
        ["transpose", "matmul"],
    ),
    "probabilities times values": ("bhij,bhjd->bhid", [(2, 3, 8, 6), (2, 3, 6, 5)], ["matmul"]),
    "a linear layer (L1/11)": ("bijl,lk->bijk", [(2, 3, 4, 5), (5, 7)], ["matmul"]),
    "x W^T": ("bnd,ed->bne", [(2, 3, 4), (5, 4)], ["transpose", "matmul"]),
    "FNO's spectral product": (
        "bixy,ioxy->boxy",
        [(2, 3, 4, 5), (3, 6, 4, 5)],
        ["permute", "permute", "matmul", "permute"],
    ),
    "implicit output": ("ij,jk", [(3, 4), (4, 5)], ["matmul"]),
    "ellipsis batch": ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)], ["matmul"]),
    "ellipsis on one side": ("...ij,jk->...ik", [(2, 3, 4), (4, 5)], ["matmul"]),
    "output transposed": ("b i j, b j k -> b k i", [(2, 3, 4), (2, 4, 6)], ["matmul", "transpose"]),
    "batch broadcast from size 1": ("bij,bjk->bik", [(1, 3, 4), (5, 4, 6)], ["matmul"]),
    "two contracted letters merged": ("bijc,bjck->bik", [(2, 3, 4, 5), (2, 4, 5, 6)], ["view", "view", "matmul"]),
    "Mamba2's chunk states (L3/48)": ("bhzc,bchpn->bzhpn", [(2, 3, 4, 5), (2, 5, 3, 6, 7)], None),
}

FALLBACK = {
    "diagonal": ("ii->i", [(3, 3)]),
    "dot products (no free letter)": ("bhd,bhd->bh", [(2, 3, 4), (2, 3, 4)]),
    "three operands": ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 6)]),
    "outer product (nothing contracted)": ("bi,bj->bij", [(2, 3), (2, 4)]),
    "a letter summed in one operand": ("bij,bjk->bk", [(2, 3, 4), (2, 4, 5)]),
    "ellipses of different ranks": ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
    "ellipsis reduced": ("...d,...d->...", [(2, 3), (2, 3)]),
}


@pytest.mark.parametrize("name", sorted(AS_MATMUL))
def test_a_two_operand_product_is_one_matmul(name):
    equation, shapes, ops = AS_MATMUL[name]
    got = _exported(equation, shapes)
    assert got.count("matmul") == 1 and "bmm" not in got, got
    if ops is not None:
        assert got == ops, got


@pytest.mark.parametrize("name", sorted(FALLBACK))
def test_any_other_einsum_is_pytorchs_decomposition_and_correct(name):
    equation, shapes = FALLBACK[name]
    assert "matmul" not in _exported(equation, shapes)


class _Baddbmm(torch.nn.Module):
    def __init__(self, beta: float, alpha: float, zeros: bool):
        super().__init__()
        self.beta, self.alpha, self.zeros = beta, alpha, zeros

    def forward(self, c, a, b):
        c = torch.zeros_like(c) if self.zeros else c
        return torch.baddbmm(c, a, b, beta=self.beta, alpha=self.alpha)


@pytest.mark.parametrize(
    "beta, alpha, zeros, ops",
    [
        (1.0, 0.125, True, ["zeros_like", "matmul", "mul", "add"]),  # GPT-NeoX's scores
        (0.5, 2.0, False, ["matmul", "mul", "mul", "add"]),
        (1.0, 1.0, False, ["matmul", "add"]),
        (0.0, 1.0, False, ["matmul"]),  # beta 0: c ignored, even NaN
    ],
)
def test_baddbmm_is_a_matmul_a_scale_and_an_add(beta, alpha, zeros, ops):
    model = _Baddbmm(beta, alpha, zeros)
    shapes = [(3, 4, 6), (3, 4, 5), (3, 5, 6)]
    ep = export_program(model, [torch.randn(*s) for s in shapes])
    assert [n.target._opname for n in ep.graph.nodes if n.op == "call_function"] == ops
    for seed in (1, 2):
        torch.manual_seed(seed)
        c, a, b = (torch.randn(*s) for s in shapes)
        if beta == 0:
            c = torch.full_like(c, float("nan"))
        torch.testing.assert_close(ep.module()(c, a, b), model(c, a, b), rtol=1e-5, atol=1e-5)


def test_a_contraction_path_reaches_pytorchs_decomposition():
    """With opt_einsum installed torch.einsum passes a contraction path for three or more operands
    (Mamba2's einsums on the GPU image); the fallback gets it as the keyword aten.einsum declares."""
    from agent.builtin.matmul_forms import einsum_as_matmul

    decompose = einsum_as_matmul(torch.export.default_decompositions()[torch.ops.aten.einsum.default])
    a, b, c = torch.randn(2, 3), torch.randn(3, 4), torch.randn(4, 5)
    got = decompose("ij,jk,kl->il", [a, b, c], path=[1, 2, 0, 1])
    torch.testing.assert_close(got, torch.einsum("ij,jk,kl->il", a, b, c))
    torch.testing.assert_close(decompose("ij,jk->ik", [a, b], path=None), a @ b)
