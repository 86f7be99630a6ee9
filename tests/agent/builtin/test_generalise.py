"""An exported graph's candidate made to follow its input sizes (agent/builtin/generalise.py):
under torch-ops=forbid and the default preset, the sandbox's shape trial runs the candidate at
other sizes, where a forward specialised to get_inputs ran the reference's own forward and was
rejected. Real modules, the real sandbox; the expressions are checked by the shape trial."""

from __future__ import annotations

import tokenize

import pytest
import torch
import torch.nn as nn

from agent.builtin.generalise import (
    MAX_PROBES,
    NotGeneral,
    bind,
    bind_float,
    probe_source,
    probe_values,
    size_constants,
)
from agent.builtin.guard import guard_digest, guard_parts, parts_digest
from agent.events import EvaluationEvent, ModelMessage
from tests.agent.builtin.test_export_capture import GPT2, _block, _policy_run

FORBID = {"compile_baseline": False, "timing_budget_s": 0.2, "min_timed_calls": 5, "torch_ops": "forbid"}


def test_each_size_constant_is_probed_alone():
    src = "B = 4\nT = 12\nC = 7\nkernel_size = 3\n\ndef get_inputs():\n    return [B, T, C, kernel_size]\n"
    assert size_constants(src) == {"B": (4, 2), "C": (7, 8), "T": (12, 6)}  # kernel sizes are not varied
    probes = [probe_source(src, name, probe) for name, (_, probe) in size_constants(src).items()]
    assert [p.splitlines()[:3] for p in probes] == [
        ["B = 2", "T = 12", "C = 7"],
        ["B = 4", "T = 12", "C = 8"],
        ["B = 4", "T = 6", "C = 7"],
    ]


# atoms as generalise.atoms gives them: (expression, value at the task's sizes and each probe)
BATCH = ("v_x.shape[0]", (4, 2, 4))
SEQ = ("v_x.shape[1]", (256, 256, 128))
HEAD = ("self.head_dim", (64, 64, 64))  # does not move: never an atom


def test_a_literal_binds_to_the_sizes_it_moves_with():
    atoms = [BATCH, SEQ]
    assert bind((256, 256, 128), atoms, forward=True) == "v_x.shape[1]"
    assert bind((1024, 512, 512), atoms, forward=True) == "v_x.shape[0] * v_x.shape[1]"  # never seq * 4
    assert bind((65536, 65536, 16384), atoms, forward=True) == "v_x.shape[1] * v_x.shape[1]"
    assert bind((16, 8, 16), atoms, forward=True) == "v_x.shape[0] * 4"
    assert bind((32, 32, 16), atoms, forward=True) == "(v_x.shape[1]) // 8"
    assert bind_float((16.0, 16.0, 11.313708498984761), atoms, True, 1) == "(v_x.shape[1]) ** 0.5"
    assert bind_float((0.0625, 0.0625, 0.125), atoms, True, 1) == "16 / (v_x.shape[1])"  # alpha / r
    with pytest.raises(NotGeneral):
        bind((257, 257, 130), atoms, forward=True)  # no product of sizes, nor one plus a constant
    assert bind((257, 257, 129), atoms, forward=True) == "(v_x.shape[1] + 1)"  # a sum: a size and a constant
    assert bind_float((13.0, 13.0, 6.0), [("self.k", (14, 14, 7))], True, 1) == "float((self.k - 1))"  # SAM's k - 1
    with pytest.raises(NotGeneral):
        bind((256, 256, 128), atoms, forward=False)  # an input's shape outside forward


def test_the_digest_leaves_out_what_moved_with_the_sizes():
    m = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16))
    m.width = 16
    bound = {"self.width", "self.0.weight.shape", "self.1.eps"}
    assert parts_digest(guard_parts(m, "export", set()), bound) == guard_digest(m, "export", bound)
    wider = nn.Sequential(nn.Linear(8, 32), nn.LayerNorm(32))
    wider.width = 32
    assert guard_digest(wider, "export", bound) != guard_digest(m, "export", bound)  # 1.weight's shape is kept
    bound |= {
        "self.0.bias.shape",
        "self.1.weight.shape",
        "self.1.bias.shape",
        "self.1.normalized_shape",
        "self.0.out_features",
    }
    assert guard_digest(wider, "export", bound) == guard_digest(m, "export", bound)


