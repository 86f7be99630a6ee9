"""sandbox.workguard on files held only through a mapping (red team "hidden_disk"): a file that is
mapped with libc's mmap, then closed and unlinked, has no name and no descriptor, yet its blocks
stay on the host's disk while mapped. The guard finds them in /proc/PID/maps. A plain child (no
sandbox) does the mapping; the guard's functions look at it as they do from their sandbox.
tests/sandbox/escape/test_mapped_unlinked.py runs the same attack through whole evaluations."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sandbox import containment, workguard

MB = 1 << 20
SIZE = 8 * MB
BIG = 1 << 40  # a limit nothing here reaches: usage() returns the count

# Maps files the way the red team did: open, size, mmap through libc (no descriptor kept), close,
# unlink, then fill through the mapping. Told what to do as JSON in argv[1]; "go" on stdin starts
# the attack (so a test can look before it), "ready" on stdout says it is done; it lives on until
# stdin closes (or `linger` seconds).
CHILD = r"""
import ctypes, json, os, resource, sys
cfg = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
size, fsize = cfg["size"], cfg.get("fsize")
if fsize:
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
print("limited", flush=True)
sys.stdin.readline()
held = []
for i in range(cfg["files"]):
    name = os.path.join(cfg["folder"], cfg.get("name", "blob") + str(i))
    fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    if cfg.get("write"):  # all of it through the descriptor; then only the first page mapped
        os.write(fd, b"\xa5" * size)
        length = 4096
    else:
        os.ftruncate(fd, size)
        length = size
    for _ in range(cfg.get("maps", 1)):
        addr = libc.mmap(None, length, 3, 1, fd, 0)  # PROT_READ|PROT_WRITE, MAP_SHARED
        assert addr != ctypes.c_void_p(-1).value, ctypes.get_errno()
        if not cfg.get("write"):
            ctypes.memset(addr, 0x5A, length)
            libc.msync(ctypes.c_void_p(addr), ctypes.c_size_t(length), 4)  # MS_SYNC: blocks on the disk
    if cfg.get("keep_fd"):
        held.append(fd)
    else:
        os.close(fd)
    if not cfg.get("keep_name"):
        os.unlink(name)
if cfg.get("lower"):  # after writing: its own limit down, so that a later look reads less
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
print("ready", flush=True)
if cfg.get("linger"):  # then ends by itself
    import time
    time.sleep(cfg["linger"])
else:
    sys.stdin.read()
