"""The bound on what a sandboxed child may keep in its own folder, which lies on the host's disk.

RLIMIT_FSIZE caps each file, not their number, so a child writing many files could fill the
host's disk for as long as it runs (docs/security.md, "Resources"). The folder cannot be a
sized tmpfs, since the evaluator writes into it while the child runs (the candidate's files, the
built library) and reads build outputs back. So a process the child cannot reach watches it:

- in a child of the zygote, the process that made its namespaces (sandbox.containment
  `isolate_forked_child`: outside the child's PID namespace, so nothing in it can signal it);
- a child that bubblewrap starts directly runs under `python -S workguard.py ... -- bwrap ...`
  (sandbox.containment `bwrap_args`), which starts bubblewrap as its own child and watches
  from outside the sandbox; bubblewrap, and with it the sandbox, dies with it.

Every `interval` seconds it adds up the folder (each inode once, at its apparent size or its
allocated blocks, whichever is larger, so a sparse file that is later filled through a mapping
counts in full from the start), the regular files that the child's processes hold open after
unlinking them (/proc/PID/fd), and the files of the folder that they hold only through a mapping
after closing and unlinking them (/proc/PID/maps: no name, no descriptor; `mapped_bytes`). Past
the limit, or past `max_entries` names, it kills the child, empties the folder and ends as
killed by SIGXFSZ, after a line in the child's log saying why. A folder it cannot read counts as
past the limit: fail closed. What it cannot see: descriptors of unlinked files in flight in a
unix socket (bounded by RLIMIT_NOFILE times RLIMIT_FSIZE).

Only the standard library, no package imports: the guard runs as a script (`python -S`).
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import stat
import sys
import time
from collections.abc import Callable, Iterable
from typing import NoReturn

GUARD_EXIT_SIGNAL = signal.SIGXFSZ
# The child's own folder as the child sees it (sandbox.containment.INSIDE_WORK; this script
# imports nothing of the package): what /proc/PID/maps shows for its files, from outside too.
INSIDE_WORK = "/kw/work"
DELETED = b" (deleted)"  # what /proc/PID/maps adds to the path of an unlinked file
DELETED_EOL = DELETED + b"\n"
INTERVAL_S = 0.05  # between two looks at the folder (at 2 GB/s of writes: 100 MB past the limit at most)


class Over(Exception):
    """The folder holds more than allowed (or could not be read): the message says what."""


def folder_usage(
    root: str, limit_bytes: int, max_entries: int, seen: set | None = None, start: int = 0
) -> tuple[int, int]:
    """(start + bytes, entries) under `root`, not following links nor leaving its file system;
    raises Over as soon as either passes its limit or a folder cannot be read."""
    seen = set() if seen is None else seen
    total, entries = start, 0
    try:
        dev = os.lstat(root).st_dev
    except FileNotFoundError:
        return start, 0
    except OSError as exc:
        raise Over(f"{root} cannot be read ({exc.strerror})") from None
    todo = [root]
    while todo:
        folder = todo.pop()
        try:
            it = os.scandir(folder)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            raise Over(f"{folder} cannot be read ({exc.strerror})") from None
        with it:
            for entry in it:
                entries += 1
                if entries > max_entries:
                    raise Over(f"more than {max_entries} names")
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise Over(f"{entry.path} cannot be read ({exc.strerror})") from None
                if st.st_dev != dev:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    todo.append(entry.path)
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                total += max(st.st_size if stat.S_ISREG(st.st_mode) else 0, st.st_blocks * 512)
                if total > limit_bytes:
                    raise Over(f"more than {limit_bytes >> 20} MB")
    return total, entries


def unlinked_bytes(pids: Iterable[int], devs: set[int], seen: set, proc: str = "/proc") -> int:
    """Bytes of regular files on `devs` that the processes hold open with no name left."""
    total = 0
    for pid in pids:
        fd_dir = f"{proc}/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if st.st_nlink or st.st_dev not in devs or not stat.S_ISREG(st.st_mode):
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += max(st.st_size, st.st_blocks * 512)
    return total


def hard_fsize(pid: int | str, proc: str = "/proc") -> int | None:
    """The hard RLIMIT_FSIZE of a process (/proc/PID/limits); None when unlimited or unreadable."""
    try:
        with open(f"{proc}/{pid}/limits", "rb") as f:
            for line in f:
                if line.startswith(b"Max file size"):
                    hard = line.split()[4]
                    return None if hard == b"unlimited" else int(hard)
    except (OSError, ValueError, IndexError):
        pass
    return None


class FileBound:
    """The largest file the watched processes can have written: the largest finite hard
    RLIMIT_FSIZE seen on any of them while watched (0: none seen). A hard limit only comes down
    (no process of a sandbox may raise it), so a child that lowers its own after writing does not
    lower this; a process is read until a finite limit is seen on it (set once, early, by the
    sandbox: long before the candidate's code runs)."""

    def __init__(self, proc: str = "/proc") -> None:
        own = hard_fsize("self", proc)
        self.bytes = own or 0
        self._read: set[int] = set()

    def update(self, pids: Iterable[int], proc: str = "/proc") -> int:
        for pid in pids:
            if pid in self._read:
                continue
            got = hard_fsize(pid, proc)
            if got is not None:
                self.bytes = max(self.bytes, got)
                self._read.add(pid)
        return self.bytes


def mapped_bytes(
    pids: Iterable[int], folders: Iterable[str], seen: set, proc: str = "/proc", file_bound: int = 0
) -> int:
    """Bytes of the folders' files that the processes hold only through a mapping: closed and
    unlinked after mmap (libc's mmap keeps no descriptor, unlike Python's mmap module), so
    neither the walk nor /proc/PID/fd sees them, yet their blocks stay on the host's disk while
    mapped. A line of /proc/PID/maps whose path ends in " (deleted)" and lies in a folder, as the
    guard or the child sees it (INSIDE_WORK): the path, not the device, since /proc/PID/maps
    shows an overlayfs file under the device of its upper layer (and a file of the host's that
    is replaced while mapped, a library under a pip upgrade, lies on the same disk but not in a
    folder). Each file once, by (device, inode), with `seen` (the walk, the fds). Its size:
    st_size or st_blocks (the larger) of /proc/PID/map_files/RANGE where that can be read
    (CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE in the host's user namespace), else the larger of
    the largest end (offset + length) of its mappings and `file_bound` (FileBound: data written
    through a descriptor past what is mapped, before closing it, is on the disk too)."""
    prefixes = tuple({os.fsencode(os.path.join(os.path.normpath(f), "")) for f in (*folders, INSIDE_WORK)})
    extent: dict[tuple[int, int], int] = {}
    where: dict[tuple[int, int], str] = {}
    total = 0
    for pid in pids:
        try:
            with open(f"{proc}/{pid}/maps", "rb") as f:
                data = f.read()
        except OSError:
            continue
        # only the lines that end in " (deleted)", found by a scan in C (most processes have
        # none, or a few memfds): in bytes, cut at newlines only, since a name may hold any other
        # byte (maps escapes newlines alone; str.splitlines would cut at a carriage return too)
        at = data.find(DELETED_EOL)
        while at >= 0:
            line = data[data.rfind(b"\n", 0, at) + 1 : at + len(DELETED)]
            at = data.find(DELETED_EOL, at + len(DELETED_EOL))
            parts = line.split(None, 5)
            if len(parts) < 6 or not parts[5].startswith(prefixes):
                continue
            try:
                lo, hi = (int(x, 16) for x in parts[0].split(b"-"))
                major, minor = (int(x, 16) for x in parts[3].split(b":"))
                key = (os.makedev(major, minor), int(parts[4]))
                end = int(parts[2], 16) + hi - lo
            except ValueError:
                continue
            if key in seen:
                continue
            if end > extent.get(key, -1):
                extent[key] = end
                where.setdefault(key, f"{proc}/{pid}/map_files/{lo:x}-{hi:x}")  # maps pads, map_files not
    for key, end in extent.items():
        try:
            st = os.stat(where[key])
        except OSError:
            st = None
        if st is not None and stat.S_ISREG(st.st_mode):
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            size = max(st.st_size, st.st_blocks * 512)
        else:
            size = max(end, file_bound)
        seen.add(key)
        total += size
    return total


def usage(
    folders: list[str],
    limit_bytes: int,
    max_entries: int,
    pids: Callable[[], Iterable[int]],
    proc: str,
    file_bound: FileBound | None = None,
) -> int:
    """The folders' bytes plus the unlinked files the processes hold open or mapped; raises Over.
    `file_bound`: kept from one look to the next (FileBound), for what a mapping hides."""
    seen: set = set()
    total, devs = 0, set()
    for folder in folders:
        try:
            devs.add(os.lstat(folder).st_dev)
        except OSError:
            pass
        total, _ = folder_usage(folder, limit_bytes, max_entries, seen, total)
    watched = list(pids())
    bound = (file_bound or FileBound(proc)).update(watched, proc)
    total += unlinked_bytes(watched, devs, seen, proc)
    total += mapped_bytes(watched, folders, seen, proc, bound)
    if total > limit_bytes:
        raise Over(f"more than {limit_bytes >> 20} MB (files unlinked while open or mapped included)")
    return total


def empty(folder: str) -> None:
    """Remove what the folder holds (the folder itself stays: the evaluator removes it)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        path = os.path.join(folder, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass


def watch(
    pid: int,
    folders: list[str],
    limit_bytes: int,
    max_entries: int,
    interval: float,
    pids: Callable[[], Iterable[int]],
    proc: str = "/proc",
    kill: Callable[[], None] | None = None,
    say: Callable[[str], None] | None = None,
) -> int | None:
    """Wait for `pid` (our child) to end, watching the folders meanwhile. Returns its wait
    status, or None after it was killed for what the folders held (`kill`: how; SIGKILL to pid
    by default), the folders emptied and `say` told why."""
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    file_bound = FileBound(proc)
    try:
        while True:
            got, status = os.waitpid(pid, os.WNOHANG)
            if got == pid:
                return status
            started = time.monotonic()
            try:
                usage(folders, limit_bytes, max_entries, pids, proc, file_bound)
            except Over as exc:
                if say is not None:
                    say(
                        f"[sandbox] killed: its folder held {exc} (the limit on a sandbox's folder, "
                        f"{limit_bytes >> 20} MB and {max_entries} names; KERNELWRIGHT_WORK_MB)"
                    )
                (kill or (lambda: os.kill(pid, signal.SIGKILL)))()
                os.waitpid(pid, 0)
                for folder in folders:
                    empty(folder)
                return None
            # a slow walk (a folder of many names) is not repeated back to back
            pause = max(interval, 4 * (time.monotonic() - started))
            if pidfd is not None:
                select.select([pidfd], [], [], pause)
            else:
                time.sleep(pause)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def descendants(root: int, proc: str = "/proc") -> list[int]:
    """`root` and every process below it (through /proc/PID/task/TID/children)."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        try:
            tids = os.listdir(f"{proc}/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"{proc}/{pid}/task/{tid}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
            except (OSError, ValueError):
                pass
    return found


def end_by(sig: int) -> NoReturn:
    """Die of `sig` (no core file), so the parent reads the same status as from the child."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)


def main(argv: list[str]) -> None:
    """workguard.py LIMIT_BYTES MAX_ENTRIES INTERVAL FOLDER... -- COMMAND..."""
    import ctypes

    sep = argv.index("--")
    limit, entries, interval, *folders = argv[:sep]
    command = argv[sep + 1 :]
    parent = os.getppid()
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the evaluator
    if os.getppid() != parent:
        os._exit(1)
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(command[0], command)
        finally:
            os._exit(127)

    def forward(sig: int, _frame: object) -> None:
        os.kill(pid, sig)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)

    def say(line: str) -> None:
        try:
            os.write(2, (line + "\n").encode())
        except OSError:
            pass

    status = watch(
        pid,
        folders,
        int(limit),
        int(entries),
        float(interval),
        lambda: descendants(pid),
        say=say,
    )
    if status is None:
        end_by(GUARD_EXIT_SIGNAL)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        end_by(-code)
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
