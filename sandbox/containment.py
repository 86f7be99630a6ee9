"""The wall around untrusted code: every process that runs code from a user or a model starts
inside bubblewrap (https://github.com/containers/bubblewrap).

What a sandboxed process gets (docs/security.md says what each layer stops):
- new user, PID, mount, network, IPC, UTS and cgroup namespaces; no capabilities; seccomp
  (sandbox.seccomp); a non-root uid inside (65534), and outside too: when the service runs as
  root, bubblewrap itself is started under a throwaway uid;
- a root file system that holds only the system's /usr, a few files of /etc, the Python
  runtime and site-packages (read-only), the `sandbox` package (read-only), its own folder
  (/kw/work, bounded in total by sandbox.workguard) and a private /tmp and /dev/shm (tmpfs of
  `Limits.tmpfs_mb` each); /dev/nvidia* only on the cuda backend; a /proc of its own;
- death with its parent (--die-with-parent) and, being PID 1's children in a namespace of their
  own, every process it starts dies with it.

Two ways in, one wall:
- `popen()` runs one program (a compiler, `python -m sandbox.worker ROLE`, the policy's
  analysis) in its own bubblewrap sandbox;
- the zygote (sandbox.zygote) runs inside one bubblewrap sandbox per evaluator and forks each
  evaluation child; `isolate_forked_child()` then gives that child user, PID, mount, network,
  IPC and UTS namespaces of its own inside the zygote's, a private /tmp and /dev/shm, only its
  own folder, no capabilities and the full seccomp filter, so children of one zygote can
  neither see nor signal each other. bubblewrap is the outer wall; this is the partition
  inside it (a fork keeps torch imported: 5 ms instead of 2 s per child).

Fail closed: where bubblewrap cannot start a sandbox, `require()` raises and nothing runs,
unless KERNELWRIGHT_UNCONTAINED=1 (one person's own machine), which every result reports.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import devlock, seccomp, workguard

if TYPE_CHECKING:
    from .limits import Limits

OPT_OUT_ENV = "KERNELWRIGHT_UNCONTAINED"
BWRAP_ENV = "KERNELWRIGHT_BWRAP"
INSIDE_UID = 65534
INSIDE_WORK = "/kw/work"  # the child's own folder, as it sees it
INSIDE_JOBS = "/kw/jobs"  # the zygote's folder of children's folders (hidden from each child)
REPO_ROOT = Path(__file__).resolve().parent.parent
HOW_TO_ENABLE = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) and allow user namespaces "
    "(sysctl user.max_user_namespaces > 0; on Ubuntu 24.04 also kernel.apparmor_restrict_unprivileged_userns=0). "
    f"On your own machine only, {OPT_OUT_ENV}=1 runs untrusted code without containment."
)

_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE, MS_SLAVE = 2, 4, 8, 4096, 16384, 1 << 18, 1 << 19
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 1, 24, 47, 4


class Unavailable(RuntimeError):
    """Raised instead of running untrusted code without its wall."""


@dataclass(frozen=True)
class Status:
    ok: bool
    mode: str  # "bubblewrap" | "uncontained" | "unavailable"
    detail: str
    how_to_enable: str = HOW_TO_ENABLE

    @property
    def label(self) -> str:
        """What a result evaluated under this status says about it."""
        if self.mode == "uncontained":
            return f"uncontained ({OPT_OUT_ENV}=1: untrusted code ran without a sandbox)"
        return self.mode

    def to_dict(self) -> dict:
        return asdict(self) | {"label": self.label}


def opted_out() -> bool:
    return os.environ.get(OPT_OUT_ENV, "").strip().lower() in ("1", "true", "yes")


def bwrap_binary() -> str | None:
    path = os.environ.get(BWRAP_ENV) or shutil.which("bwrap")
    return path if path and os.access(path, os.X_OK) else None


# ---- what the sandbox sees ------------------------------------------------------------


def _system_args() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        top = Path("/") / name
        if top.is_symlink():
            args += ["--symlink", os.readlink(top), str(top)]
        elif top.is_dir():
            args += ["--ro-bind", str(top), str(top)]
    for name in (
        "ld.so.cache",
        "ld.so.conf",
        "ld.so.conf.d",
        "alternatives",
        "passwd",
        "group",
        "nsswitch.conf",
        "localtime",
        "hosts",
    ):
        if os.path.lexists(f"/etc/{name}"):
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    return args


@functools.lru_cache(maxsize=2)
def runtime_paths(with_agent: bool = False) -> tuple[str, ...]:
    """Read-only folders the Python side needs: the interpreter's prefixes, site-packages, our
    `sandbox` package (and `agent`, for the policy's analysis), CUDA. Not the project tree.
    Computed once per process: the zygote computes it before forking, so no child pays for it."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    # package folders only: a script's own folder on sys.path (/tmp, a home) is not the runtime
    paths.update(e for e in sys.path if os.path.basename(e) in ("site-packages", "dist-packages") and os.path.isdir(e))
    paths.add(str(REPO_ROOT / "sandbox"))
    if with_agent:
        paths.add(str(REPO_ROOT / "agent"))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            paths.add(os.environ[var])
    paths.update(p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p)
    paths.update(_toolchain_prefixes())
    paths.update(glob.glob("/usr/local/cuda*"))
    real = {os.path.realpath(p) for p in paths if os.path.exists(p)}
    real = {p for p in real if not p.startswith("/usr/") and p != "/usr"}
    # drop folders inside another one already bound
    return tuple(sorted(p for p in real if not any(p != q and p.startswith(q + "/") for q in real)))


def _toolchain_prefixes() -> set[str]:
    """Where the compilers live when not under /usr (the H200 image's CC is /opt/gcc/bin/gcc):
    inductor, triton and load_inline run them inside the sandbox."""
    found = set()
    names = [os.environ.get(v, "").split()[0] for v in ("CC", "CXX", "CUDAHOSTCXX") if os.environ.get(v, "").strip()]
    for name in [*names, "gcc", "g++", "cc", "c++", "nvcc", "ninja"]:
        path = shutil.which(name)
        if path:
            real = os.path.realpath(path)
            found.add(os.path.dirname(os.path.dirname(real)))  # .../bin/gcc -> ...
    return {p for p in found if p not in ("/", "/usr")}


def gpu_devices() -> list[str]:
    return sorted(d for d in glob.glob("/dev/nvidia*") if stat.S_ISCHR(os.stat(d).st_mode)) + sorted(
        glob.glob("/dev/nvidia-caps/*")
    )


def _limits(limits: Limits | None) -> Limits:
    from .limits import Limits

    return limits if limits is not None else Limits()


def guard_args(folders: Iterable[str], limits: Limits | None = None) -> list[str]:
    """The command prefix that runs what follows under sandbox.workguard, watching `folders`."""
    lim = _limits(limits)
    return [
        sys.executable,
        "-S",
        str(Path(workguard.__file__).resolve()),
        str(lim.work_mb << 20),
        str(lim.work_entries),
        str(workguard.INTERVAL_S),
        *folders,
        "--",
    ]


def bwrap_args(
    binds: Iterable[tuple[str, str]] = (),
    *,
    gpu: bool,
    with_agent: bool = False,
    seccomp_fd: int | None = None,
    zygote: bool = False,
    chdir: str = INSIDE_WORK,
    limits: Limits | None = None,
) -> list[str]:
    """bubblewrap's arguments for one sandbox; `binds` are (host folder, inside path), writable.
    zygote: the sandbox forks children that make namespaces of their own (isolate_forked_child),
    which bound their folders themselves; otherwise the writable folders are bounded in total by
    a sandbox.workguard that starts bubblewrap (`limits`: the sizes; default Limits())."""
    binds = list(binds)
    lim = _limits(limits)
    tmpfs = str(lim.tmpfs_mb << 20)
    args = [
        *([] if zygote or not binds else guard_args([host for host, _ in binds], lim)),
        bwrap_binary() or "bwrap",
        "--unshare-all",
        "--unshare-user",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--uid",
        str(INSIDE_UID),
        "--gid",
        str(INSIDE_UID),
        "--hostname",
        "sandbox",
    ]
    if not zygote:
        args += ["--disable-userns"]
    # /tmp first: a runtime or a clone of the project may live below it. Sized: tmpfs pages are
    # host memory that RLIMIT_AS does not count (--dev's own /dev/shm would be unsized)
    args += _system_args() + ["--proc", "/proc", "--dev", "/dev", "--size", tmpfs, "--tmpfs", "/dev/shm"]
    args += ["--size", tmpfs, "--tmpfs", "/tmp", "--dir", "/kw"]
    for path in runtime_paths(with_agent):
        args += ["--ro-bind", path, path]
    # No device lock folder: a descriptor of a lock file, even read-only, lets its holder flock
    # it and stall every other evaluation's timing window (red team lock_hang); the parent takes
    # the lock for its children (sandbox.devlock.ChildHold)
    if gpu:
        for dev in gpu_devices():
            args += ["--dev-bind", dev, dev]
        args += ["--ro-bind-try", "/sys", "/sys"]
    else:
        args += ["--ro-bind-try", "/sys/devices/system/cpu", "/sys/devices/system/cpu"]
    for host, inside in binds:
        args += ["--bind", host, inside]
    if zygote:
        args += ["--dir", INSIDE_WORK]
    args += _hide_lock_dir(args)
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    # the root itself is a tmpfs of bubblewrap's: read-only, so only /tmp and the binds take writes
    return args + ["--remount-ro", "/", "--chdir", chdir, "--"]


def _mount_points(args: list[str]) -> list[str]:
    """Where bubblewrap's arguments bind host folders inside the sandbox."""
    out = []
    for i, arg in enumerate(args):
        if arg in ("--ro-bind", "--bind", "--ro-bind-try", "--dev-bind", "--dev-bind-try") and i + 2 < len(args):
            out.append(args[i + 2])
    return out


def _hide_lock_dir(args: list[str]) -> list[str]:
    """The device lock folder (sandbox.devlock) is bound into no sandbox; where it lies below a
    folder that is (KERNELWRIGHT_LOCK_DIR under the runtime, say), an empty read-only tmpfs
    covers it."""
    folder = devlock.lock_dir()
    names = {os.path.abspath(folder), os.path.realpath(folder)}
    for point in _mount_points(args):
        if any(n == point or n.startswith(point.rstrip("/") + "/") for n in names):
            return ["--size", "4096", "--tmpfs", os.path.abspath(folder), "--remount-ro", os.path.abspath(folder)]
    return []


def seccomp_fd(allow_namespaces: bool = False) -> int:
    """A file descriptor holding the compiled filter, for `bwrap --seccomp FD` (read once)."""
    fd = os.memfd_create("kw-seccomp", 0)
    os.write(fd, seccomp.program(allow_namespaces))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


# ---- starting bubblewrap as a throwaway uid when we are root ---------------------------


def _blocked_ancestor(path: str, uid: int) -> str | None:
    """The highest folder above `path` that `uid` cannot pass through (e.g. /root, 0700)."""
    for folder in reversed(Path(path).parents):
        st = os.stat(folder)
        if st.st_uid != uid and not st.st_mode & stat.S_IXOTH:
            return str(folder)
    return None


def reachable_view(paths: Iterable[str], uid: int) -> list[tuple[str, list[str]]]:
    """Plan for `_make_reachable`: per folder the uid cannot pass through, the paths below it
    to bring back. Computed in the parent; only system calls run between fork and exec."""
    plan: dict[str, list[str]] = {}
    for path in paths:
        blocked = _blocked_ancestor(path, uid)
        if blocked is not None:
            plan.setdefault(blocked, []).append(path)
    return sorted(plan.items())


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(text: str | None) -> bytes | None:
        return text.encode() if text is not None else None

    _check(_libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)), f"mount {dst}")