"""


class Child:
    def __init__(self, **cfg) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-S", "-c", CHILD, json.dumps({"size": SIZE, "files": 1} | cfg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.pid = self.proc.pid
        assert self.proc.stdout.readline().strip() == "limited"

    def attack(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline().strip()
        assert line == "ready", f"the child failed to map its files ({self.proc.poll()})"

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def child():
    started: list[Child] = []

    def start(**cfg) -> Child:
        c = Child(**cfg)
        started.append(c)
        return c

    yield start
    for c in started:
        c.close()


@pytest.fixture(params=["map_files", "maps_only"])
def view(request, monkeypatch) -> str:
    """map_files: the guard can stat /proc/PID/map_files (root in the host's user namespace, as
    this test runs); maps_only: it cannot, as in the zygote's children (the guard is in a user
    namespace of its own) and under bubblewrap when it runs as a throwaway uid."""
    if request.param == "maps_only":
        real = os.stat

        def stat(path, *args, **kwargs):
            if "/map_files/" in os.fspath(path):
                raise PermissionError(1, "Operation not permitted", path)
            return real(path, *args, **kwargs)

        monkeypatch.setattr(os, "stat", stat)
    return request.param


def count(folder, pid: int, limit: int = BIG, bound: workguard.FileBound | None = None) -> int:
    extra = () if bound is None else (bound,)
    return workguard.usage([str(folder)], limit, 20000, lambda: [pid], "/proc", *extra)


def test_files_held_only_by_a_mapping_count(tmp_path, child, view):
    """4 files of 8 MB, mapped, closed, unlinked, filled through the mapping: all 32 MB count
    (the red team's candidate held 48 x 64 MB against a 1024 MB bound, unseen)."""
    c = child(folder=str(tmp_path), files=4)
    c.attack()
    assert os.listdir(tmp_path) == []
    assert count(tmp_path, c.pid) >= 4 * SIZE
    with pytest.raises(workguard.Over, match="more than 16 MB"):
        count(tmp_path, c.pid, 16 * MB)


def test_data_written_past_the_mapping_counts(tmp_path, child, view):
    """8 MB written through the descriptor, one page mapped, closed, unlinked, and the child's
    file-size limit lowered afterwards: the mapping shows 4 KB of each file, the disk holds 8 MB.
    Where map_files cannot be read, each counts at the largest file the child could write (its
    hard RLIMIT_FSIZE, seen by an earlier look)."""
    c = child(folder=str(tmp_path), files=4, write=True, fsize=SIZE, lower=True)
    bound = workguard.FileBound()
    assert count(tmp_path, c.pid, bound=bound) == 0 and bound.bytes >= SIZE
    c.attack()
    assert count(tmp_path, c.pid, bound=bound) >= 4 * SIZE
    with pytest.raises(workguard.Over):
        count(tmp_path, c.pid, 16 * MB, bound)


def test_a_file_mapped_many_times_counts_once(tmp_path, child, view):
    c = child(folder=str(tmp_path), files=1, maps=40)
    c.attack()
    assert SIZE <= count(tmp_path, c.pid) < 2 * SIZE


def test_a_mapped_file_with_a_name_counts_once(tmp_path, child, view):
    c = child(folder=str(tmp_path), files=2, maps=3, keep_name=True)
    c.attack()
    assert len(os.listdir(tmp_path)) == 2
    assert 2 * SIZE <= count(tmp_path, c.pid) < 3 * SIZE


def test_a_file_held_open_and_mapped_counts_once(tmp_path, child, view):
    c = child(folder=str(tmp_path), files=2, maps=2, keep_fd=True)
    c.attack()
    assert 2 * SIZE <= count(tmp_path, c.pid) < 3 * SIZE


def test_odd_names_do_not_hide_a_mapping(tmp_path, child, view):
    """/proc/PID/maps escapes only newlines: a carriage return or a " (deleted)" of its own in the
    name must neither split the line nor fool the count."""
    c = child(folder=str(tmp_path), files=2, name="a\rb (deleted)\x0bc\n")
    c.attack()
    assert count(tmp_path, c.pid) >= 2 * SIZE


def test_mappings_of_files_elsewhere_do_not_count(tmp_path, child):
    """A file outside the folder (the host's, replaced while mapped) is none of the child's."""
    (tmp_path / "work").mkdir()
    (tmp_path / "else").mkdir()
    c = child(folder=str(tmp_path / "else"), files=2)
    c.attack()
    assert count(tmp_path / "work", c.pid) == 0


def test_the_guard_kills_a_child_that_hides_its_files_in_mappings(tmp_path):
    """watch(), as the sandbox runs it: the child is killed on the way, the folder emptied."""
    c = Child(folder=str(tmp_path), files=6, linger=5)
    said: list[str] = []
    c.proc.stdin.write("go\n")
    c.proc.stdin.flush()
    try:
        status = workguard.watch(
            c.pid, [str(tmp_path)], 16 * MB, 20000, 0.02, lambda: workguard.descendants(c.pid), say=said.append
        )
    finally:
        c.proc.kill()
    assert status is None, f"not killed (status {status}): {said}"
    assert "its folder held more than 16 MB" in said[0] and "mapped" in said[0], said
    assert os.listdir(tmp_path) == []


def test_inside_work_is_the_sandboxs():
    assert workguard.INSIDE_WORK == containment.INSIDE_WORK
