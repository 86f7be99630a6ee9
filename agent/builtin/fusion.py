"""Partition a lowered graph into steps: Python steps (views, library GEMM/convolution calls,
derived weights) and fused groups, each of which becomes one kernel.

A group is a set of elementwise ops and row reductions over one iteration space: the full
shape D of its largest value, split at `split` into rows (D[:split]) and columns
(D[split:]); every reduction in a group reduces exactly the column dims. Values that vary only
per row (reduction results and what is computed from them) live in registers, once per row;
everything else is recomputed per element from the group's inputs, so a group reads each
input once per phase and writes only the values used outside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from agent.builtin.graph import ELEMENTWISE, REDUCTIONS, Graph, Node, Ref, Scalar


class FusionError(Exception):
    """`node`: the (lowered) node that does not fit a fused group, when one is to blame."""

    def __init__(self, msg: str, node: str | None = None):
        super().__init__(msg)
        self.node = node


# How a group reads an external tensor: its index as a function of the flat index i = r*cols + c.
FULL, SCALAR, ROW, ROWGEN, COL, COLGEN, GEN = "full", "scalar", "row", "rowgen", "col", "colgen", "gen"
GAP = "gap"  # two blocks with dims it is broadcast over between them (pipeline.read_gaps_in_place)
ROW_KINDS = (SCALAR, ROW, ROWGEN)


@dataclass
class Operand:
    value: str  # materialised node name
    kind: str
    block: tuple[int, int]  # dims [a, b) of D that the operand spans
    rpad: int = 0  # trailing dims of D it is aligned before (a rank-reduced per-row consumer)
    gap: tuple[int, int] | None = None  # GAP: dims [g0, g1) of D it is broadcast over, inside block


@dataclass
class Group:
    name: str
    nodes: list[Node] = field(default_factory=list)
    full: list[int] = field(default_factory=list)
    split: int | None = None
    operands: list[Operand] = field(default_factory=list)
    scalars: list[Scalar] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    space: dict[str, str] = field(default_factory=dict)  # node -> "full" | "row"

    @property
    def reductions(self) -> list[Node]:
        return [n for n in self.nodes if n.op in REDUCTIONS]

    def member(self, name: str) -> bool:
        return any(n.name == name for n in self.nodes)

    def operand_index(self, name: str) -> int:
        return next(i for i, o in enumerate(self.operands) if o.value == name)

    def describe(self) -> str:
        ops = [n.op for n in self.nodes]
        return ", ".join(ops)


@dataclass
class Step:
    kind: str  # "node" (a Python-level node: view, library op, derived) or "group"
    # node is set exactly when kind is "node", group when it is "group": checks on them narrow the type
    node: Node | None = None
    group: Group | None = None

    def nodes(self) -> list[Node]:
        """The step's node alone, or its group's nodes."""
        if self.node is not None:
            return [self.node]
        assert self.group is not None
        return self.group.nodes


@dataclass
class Plan:
    graph: Graph
    steps: list[Step]
    groups: list[Group]


def _pad(shape: list[int], k: int) -> list[int]:
    return [1] * (k - len(shape)) + list(shape)


def broadcastable(small: list[int], big: list[int]) -> bool:
    """`small` broadcasts to `big` (dims aligned from the right)."""
    if len(small) > len(big):
        return False
    return all(s == 1 or s == b for s, b in zip(_pad(small, len(big)), big, strict=True))


def classify(shape: list[int], full: list[int], split: int) -> tuple[str, tuple[int, int]]:
    k = len(full)
    s = _pad(shape, k)
    nz = [i for i in range(k) if s[i] != 1]
    if not nz:
        return SCALAR, (0, 0)
    a, b = nz[0], nz[-1] + 1
    if any(s[i] != full[i] for i in nz) or any(s[i] == 1 and full[i] != 1 for i in range(a, b)):
        raise FusionError(f"an operand of shape {shape} is not a contiguous block of the group shape {full}")
    if math.prod(s) == math.prod(full):
        return FULL, (0, k)
    if b <= split:
        return (ROW if math.prod(s) == math.prod(full[:split]) else ROWGEN), (a, b)
    if a >= split:
        return (COL if math.prod(s) == math.prod(full[split:]) else COLGEN), (a, b)
    return GEN, (a, b)


def _is_row_shape(shape: list[int], full: list[int], split: int | None) -> bool:
    if list(shape) == list(full[:split]):
        return True  # a reduction result without keepdim (before a split is chosen: the full shape)
    if len(shape) > len(full):
        return False
    assert split is not None, "only the full shape is per-row before a split is chosen"
    s = _pad(shape, len(full))
    return all(s[i] == 1 for i in range(split, len(full)))


def _align(dshape: list[int], nshape: list[int], full: list[int], split: int) -> list[int]:
    """dshape as torch broadcasts it against nshape, written in the group's rank."""
    if list(nshape) == list(full[:split]) and len(nshape) < len(full):
        return _pad(dshape, len(nshape)) + [1] * (len(full) - len(nshape))
    return _pad(dshape, len(full))


