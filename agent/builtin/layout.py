"""Channels-last convolutions: the convolution's output kept in NHWC order through its epilogue.

cuDNN's (and oneDNN's) convolutions are often faster with channels-last memory, and PyTorch picks
that layout when the weight is channels-last (`cudnn_conv_suggest_memory_format`: input or
weight). Inductor's layout optimisation does the same. The output then has NCHW shape and NHWC
memory; `out.permute(0, 2, 3, 1)` is a contiguous NHWC tensor, which the fused kernels read as it
lies. The rewrite moves the convolution's epilogue into that permuted view:

- the convolution's bias becomes an add of a [C] vector broadcast over the trailing (channel) dim,
  fused into the next kernel (ATen's convolutions add it in a pass of their own);
- elementwise ops follow unchanged, with broadcast operands of one non-1 dim (a per-channel bias
  [C, 1, 1]) viewed in the permuted order;
- reductions, softmax and logsumexp over the channel dim become reductions over the trailing dim,
  which the row kernels fuse (over NCHW they are kernels of their own, agent.builtin.ownkernels);
- the graph's output, and another convolution, read the value permuted back: a view, no copy. The
  output therefore has the reference's shape and values with channels-last strides, as
  nn.Conv2d's own output has for a channels-last weight. Any other reader (a group norm, a pooling
  kernel of ours, a residual add of an NCHW tensor) reads it through a copy back to NCHW at its
  kernel boundary: a pass more, named in the rewrite's description.

A kernel of ours never reads a channels-last tensor as if it were NCHW: a channels-last value and
every view of it count as strided (graph.makes_strided), so a kernel boundary that meets one
copies it unless it is contiguous (the permuted view is; the check is at run time, so a backend
that returns NCHW anyway is still computed right). Whether the layout is faster depends on the
shapes and the backend: the policy evaluates the rewritten graph as one more candidate and keeps
the faster.
"""

from __future__ import annotations

from typing import Any

from agent.builtin.graph import ELEMENTWISE, REDUCTIONS, Graph, Lit, Node, Ref
from agent.builtin.lower import norm_dims
from agent.builtin.poolfold import conv_bias

# convolutions captured by torch.export (aten islands) whose weight's layout picks the algorithm
CONV_TARGETS = {
    "aten.conv2d.default",
    "aten.conv3d.default",
    "aten.convolution.default",
    "aten.conv_transpose2d.input",
    "aten.conv_transpose3d.input",
}
_ROWWISE = {"softmax", "log_softmax"}


def is_conv(n: Node) -> bool:
    if n.attrs.get("channels_last") or len(n.shape or []) not in (4, 5):
        return False
    if n.op == "conv2d":
        return not n.attrs.get("island")
    return n.op == "aten" and n.attrs.get("target") in CONV_TARGETS


def last_perm(nd: int) -> list[int]:
    """NC... -> N...C: the channel dim moved last."""
    return [0, *range(2, nd), 1]


def inverse(p: list[int]) -> list[int]:
    return [p.index(i) for i in range(len(p))]


def _permuted(shape: list[int], p: list[int]) -> list[int]:
    return [shape[i] for i in p]


class _Region:
    """The values downstream of one convolution that are held in the permuted order."""

    def __init__(self, g: Graph):
        self.g = g
        self.perm: dict[str, list[int]] = {}  # value -> p: the value holds std.permute(p)
        self.moved = 0  # ops moved into the permuted order (beyond the bias add)

    def add_before(self, anchor: str, op: str, args: list[Any], shape: list[int], prefix: str) -> str:
        name = self.g.fresh(prefix)
        self.g.insert_before(anchor, Node(name, op, args, {}, shape, "float32"))
        return name

    def back(self, n: Node, name: str) -> str:
        """name permuted back to the reference's order, as a view read by n."""
        back = inverse(self.perm[name])
        std = _permuted(self.g.node(name).dims, back)  # its shape in the reference's order
        return self.add_before(n.name, "permute", [Ref(name), Lit(back)], std, "cl_back")

    def operand(self, n: Node, a: Any, p: list[int]) -> Any:
        """An elementwise op's argument in the permuted order, or None when it has none cheaply
        (a tensor with more than one non-1 dim from outside the region, or another order)."""
        if not isinstance(a, Ref):
            return a
        if a.name in self.perm:
            return a if self.perm[a.name] == p else None
        src = self.g.node(a.name)
        if src.op == "permute" and src.args[1] == Lit(inverse(p)) and isinstance(src.args[0], Ref):
            return src.args[0]  # another region's value viewed back (a residual branch): read it as it lies
        shape = src.shape
        if shape is None or len(shape) > len(p) or sum(s != 1 for s in shape) > 1:
            return None
        if all(s == 1 for s in shape):
            return a
        full = [1] * (len(p) - len(shape)) + list(shape)
        view = _permuted(full, p)
        # -1 for the one dim that is not 1: another init argument (the shape trial's) changes its size
        return Ref(self.add_before(n.name, "view", [a, Lit([-1 if d != 1 else 1 for d in view])], view, "cl_operand"))

    def visit(self, n: Node) -> None:
        ins = [r for r in n.refs() if r in self.perm]
        if not ins:
            return
        p = self.perm[ins[0]]
        nd = len(p)
        if n.op in ELEMENTWISE and len(n.shape or []) == nd and not n.attrs.get("island"):
            args = [self.operand(n, a, p) for a in n.args]
            if all(x is not None for x in args):
                self._move(n, args, p, _permuted(n.dims, p))
                return
        if n.op in REDUCTIONS or n.op == "logsumexp":
            dims = norm_dims(n.attrs.get("dim"), nd)
            keep = bool(n.attrs.get("keepdim"))
            n.attrs = {**n.attrs, "dim": sorted(p.index(d) for d in dims)}
            rest = [d for d in p if d not in dims]
            q = p if keep else [sorted(rest).index(d) for d in rest]
            self._move(n, n.args, q, _permuted(n.dims, q))
            return
        if n.op in _ROWWISE and len(n.shape or []) == nd:
            n.attrs = {**n.attrs, "dim": p.index(n.attrs["dim"] % nd)}
            self._move(n, n.args, p, _permuted(n.dims, p))
            return
        n.args = [Ref(self.back(n, a.name)) if isinstance(a, Ref) and a.name in self.perm else a for a in n.args]

    def _move(self, n: Node, args: list[Any], p: list[int], shape: list[int]) -> None:
        n.args, n.shape = args, shape
        self.moved += 1
        if p != list(range(len(p))):
            self.perm[n.name] = p


