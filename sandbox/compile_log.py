"""Compiler diagnostics -> CompileError(file, line, column, message), workspace-relative."""

from __future__ import annotations

import re

from .schema import CompileError

_GCC = re.compile(r"^(?P<file>[^:\s][^:\n]*):(?P<line>\d+):(?:(?P<col>\d+):)? (?:fatal )?error: (?P<msg>.*)$", re.M)
_NVCC = re.compile(r"^(?P<file>[^()\n]+)\((?P<line>\d+)\): (?:catastrophic )?error:? (?P<msg>.*)$", re.M)
_LINK = re.compile(r"^(?:.*?: )?(?P<msg>(?:undefined reference to|multiple definition of) .*)$", re.M)


def _relative(path: str, roots: list[str]) -> str:
    for root in roots:
        root = root.rstrip("/") + "/"
        if path.startswith(root):
            return path[len(root) :]
    return path


def parse_errors(log: str, roots: list[str], limit: int = 50) -> list[CompileError]:
    """Every error line of a gcc/g++/nvcc/ld log; paths made relative to the workspace."""
    errors: list[CompileError] = []
    seen: set[tuple] = set()
    for pattern in (_GCC, _NVCC):
        for m in pattern.finditer(log):
            file = _relative(m.group("file").strip(), roots)
            col = m.groupdict().get("col")
            key = (file, m.group("line"), m.group("msg"))
            if key in seen:
                continue
            seen.add(key)
            errors.append(
                CompileError(
                    file=file,
                    line=int(m.group("line")),
                    column=int(col) if col else None,
                    message=m.group("msg").strip(),
                )
            )
    for m in _LINK.finditer(log):
        errors.append(CompileError(file="(link)", line=None, column=None, message=m.group("msg").strip()))
    errors.sort(key=lambda e: (e.file, e.line or 0))
    return errors[:limit]