def _cover(folder: str, keep: Iterable[str], mode: str, size_mb: int | None = None) -> None:
    """Mount a fresh tmpfs over `folder` (of `size_mb` at most), then bind back just the paths
    in `keep` below it."""
    fds = [(os.open(p, os.O_PATH), p) for p in keep]  # opened before the cover hides them
    size = f",size={size_mb}m" if size_mb else ""
    _mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode}{size}")
    for fd, path in fds:
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "w").close()
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        os.close(fd)


def _make_reachable(plan: list[tuple[str, list[str]]]) -> None:
    """In a private mount namespace of the forked child (root only): cover each blocked folder
    with a tmpfs that anyone may pass through and bind back just the paths the sandbox needs.
    The host's own view never changes."""
    if not plan:
        return
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, MS_REC | MS_SLAVE)
    for blocked, paths in plan:
        _cover(blocked, paths, "0755")


def _drop_to(uid: int) -> None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def host_uid_for_sandbox() -> int | None:
    """The uid bubblewrap runs as: a throwaway one when we are root, else our own (None)."""
    if os.geteuid() != 0:
        return None
    import random

    return random.SystemRandom().randrange(1_000_000, 2_000_000_000)


def preexec(
    uid: int | None, plan: list[tuple[str, list[str]]], then: Callable[[], None] | None = None
) -> Callable[[], None]:
    """What runs between fork and exec of bubblewrap: our own setup (`then`: session, rlimits,
    cgroup), the reachable view and the drop to the sandbox's host uid."""

    def setup() -> None:
        if then is not None:
            then()
        if uid is not None:
            _make_reachable(plan)
            _drop_to(uid)

    return setup


