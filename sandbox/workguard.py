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
counts in full from the start) and the regular files that the child's processes hold open after
unlinking them. Past the limit, or past `max_entries` names, it kills the child, empties the
folder and ends as killed by SIGXFSZ, after a line in the child's log saying why. A folder it
cannot read counts as past the limit: fail closed. What it cannot see: descriptors of unlinked
files in flight in a unix socket (bounded by RLIMIT_NOFILE times RLIMIT_FSIZE).

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


def usage(folders: list[str], limit_bytes: int, max_entries: int, pids: Callable[[], Iterable[int]], proc: str) -> int:
    """The folders' bytes plus the unlinked files the processes hold open; raises Over."""
    seen: set = set()
    total, devs = 0, set()
    for folder in folders:
        try:
            devs.add(os.lstat(folder).st_dev)
        except OSError:
            pass
        total, _ = folder_usage(folder, limit_bytes, max_entries, seen, total)
    total += unlinked_bytes(pids(), devs, seen, proc)
    if total > limit_bytes:
        raise Over(f"more than {limit_bytes >> 20} MB (files unlinked while open included)")
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
    try:
        while True:
            got, status = os.waitpid(pid, os.WNOHANG)
            if got == pid:
                return status
            started = time.monotonic()
            try:
                usage(folders, limit_bytes, max_entries, pids, proc)
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
