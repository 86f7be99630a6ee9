"""Run a command as an unprivileged system user, from root, without changing host permissions.

CI runs as root, but the sandbox must hold for a service run by an ordinary user too (issue 16),
so the escape tests run a second time as the system user `kw-escape`:

    .venv/bin/python -m tests.support.unprivileged -- .venv/bin/python -m pytest tests/sandbox/escape -p no:cacheprovider

(tests/sandbox/escape/test_unprivileged.py does exactly that.) The user is created on first use
(useradd --system, with a home folder under /home; idempotent). The difficulty is the Python
runtime: the virtual environment's interpreter links to a pyenv under /root, mode 0700, which
another user may not enter. So the command runs in a private mount namespace of its own (made a
slave of the host's, so nothing propagates back) in which each folder the user cannot pass
through on the way to the runtime is covered by a tmpfs (mode 0755), and just the runtime's paths
are bound back onto it, through O_PATH descriptors opened before the tmpfs hid them. Then the
process drops to the user (its groups from /etc/group) and executes the command. The host's view
of /root and its permissions never change. (sandbox.containment uses the same trick for its own
sandboxes; this harness keeps a copy of its own so that it does not depend on the code it tests.)
"""

from __future__ import annotations

import argparse
import ctypes
import grp
import os
import pwd
import shutil
import stat
import subprocess
import sys
from pathlib import Path

USER = "kw-escape"
HOME_BASE = Path("/home")
PASS_ENV = (
    "LANG",
    "LC_ALL",
    "TERM",
    "TZ",
    "REDIS_URL",
    "CUDA_VISIBLE_DEVICES",
    "KERNELWRIGHT_BACKEND",
    "KERNELWRIGHT_FORCE_CPU",
    "KERNELWRIGHT_BWRAP",
)

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_SLAVE = 2, 4, 4096, 16384, 1 << 19
_libc = ctypes.CDLL(None, use_errno=True)


def why_unavailable() -> str | None:
    """None when this process can run commands as the user, else why not."""
    if os.geteuid() != 0:
        return "not root: cannot create a user or switch to one"
    for tool in ("useradd",):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    return None


def ensure_user(name: str = USER) -> pwd.struct_passwd:
    """The system user `name`, created (with its group and home folder) if it does not exist yet."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        home = HOME_BASE / name
        subprocess.run(
            [
                "useradd",
                "--system",
                "--user-group",
                "--create-home",
                "--home-dir",
                str(home),
                "--shell",
                "/usr/sbin/nologin",
                name,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        entry = pwd.getpwnam(name)
    home = Path(entry.pw_dir)
    if not home.is_dir():
        home.mkdir(parents=True, mode=0o755)
    if home.stat().st_uid != entry.pw_uid:
        os.chown(home, entry.pw_uid, entry.pw_gid)
    return entry


def _can_pass(st: os.stat_result, uid: int, gids: set[int]) -> bool:
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid in gids:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def runtime_paths() -> list[str]:
    """What the interpreter needs: its prefixes and the folder its binary really lives in."""
    paths = {sys.base_prefix, sys.base_exec_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))}
    return sorted(os.path.realpath(p) for p in paths if os.path.exists(p))


def reach_plan(paths: list[str], uid: int, gids: set[int]) -> dict[str, list[str]]:
    """Per folder that the user cannot pass through, the paths below it to bind back."""
    plan: dict[str, list[str]] = {}
    for path in paths:
        for folder in reversed(Path(path).parents):
            if not _can_pass(os.stat(folder), uid, gids):
                plan.setdefault(str(folder), [])
                if path not in plan[str(folder)]:
                    plan[str(folder)].append(path)
                break
    return {
        folder: [p for p in ps if not any(p != q and p.startswith(q + "/") for q in ps)] for folder, ps in plan.items()
    }


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _enc(s: str | None) -> bytes | None:
    return s.encode() if s is not None else None


def _mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(_enc(src), _enc(dst), _enc(fstype), flags, _enc(data)), f"mount {dst}")


def enter_private_view(plan: dict[str, list[str]]) -> None:
    """In a new mount namespace of this process: cover each blocked folder, bind back its paths."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, MS_REC | MS_SLAVE)
    for blocked, paths in sorted(plan.items()):
        fds = [(os.open(p, os.O_PATH), p) for p in paths]  # before the tmpfs hides them
        _mount("tmpfs", blocked, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
        for fd, path in fds:
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(path, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "w").close()
            _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            os.close(fd)


def user_env(entry: pwd.struct_passwd, base: dict[str, str] | None = None) -> dict[str, str]:
    base = os.environ if base is None else base
    env = {k: base[k] for k in PASS_ENV if k in base}
    env.update(
        HOME=entry.pw_dir,
        USER=entry.pw_name,
        LOGNAME=entry.pw_name,
        PYTHONDONTWRITEBYTECODE="1",
        PATH=os.path.dirname(sys.executable) + ":/usr/local/bin:/usr/bin:/bin",
    )
    return env


def exec_as(entry: pwd.struct_passwd, argv: list[str], env: dict[str, str]) -> None:
    """Replace this (root, single-threaded) process with `argv` run as the user. Never returns."""
    gids = {entry.pw_gid} | {g.gr_gid for g in grp.getgrall() if entry.pw_name in g.gr_mem}
    enter_private_view(reach_plan(runtime_paths(), entry.pw_uid, gids))
    os.setgroups(sorted(gids))
    os.setresgid(entry.pw_gid, entry.pw_gid, entry.pw_gid)
    os.setresuid(entry.pw_uid, entry.pw_uid, entry.pw_uid)
    os.execvpe(argv[0], argv, env)


def command(argv: list[str], user: str = USER) -> list[str]:
    """The command line that runs `argv` as `user` (for subprocess, from a root process)."""
    return [sys.executable, "-m", "tests.support.unprivileged", "--user", user, "--", *argv]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--user", default=USER)
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        ap.error("no command given")
    why = why_unavailable()
    if why:
        print(f"tests.support.unprivileged: {why}", file=sys.stderr)
        return 2
    entry = ensure_user(args.user)
    exec_as(entry, argv, user_env(entry))
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
