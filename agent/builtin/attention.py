"""Attention written out as ops, recognised and called as one scaled-dot-product-attention kernel.

`softmax(Q @ K^T * s + mask) @ V` (minGPT, nanoGPT, BERT, transformers' eager attention as people
write it) is what `F.scaled_dot_product_attention` computes. Written out, eager PyTorch writes the
[..., L, S] score matrix and reads it back for the scale, the mask and the softmax; the SDPA
kernels (FlashAttention, memory-efficient attention) keep each row block on chip and never write
it. The rewrite is exact up to floating-point reassociation: SDPA adds the mask to the scaled
scores; `where(c, -inf, x)` is `x + (c ? -inf : 0)` bit for bit, which SDPA builds from the boolean
`c == 0`, and a fill of float32's minimum gives the same softmax because exp underflows to 0. Fully
masked rows differ (NaN or a uniform row written out, possibly zeros in SDPA): the sandbox's
correctness check on the task's own mask decides.

The result is an ATen call (an island), so it is offered only under torch-ops=allow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agent.builtin.fusion import broadcastable
from agent.builtin.graph import Graph, Lit, Node, Ref, Scalar
from agent.builtin.rewrites import Rewrite, combine_scales, single_use, transposed_dims

SDPA = "aten.scaled_dot_product_attention.default"
_FLOAT32_MIN = -3.4028234663852886e38  # torch.finfo(torch.float32).min: a fill of it gives the softmax of a -inf fill
_PASS_THROUGH = ("contiguous", "identity")  # ops on the probabilities that compute nothing
_REGROUP = ("view", "reshape")


@dataclass
class _Split:
    """Tensors added to the scores while viewed as [..., a, b, c, d] for [..., a*b, c*d] (SAM's
    decomposed relative positions: one term per axis, broadcast over the other): their sum, viewed
    back to the scores' shape, is SDPA's float mask."""

    dims: list[int]  # the split view's shape
    merged: list[int]  # the scores' shape
    terms: list[str]


@dataclass
class _Match:
    out: Node  # the P @ V matmul
    q: str
    k: str
    v: str
    scale: Scalar
    # ("fill", c): -inf where c != 0; ("keep", c): -inf where c == 0; ("add", m): m added to the scaled scores
    mask: tuple[str, str] | None
    batch: list[int]  # the batch dims SDPA runs over (the mask's, where views regroup them)
    k_node: Node | None = None  # K made here: K^T came as one permute of the heads' split (Whisper)
    bias: str | None = None  # beside a fill: a tensor added to the scaled scores too (BLOOM's ALiBi)
    split: _Split | None = None  # tensors added to the scores viewed with split rows and columns (SAM)


def _softmax_dim(p: Node) -> int | None:
    """The dim of a softmax node: the IR's, or an ATen island's (`softmax(x, dim, dtype=float32)`, as
    transformers' eager attention calls it on float32 scores); None for anything else."""
    if p.op == "softmax":
        return p.attrs.get("dim")
    call = p.attrs.get("call") or {}
    args = call.get("args") or []
    if p.op != "aten" or p.attrs.get("target") not in ("aten.softmax.int", "aten._softmax.default") or len(args) < 2:
        return None
    extra = args[2] if len(args) > 2 else {"v": None}
    if extra not in ({"v": None}, {"dtype": "float32"}, {"v": False}) or call.get("kwargs"):
        return None
    return args[1].get("v")


def _ref_node(g: Graph, a: object) -> Node | None:
    return g.node(a.name) if isinstance(a, Ref) else None


def _swaps_last_two(n: Node) -> bool:
    nd = len(n.dims)
    return n.op in ("t", "transpose") and tuple(d % nd for d in transposed_dims(n)) == (nd - 2, nd - 1)


def _constant(g: Graph, a: object) -> Scalar | None:
    """A scalar operand: a Scalar, a 0-d `torch.full([], v)` (transformers' GPT-2 divides by one
    and fills with one), or a 0-d constant lifted from `torch.tensor(v)` (GPT-NeoX's fill)."""
    if isinstance(a, Scalar):
        return a
    n = _ref_node(g, a)
    while n is not None and n.op == "contiguous" and n.args:  # a copy of a lifted `torch.tensor(v)`
        n = _ref_node(g, n.args[0])
    if n is not None and n.op == "constant" and n.shape == [] and isinstance(n.attrs.get("value"), int | float):
        return Scalar(float(n.attrs["value"]))
    if n is None or n.op != "aten" or n.attrs.get("target") != "aten.full.default" or n.shape != []:
        return None
    args = n.attrs["call"]["args"]
    v = args[1].get("v") if len(args) > 1 else None
    return Scalar(float(v)) if isinstance(v, int | float) else None


def _scale_of(g: Graph, n: Node) -> tuple[Scalar, object] | None:
    """n = x * s, s * x or x / d with a positive constant: (the scale, x)."""
    if n.op == "mul":
        for i in (0, 1):
            s, x = _constant(g, n.args[i]), n.args[1 - i]
            if s is not None and s.value > 0 and isinstance(x, Ref):
                return s, x
    d = _constant(g, n.args[1]) if n.op == "div" else None
    if d is not None and d.value > 0:
        expr = f"1.0 / ({d.expr})" if d.expr is not None else None
        return Scalar(1.0 / d.value, expr), n.args[0]
    return None


def _no_score_reaches(c: Scalar | None) -> bool:
    """-inf, or a fill so low (float32's minimum, as transformers fills) that exp(fill - max) is
    exactly 0 unless the whole row is masked: then the softmax is SDPA's with -inf."""
    return c is not None and not c.runtime and c.value <= -3.0e38


def _filled(g: Graph, n: Node) -> tuple[tuple[str, str], object] | None:
    """n = where(c, FILL, x) (masked_fill: masked where c != 0) or where(c, x, FILL) (torch.where with
    a keep mask: masked where c == 0), FILL -inf or float32's minimum: ((how, c), x)."""
    if n.op != "where" or len(n.args) != 3 or not isinstance(n.args[0], Ref):
        return None
    c = n.args[0].name
    if _no_score_reaches(_constant(g, n.args[1])) and isinstance(n.args[2], Ref):
        return ("fill", c), n.args[2]
    if _no_score_reaches(_constant(g, n.args[2])) and isinstance(n.args[1], Ref):
        return ("keep", c), n.args[1]
    return None


def _added(g: Graph, n: Node) -> tuple[str, object] | None:
    """n = x + m with m a float32 tensor broadcast over the scores (BERT's extended attention mask,
    a relative position bias): (m, x), x being the operand the scores come through. The scores may
    come through an earlier add (SAM adds one term per axis), tried after every other kind."""
    if n.op != "add" or not all(isinstance(a, Ref) for a in n.args):
        return None
    for kinds in (("matmul", "mul", "div", "where", *_REGROUP), ("add",)):
        for i in (0, 1):
            x, m = g.node(n.args[i].name), g.node(n.args[1 - i].name)
            scores_like = x.shape == n.shape and x.op in kinds and single_use(g, x.name)
            if scores_like and m.dtype in (None, "float32") and len(m.dims) <= len(n.dims):
                return m.name, Ref(x.name)
    return None


def _regroups_batch(g: Graph, n: Node) -> bool:
    """n is a view that only regroups the batch dims ([B*H, L, S] <-> [B, H, L, S], as CLIP before
    transformers 4.48 adds its masks): the last two dims and the element count stay."""
    src = _ref_node(g, n.args[0]) if n.op in _REGROUP and n.args else None
    return src is not None and src.dims[-2:] == n.dims[-2:] and src.numel == n.numel


def _split_region(g: Graph, merge: Node) -> tuple[_Split, object] | None:
    """merge views [..., a, b, c, d] back to the scores' [..., a*b, c*d]: from its input down to the
    view that split the scores, the tensors added on the way (each broadcast against the split
    shape, float32), and that view's input."""
    src = _ref_node(g, merge.args[0]) if merge.op in _REGROUP and merge.args else None
    if src is None or len(src.dims) != len(merge.dims) + 2 or src.dims[:-4] != merge.dims[:-2]:
        return None
    a, b, c, d = src.dims[-4:]
    if [a * b, c * d] != merge.dims[-2:]:
        return None
    terms: list[str] = []
    s: Node | None = src
    while s is not None and single_use(g, s.name) and (added := _added(g, s)) is not None:
        if not broadcastable(g.node(added[0]).dims, src.dims):
            return None
        terms.append(added[0])
        s = _ref_node(g, added[1])
    splits = s is not None and s.op in _REGROUP and single_use(g, s.name) and bool(s.args)
    scores = _ref_node(g, s.args[0]) if splits and s is not None else None
    if not terms or scores is None or scores.dims != merge.dims:
        return None
    return _Split(list(src.dims), list(merge.dims), terms[::-1]), Ref(scores.name)


@dataclass
class _Masks:
    """What lies between the scaled scores and the softmax: at most one fill and one added tensor,
    each with the batch dims of the scores where it applies (views may regroup them between)."""

    fill: tuple[str, str] | None = None
    fill_at: list[int] | None = None
    add: str | None = None
    add_at: list[int] | None = None
    split: _Split | None = None

    def batch(self) -> list[int] | None:
        """The batch dims SDPA runs over: where the mask nearest the softmax applies."""
        return self.fill_at if self.fill is not None else self.add_at


def _scores(g: Graph, s: Node | None) -> tuple[Node, Scalar, _Masks] | None:
    """Walk from the softmax's input to the Q @ K^T matmul through at most one positive scale, one
    fill and one added tensor (added after the scale only: SDPA adds its mask to the scaled scores)
    and views that regroup the batch dims."""
    scale: Scalar | None = None
    masks = _Masks()
    while s is not None and s.op != "matmul" and single_use(g, s.name):
        sc, filled, added = _scale_of(g, s), _filled(g, s), _added(g, s)
        if sc is not None and scale is None:
            scale, nxt = sc
        elif filled is not None and masks.fill is None:
            (masks.fill, nxt), masks.fill_at = filled, s.dims[:-2]
        elif added is not None and masks.add is None and scale is None:
            (masks.add, nxt), masks.add_at = added, s.dims[:-2]
        elif masks.add is None and masks.split is None and scale is None and (split := _split_region(g, s)):
            (masks.split, nxt), masks.add_at = split, s.dims[:-2]
        elif _regroups_batch(g, s):
            nxt = s.args[0]
        else:
            return None
        s = _ref_node(g, nxt)
    if s is None or s.op != "matmul" or not single_use(g, s.name):
        return None
    return s, scale or Scalar(1.0), masks


def _match(g: Graph, out: Node) -> _Match | None:
    if out.op != "matmul" or len(out.args) != 2:
        return None
    p, v = _ref_node(g, out.args[0]), _ref_node(g, out.args[1])
    while p is not None and (p.op in _PASS_THROUGH or _regroups_batch(g, p)) and single_use(g, p.name):
        p = _ref_node(g, p.args[0])  # BLOOM views the probabilities back to [B*H] for its bmm
    if p is None or v is None or not single_use(g, p.name) or p.dtype not in (None, "float32"):
        return None
    if _softmax_dim(p) not in (-1, len(p.dims) - 1):
        return None
    found = _scores(g, _ref_node(g, p.args[0]))
    if found is None:
        return None
    s, scale, masks = found
    (q, sq), (kt, sk) = _unscaled(g, _ref_node(g, s.args[0])), _unscaled(g, _ref_node(g, s.args[1]))
    k, k_node = _key(g, kt)
    if q is None or k is None:
        return None
    batch = masks.batch()
    if not _shapes_fit(q, k, v, s) or (batch is not None and math.prod(batch) != math.prod(q.dims[:-2])):
        return None
    batch = batch if batch is not None else q.dims[:-2]
    scale = _product(_product(scale, sq), sk)
    if masks.fill is None:
        mask = ("add", masks.add) if masks.add is not None else None
        return _Match(out, q.name, k.name, v.name, scale, mask, batch, k_node, split=masks.split)
    if masks.split is not None or masks.add is not None and not _bias_fits(g, masks.add, batch):
        return None
    return _Match(out, q.name, k.name, v.name, scale, masks.fill, batch, k_node, masks.add)


def _bias_fits(g: Graph, name: str, batch: list[int]) -> bool:
    """An added tensor beside a fill can join SDPA's mask: its batch dims broadcast against `batch`
    as they are, or hold as many elements, to be regrouped row-major (BLOOM's ALiBi over [B*H] for
    scores filled over [B, H]: _with_bias)."""
    own = g.node(name).dims[:-2]
    return broadcastable(own, batch) or math.prod(own) == math.prod(batch)


def _unscaled(g: Graph, n: Node | None) -> tuple[Node | None, Scalar | None]:
    """A matmul operand without its positive constant scale, and the scale (Whisper scales both Q
    and K^T by head_dim ** -0.25, timm and BART scale Q): SDPA takes their product."""
    sc = _scale_of(g, n) if n is not None and single_use(g, n.name) else None
    return (n, None) if sc is None else (_ref_node(g, sc[1]), sc[0])


def _key(g: Graph, kt: Node | None) -> tuple[Node | None, Node | None]:
    """K from the K^T operand: the transpose's input, or, where K^T is one permute of the heads'
    split (Whisper's `k.view(B, S, H, -1).permute(0, 2, 3, 1)`), a new permute to [..., S, E]
    (returned second: it is to be inserted). A copy of either, or a view of it that regroups the
    batch dims, is seen through (K's batch dims may then be grouped unlike Q's: _shapes_fit)."""
    while kt is not None and kt.args and single_use(g, kt.name) and (kt.op == "contiguous" or _regroups_batch(g, kt)):
        kt = _ref_node(g, kt.args[0])  # BLOOM: K^T a permute's copy viewed to [B*H, E, S]
    if kt is None or not isinstance(kt.args[0] if kt.args else None, Ref):
        return None, None
    if _swaps_last_two(kt):
        return g.node(kt.args[0].name), None
    if kt.op != "permute" or not single_use(g, kt.name) or len(kt.args) != 2:
        return None, None
    perm = list(kt.args[1].value) if isinstance(kt.args[1], Lit) else None
    if perm is None or len(perm) != len(kt.dims) or len(perm) < 3:
        return None, None
    perm[-2], perm[-1] = perm[-1], perm[-2]
    dims = [*kt.dims[:-2], kt.dims[-1], kt.dims[-2]]
    node = Node(g.fresh(f"{kt.name}_k"), "permute", [Ref(kt.args[0].name), Lit(perm)], shape=dims, dtype=kt.dtype)
    return node, node


def _product(a: Scalar, b: Scalar | None) -> Scalar:
    """a * b (b may be absent), read at run time where either is a model attribute."""
    return a if b is None else combine_scales(a, False, b, False)


def _shapes_fit(q: Node, k: Node, v: Node, scores: Node) -> bool:
    """Q [..., L, E], K [..., S, E], V [..., S, Ev], float32, with as many batch elements each (the
    fused kernels do not broadcast batch dims). Their batch dims may be grouped differently (GPT-NeoX
    makes the scores by bmm over [B*H] and multiplies [B, H] probabilities by V): views regroup them
    row-major, as the scores' views between do, and SDPA runs over one grouping (_sdpa_nodes)."""
    if any(n.dtype not in (None, "float32") for n in (q, k, v)):
        return False
    qs, ks, vs = q.dims, k.dims, v.dims
    if min(len(qs), len(ks), len(vs)) < 3 or not math.prod(qs[:-2]) == math.prod(ks[:-2]) == math.prod(vs[:-2]):
        return False
    return qs[-1] == ks[-1] and ks[-2] == vs[-2] and scores.dims[-2:] == [qs[-2], ks[-2]]


def _regrouped(g: Graph, name: str, batch: list[int]) -> Node | None:
    """A reshape of `name` to `batch` + its last two dims; None where its batch dims already are."""
    n = g.node(name)
    if n.dims[:-2] == batch:
        return None
    return Node(
        g.fresh(f"{name}_heads"),
        "reshape",
        [Ref(name), Lit([*batch, *n.dims[-2:]])],
        shape=[*batch, *n.dims[-2:]],
        dtype=n.dtype,
    )


def _sdpa_nodes(g: Graph, m: _Match) -> list[Node]:
    """The nodes that replace m.out, in order; the last one is read where m.out was."""
    views: dict[str, Node | None] = {x: _regrouped(g, x, m.batch) for x in (m.q, m.k, m.v)}
    names = {x: (view.name if view is not None else x) for x, view in views.items()}
    m.q, m.k, m.v = names[m.q], names[m.k], names[m.v]
    sdpa, masks = _sdpa_node(g, m)
    out = sdpa.dims
    back = (
        None
        if out == m.out.dims
        else Node(
            g.fresh("sdpa_out"),
            "reshape",
            [Ref(sdpa.name), Lit(list(m.out.dims))],
            shape=list(m.out.dims),
            dtype="float32",
        )
    )
    return [x for x in (*views.values(), *masks, sdpa, back) if x is not None]


def _island(g: Graph, name: str, target: str, args: list, shape: list[int], why: str) -> Node:
    """An ATen call node over `args` (node names, then literal values)."""
    refs = [a for a in args if isinstance(a, str)]
    call = [{"arg": i} for i in range(len(refs))] + [{"v": a} for a in args if not isinstance(a, str)]
    attrs = {"target": target, "call": {"args": call, "kwargs": {}}, "tuple": False, "island": why}
    return Node(g.fresh(name), "aten", [Ref(r) for r in refs], attrs, shape=shape, dtype="float32")


def _with_bias(g: Graph, keep: Node, bias: str, batch: list[int]) -> list[Node]:
    """The one float mask SDPA takes where the scores get a fill and an added tensor: the tensor
    where kept, float32's minimum elsewhere (the fill replaced the sum, or was added to it: exp
    underflows to 0 either way). The tensor is regrouped to SDPA's batch dims where it does not
    broadcast against them."""
    b = g.node(bias)
    nodes: list[Node] = []
    if not broadcastable(b.dims[:-2], batch):
        view = _regrouped(g, bias, batch)
        assert view is not None
        nodes.append(view)
        b = view
    # both broadcast to the scores' [*batch, L, S]: their common shape is the larger size per dim
    rank = max(len(keep.dims), len(b.dims))
    ka, ba = [1] * (rank - len(keep.dims)) + keep.dims, [1] * (rank - len(b.dims)) + b.dims
    shape = [max(x, y) for x, y in zip(ka, ba, strict=True)]
    why = "the attention mask: the added tensor where kept, float32's minimum where filled"
    combined = _island(g, "attn_bias", "aten.where.ScalarOther", [keep.name, b.name, _FLOAT32_MIN], shape, why)
    return [*nodes, combined]


def _summed(g: Graph, split: _Split) -> list[Node]:
    """SDPA's float mask from a split region's terms: their sum, expanded to the split shape and
    viewed as the scores."""
    why = "the attention mask: the tensors added to the scores, summed"
    acc = g.node(split.terms[0])
    nodes: list[Node] = []
    for i, t in enumerate(split.terms[1:]):  # names fresh by prefix: none of these is in g yet
        other = g.node(t)
        rank = max(len(acc.dims), len(other.dims))
        a, b = [1] * (rank - len(acc.dims)) + acc.dims, [1] * (rank - len(other.dims)) + other.dims
        acc = _island(
            g, f"attn_sum{i}", "aten.add.Tensor", [acc.name, t], [max(x, y) for x, y in zip(a, b, strict=True)], why
        )
        nodes.append(acc)
    if acc.dims != split.dims:
        acc = _island(g, "attn_full", "aten.expand.default", [acc.name, split.dims], split.dims, why)
        nodes.append(acc)
    nodes.append(_island(g, "attn_bias", "aten.reshape.default", [acc.name, split.merged], split.merged, why))
    return nodes


def _sdpa_node(g: Graph, m: _Match) -> tuple[Node, list[Node]]:
    """The SDPA call and the mask nodes it reads (none, the boolean keep mask, or that and the
    float mask built from it and the added tensor)."""
    args: list[object] = [Ref(m.q), Ref(m.k), Ref(m.v)]
    kwargs: dict[str, object] = {}
    keep = None
    masks: list[Node] = []
    if m.mask is not None and m.mask[0] == "add":
        args.append(Ref(m.mask[1]))
        kwargs["attn_mask"] = {"arg": 3}
    elif m.split is not None:
        masks = _summed(g, m.split)
        args.append(Ref(masks[-1].name))
        kwargs["attn_mask"] = {"arg": 3}
    elif m.mask is not None:
        c = g.node(m.mask[1])
        keep = Node(
            g.fresh("attn_keep"),
            "aten",
            [Ref(c.name)],
            {
                "target": "aten.eq.Scalar" if m.mask[0] == "fill" else "aten.ne.Scalar",
                "call": {"args": [{"arg": 0}, {"v": 0}], "kwargs": {}},
                "tuple": False,
                "island": "the attention mask, as the boolean SDPA takes",
            },
            shape=list(c.dims),
            dtype="bool",
        )
        masks = [keep] if m.bias is None else [keep, *_with_bias(g, keep, m.bias, m.batch)]
        args.append(Ref(masks[-1].name))
        kwargs["attn_mask"] = {"arg": 3}
    kwargs["scale"] = {"v": m.scale.value, **({"expr": m.scale.expr} if m.scale.expr else {})}
    node = Node(
        g.fresh("sdpa"),
        "aten",
        args,
        {
            "target": SDPA,
            "call": {"args": [{"arg": 0}, {"arg": 1}, {"arg": 2}], "kwargs": kwargs},
            "tuple": False,
            "island": "fused attention: PyTorch's flash or memory-efficient kernel, the score matrix never written",
        },
        shape=[*m.batch, *m.out.dims[-2:]],
        dtype="float32",
    )
    return node, masks


def attention_to_sdpa(g: Graph) -> Rewrite | None:
    """Every written-out attention in g as one SDPA call; None when there is none."""
    g = g.copy()
    g.remove_dead()  # `.to(the same dtype)` leaves a metadata assertion that would read the probabilities
    done: list[str] = []
    alive = {n.name for n in g.nodes}
    for n in list(g.nodes):
        m = _match(g, n) if n.name in alive else None  # an earlier match may have removed n
        if m is None:
            continue
        if m.k_node is not None:
            g.insert_before(n.name, m.k_node)
        q, k, v = m.q, m.k, m.v
        nodes = _sdpa_nodes(g, m)
        for extra in nodes:
            g.insert_before(n.name, extra)
        g.replace_uses(n.name, nodes[-1].name)
        g.nodes.remove(n)
        g.remove_dead()
        alive = {x.name for x in g.nodes}
        how = f"scale {m.scale.value:.6g}"
        if m.mask is not None:
            how += {"fill": f", -inf where {m.mask[1]} != 0", "keep": f", -inf where {m.mask[1]} == 0"}.get(
                m.mask[0], f", {m.mask[1]} added"
            )
        if m.split is not None:
            how += f", {' + '.join(m.split.terms)} added over the split {m.split.dims}"
        done.append(f"{n.name} = softmax({q} @ {k}^T) @ {v} ({how})")
    if not done:
        return None
    return Rewrite(
        "attention_to_sdpa",
        "Attention as one scaled-dot-product-attention kernel",
        "Recognised " + "; ".join(done) + ". F.scaled_dot_product_attention computes the same "
        "softmax(Q K^T s + mask) V in one fused kernel (memory-efficient or flash attention) that keeps each "
        "block of scores on chip: the L x S score matrix is never written, where eager writes it and reads "
        "it back for the scale, the mask and the softmax. A -inf (or float32-minimum) fill becomes SDPA's "
        "boolean mask of the kept positions, an added mask its additive mask.",
        g,
    )
