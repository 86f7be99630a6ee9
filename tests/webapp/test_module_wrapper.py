"""webapp/jobs/module_wrapper.py: any file with nn.Module subclasses -> a KernelBench-format task."""

from __future__ import annotations

from pathlib import Path

import pytest

from webapp.jobs.module_wrapper import (
    InputSpec,
    SpecError,
    find_module_classes,
    parse_init_args,
    parse_input_spec,
    parse_input_specs,
    wrapper_source,
)
from webapp.jobs.task_check import check_task_source

SE = (Path(__file__).parent / "data" / "se_block_module.py").read_text()


def test_classes_are_found_without_importing():
    found = {c.name: c for c in find_module_classes(SE + "\nraise SystemExit('imported!')\n")}
    assert list(found) == ["Squeeze", "SEBlock", "TokenMixer"]  # TokenMixer through SEBlock
    assert found["SEBlock"].init_params == ["channels", "reduction=REDUCTION"]
    assert found["SEBlock"].forward_params == ["x"]
    assert found["SEBlock"].doc == "Squeeze-and-excitation: channel attention from global pooling."
    assert found["TokenMixer"].forward_params == ["tokens", "mask=None"] and found["TokenMixer"].init_params == []
    assert find_module_classes("class A:\n    pass\n") == []
    with pytest.raises(SyntaxError):
        find_module_classes("class (:")


@pytest.mark.parametrize(
    "text, spec",
    [
        ("float32[8,64,28,28]", InputSpec("float32", (8, 64, 28, 28), "randn")),
        ("int64[8,128] randint(0,50257)", InputSpec("int64", (8, 128), "randint", (0, 50257))),
        (" bf16[ 4 , 4 ]  uniform(-1, 1) ", InputSpec("bfloat16", (4, 4), "uniform", (-1, 1))),
        ("torch.float16[16]", InputSpec("float16", (16,), "randn")),
        ("int32[3]", InputSpec("int32", (3,), "randint", (0, 100))),
        ("bool[2,2]", InputSpec("bool", (2, 2), "bernoulli", (0.5,))),
        ("float64[]", InputSpec("float64", (), "randn")),
    ],
)
def test_input_specs(text, spec):
    assert parse_input_spec(text) == spec


@pytest.mark.parametrize(
    "text, words",
    [
        ("float32", "not an input spec"),
        ("complex64[3]", "unknown dtype"),
        ("float32[8,x]", "whole numbers"),
        ("float32[0]", "positive"),
        ("int64[8] randn", "floating-point"),
        ("int64[8] randint(5,5)", "LOW < HIGH"),
        ("float32[8] gamma(1)", "unknown distribution"),
        ("float32[8] uniform(1)", "takes 2 arguments"),
        ("float32[100000,100000]", "more than one input"),
    ],
)
def test_bad_input_specs_say_why(text, words):
    with pytest.raises(SpecError, match=words):
        parse_input_spec(text)


def test_init_args():
    assert parse_init_args("[64, 256]") == [64, 256]
    assert parse_init_args('{"channels": 64}') == {"channels": 64}
    assert parse_init_args("") == [] and parse_init_args("64") == [64]
    with pytest.raises(SpecError, match="JSON"):
        parse_init_args("[64,")
    with pytest.raises(SpecError, match="identifiers"):
        parse_init_args('{"not a name": 1}')


def run_task(source: str):
    """What the sandbox would do with the task (here in the test process, which may import it)."""
    import torch

    namespace: dict = {"__name__": "task"}
    exec(compile(source, "task.py", "exec"), namespace)
    torch.manual_seed(0)
    model = namespace["Model"](*namespace["get_init_inputs"]())
    inputs = namespace["get_inputs"]()
    return model, inputs, model(*inputs)


def test_the_wrapper_is_a_kernelbench_task_that_runs():
    source = wrapper_source(SE, "SEBlock", [64], parse_input_specs("float32[8,64,28,28]"))
    assert source.startswith(SE.rstrip("\n"))  # the file verbatim
    assert check_task_source(source).ok, check_task_source(source).errors
    model, inputs, out = run_task(source)
    assert type(model).__mro__[1].__name__ == "SEBlock"
    assert inputs[0].shape == (8, 64, 28, 28) and out.shape == (8, 64, 28, 28)


def test_keyword_init_and_integer_inputs():
    import torch

    module = """import torch
from torch import nn


class Embed(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.table = nn.Embedding(vocab, dim)

    def forward(self, ids, scale):
        return self.table(ids) * scale
"""
    specs = parse_input_specs(["int64[8,128] randint(0,50257)", "float32[] ones"])
    source = wrapper_source(module, "Embed", {"vocab": 50257, "dim": 16}, specs)
    _, inputs, out = run_task(source)
    assert inputs[0].dtype == torch.int64 and int(inputs[0].max()) < 50257 and inputs[1].shape == ()
    assert out.shape == (8, 128, 16)


def test_a_class_named_model_and_the_files_own_functions_are_overridden():
    module = "import torch\nfrom torch import nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x + 1\n\ndef get_inputs():\n    return []\n"
    _, inputs, out = run_task(wrapper_source(module, "Model", [], parse_input_specs("float32[2]")))
    assert inputs[0].shape == (2,) and (out == inputs[0] + 1).all()


def test_wrong_class_or_input_count_is_refused():
    with pytest.raises(SpecError, match="not an nn.Module subclass of this file .found: Squeeze, SEBlock, TokenMixer"):
        wrapper_source(SE, "helper", [], parse_input_specs("float32[2]"))
    with pytest.raises(SpecError, match=r"SEBlock.forward\(x\) takes 1 input; 2 specs given"):
        wrapper_source(SE, "SEBlock", [64], parse_input_specs("float32[2]; float32[2]"))
    assert wrapper_source(SE, "TokenMixer", [8], parse_input_specs("float32[2,8]"))  # mask has a default
    with pytest.raises(SpecError, match="one input spec per input"):
        parse_input_specs("  \n ")


def test_the_wrappers_forward_has_the_modules_parameters():
    import ast

    module = "import torch\nfrom torch import nn\n\nclass Base(nn.Module):\n    def forward(self, x: 'Tensor', /, y=2, *rest, scale=1.0, **kw):\n        return x * y * scale\n\nclass Child(Base):\n    pass\n"
    source = wrapper_source(module, "Base", [], parse_input_specs("float32[3]"))
    fn = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "Model").body[1]
    assert ast.unparse(fn.args) == "self, x, y=2, *rest, scale=1.0, **kw"
    assert ast.unparse(fn.body[0]) == "return super().forward(x, y, *rest, scale=scale, **kw)"
    _, inputs, out = run_task(source)
    assert (out == inputs[0] * 2).all()
    # forward inherited from a class of the file: passed on as it comes
    assert "def forward(self, *args, **kwargs):" in wrapper_source(module, "Child", [], parse_input_specs("float32[3]"))
