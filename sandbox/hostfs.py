"""Host-side file access under folders that untrusted code wrote or named.

The evaluator runs as root. A symbolic link, a `..` or a FIFO that it followed in a sandboxed
child's work folder, in a torch.compile cache a task filled, or in an uploaded candidate folder
would read, overwrite or hang on any host file (docs/security.md, "Host paths"). So everything
here starts from a root that this process trusts (a folder it made, or one its caller named),
opens each component below it relative to its parent's descriptor with O_NOFOLLOW, and deals
only in directories and regular files: a link, a special file or a `..` is refused (`Unsafe`),
or, where a caller copies a cache, skipped.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC  # the trusted root: may be a link its owner made
_DIR_FLAGS = _ROOT_FLAGS | os.O_NOFOLLOW
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # O_NONBLOCK: a FIFO never blocks
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20
MAX_DEPTH = 64


class Unsafe(OSError):
    """A path that is a link or a special file, leaves its root, or is larger than allowed."""


def relative_parts(rel: str) -> list[str]:
    """The components of a plain relative path; absolute paths and empty, `.` or `..`
    components are refused, since joining them to a root could name anything."""
    parts = rel.split("/") if isinstance(rel, str) else [""]
    if any(p in ("", ".", "..") or "\0" in p for p in parts):
        raise Unsafe(f"not a plain relative path: {rel!r}")
    return parts


def is_within(path: str | Path, root: str | Path) -> bool:
    """Whether `path`, with every link resolved, is `root` or below it."""
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top.rstrip("/") + "/")


def _open_parent(root: str | Path, parts: list[str], create: bool = False) -> int:
    """A descriptor of root/parts[:-1], no component a link (made as directories if `create`)."""
    fd = os.open(root, _ROOT_FLAGS)
    try:
        for part in parts[:-1]:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            parent, fd = fd, os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(parent)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(dir_fd: int, name: str) -> int:
    """A read descriptor of the regular file `name` in `dir_fd`; a link or special file is refused."""
    if not stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
        raise Unsafe(f"{name!r} is not a regular file")
    fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped since the stat
        os.close(fd)
        raise Unsafe(f"{name!r} is not a regular file")
    return fd


def open_beneath(root: str | Path, rel: str) -> int:
    """A read descriptor of the regular file root/rel, found without following any link."""
    parts = relative_parts(rel)
    parent = _open_parent(root, parts)
    try:
        return open_regular(parent, parts[-1])
    finally:
        os.close(parent)


def write_beneath(root: str | Path, rel: str, data: bytes) -> None:
    """Write root/rel (folders made as needed), never through a link."""
    parts = relative_parts(rel)
    parent = _open_parent(root, parts, create=True)
    try:
        fd = os.open(parts[-1], _CREATE_FLAGS, 0o644, dir_fd=parent)
    finally:
        os.close(parent)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def read_bounded(fd: int, max_bytes: int) -> bytes:
    """All of an open file, refused when it holds more than max_bytes."""
    chunks, total = [], 0
    while chunk := os.read(fd, _CHUNK):
        total += len(chunk)
        if total > max_bytes:
            raise Unsafe(f"larger than {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def copy_fd(src_fd: int, dest: Path, max_bytes: int, mode: int = 0o644) -> int:
    """Copy an open file into the new file `dest` (never an existing one or a link), at most
    max_bytes; returns the bytes copied. A refused copy leaves no file behind."""
    out = os.open(dest, _CREATE_FLAGS | os.O_EXCL, mode)
    total = 0
    try:
        with os.fdopen(out, "wb") as f:
            while chunk := os.read(src_fd, _CHUNK):
                total += len(chunk)
                if total > max_bytes:
                    raise Unsafe(f"larger than {max_bytes} bytes")
                f.write(chunk)
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    return total


class Budget:
    """What a tree copy may still take: bytes and entries (a bomb of empty files is bounded too)."""

    def __init__(self, max_bytes: int, max_entries: int):
        self.bytes, self.entries = max_bytes, max_entries

    def take(self, nbytes: int = 0) -> None:
        self.bytes -= nbytes
        self.entries -= 1
        if self.bytes < 0 or self.entries < 0:
            raise Unsafe("the tree is larger than allowed")


def copy_tree(src: Path, dest: Path, budget: Budget, root: Path) -> None:
    """Copy the folder `src` to the new folder `dest`: folders and regular files only (links,
    FIFOs, sockets and devices are skipped), within `budget`. src.parent is trusted; src and
    everything under it are opened without following links. Every destination must resolve
    under `root`; anything amiss raises, leaving the partial copy to the caller to remove."""
    parent = os.open(src.parent, _ROOT_FLAGS)
    try:
        src_fd = os.open(src.name, _DIR_FLAGS, dir_fd=parent)
    finally:
        os.close(parent)
    try:
        _copy_dir(src_fd, dest, budget, root, 0)
    finally:
        os.close(src_fd)


def _copy_dir(src_fd: int, dest: Path, budget: Budget, root: Path, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise Unsafe("the tree is deeper than allowed")
    os.mkdir(dest, 0o755)  # fails on anything already there, a link included
    if not is_within(dest, root):
        raise Unsafe(f"{dest} resolves outside {root}")
    for name in os.listdir(src_fd):
        st = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            budget.take()
            sub = os.open(name, _DIR_FLAGS, dir_fd=src_fd)
            try:
                _copy_dir(sub, dest / name, budget, root, depth + 1)
            finally:
                os.close(sub)
        elif stat.S_ISREG(st.st_mode):
            budget.take(st.st_size)
            fd = open_regular(src_fd, name)
            try:
                copy_fd(fd, dest / name, st.st_size, st.st_mode & 0o755)
            finally:
                os.close(fd)
            os.utime(dest / name, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)  # as copy2 did
            if not is_within(dest / name, root):
                raise Unsafe(f"{dest / name} resolves outside {root}")


def regular_files(root: Path, skip: Callable[[str], bool]) -> Iterator[tuple[str, int]]:
    """(relative path, open descriptor) of each regular file under `root`, names sorted; names
    for which `skip` says so are passed over, and any other link or special file raises Unsafe.
    Each descriptor is closed once the consumer asks for the next."""
    fd = os.open(root, _ROOT_FLAGS)
    try:
        yield from _walk(fd, "", skip, 0)
    finally:
        os.close(fd)


def _walk(dir_fd: int, prefix: str, skip: Callable[[str], bool], depth: int) -> Iterator[tuple[str, int]]:
    if depth > MAX_DEPTH:
        raise Unsafe(f"{prefix or '.'} is nested deeper than {MAX_DEPTH} folders")
    for name in sorted(os.listdir(dir_fd)):
        rel = prefix + name
        if skip(rel):
            continue
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        if stat.S_ISDIR(mode):
            sub = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            try:
                yield from _walk(sub, rel + "/", skip, depth + 1)
            finally:
                os.close(sub)
        elif stat.S_ISREG(mode):
            fd = open_regular(dir_fd, name)
            try:
                yield rel, fd
            finally:
                os.close(fd)
        else:
            kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
            raise Unsafe(f"{rel} is {kind}; links and special files are not followed")
