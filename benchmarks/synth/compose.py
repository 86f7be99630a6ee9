"""Random KernelBench-format tasks from the mined operators: an optional layer with weights,
then one to four operators on its output, written out as a module like KernelBench's own
(sizes as module-level constants, `get_inputs`, `get_init_inputs`).

Three layouts: "vec" (batch, features) after nn.Linear, "img" (batch, channels, h, w) after
nn.Conv2d, "seq" (batch, tokens, dim) after a self-attention-like matmul or nn.Linear. Each
following step is a mined torch function (unary, with a learned parameter as the second operand
of a binary one, along the last dim), an activation module, a normalisation, a residual of a
unary, or, last, a reduction of the last dim. Sizes are small powers of two.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from benchmarks.synth.ops import Catalogue

HEADER = '''"""{doc}"""
import torch
import torch.nn as nn
'''


@dataclass
class Program:
    layout: str
    sizes: dict[str, int]  # module-level constants, in order
    inputs: list[str]  # shape expressions of get_inputs' tensors, e.g. "batch_size, features"
    init: list[str] = field(default_factory=list)  # lines of __init__ after super().__init__()
    forward: list[str] = field(default_factory=list)  # lines of forward before `return x`
    steps: list[str] = field(default_factory=list)  # what each step is, for the name and the report
    last_dim: str = ""  # the size constant of the last dim (a parameter's shape, LayerNorm's)
    channels: str = ""  # img: the channel count after the convolution
    uses_transformers: bool = False

    def name(self, index: int) -> str:
        words = "_".join(s.replace("nn.", "").replace("transformers:", "") for s in self.steps)
        return re.sub(r"[^A-Za-z0-9]+", "_", f"synth_{index:04d}_{words}")[:80].strip("_")

    def source(self) -> str:
        args = [k for k in self.sizes if k != "batch_size"]
        lines = [HEADER.format(doc=f"Synthesised ({self.layout}): " + " -> ".join(self.steps) + ".")]
        if self.uses_transformers:
            lines.append("from transformers.activations import ACT2FN\n")
        lines += [
            "",
            "class Model(nn.Module):",
            f"    def __init__(self, {', '.join(args)}):" if args else "    def __init__(self):",
            "        super().__init__()",
        ]
        lines += [f"        {ln}" for ln in self.init]
        lines += (
            ["", "    def forward(self, x):"] + [f"        {ln}" for ln in self.forward] + ["        return x", "", ""]
        )
        lines += [f"{k} = {v}" for k, v in self.sizes.items()]
        tensors = ", ".join(f"torch.randn({shape})" for shape in self.inputs)
        lines += [
            "",
            "",
            "def get_inputs():",
            f"    return [{tensors}]",
            "",
            "",
            "def get_init_inputs():",
            f"    return [{', '.join(args)}]",
            "",
        ]
        return "\n".join(lines)


class Composer:
    def __init__(self, catalogue: Catalogue, rng: random.Random) -> None:
        self.cat, self.rng = catalogue, rng

    def pick(self, options):
        return self.rng.choice(options)

    def program(self) -> Program:
        layout = self.pick(("vec", "img", "seq"))
        prog = getattr(self, f"_start_{layout}")()
        for i in range(self.rng.randint(1, 4)):
            self._step(prog, i, prog.last_dim)
        if self.rng.random() < 0.15:
            name = self.pick(self.cat.reducing)
            prog.forward.append(f"x = torch.{name}(x, dim=-1)")
            prog.steps.append(f"{name}(dim=-1)")
        return prog

    # -- the first layer, by layout ---------------------------------------------------------------------
    def _start_vec(self) -> Program:
        sizes = {
            "batch_size": self.pick((16, 32, 64)),
            "in_features": self.pick((64, 128, 256)),
            "out_features": self.pick((64, 128, 256, 512)),
        }
        prog = Program("vec", sizes, ["batch_size, in_features"])
        prog.init.append("self.linear = nn.Linear(in_features, out_features)")
        prog.forward.append("x = self.linear(x)")
        prog.steps.append("nn.Linear")
        prog.last_dim = "out_features"
        return prog

    def _start_img(self) -> Program:
        k = self.pick((1, 3, 5))
        sizes = {
            "batch_size": self.pick((4, 8)),
            "in_channels": self.pick((3, 8, 16)),
            "out_channels": self.pick((8, 16, 32)),
            "height": self.pick((16, 32)),
            "width": self.pick((16, 32)),
            "kernel_size": k,
        }
        prog = Program("img", sizes, ["batch_size, in_channels, height, width"])
        prog.init.append("self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)")
        prog.forward.append("x = self.conv(x)")
        prog.steps.append("nn.Conv2d")
        prog.last_dim = "width"
        prog.channels = "out_channels"
        return prog

    def _start_seq(self) -> Program:
        sizes = {"batch_size": self.pick((4, 8)), "tokens": self.pick((32, 64, 128)), "dim": self.pick((32, 64, 128))}
        prog = Program("seq", sizes, ["batch_size, tokens, dim"])
        if self.rng.random() < 0.5:
            prog.init.append("self.proj = nn.Linear(dim, dim)")
            prog.forward.append("x = self.proj(x)")
            prog.steps.append("nn.Linear")
            prog.last_dim = "dim"
        else:
            prog.forward.append("x = torch.matmul(x, x.transpose(-1, -2)) / dim ** 0.5")
            prog.steps.append("matmul(x, x^T)")
            prog.last_dim = "tokens"
        return prog

    # -- the steps after it ----------------------------------------------------------------------------
    def _step(self, prog: Program, i: int, last: str) -> None:
        kind = self.rng.choices(
            ("unary", "module", "binary", "along_dim", "norm", "residual"), (35, 20, 15, 10, 10, 10)
        )[0]
        if kind == "unary" or (kind == "binary" and not last):
            name = self.pick(self.cat.unary)
            prog.forward.append(f"x = torch.{name}(x)")
            prog.steps.append(name)
        elif kind == "module":
            self._module(prog, i)
        elif kind == "binary":
            name = self.pick(self.cat.binary)
            prog.init.append(f"self.p{i} = nn.Parameter(torch.randn({last}))")
            prog.forward.append(f"x = torch.{name}(x, self.p{i})")
            prog.steps.append(f"{name}(param)")
        elif kind == "along_dim":
            name = self.pick(self.cat.along_dim)
            prog.forward.append(f"x = torch.{name}(x, dim=-1)")
            prog.steps.append(f"{name}(dim=-1)")
        elif kind == "norm":
            self._norm(prog, i, last)
        else:
            name = self.pick(self.cat.unary)
            prog.forward.append(f"x = x + torch.{name}(x)")
            prog.steps.append(f"residual({name})")

    def _module(self, prog: Program, i: int) -> None:
        choice = self.pick(self.cat.modules)
        if choice.startswith("transformers:"):
            prog.init.append(f"self.act{i} = ACT2FN[{choice.split(':', 1)[1]!r}]")
            prog.uses_transformers = True
        else:
            extra = "dim=-1" if choice in ("nn.Softmax", "nn.Softmin", "nn.LogSoftmax") else ""
            prog.init.append(f"self.act{i} = {choice}({extra})")
        prog.forward.append(f"x = self.act{i}(x)")
        prog.steps.append(choice)

    def _norm(self, prog: Program, i: int, last: str) -> None:
        if prog.layout == "img":
            channels = prog.channels
            norm = self.pick(("nn.BatchNorm2d({c})", "nn.GroupNorm(4, {c})", "nn.InstanceNorm2d({c})"))
            prog.init.append(f"self.norm{i} = " + norm.format(c=channels))
            prog.steps.append(norm.split("(")[0])
        else:
            prog.init.append(f"self.norm{i} = nn.LayerNorm({last})")
            prog.steps.append("nn.LayerNorm")
        prog.forward.append(f"x = self.norm{i}(x)")