def _shapes_checked(res) -> list[str]:
    final = [e for e in res.trajectory.events if isinstance(e, EvaluationEvent) and e.result.get("status") == "ok"]
    return [f for e in final for f in e.result["audit"]["findings"] if "shapes checked" in f]


def test_exported_attention_passes_the_shape_trial_under_forbid():
    """minGPT's causal attention (export: the mask sliced by a traced size, the scale
    1/sqrt(n_embd / n_head) in the fused softmax): correct under forbid and the default preset,
    with both shape trials run on the generated kernels. Before: rejected for the reference's
    aten::_softmax, aten::tril, ... at the trial's shapes."""
    src = GPT2.replace("\nseq = 8\n", "\nseq = 4 * 2\n")  # a size written as arithmetic is one too
    assert src != GPT2
    res, pol = _policy_run(src, "gpt2_attention", FORBID, max_turns=3)  # analyse, one candidate, finish
    assert res.verified, res.trajectory.finished().summary
    assert pol.analysis.data["capture"] == "export" and len(pol.probes) == 3
    text = res.best.files["model_new.py"]
    assert "v_x.dim() != 3" in text and "(2, 8, 32)" not in text
    checked = _shapes_checked(res)
    assert checked and all("smaller" not in c for c in checked), checked
    assert any("->" in c for c in checked), checked  # the trial changed sizes and passed


def test_a_task_without_size_constants_is_not_probed():
    """Sizes written into get_inputs: the shape trial has nothing to change either, so the
    specialised candidate is no blocker and no capture is spent on probes."""
    from agent.builtin import BuiltinPolicy
    from agent.policy import TaskInfo

    src = GPT2.replace("torch.randn(batch, seq, n_embd)", "torch.randn(2, 8, 32)").replace(
        "return [n_embd, n_head]", "return [32, 2]"
    )
    assert not size_constants(src)
    pol = BuiltinPolicy(profile_reference=False)
    pol.reset(TaskInfo("t", src, "cpu", {"torch_ops": "forbid"}), [], [])
    assert pol.analysis.data["capture"] == "export" and not pol.probes
    assert not any("shape" in b for b in pol.blockers), pol.blockers


def test_more_size_constants_than_the_probes_vary_is_named():
    """GPT-2's attention with MAX_PROBES more sizes that get_inputs reads: no probe is captured and
    the policy says why its candidates stay specialised."""
    from agent.builtin import BuiltinPolicy
    from agent.policy import TaskInfo

    names = [f"size{i}" for i in range(MAX_PROBES)]
    src = "".join(f"{n} = {8 + i}\n" for i, n in enumerate(names)) + GPT2.replace(
        "def get_inputs():\n", f"def get_inputs():\n    _ = [{', '.join(names)}]\n"
    )
    assert len(size_constants(src)) > MAX_PROBES
    pol = BuiltinPolicy(profile_reference=False)
    pol.reset(TaskInfo("t", src, "cpu", {"torch_ops": "forbid"}), [], [])
    assert pol.analysis.data["capture"] == "export" and not pol.probes
    assert "more than the 8 the probes vary" in pol.general_note, pol.general_note


def test_probe_values_keep_a_multiple_of_eight_after_half():
    assert probe_values(104) == [52, 72, 160, 105]  # 52 // 8 = 6 groups do not divide 52; 72 // 8 = 9 do
    assert probe_values(197) == [198, 144, 296]
    assert probe_values(4) == [2, 5] and probe_values(3) == [4]


# RegNet's grouped 3x3 (groups = width // group_width) behind an adaptive pool (exported, not fx):
# at the first probe value, width 52, the reference raises (52 is no multiple of 6 groups)
GROUPED = """
import torch
import torch.nn as nn

batch = 2
width = 104
group_width = 8
size = 6


class Model(nn.Module):
    def __init__(self, width, group_width):
        super().__init__()
        self.conv = nn.Conv2d(width, width, 3, padding=1, groups=width // group_width, bias=False)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return y * torch.sigmoid(self.pool(y))


def get_inputs():
    return [torch.randn(batch, width, size, size)]


def get_init_inputs():
    return [width, group_width]
"""


@pytest.mark.slow
def test_a_size_the_reference_cannot_run_at_is_probed_at_its_next_value():
    res, pol = _policy_run(GROUPED, "grouped", FORBID, max_turns=3)
    assert pol.analysis.data["capture"] == "export" and len(pol.probes) == 3, pol.general_note
    assert res.verified, res.trajectory.finished().summary
    checked = _shapes_checked(res)
    assert any("width=104->" in c for c in checked), checked