def sources_of(args: list[str]) -> list[str]:
    """Host paths that bubblewrap binds (it must be able to reach them as the sandbox uid)."""
    out = []
    for i, arg in enumerate(args):
        if arg in ("--ro-bind", "--bind", "--ro-bind-try", "--dev-bind") and i + 1 < len(args):
            out.append(args[i + 1])
    return out


# ---- the status every result and /health report ----------------------------------------

_PROBE = "import os,sys; sys.stdout.write(str(os.getuid()) + ' ' + str(len([p for p in os.listdir('/proc') if p.isdigit()])))"


@functools.lru_cache(maxsize=4)
def _probe(gpu: bool) -> Status:
    binary = bwrap_binary()
    if binary is None:
        return Status(False, "unavailable", f"bubblewrap not found ({os.environ.get(BWRAP_ENV) or 'bwrap on PATH'})")
    with tempfile.TemporaryDirectory(prefix="kw-probe-") as work:
        uid = host_uid_for_sandbox()
        if uid is not None:
            os.chown(work, uid, uid)
        fd = seccomp_fd()
        try:
            args = bwrap_args([(work, INSIDE_WORK)], gpu=gpu, seccomp_fd=fd) + [sys.executable, "-S", "-c", _PROBE]
            proc = subprocess.run(
                args,
                capture_output=True,
                text=True,
                timeout=60,
                pass_fds=(fd,),
                preexec_fn=preexec(uid, reachable_view(sources_of(args), uid) if uid else []),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return Status(False, "unavailable", f"bubblewrap could not start a sandbox: {exc}")
        finally:
            os.close(fd)
    if proc.returncode != 0 or proc.stdout.split()[:1] != [str(INSIDE_UID)]:
        why = (proc.stderr or proc.stdout).strip()[-500:]
        return Status(False, "unavailable", f"bubblewrap could not start a sandbox (exit {proc.returncode}): {why}")
    return Status(
        True,
        "bubblewrap",
        f"bubblewrap {binary}: uid {INSIDE_UID} inside"
        + (", a throwaway host uid outside (the service runs as root)" if uid is not None else "")
        + ", own user/pid/mount/net/ipc/uts namespaces, no capabilities, seccomp",
    )


def status(gpu: bool | None = None) -> Status:
    """Can untrusted code run here, and how. Probed once per process (a real sandbox started)."""
    if opted_out():
        return Status(True, "uncontained", f"{OPT_OUT_ENV}=1: untrusted code runs without a sandbox on this machine")
    if not seccomp.supported():
        return Status(False, "unavailable", f"no seccomp filter for this architecture ({os.uname().machine})")
    if gpu is None:
        gpu = bool(gpu_devices())
    return _probe(gpu)


def require(gpu: bool) -> Status:
    st = status(gpu)
    if not st.ok:
        raise Unavailable(f"the sandbox is unavailable, so untrusted code was not run: {st.detail}. {st.how_to_enable}")
    return st


# ---- inside the zygote: one forked child's own namespaces ------------------------------


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _drop_capabilities() -> None:
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:  # EINVAL: past the last cap
            break
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3, all zero
    _check(_libc.capset(ctypes.byref(header), data), "capset")


def _pass_status(fd: int, status: int) -> None:
    os.write(fd, status.to_bytes(4, "little", signed=True))


def _end_like(status: int) -> None:
    """Exit as the waited-for process did: the same code, or the same signal."""
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 128 - code)