def _detach_bias(conv: Node) -> Any:
    """The convolution's bias (a Ref) taken out of its call, or None when it has none."""
    b = conv_bias(conv)
    if not isinstance(b, Ref):
        return None
    if conv.op == "conv2d":
        conv.args = [conv.args[0], conv.args[1], Lit(None), *conv.args[3:]]
    else:
        call = conv.attrs["call"]
        args = list(call["args"])
        conv.attrs = {**conv.attrs, "call": {**call, "args": [*args[:2], {"v": None}, *args[3:]]}}
    return b


def channels_last(g: Graph) -> tuple[Graph, list[str], int] | None:
    """The convolutions of g with a channels-last weight and their epilogues in the permuted order
    (see the module's docstring), their descriptions and how many values are read back in NCHW
    order through a copy; None when g has no convolution. A value leaving a region for a
    reader that is not _native (a group norm, a pooling kernel of ours, a residual add of an NCHW
    tensor) is copied back to NCHW at that reader: a pass more, which a faster convolution can
    outweigh many times (oneDNN's NCHW transposed convolution took 10x its NHWC one on the
    development CPU), so the candidate is measured rather than judged here."""
    done: list[str] = []
    for name in [n.name for n in g.nodes if is_conv(n)]:
        trial = g.copy()
        label = _convert(trial, trial.node(name))
        if label is not None:
            g, done = trial, [*done, label]
    if not done:
        return None
    g.remove_dead()
    # a value viewed back that a reader other than a convolution or the output takes: a copy to NCHW
    copies = [n.name for n in g.nodes if n.name.startswith("cl_back") and not all(_native(u) for u in g.users(n.name))]
    return g, done, len(copies)


def _native(n: Node) -> bool:
    """n reads a channels-last value as it lies: the graph's output (a view is returned) or a convolution."""
    return n.op == "output" or n.op == "conv2d" or (n.op == "aten" and n.attrs.get("target") in CONV_TARGETS)


def _convert(g: Graph, conv: Node) -> str | None:
    """conv (a node of g, changed in place) with a channels-last weight, its bias and epilogue in
    the permuted order; its description (None for a weight that is no tensor of the graph)."""
    nd = len(conv.dims)
    p = last_perm(nd)
    w = conv.args[1] if conv.op == "conv2d" else conv.args[conv.attrs["call"]["args"][1]["arg"]]
    if not isinstance(w, Ref):
        return None
    wcl = g.fresh("w_cl")
    g.insert_before(conv.name, Node(wcl, "channels_last", [w], {}, list(g.node(w.name).dims), "float32"))
    if conv.op == "conv2d":
        conv.args = [conv.args[0], Ref(wcl), *conv.args[2:]]
    else:
        conv.args = [Ref(wcl) if isinstance(a, Ref) and a.name == w.name else a for a in conv.args]
    conv.attrs = {**conv.attrs, "channels_last": True}
    bias = _detach_bias(conv)
    users = g.users(conv.name)
    after = users[0].name if users else g.output.name
    reg = _Region(g)
    head = reg.add_before(after, "permute", [Ref(conv.name), Lit(p)], _permuted(conv.dims, p), "cl")
    reg.perm[head] = p
    if bias is not None:
        view = [1] * (nd - 1) + [conv.dims[1]]
        bv = reg.add_before(after, "view", [bias, Lit([1] * (nd - 1) + [-1])], view, "cl_bias")
        add = reg.add_before(after, "add", [Ref(head), Ref(bv)], _permuted(conv.dims, p), "cl_add")
        reg.perm[add] = p
        head = add
    for u in users:
        u.args = [Ref(head) if isinstance(a, Ref) and a.name == conv.name else a for a in u.args]
    g.toposort()
    start = next(i for i, n in enumerate(g.nodes) if n.name == head) + 1
    for n in list(g.nodes[start:]):
        reg.visit(n)
    g.toposort()
    label = conv.attrs.get("module") or conv.name
    return f"{label} ({reg.moved} op(s) of its epilogue in NHWC order" + (", its bias fused)" if bias else ")")