@pytest.mark.slow
def test_nn_transformer_encoder_layer_passes_the_shape_trial_under_forbid():
    """nn.MultiheadAttention projects a transposed view: ATen's linear runs that as a matmul, a copy
    and an aten::add, not one addmm, so its bias add is a kernel of ours, not the library call's
    epilogue. Before: rejected for aten::add and aten::clone in every trial."""
    src = _block("torch_transformer_encoder_layer", batch=2, seq=8, d_model=32, nhead=2, dim_feedforward=64)
    res, _ = _policy_run(src, "encoder_layer", FORBID, max_turns=3)
    assert res.verified, res.trajectory.finished().summary
    assert any("->" in c for c in _shapes_checked(res))


def test_a_scale_computed_in_float32_binds_to_its_size():
    """GPT-NeoX's `1 / sqrt(head_size)` comes out of a float32 tensor: 0.1767766922712326, not
    0.17677669529663687; it is still the head size's."""
    import torch

    vals = tuple(float(1 / torch.sqrt(torch.tensor(float(h)))) for h in (32, 32, 16))
    assert bind_float(vals, [("self.head_size", (32, 32, 16))], False, 1) == "(self.head_size) ** -0.5"
    with pytest.raises(NotGeneral):
        bind_float((0.1767, 0.1767, 0.25), [("self.head_size", (32, 32, 16))], False, 1)  # 4 decimals: no size


@pytest.mark.slow
def test_peft_lora_scaling_is_read_from_its_dict_and_passes_the_shape_trial():
    """PEFT's LoRA keeps `alpha / r` in a dict per adapter (`self.scaling['default']`); the
    probes move it (r and alpha are size constants) and no size gives it. Read from the module at
    run time, the candidate passes the shape trial under forbid."""
    src = _block("lora_linear", batch=2, seq=4, dim=16, hidden=32, r=4, alpha=8)
    res, _ = _policy_run(src, "lora", FORBID, max_turns=3)
    assert res.verified, res.trajectory.finished().summary
    assert "self.fc1.scaling['default']" in res.best.files["model_new.py"]
    assert any("->" in c for c in _shapes_checked(res))


