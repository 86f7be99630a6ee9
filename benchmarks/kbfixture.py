"""KernelBench case studies as gallery fixtures that hold none of KernelBench's text.

Why: KernelBench's files are never committed here (a user clones it), but a trajectory of one of
its problems holds the problem's source many times over: the task event, the reference the
candidates subclass (`_KwReference`, a copy of its Model class), the files and diffs of each turn.
`redact` replaces each line of the problem's source (at least MIN_LINE characters, stripped)
wherever it occurs in the fixture's strings with a token naming it, keeping the indentation and
diff marker around it; `restore` puts them back from a local KernelBench checkout after checking the file's
SHA-256, so the gallery shows (and a download runs) exactly what ran.

A token is `⟦kb:<index>⟧`, index into `fragments(source)`; the fixture's meta.kernelbench names the
file, its SHA-256 and the shrink factor the case ran at.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

from benchmarks.runner import shrink_source

TOKEN = re.compile(r"⟦kb:(\d+)⟧")
MIN_LINE = 16  # shorter lines (`return x`, `super().__init__()`) say nothing of the problem


class RestoreError(Exception):
    """The fixture's KernelBench file is missing or not the version it was made from."""


def fragments(source: str) -> list[str]:
    """The source's distinct lines of at least MIN_LINE characters, stripped, in order: whatever
    copies it (the task event, a candidate's `_KwReference`, a turn's diff) copies them line by
    line, indented or prefixed as it likes."""
    out: dict[str, None] = {}
    for line in source.splitlines():
        core = line.strip()
        if len(core) >= MIN_LINE:
            out.setdefault(core, None)
    return list(out)


def _redacted(text: str, index: dict[str, int]) -> str:
    """text with each fragment in it replaced by its token, longest first, whole lines or inside a
    longer one (a message quoting the problem's forward)."""
    for part in sorted((p for p in index if p in text), key=len, reverse=True):
        text = text.replace(part, f"⟦kb:{index[part]}⟧")
    return text


def _walk(value: Any, fn) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list):
        return [_walk(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _walk(v, fn) for k, v in value.items()}
    return value


def redact(data: dict, source: str, file: str, sha256: str, shrink: int) -> dict:
    """`data` (a trajectory fixture) without `source`'s text; meta.kernelbench says how to restore it."""
    parts = fragments(source)
    index = {part: k for k, part in enumerate(parts)}
    out = _walk(data, lambda s: _redacted(s, index))
    meta = out.setdefault("meta", {})
    meta.pop("task_source", None)
    meta["kernelbench"] = {"file": file, "sha256": sha256, "shrink": shrink, "fragments": len(parts)}
    return out


def redact_text(text: str, source: str) -> str:
    """One string without `source`'s lines (a case study's write-up)."""
    return _redacted(text, {part: k for k, part in enumerate(fragments(source))})


def is_kernelbench(data: dict) -> bool:
    return isinstance(data, dict) and isinstance((data.get("meta") or {}).get("kernelbench"), dict)


def restore(data: dict, root: Path) -> dict:
    """The fixture with KernelBench's text put back from `root` (the checkout's problem folder,
    holding level1 ... level3)."""
    ref = data["meta"]["kernelbench"]
    path = Path(root) / ref["file"]
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RestoreError(f"{ref['file']}: not in the KernelBench checkout at {root} ({exc.strerror})") from None
    if hashlib.sha256(raw).hexdigest() != ref["sha256"]:
        raise RestoreError(f"{ref['file']}: the checkout's file is another version than the one this case ran")
    source = shrink_source(raw.decode("utf-8"), int(ref.get("shrink") or 1))
    parts = fragments(source)
    if len(parts) != int(ref.get("fragments", len(parts))):
        raise RestoreError(f"{ref['file']}: its lines do not match the fixture's tokens")
    out = _walk(data, lambda s: TOKEN.sub(lambda m: parts[int(m.group(1))], s))
    out["meta"]["task_source"] = source
    return out


CHECKOUT_ENV = "KERNELWRIGHT_KERNELBENCH"  # a KernelBench checkout's problem folder (level1 ... level3)
DEFAULT_CHECKOUT = Path(__file__).resolve().parent.parent / ".kernelbench" / "KernelBench" / "KernelBench"


def checkout() -> Path | None:
    """Where the KernelBench problems are: $KERNELWRIGHT_KERNELBENCH, else the git-ignored
    .kernelbench folder that docs/benchmarks.md's runs use; None when neither holds level1."""
    for root in (os.environ.get(CHECKOUT_ENV), DEFAULT_CHECKOUT):
        if root and (Path(root) / "level1").is_dir():
            return Path(root)
    return None
