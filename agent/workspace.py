"""The candidate's files as a versioned set that the agent edits through checked operations.

Why a gatekeeper: the model writes arbitrary paths and contents. Anything that could change
what the candidate is judged against (the task file, the sandbox's evaluation scripts, files
outside the workspace) must be refused here, with a message the model can act on, before the
files ever reach the sandbox. Every accepted change bumps the version and yields a unified diff,
so a trajectory can show and replay exactly what changed.
"""

from __future__ import annotations

import difflib
import posixpath
import re
from dataclasses import dataclass

ALLOWED_EXTENSIONS = (".py", ".cu", ".cuh", ".cpp", ".h", ".hpp", ".md", ".txt")
MAX_FILE_BYTES = 256 * 1024
MAX_FILES = 64
MAX_PATH_CHARS = 200

# The read-only copy of the task shown to the model.
REFERENCE_PATH = "reference.py"
# Names the sandbox uses for its own scripts, or that would shadow them on the child's path.
PROTECTED_NAMES = frozenset(
    {
        REFERENCE_PATH,
        "kwrt.py",
        "sitecustomize.py",
        "usercustomize.py",
        "conftest.py",
        "torch.py",
        "numpy.py",
    }
)
PROTECTED_PREFIXES = ("sandbox/", "eval", "evaluate", "harness", "_kw", ".")
_SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


class WorkspaceError(ValueError):
    """A refused operation; the message is written for the model to read and act on."""


@dataclass
class Edit:
    path: str
    diff: str
    content: str
    version: int
    created: bool = False
    deleted: bool = False

    def summary(self) -> str:
        added = sum(1 for ln in self.diff.splitlines() if ln.startswith("+") and not ln.startswith("+++"))
        removed = sum(1 for ln in self.diff.splitlines() if ln.startswith("-") and not ln.startswith("---"))
        verb = "created" if self.created else "updated"
        return f"{verb} {self.path} (+{added} -{removed} lines, {len(self.content)} chars); workspace version {self.version}"


def unified_diff(path: str, old: str, new: str) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"a/{path}" if old else "/dev/null",
            tofile=f"b/{path}",
        )
    )


def check_path(path: str) -> str:
    """Normalise a model-supplied path or raise WorkspaceError saying why it is refused."""
    if not isinstance(path, str) or not path.strip():
        raise WorkspaceError("path must be a non-empty relative path such as 'model_new.py' or 'kernels/add.cpp'")
    raw = path.strip().replace("\\", "/")
    if raw.startswith("/") or re.match(r"^[A-Za-z]:", raw) or raw.startswith("~"):
        raise WorkspaceError(f"{path!r}: absolute paths are not allowed; use a path relative to the workspace")
    if len(raw) > MAX_PATH_CHARS:
        raise WorkspaceError(f"path is longer than {MAX_PATH_CHARS} characters")
    if "\x00" in raw:
        raise WorkspaceError("path contains a NUL byte")
    parts = raw.split("/")
    if ".." in parts:
        raise WorkspaceError(f"{path!r}: '..' is not allowed; files must stay inside the workspace")
    norm = posixpath.normpath(raw)
    if norm.startswith("./"):
        norm = norm[2:]
    for seg in norm.split("/"):
        if not _SEGMENT.match(seg):
            raise WorkspaceError(f"{path!r}: path segment {seg!r} may use only letters, digits, '_', '-' and '.'")
    return norm


def check_writable(path: str, content: str) -> str:
    norm = check_path(path)
    base = posixpath.basename(norm)
    if norm in PROTECTED_NAMES or base in PROTECTED_NAMES:
        raise WorkspaceError(
            f"{norm!r} is protected: the task file and the evaluation scripts cannot be written. "
            "Put your implementation in model_new.py and kernels/*."
        )
    if norm.startswith(PROTECTED_PREFIXES) or base.startswith(PROTECTED_PREFIXES):
        raise WorkspaceError(f"{norm!r} is protected (reserved for the sandbox's evaluation scripts)")
    if not norm.endswith(ALLOWED_EXTENSIONS):
        raise WorkspaceError(f"{norm!r}: allowed file types are {', '.join(ALLOWED_EXTENSIONS)}")
    if not isinstance(content, str):
        raise WorkspaceError("content must be a string")
    size = len(content.encode("utf-8", errors="replace"))
    if size > MAX_FILE_BYTES:
        raise WorkspaceError(f"{norm!r}: {size} bytes is larger than the {MAX_FILE_BYTES}-byte limit per file")
    return norm


class Workspace:
    """Files by relative path; `version` counts accepted edits. `reference` is readable, never writable."""

    def __init__(self, files: dict[str, str] | None = None, reference: str | None = None, version: int = 0) -> None:
        self.files: dict[str, str] = {}
        self.reference = reference
        self.version = version
        for p, c in (files or {}).items():
            self.files[check_writable(p, c)] = c

    def snapshot(self) -> dict[str, str]:
        """The candidate as the sandbox takes it (no reference copy)."""
        return dict(self.files)

    def listing(self) -> list[tuple[str, int, bool]]:
        """(path, size in chars, writable), sorted; the reference first when present."""
        rows = [(REFERENCE_PATH, len(self.reference), False)] if self.reference is not None else []
        rows += [(p, len(c), True) for p, c in sorted(self.files.items())]
        return rows

    def read(self, path: str) -> str:
        norm = check_path(path)
        if norm == REFERENCE_PATH and self.reference is not None:
            return self.reference
        if norm not in self.files:
            known = ", ".join(p for p, _, _ in self.listing()) or "(none yet)"
            raise WorkspaceError(f"no file {norm!r} in the workspace; files: {known}")
        return self.files[norm]

    def write(self, path: str, content: str) -> Edit:
        norm = check_writable(path, content)
        old = self.files.get(norm)
        if old is None and len(self.files) >= MAX_FILES:
            raise WorkspaceError(f"the workspace already holds {MAX_FILES} files, the maximum")
        if old == content:
            raise WorkspaceError(f"{norm!r} already has exactly this content; nothing changed")
        self.files[norm] = content
        self.version += 1
        return Edit(norm, unified_diff(norm, old or "", content), content, self.version, created=old is None)

    def edit(self, path: str, old: str, new: str) -> Edit:
        """Search/replace that must match exactly once, so the model cannot edit the wrong spot."""
        norm = check_path(path)
        current = self.read(norm)
        if not isinstance(old, str) or old == "":
            raise WorkspaceError("'old' must be a non-empty string copied exactly from the file")
        if not isinstance(new, str):
            raise WorkspaceError("'new' must be a string")
        count = current.count(old)
        if count == 0:
            raise WorkspaceError(
                f"'old' text was not found in {norm!r}; it must match the file exactly, including whitespace "
                "(read_file the file first)"
            )
        if count > 1:
            raise WorkspaceError(
                f"'old' text occurs {count} times in {norm!r}; include more context so it matches once"
            )
        return self.write(norm, current.replace(old, new, 1))

    def apply(self, path: str, content: str, version: int) -> None:
        """Replay a recorded edit (resume); trusts the trajectory, which the checks produced."""
        self.files[path] = content
        self.version = max(self.version, version)