def _reads_as_row(dshape: list[int], nshape: list[int], full: list[int], split: int) -> bool:
    """Whether a per-row value of shape dshape, broadcast by torch against nshape, still means
    'one value per row' (a keepdim result does; a rank-reduced one only next to its own kind)."""
    if math.prod(dshape) == 1:
        return True
    if list(dshape) == list(full[:split]) and len(dshape) < len(full):
        return list(nshape) == list(dshape)
    s = _pad(dshape, len(full))
    return len(dshape) <= len(full) and all(s[i] == 1 for i in range(split, len(full)))


def plan(g: Graph) -> Plan:
    steps: list[Step] = []
    groups: list[Group] = []
    producer: dict[str, Group] = {}
    cur: Group | None = None

    def close() -> None:
        nonlocal cur
        if cur is not None:
            steps.append(Step("group", group=cur))
            groups.append(cur)
            cur = None

    for n in g.nodes:
        if n.op in ("input", "param", "output"):
            continue
        compute = (n.op in ELEMENTWISE or n.op in REDUCTIONS) and not n.attrs.get("island")
        deps = n.refs()
        if not compute:
            if cur is not None and any(cur.member(d) for d in deps):
                close()
            steps.append(Step("node", node=n))
            continue
        if n.attrs.get("alone"):  # a kernel of its own (pipeline.fuse: it did not fit a group's outputs)
            close()
            cur = Group(f"fused_{len(groups)}")
            if not _try_join(g, cur, n):
                raise FusionError(f"{n.name}: {n.op} of shape {n.shape} cannot start a fused group", n.name)
            producer[n.name] = cur
            close()
            continue
        if cur is not None and not _try_join(g, cur, n):
            close()
        if cur is None:
            cur = Group(f"fused_{len(groups)}")
            if not _try_join(g, cur, n):
                raise FusionError(f"{n.name}: {n.op} of shape {n.shape} cannot start a fused group", n.name)
        producer[n.name] = cur
    close()
    # outputs: values used outside their group or returned, judged under the group's final split
    for grp in groups:
        _choose_split(g, grp)
        for n in grp.nodes:
            used_outside = any(not grp.member(u.name) for u in g.users(n.name))
            if used_outside:
                grp.outputs.append(n.name)
                space = grp.space[n.name]
                ok = n.shape == grp.full if space == "full" else _is_row_shape(n.dims, grp.full, grp.split)
                # stored at out[i] or out[r]: exactly one value per element or per row (a 0-d value
                # computed in a row loop, DeBERTa's sqrt(scale * 3), was stored once per row)
                if math.prod(n.dims) != math.prod(grp.full if space == "full" else grp.full[: grp.split]):
                    ok = False
                if not ok:
                    raise FusionError(
                        f"{n.name} (shape {n.shape}) is needed outside its fused group but is neither "
                        f"the group's full shape {grp.full} nor one value per row of {grp.full[: grp.split]}",
                        n.name,
                    )
        _finish_operands(g, grp)
    return Plan(g, steps, groups)