def test_the_log_of_a_ratio_of_sizes_binds():
    """T5's buckets: `log(max_distance / max_exact)` with max_exact = num_buckets // 4."""
    import math

    caps = [(32, 128), (16, 128), (32, 64)]
    vals = tuple(math.log(md / (nb // 4)) for nb, md in caps)
    atoms = [("self.num_buckets", tuple(c[0] for c in caps)), ("self.max_distance", tuple(c[1] for c in caps))]
    expr = bind_float(vals, atoms, False, 1)
    assert expr == "math.log((self.max_distance * 4) / (self.num_buckets))", expr
    with pytest.raises(NotGeneral):
        bind_float((2.7, 3.4, 2.1), atoms, False, 1)  # exp of these is no int
    assert bind((15, 7, 15), atoms, False) == "((self.num_buckets) // 2 - 1)"  # its last bucket


def test_the_log_of_a_ratio_that_is_no_int_binds():
    """DeBERTa-v2's log buckets: `log((max_position - 1) / mid)` with mid = bucket_size // 2, in
    float32 (torch.log of a torch.tensor); 511 / 128 is no int, its numerator over mid is."""
    import math

    import torch

    caps = [(256, 512), (128, 512), (256, 256)]
    vals = tuple(float(torch.log(torch.tensor((mp - 1) / (b // 2)))) for b, mp in caps)
    atoms = [
        ("self.position_buckets", tuple(c[0] for c in caps)),
        ("self.max_relative_positions", tuple(c[1] for c in caps)),
    ]
    expr = bind_float(vals, atoms, False, 1)
    assert expr.startswith("math.log(") and "self.max_relative_positions" in expr, expr
    scope = {"math": math, "self": type("S", (), {"position_buckets": 96, "max_relative_positions": 300})}
    assert eval(expr, scope) == pytest.approx(math.log(299 / 48))  # another size: the formula, not the values


def test_a_size_written_as_arithmetic_is_a_size_constant():
    """The sandbox reads the module's ints, however written (DINOv2's `num_tokens = 1 + 7 * 7`): the
    probes must vary the same constants, or the trial meets a size the candidate left fixed."""
    src = "n = 1 + 7 * 7\nd = 2 * n - 4\nf = d // 4\nk = int('3')\n\ndef get_inputs():\n    return [n, d, f, k]\n"
    assert size_constants(src) == {"d": (96, 48), "f": (24, 12), "n": (50, 25)}
    assert probe_source(src, "n", 25).splitlines()[0] == "n = 25"


def test_sums_windows_and_ratios_of_sizes_bind():
    """DenseNet's concatenated channels (input + 4 * growth, and times the map's area), a strided
    window's output length (wav2vec2's (L - 10) // 5 + 1), DETR's image_size / feature_size."""
    g, c = ("self.growth", (32, 32, 16, 32)), ("self.init", (64, 64, 64, 32))
    side = ("v_x.shape[2]", (28, 14, 28, 28))
    assert bind((192, 192, 128, 160), [g, c, side], True) == "(4 * self.growth + self.init)"
    assert bind((150528, 37632, 100352, 125440), [g, c, side], True) == (
        "(4 * self.growth + self.init) * v_x.shape[2] * v_x.shape[2]"
    )
    length = ("v_x.shape[1]", (16000, 16000, 8000, 12000))
    assert bind(tuple((n - 10) // 5 + 1 for n in length[1]), [length], True) == "((v_x.shape[1]) // 5 - 1)"
    assert bind(tuple((n - 7) // 3 for n in length[1]), [length], True) == "((v_x.shape[1] - 7) // 3)"
    image, feat = ("self.image", (640, 320, 640, 640)), ("self.feat", (20, 10, 10, 20))
    assert bind_float((32.0, 32.0, 64.0, 32.0), [image, feat], False, 1) == "(self.image) / (self.feat)"


def test_a_difference_of_sizes_and_a_list_attribute_s_items_bind():
    """torchvision's Swin masks the last `size - shift` rows of the padded map, its shift kept as
    a list `[3, 3]`: each item of an int list attribute is an atom, and a difference of two binds."""
    from agent.builtin.generalise import atoms

    guard = {"inputs": [{"shape": [2, 28, 28, 96]}], "parts": [[], {"attn.shift_size": [3, 4], "attn.on": True}, {}]}
    shifted = atoms(["x"], guard)
    assert shifted["self.attn.shift_size[0]"] == 3 and shifted["self.attn.shift_size[1]"] == 4
    side, shift = ("v_x.shape[1]", (28, 28, 28, 14)), ("self.attn.shift_size[0]", (3, 3, 4, 3))
    assert bind((25, 25, 24, 11), [side, shift], True) == "(v_x.shape[1] - self.attn.shift_size[0])"
    assert bind((31, 31, 32, 17), [side, shift], True) == "(v_x.shape[1] + self.attn.shift_size[0])"
    with pytest.raises(NotGeneral):
        bind((25, 25, 24, 12), [side, shift], True)


def test_floats_of_the_uploads_own_modules_and_dicts_are_slots():
    """float_slots finds what the fast path reads at run time (the slow test above runs LoRA end to
    end): a float in a dict attribute of a submodule of the upload's own class, none of torch.nn's
    (their eps and dropout rates), and each perturbed to its own value so two equal floats are told
    apart."""
    from agent.builtin.capture_export import float_slots, perturbed

    class Lora(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.scaling = {"default": 2.0}
            self.drop = nn.Dropout(0.1)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = Lora(), Lora()
            self.layers = nn.ModuleList([Lora()])
            self.temperature = 0.5

    slots = float_slots(Net())
    assert list(slots) == [
        "self.temperature",
        "self.a.scaling['default']",
        "self.b.scaling['default']",
        "self.get_submodule('layers.0').scaling['default']",
    ]
    assert len({perturbed(s.value, i) for i, s in enumerate(slots.values())}) == 4
    net = Net()
    slot = float_slots(net)["self.b.scaling['default']"]
    slot.set(3.0)
    assert net.b.scaling["default"] == 3.0 and net.a.scaling["default"] == 2.0


HEAD = """
import torch
import torch.nn as nn


class Model(nn.Module):
    \"\"\"A detection head over two pyramid levels, as torchvision's RetinaNet v2 writes it: a
    convolution and GroupNorm(32) per level, each level's anchors flattened, then concatenated.\"\"\"

    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm = nn.GroupNorm(32, channels)

    def forward(self, p3, p4):
        out = []
        for p in (p3, p4):
            y = torch.relu(self.norm(self.conv(p)))
            out.append(y.flatten(2).transpose(1, 2))
        return torch.cat(out, dim=1)


batch = 2
channels = 64
size = 4


def get_inputs():
    return [torch.randn(batch, channels, size, size), torch.randn(batch, channels, size // 2, size // 2)]


def get_init_inputs():
    return [channels]
"""


@pytest.mark.slow
def test_a_degenerate_probe_gives_way_and_a_cat_of_levels_follows_its_inputs():
    """GroupNorm(32) over 64 channels has 2 per group; the first probe, 32 channels, has 1 and so
    another kernel: that probe gives way to the next value whose kernels are the same (96); so
    does the size's first probe, which makes the second level 1 x 1. The cat's length is a sum
    over the levels, which no product of sizes gives: the cat reads it from its operands. Before: specialised ("the kernel files differ between sizes"), then rejected for
    the reference's aten::native_group_norm and aten::cat at the shape trial's sizes."""
    res, pol = _policy_run(HEAD, "retina_head", FORBID, max_turns=3)
    assert pol.analysis.data["capture"] == "export", pol.general_note
    probed = [p.probe_of for p in pol.probes]
    assert ("channels", 0) not in probed and ("size", 0) not in probed and len(probed) == 3, probed
    assert res.verified, res.trajectory.finished().summary
    assert "Sizes follow the inputs" in " ".join(e.content for e in res.trajectory.of_type(ModelMessage))


def test_a_size_reduced_by_a_module_ratio_binds():
    """SegFormer's keys after its sequence reduction: the image's side over 4 (the patch
    embedding's stride) over sr_ratio, squared, divides by a module attribute twice; no product of
    sizes times a constant gives it (specialised before, and rejected at the shape trial)."""
    side = ("v_pixel_values.shape[2]", (256, 128, 256, 256))
    sr = ("self.sr_ratio", (8, 8, 4, 8))
    heads = ("self.heads", (1, 1, 1, 2))
    keys = tuple((h // 4 // r) ** 2 for h, r in zip(side[1], sr[1], strict=True))
    assert keys == (64, 16, 256, 64)
    expr = bind(keys, [side, sr, heads], True)
    assert expr == "(v_pixel_values.shape[2] * v_pixel_values.shape[2]) // (16 * self.sr_ratio * self.sr_ratio)", expr
    with pytest.raises(NotGeneral):  # a ratio of sizes no attribute explains still stays specialised
        bind((64, 16, 256, 63), [side, sr, heads], True)


def test_a_count_with_one_more_position_binds():
    """GPT-J's `seq * (seq + 1)` (16512 at 128): a product times a size plus one. An atom of 2
    (minus 2 is 0) is passed over, not divided by."""
    seq, two = ("v_x.shape[1]", (128, 128, 128, 128, 64)), ("v_x.shape[0]", (2, 2, 3, 2, 2))
    heads = ("self.n_head", (16, 16, 16, 8, 16))
    assert bind((16512, 16512, 16512, 16512, 4160), [two, seq, heads], True) == "v_x.shape[1] * (v_x.shape[1] + 1)"
    with pytest.raises(NotGeneral):
        bind((16511, 16512, 16512, 16512, 4160), [two, seq, heads], True)


# GPT-J's rotary positions as transformers writes them: a table of max_positions rows held as a
# plain tensor attribute (no parameter, no buffer, no int attribute keeps its length), repeated
# over the batch and gathered by the position ids
POSITION_TABLE = """
import torch
import torch.nn as nn


def sinusoids(n, dim):
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64) / dim))
    angles = torch.einsum("i,j->ij", torch.arange(n, dtype=torch.int64).float(), inv).float()
    return torch.cat((torch.sin(angles), torch.cos(angles)), dim=1)


class Model(nn.Module):
    def __init__(self, dim, max_positions):
        super().__init__()
        self.table = sinusoids(max_positions, dim)

    def forward(self, x, position_ids):
        table = self.table.to(x.device).repeat(position_ids.shape[0], 1, 1)
        sincos = torch.gather(table, 1, position_ids.unsqueeze(-1).repeat(1, 1, table.shape[-1]))
        sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


batch = 2
seq = 16
dim = 8
max_positions = 64


def get_inputs():
    return [torch.randn(batch, seq, dim), torch.arange(seq).repeat(batch, 1)]


def get_init_inputs():
    return [dim, max_positions]
"""


def test_a_plain_tensor_attribute_s_shape_is_part_of_the_guard():
    """A table held as a plain attribute is baked into the export as a weight is: its shape is
    in the guard's parts (so a longer table is another module), and leaves it once bound."""
    m, longer = nn.Linear(4, 4), nn.Linear(4, 4)
    m.table, longer.table = torch.zeros(64, 8), torch.zeros(128, 8)
    assert guard_parts(m, "export", set())[2]["table"] == [64, 8]
    assert guard_digest(m, "export", set()) != guard_digest(longer, "export", set())
    bound = {"self.table.shape"}
    assert guard_digest(m, "export", bound) == guard_digest(longer, "export", bound)


@pytest.mark.slow
def test_a_position_table_s_length_binds_and_passes_the_shape_trial():
    """GPT-J's sinusoidal positions under forbid: the table's length (max_positions, 64) moves
    only in its own probe and is no input's dimension; read from the table itself
    (`self.table.shape[0]`), the candidate passes the shape trial. Before: specialised ("no
    product of sizes gives (64, 64, 64, 64, 32)") and rejected at the trial's shapes."""
    res, pol = _policy_run(POSITION_TABLE, "position_table", FORBID, max_turns=3)
    assert res.verified, res.trajectory.finished().summary
    assert "self.table.shape[0]" in res.best.files["model_new.py"]
    checked = _shapes_checked(res)
    assert any("->" in c for c in checked), checked


# NeRF's positional encoding: the number of frequencies builds the graph (one sin and one cos per
# frequency, cat'ed), so its probe captures another graph at every value; a layer count builds
# another module (the sandbox's trial passes over its changes); the rays vary freely
FREQUENCIES = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_freqs, depth, width):
        super().__init__()
        self.freqs = [2.0 ** i for i in range(num_freqs)]
        self.layers = nn.ModuleList([nn.Linear(3 * (1 + 2 * num_freqs), width)])
        self.layers.extend(nn.Linear(width, width) for _ in range(depth - 1))

    def forward(self, x):
        parts = [x]
        for f in self.freqs:
            parts += [torch.sin(x * f), torch.cos(x * f)]
        h = torch.cat(parts, -1)
        for layer in self.layers:
            h = torch.relu(layer(h))
        return h


batch = 16
num_freqs = 4
depth = 2
width = 32


def get_inputs():
    return [torch.randn(batch, 3)]


def get_init_inputs():
    return [num_freqs, depth, width]
"""


@pytest.mark.slow
def test_a_constant_that_changes_the_graph_stays_fixed_and_the_rest_follow_the_inputs():
    """A probe of num_freqs captures another graph at every value: it is left out (the constant
    stays as captured, the first layer's shape stays in the guard) and the candidate follows the
    batch, as the sandbox's trial changes it (NeRF's rays; depth's changes build another module,
    so the trial passes over the change of every constant at once). Before: "the captured graph
    differs between sizes" for the whole, and the trial ran the reference's forward."""
    res, pol = _policy_run(FREQUENCIES, "frequencies", FORBID, max_turns=3)
    assert res.verified, res.trajectory.finished().summary
    bound = res.best.files["model_new.py"].split("_KW_GUARD = ")[1].splitlines()[0]  # what the digest leaves out
    assert "'self.layers.0.in_features'" not in bound and "'self.layers.1.in_features'" in bound, bound
    checked = _shapes_checked(res)
    assert any("batch=16->" in c for c in checked), checked


# T5's relative position buckets: `log(max_distance / max_exact)` with max_exact = num_buckets // 4,
# a float whose two terms move in two different probes
BUCKETS = """
import math

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_buckets, max_distance, heads):
        super().__init__()
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.bias = nn.Embedding(num_buckets, heads)

    def forward(self, scores):
        q = torch.arange(scores.shape[-2], dtype=torch.long, device=scores.device)[:, None]
        k = torch.arange(scores.shape[-1], dtype=torch.long, device=scores.device)[None, :]
        rel = k - q
        half = self.num_buckets // 2
        buckets = (rel > 0).to(torch.long) * half
        rel = torch.abs(rel)
        exact = half // 2
        large = exact + (
            torch.log(rel.float() / exact) / math.log(self.max_distance / exact) * (half - exact)
        ).to(torch.long)
        large = torch.min(large, torch.full_like(large, half - 1))
        buckets = buckets + torch.where(rel < exact, rel, large)
        return torch.softmax(scores + self.bias(buckets).permute(2, 0, 1), dim=-1)


seq = 24
num_buckets = 16
max_distance = 64
heads = 4


def get_inputs():
    return [torch.randn(heads, seq, seq)]


def get_init_inputs():
    return [num_buckets, max_distance, heads]
"""


@pytest.mark.slow
def test_a_float_whose_terms_move_in_two_probes_keeps_both_probes():
    """A probe's candidate is compared with this one's with its moving floats as run-time scalars
    (generalise.scalars_as_arguments): the pair alone cannot bind T5's `log(max_distance /
    max_exact)` (max_exact moves only in num_buckets' probe), which left max_distance's probe out
    and the candidate fell back at the shape trial's sizes (T5's block, 2026-12-07). Its
    `num_buckets // 4` is an exact quotient at 16 and 8, so the guard sends a num_buckets it does
    not divide (the sandbox's smaller trial: 17) to the reference: forbid rejects that trial."""
    from agent.events import EvaluationEvent, FileEdit

    res, pol = _policy_run(BUCKETS, "buckets", FORBID, max_turns=2)
    assert {p.probe_of[0] for p in pol.probes} == {"seq", "num_buckets", "max_distance"}
    first = [e.content for e in res.trajectory.events if isinstance(e, FileEdit) and e.path == "model_new.py"][0]
    assert "self.max_distance" in first and "(self.num_buckets) % 4" in first
    result = [e.result for e in res.trajectory.events if isinstance(e, EvaluationEvent)][0]
    assert result["status"] == "rejected" and "in trial 8 (shape)" in result["reasons"][0], result["reasons"]


def test_a_quotient_of_sizes_is_checked_to_divide_before_the_generated_forward_runs():
    """Res2Net's stride-2 pool gives 12 at 24 and 6 at 12: `size // 2` fits both captures, and is
    wrong at 25 (the pool gives 13). Nothing captured says floor or round up, so the guard sends
    every size at which the quotient would not divide to the reference."""
    from agent.builtin.generalise import _checked_divisions
    from agent.builtin.guard import SPECIALISED_CHECK

    side = ("v_x.shape[2]", (24, 12, 24, 24))
    divisions: list[str] = []
    assert bind((12, 6, 12, 12), [side], True, divisions=divisions) == "(v_x.shape[2]) // 2"
    assert divisions == ["(v_x.shape[2]) % 2"]
    assert bind((24, 12, 24, 24), [side], True, divisions=divisions) == "v_x.shape[2]"
    assert divisions == ["(v_x.shape[2]) % 2"]  # an exact product needs no check
    text = f"        if v_x.dim() != 4 or {SPECIALISED_CHECK}:\n            return super().forward(v_x)\n"
    checked = _checked_divisions(text, divisions + divisions)
    assert f"{SPECIALISED_CHECK} or (v_x.shape[2]) % 2:" in checked
    assert eval("(v_x.shape[2]) % 2", {"v_x": torch.zeros(1, 1, 25, 25)})  # 25: the reference runs
    with pytest.raises(NotGeneral):
        _checked_divisions("        return v_x\n", divisions)  # no guard to extend: stays specialised
    assert _checked_divisions("        return v_x\n", []) == "        return v_x\n"


def _bound_text(text: str, exprs: list[tuple[str, str | None]]):
    """The NUMBER tokens of `text` in order, bound as `exprs` (expression, division)."""
    from agent.builtin.generalise import _Bound, _tokens

    toks = _tokens(text)
    at = [i for i, t in enumerate(toks) if t.type == tokenize.NUMBER]
    return [_Bound(i, toks[i], e, d) for i, (e, d) in zip(at, exprs, strict=True)]


def _check(text: str, atoms_at: dict[str, int], bound, divisions: list[str], fitted: str = "") -> list[str]:
    from agent.builtin.generalise import checked, form

    fitted_form = form({"model_new.py": fitted or text})
    return checked(bound, list(divisions), [({"model_new.py": text}, atoms_at)], fitted_form)


def test_a_half_is_told_floor_or_ceiling_at_an_odd_size_and_its_check_goes():
    """A capture at a size no binding was fitted on (generalise.checked): where a half's product
    is odd there, the literal says floor or ceiling, and the division check goes, if every other
    bound literal gives the check's value too."""
    half, div = "(v_x.shape[2]) // 2", "(v_x.shape[2]) % 2"
    side = {"v_x.shape[2]": 25}
    b = _bound_text("a = 12\n", [(half, div)])
    assert _check("a = 12\n", side, b, [div]) == [] and b[0].expr == half  # floors
    b = _bound_text("a = 12\n", [(f"({half} + 1)", div)])
    assert _check("a = 14\n", side, b, [div]) == [] and b[0].expr == "(-(-(v_x.shape[2]) // 2) + 1)"  # rounds up
    b = _bound_text("a = 12\n", [(half, div)])
    assert _check("a = 13\n", {"v_x.shape[2]": 26}, b, [div]) == [div]  # even there: nothing learned
    b = _bound_text("a = 7\nb = 12\n", [("self.unknown * 2", None), (half, div)])
    assert _check("a = 7\nb = 12\n", side, b, [div]) == []  # an atom it lacks says nothing against it
    b = _bound_text("a = 12\n", [(half, div)])
    assert _check("a = 12\nb = 1\n", side, b, [div], fitted="a = 12\n") == [div]  # other tokens: left out


def test_a_literal_wrong_at_the_check_keeps_the_checks_or_stays_specialised():
    """Attention U-Net's upsampling scale, bound as `2 * g / x` from sizes where x = 4g, is 0.5 at
    x = 33 (the gate's side over the halved input's), where the expression gives 0.485: the
    halves keep their checks, which send 33 to the reference. With no check covering that size
    the candidate would be wrong there: it stays specialised."""
    half, div = "(v_x.shape[2]) // 2", "(v_x.shape[2]) % 2"
    scale = "(v_g.shape[2] * 2) / (v_x.shape[2])"
    at33 = {"v_x.shape[2]": 33, "v_g.shape[2]": 8}
    b = _bound_text("a = 16\ns = 0.5\n", [(half, div), (scale, None)])
    assert _check("a = 16\ns = 0.5\n", at33, b, [div]) == [div] and b[0].expr == half
    b = _bound_text("s = 0.5\n", [(scale, None)])
    with pytest.raises(NotGeneral, match="at another size"):  # T5's float: right where fitted, wrong here
        _check("s = 0.5\n", at33, b, [])


POOLED = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.pool = nn.AvgPool2d(3, stride=2, padding=1)  # ceil(size / 2): 6 at 12, 7 at 13
        self.scale = nn.Parameter(torch.ones(c, 1, 1))

    def forward(self, x):
        if x.shape[0] > 1:  # a branch on a size: exported, not traced by fx
            x = x * 2.0
        y = self.pool(x)
        return torch.relu(y * self.scale) + y.mean(dim=(2, 3), keepdim=True)


batch = 2
channels = 8
size = 12


def get_inputs():
    return [torch.randn(batch, channels, size, size)]


def get_init_inputs():
    return [channels]
"""


def test_a_pooled_half_follows_odd_sizes_under_forbid():
    """Res2Net's case: the pool's side is bound from 12 and 6 as `size // 2`; a capture at 13
    says it rounds up, so the forward computes the ceiling and runs its kernels at odd sizes
    too (the sandbox's smaller shape trial: 13), where its check used to send them to the
    reference and forbid rejected that."""
    res, pol = _policy_run(POOLED, "pooled", FORBID, max_turns=3)
    assert res.verified, res.trajectory.finished().summary
    text = res.best.files["model_new.py"]
    assert "-(-(v_x.shape[2]) // 2)" in text and "% 2" not in text
    assert any("13" in c for c in _shapes_checked(res))  # the odd trial ran these kernels


def test_an_expression_from_a_forged_analysis_is_never_evaluated():
    """The atoms and their names come from the analysis child's result, which the upload can
    forge (docs/security.md): after the atoms' values are put in, only digits, arithmetic and
    public math names are evaluated, in the agent's process."""
    from agent.builtin.generalise import _evaluate

    assert _evaluate("(self.a) // 2", {"self.a": 25}) == 12.0
    assert _evaluate("math.log(self.a)", {"self.a": 1}) == 0.0
    for hostile in (
        "__import__('os').system('touch /tmp/kw-pwned')",
        "math.__loader__",
        "(lambda: 1)()",
        "self.get_submodule('x').__class__",
        "[1][0]",
        "'a' * 3",
    ):
        assert _evaluate(hostile, {}) is None, hostile
    # a forged atom name is replaced by its int value, or the text is refused as it is
    assert _evaluate("self.get_submodule('a;b').c * 2", {"self.get_submodule('a;b').c": 3}) == 6.0
    assert _evaluate("self.get_submodule('a;b').c * 2", {}) is None