def _watch_work(pid1: int, limits: Limits, log_fd: int | None, host_proc: int) -> int | None:
    """M's wait for C: the child's folder bounded meanwhile (sandbox.workguard). The wait status,
    or None when the child was killed for what its folder held."""

    def pids() -> list[int]:  # the child's PID namespace, once C has mounted its /proc over ours
        try:
            if os.stat("/proc").st_dev == host_proc:
                return []
            return [int(p) for p in os.listdir("/proc") if p.isdigit()]
        except OSError:
            return []

    def say(line: str) -> None:
        if log_fd is not None:
            try:
                os.write(log_fd, (line + "\n").encode())
            except OSError:
                pass

    return workguard.watch(
        pid1, [INSIDE_WORK], limits.work_mb << 20, limits.work_entries, workguard.INTERVAL_S, pids, say=say
    )


def isolate_forked_child(job_dir: str, limits: Limits | None = None, log_fd: int | None = None) -> None:
    """Called in a process the zygote just forked; returns only in the process that runs the
    worker, which then sees `job_dir` (a folder under INSIDE_JOBS) at INSIDE_WORK and nothing
    of its siblings. Three processes:
      M, the one the zygote forked: makes the namespaces, reports how W ended, dies with the zygote;
        meanwhile it bounds what the child keeps in its folder (`limits.work_mb`, sandbox.workguard;
        killed past it, with a line on `log_fd`), from outside the child's PID namespace;
      C, PID 1 of the new PID namespace: mounts its /proc, reaps orphans, dies with M, and
        takes every process of the namespace with it;
      W, the worker: no capabilities, the full seccomp filter, runs the code.
    /tmp and /dev/shm are private tmpfs of `limits.tmpfs_mb` each."""
    lim = _limits(limits)
    libc_prctl = _libc.prctl
    zygote = os.getppid()
    libc_prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != zygote:
        os._exit(1)
    uid, gid = os.getuid(), os.getgid()
    _check(
        _libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS),
        "unshare",
    )
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount(job_dir, INSIDE_WORK, None, MS_BIND | MS_REC)
    _mount("tmpfs", INSIDE_JOBS, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0555")
    shared = runtime_paths()  # a clone of the project under /tmp; never the device locks (sandbox.devlock)
    _cover("/tmp", [p for p in shared if p.startswith("/tmp/") and os.path.exists(p)], "1777", lim.tmpfs_mb)
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={lim.tmpfs_mb}m")
    if lim.cpus:  # M and C off the CPUs the worker is confined to (limits.confine, in W)
        others = os.sched_getaffinity(0) - set(lim.cpus)
        if others:
            os.sched_setaffinity(0, others)
    host_proc = os.stat("/proc").st_dev
    alive_r, alive_w = os.pipe()  # M holds the write end: C sees EOF when M is gone
    status_r, status_w = os.pipe()
    pid1 = os.fork()
    if pid1 != 0:  # M
        os.close(alive_r)
        os.close(status_w)
        st = _watch_work(pid1, lim, log_fd, host_proc)
        if st is None:  # killed for what its folder held
            workguard.end_by(workguard.GUARD_EXIT_SIGNAL)
        data = os.read(status_r, 4)
        _end_like(int.from_bytes(data, "little", signed=True) if len(data) == 4 else st)
    os.close(alive_w)
    os.close(status_r)
    libc_prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    import select

    if select.select([alive_r], [], [], 0)[0]:  # EOF already: M died before PDEATHSIG was set
        os._exit(1)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _libc.sethostname(b"sandbox", 7)
    worker = os.fork()
    if worker != 0:  # C: PID 1 until the worker ends, then the namespace goes with it
        os.close(alive_r)
        while True:
            try:
                pid, st = os.waitpid(-1, 0)
            except ChildProcessError:
                os._exit(1)
            if pid == worker:
                _pass_status(status_w, st)
                os._exit(0)
    os.close(alive_r)
    os.close(status_w)
    _drop_capabilities()
    seccomp.install()