def _try_join(g: Graph, grp: Group, n: Node) -> bool:
    """Add n to the group if it fits the group's iteration space; False leaves the group as it was."""
    full, split = list(grp.full), grp.split
    if n.op in REDUCTIONS:
        src = g.node(n.args[0].name)
        ishape = src.dims
        j = n.attrs["dim"][0] if n.attrs["dim"] else len(ishape)
        if not full:
            full = list(ishape)
        elif ishape != full:
            if split is None and broadcastable(full, ishape):
                full = list(ishape)
            else:
                return False
        if split is not None and split != j:
            return False
        split = j
        if grp.member(src.name) and grp.space[src.name] == "row":
            return False  # a reduction of a per-row value is a second-level reduction: a new group
    else:
        if not full:
            full = list(n.dims)
        elif n.shape != full:
            if broadcastable(n.dims, full) or (split is not None and list(n.dims) == full[:split]):
                pass
            elif split is None and broadcastable(full, n.dims) and len(n.dims) >= len(full):
                full = list(n.dims)
            else:
                return False
    sp = split if split is not None else max(len(full) - 1, 0)
    # internal values must be read with the same meaning they were computed with
    space = "row" if n.op in REDUCTIONS else None
    for d in n.refs():
        if grp.member(d):
            dn = g.node(d)
            if grp.space[d] == "row":
                if n.op not in REDUCTIONS and not _reads_as_row(dn.dims, n.dims, full, sp):
                    return False
            elif n.op not in REDUCTIONS:
                if _pad(dn.dims, len(full)) != full:
                    return False  # a smaller full-space value: only materialised values may broadcast
                space = "full"
        else:
            dn = g.node(d)
            if dn.shape is None:
                return False
            aligned = _align(dn.dims, full if n.op in REDUCTIONS else n.dims, full, sp)
            if not broadcastable(aligned, full):
                return False
            try:
                kind, _ = classify(aligned, full, sp)
            except FusionError:
                return False
            if n.op not in REDUCTIONS and kind not in ROW_KINDS:
                space = "full"
    if space is None:
        space = "row"
    if space == "row" and n.op not in REDUCTIONS and not _is_row_shape(n.dims, full, sp):
        space = "full"
    # a full-space value must have the full shape to be stored by the loop
    if space == "full" and _pad(n.dims, len(full)) != full:
        return False
    if split is not None and grp.split is None:
        # a reduction joined: every existing value must still be readable under the new split
        for m in grp.nodes:
            if grp.space[m.name] == "row" and not _is_row_shape(m.dims, full, split):
                return False
    grp.full, grp.split = full, split
    grp.nodes.append(n)
    grp.space[n.name] = space
    return True


def _choose_split(g: Graph, grp: Group) -> None:
    """A reduction-free group's split is chosen once its members are known (`_try_join` gave
    their spaces for a provisional one): before its outputs are checked, which asks whether an
    output is one value per row of that split."""
    if grp.split is None:
        grp.split = _best_split(g, grp)
        grp.space = _spaces(g, grp, grp.split) or grp.space


def _finish_operands(g: Graph, grp: Group) -> None:
    assert grp.split is not None, "_choose_split runs first"
    for n in grp.nodes:
        for a in n.args:
            if isinstance(a, Ref) and not grp.member(a.name) and all(o.value != a.name for o in grp.operands):
                nshape = grp.full if n.op in REDUCTIONS else n.dims
                try:
                    kind, block = classify(
                        _align(g.node(a.name).dims, nshape, grp.full, grp.split), grp.full, grp.split
                    )
                except FusionError as e:
                    raise FusionError(f"{n.name}: {e}", n.name) from None
                rpad = (
                    len(grp.full) - len(nshape)
                    if list(nshape) == grp.full[: grp.split] and len(nshape) < len(grp.full)
                    else 0
                )
                grp.operands.append(Operand(a.name, kind, block, rpad))
            if isinstance(a, Scalar) and a.runtime and a not in grp.scalars:
                grp.scalars.append(a)


def _spaces(g: Graph, grp: Group, split: int) -> dict[str, str] | None:
    """Each node's space in a reduction-free group under `split` (the spaces `_try_join` gave were
    for its provisional split): "row" where the node reads only per-row values and has a per-row
    shape, else "full"; None when a node is neither (the split does not fit the group)."""
    space: dict[str, str] = {}
    for n in grp.nodes:
        row = _is_row_shape(n.dims, grp.full, split)
        for d in n.refs():
            if d in space:
                row = row and space[d] == "row"
            else:
                try:
                    kind = classify(_align(g.node(d).dims, n.dims, grp.full, split), grp.full, split)[0]
                except FusionError:
                    return None
                row = row and kind in ROW_KINDS
        if not row and _pad(n.dims, len(grp.full)) != grp.full:
            return None
        space[n.name] = "row" if row else "full"
    return space


def _best_split(g: Graph, grp: Group) -> int:
    """For a purely elementwise group: the row/column split with the cheapest indexing, and of
    those the one with the fewest (so longest) rows: a per-channel bias over NCHW split as N*C*H
    rows of W columns ran 7x slower than torch's relu over the same tensor (a short simd loop and
    its scalar remainder per row), as N*C rows of H*W it is one long vector loop per row."""
    k = len(grp.full)
    ext = {a.name for n in grp.nodes for a in n.args if isinstance(a, Ref) and not grp.member(a.name)}
    best, best_cost = max(k - 1, 0), None
    cost_of = {FULL: 0, SCALAR: 0, ROW: 0, COL: 0, ROWGEN: 1, COLGEN: 2, GEN: 3}
    for j in range(max(k - 1, 0), -1, -1):
        try:
            cost = (sum(cost_of[classify(g.node(e).dims, grp.full, j)[0]] for e in ext), math.prod(grp.full[:j]))
        except FusionError:
            continue
        if _spaces(g, grp, j) is None:
            continue
        if best_cost is None or cost < best_cost:
            best, best_cost = j, cost
    return best
