"""Child processes that run user code (the task's and the candidate's) away from the caller.

Each child gets: its own session (so the whole group can be killed), a fresh working
directory, an environment with no secrets, rlimits (file size caps every output file including
stdout/stderr, CPU time, address space on the CPU backend, core dumps off), a network namespace
where the host allows one, and - when we run as root - a throwaway uid, which makes
RLIMIT_NPROC effective (root ignores it), keeps the child out of the parent's and the other
child's memory and files, and lets us kill every process it spawned, even ones that left the
session. What could be applied is recorded in `Isolation` and reported with each result.
"""

from __future__ import annotations

import atexit
import ctypes
import dataclasses
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import channel, containment, devlock, hostfs
from .limits import Limits, hardening

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000

# Environment: an allowlist, then a denylist on top so that nothing secret-looking survives.
_ENV_ALLOW = re.compile(
    r"^(PATH|LANG|LANGUAGE|LC_[A-Z]+|TZ|TERM|CUDA_HOME|CUDA_PATH|CUDA_VISIBLE_DEVICES|CUDA_DEVICE_ORDER|"
    r"NVIDIA_[A-Z_]+|LD_LIBRARY_PATH|TORCH_CUDA_ARCH_LIST|CC|CXX|NVCC_[A-Z_]+|KERNELWRIGHT_FORCE_CPU|"
    # where triton finds libcuda and its CUDA tools on hosts whose `ldconfig -p` does not list them
    r"TRITON_(LIBCUDA_PATH|PTXAS_PATH|CUOBJDUMP_PATH|NVDISASM_PATH|CUDACRT_PATH|CUDART_PATH))$"
)
_ENV_DENY = re.compile(
    r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION|DATABASE|REDIS|OPENAI|AWS_|_DSN)", re.I
)


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if _ENV_ALLOW.match(k) and not _ENV_DENY.search(k)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    # torch's CPU allocator asks for 2 MB pages for big tensors: receiving a 67 MB tensor into
    # fresh memory was page-fault bound (1.9 -> 4.5 GB/s measured on the development machine)
    env.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    venv_bin = str(Path(sys.executable).parent)
    if venv_bin not in env["PATH"].split(":"):
        env["PATH"] = venv_bin + ":" + env["PATH"]
    env.update(extra or {})
    return env


@dataclass
class Isolation:
    """What the host let us apply to a child; reported in each result's audit."""

    uid: int | None = None
    network_namespace: bool = False
    nproc_enforced: bool = False
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        parts = [f"uid {self.uid}" if self.uid is not None else "same uid as the evaluator"]
        parts.append("no network (own namespace)" if self.network_namespace else "network namespace unavailable")
        parts.append("process limit enforced" if self.nproc_enforced else "process limit by group kill only")
        return ", ".join(parts + self.notes)


_libc = ctypes.CDLL(None, use_errno=True)
_netns_support: dict[bool, bool] = {}


def _can_unshare(flags: int) -> bool:
    """Probe in a forked helper, so the parent's own namespaces never change."""
    code = f"import ctypes,sys;libc=ctypes.CDLL(None,use_errno=True);sys.exit(0 if libc.unshare({flags})==0 else 1)"
    try:
        return subprocess.run([sys.executable, "-S", "-c", code], timeout=20, env=scrubbed_env()).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def netns_available() -> bool:
    root = os.geteuid() == 0
    if root not in _netns_support:
        flags = CLONE_NEWNET if root else (CLONE_NEWUSER | CLONE_NEWNET)
        _netns_support[root] = _can_unshare(flags)
    return _netns_support[root]


def _world_readable_path(path: Path) -> bool:
    """True if an unprivileged uid can reach `path` (dirs o+x, file o+r)."""
    try:
        path = path.resolve()
        for parent in list(path.parents)[::-1]:
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
        mode = os.stat(path).st_mode
        return bool(mode & stat.S_IROTH) and (not stat.S_ISDIR(mode) or bool(mode & stat.S_IXOTH))
    except OSError:
        return False


_uid_drop_ok: bool | None = None


def _gpu_devices_world_accessible() -> bool:
    """A throwaway uid can use the GPU only if the NVIDIA device files are open to others."""
    import glob

    devices = glob.glob("/dev/nvidia*")
    if not devices:
        return False
    for dev in devices:
        try:
            mode = os.stat(dev).st_mode
        except OSError:
            return False
        if stat.S_ISCHR(mode) and (mode & 0o006) != 0o006:
            return False
    return True


def uid_drop_available() -> bool:
    """Root can drop to a throwaway uid only if that uid can still read python, torch and us."""
    global _uid_drop_ok
    if os.environ.get("KERNELWRIGHT_NO_UID_DROP"):
        return False
    if os.geteuid() != 0:
        return False
    if _uid_drop_ok is None:
        import importlib.util

        paths = [
            Path(sys.executable),
            Path(__file__).parent / "__init__.py",
            Path(__file__).parent / "runtime" / "kwrt.py",
        ]
        torch_spec = importlib.util.find_spec("torch")
        if torch_spec and torch_spec.origin:
            paths.append(Path(torch_spec.origin))
        _uid_drop_ok = all(_world_readable_path(p) for p in paths)
    return _uid_drop_ok


_cgroup_root: Path | None = None
_cgroup_probed = False


def cgroup_root() -> Path | None:
    """A pids cgroup folder we may create children in (v1 `pids` hierarchy or v2 with the pids
    controller), or None. Root ignores RLIMIT_NPROC, but not a cgroup's pids.max."""
    global _cgroup_root, _cgroup_probed
    if _cgroup_probed:
        return _cgroup_root
    _cgroup_probed = True
    if os.environ.get("KERNELWRIGHT_NO_CGROUP"):
        return None
    candidates = [Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")]
    for base in candidates:
        try:
            if base == Path("/sys/fs/cgroup") and "pids" not in (base / "cgroup.controllers").read_text():
                continue
            root = base / "kernelwright"
            root.mkdir(exist_ok=True)
            if base == Path("/sys/fs/cgroup"):
                (root / "cgroup.subtree_control").write_text("+pids")
            probe = root / f"probe-{os.getpid()}"
            probe.mkdir(exist_ok=True)
            ok = (probe / "pids.max").exists()
            probe.rmdir()
            if ok:
                _cgroup_root = root
                _remove_stale_cgroups(root)
                break
        except OSError:
            continue
    return _cgroup_root


def _remove_stale_cgroups(root: Path) -> None:
    """Empty cgroups left by evaluators that were killed before cleaning up."""
    for path in root.glob("c*-*"):
        try:
            owner = int(path.name[1:].split("-", 1)[0])
            if not os.path.exists(f"/proc/{owner}") and not (path / "cgroup.procs").read_text().strip():
                path.rmdir()
        except (OSError, ValueError):
            continue


class Cgroup:
    """One evaluation child's pids cgroup: a hard process/thread cap and a way to find (and
    kill) every process it started, whatever session or uid they moved to."""

    def __init__(self, limit: int, enabled: bool = True):
        root = cgroup_root() if enabled else None
        self.path: Path | None = None
        if root is None:
            return
        try:
            path = root / f"c{os.getpid()}-{random.SystemRandom().randrange(1 << 40):x}"
            path.mkdir()
            (path / "pids.max").write_text(str(limit))
            self.path = path
        except OSError:
            self.path = None

    def pids(self) -> list[int]:
        if self.path is None:
            return []
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def remove(self) -> None:
        if self.path is None:
            return
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for _ in range(100):
            pids = [p for p in self.pids() if _alive(p)]
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)
        try:
            self.path.rmdir()
        except OSError:
            pass


def _alive(pid: int) -> bool:
    """False for exited-but-unreaped (zombie) processes: they hold no resources."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _processes_of(uid: int | None, sid: int | None) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            if uid is not None:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    found.append(pid)
            elif sid is not None:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[3]) == sid:
                    found.append(pid)
        except (OSError, ValueError, IndexError):
            continue
    return found


def kill_all(pgid: int, uid: int | None, cgroup: Cgroup | None = None) -> None:
    """Kill the child's group and, with a private uid, every process of that uid (fork bombs
    that called setsid included), and every process of its cgroup. Repeated until none is left,
    since a bomb forks while we kill."""
    if cgroup is not None:
        cgroup.remove()
    for _ in range(50):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
        pids = _processes_of(uid, None if uid is not None else pgid)
        pids = [p for p in pids if p != os.getpid() and _alive(p)]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.02)


def new_uid() -> int:
    return random.SystemRandom().randrange(1_000_000, 2_000_000_000)


class Child:
    """A Python child running `python -m sandbox.worker ROLE` with a message channel.

    Contained (the default): forked by the evaluator's zygote inside its bubblewrap sandbox,
    or (zygote off) started by bubblewrap itself; either way it sees its folder at
    containment.INSIDE_WORK. Uncontained (KERNELWRIGHT_UNCONTAINED=1 only): the older
    hardening of `limits.hardening`, labelled as such in every result."""

    # A CUDA child creates its context at start (worker.early_device_init), before any message:
    # its parent holds the device shared from just before the start for this long, or until the
    # first message, so a spare's context is never created beside another evaluation's timed loop
    # (0.3-0.7 s after a fork from the zygote on the H200 host)
    START_HOLD_S = 3.0

    def __init__(self, role: str, limits: Limits, options: Any, env_extra: dict[str, str] | None = None):
        self.role = role
        self.limits = limits
        self.isolation = Isolation()
        self.gpu = options.resolved_backend() == "cuda"
        # The device lock: never the child's to open (sandbox.devlock); KW_LOCK_DIR tells this
        # parent which folder to hold it in for the child, and goes no further
        env_extra = dict(env_extra or {})
        lock_folder = env_extra.pop("KW_LOCK_DIR", None)
        lock_name = devlock.host_lock_name("cuda" if self.gpu else "cpu") if lock_folder else None
        self.device_hold = devlock.ChildHold(lock_name, lock_folder)
        self._start_hold: _StartHold | None = None
        self.contained = not containment.opted_out()
        if self.contained:
            self.isolation.notes.append(containment.require(self.gpu).detail)
        self._private = Path(tempfile.mkdtemp(prefix=f"kw-{role}-log-"))
        self.log_path = self._private / "output.log"
        self.uid: int | None = None  # the host uid that owns the child's files
        self._kill_uid: int | None = None  # every process of this uid is the child's (never the zygote's)
        client = None
        if getattr(options, "zygote", True):
            from .zygote import get_client

            client = get_client(scrubbed_env(), gpu=self.gpu, contained=self.contained)
        self.workdir = Path(
            tempfile.mkdtemp(prefix=f"kw-{role}-", dir=client.jobs_dir if client and self.contained else None)
        )
        self.inside_root = Path(containment.INSIDE_WORK) if self.contained else self.workdir
        self._choose_uid(options, client)
        if self.uid is not None:
            os.chown(self.workdir, self.uid, self.uid)
        os.chmod(self.workdir, 0o700)
        self.isolation.uid = containment.INSIDE_UID if self.contained else self.uid
        # a contained zygote's child is capped by RLIMIT_NPROC in its own user namespace instead
        self.cgroup = Cgroup(limits.nproc, enabled=not (self.contained and client is not None))
        if self.cgroup.path is not None:
            self.isolation.notes.append("pids cgroup")
        netns = not self.contained and bool(options.network_namespace) and netns_available()
        self.isolation.network_namespace = self.contained or netns
        # one unix socketpair carries both directions (descriptors of sealed memfds ride with the
        # messages, sandbox.shared); the child's end is its KW_FD_IN and KW_FD_OUT
        self._sock, theirs = channel.socketpair()
        self.traffic = channel.Traffic()
        fd = theirs.fileno()
        env = scrubbed_env(self._env(fd, fd, env_extra))
        log = open(self.log_path, "wb")
        # a Popen, or the zygote's forked child (sandbox.zygote.ZygoteProcess), which signals its own tree
        self.proc: Any = None
        if self.gpu and lock_name:
            self._start_hold = _StartHold(lock_name, lock_folder, limits.wall_s, self.START_HOLD_S)
        try:
            if client is not None:
                self.proc = self._spawn_from(client, env, netns, [fd, fd, log.fileno()])
            if self.proc is None:
                self.proc = self._popen(env, log, (fd,), netns)
        except BaseException:
            self._end_holds(close=True)
            raise
        finally:
            log.close()
            theirs.close()
        if self._start_hold is not None:
            self._start_hold.started()
        self.started = time.monotonic()
        self.deadline = self.started + limits.wall_s

    def _end_holds(self, close: bool = False) -> None:
        if self._start_hold is not None:
            self._start_hold.end()
        if close:
            self.device_hold.close()
        else:
            self.device_hold.drop()

    def _choose_uid(self, options: Any, client: Any) -> None:
        if self.contained:
            if client is not None:
                self.uid = client.host_uid  # the zygote's; its children are told apart by namespaces
            else:
                self.uid = self._kill_uid = containment.host_uid_for_sandbox()
            self.isolation.nproc_enforced = True
            if self.gpu and self.uid is not None and not _gpu_devices_world_accessible():
                raise containment.Unavailable(
                    "the NVIDIA device files are not open to other users (mode 0666 needed "
                    "for the sandbox's throwaway uid)"
                )
            return
        gpu_ok = not self.gpu or _gpu_devices_world_accessible()
        if options.drop_privileges and uid_drop_available() and gpu_ok:
            self.uid = self._kill_uid = new_uid()
            self.isolation.nproc_enforced = True
        elif os.geteuid() != 0:
            self.isolation.nproc_enforced = True
        self.isolation.notes.append(containment.status().label)

    def _env(self, fd_in: int, fd_out: int, extra: dict[str, str] | None) -> dict[str, str]:
        inside = str(self.inside_root)
        return {
            "HOME": inside,
            "TMPDIR": inside,
            # a throwaway uid has no passwd entry: getpass.getuser() (inductor, triton) reads these first
            "USER": "kernelwright",
            "LOGNAME": "kernelwright",
            "TORCHINDUCTOR_CACHE_DIR": f"{inside}/.inductor",
            "TRITON_CACHE_DIR": f"{inside}/.triton",
            "PYTHONPATH": str(containment.REPO_ROOT),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "KW_FD_IN": str(fd_in),
            "KW_FD_OUT": str(fd_out),
            "KW_WORKDIR": inside,
            **(extra or {}),
        }

    def _spawn_from(self, client: Any, env: dict[str, str], netns: bool, fds: list[int]) -> Any:
        req = {
            "role": self.role,
            "env": env,
            "cwd": str(self.inside_root),
            "uid": self._kill_uid,
            "netns": netns,
            "limits": dataclasses.asdict(self.limits),
            "cgroup": str(self.cgroup.path) if self.cgroup.path else None,
        }
        if self.contained:
            req.update(uid=None, cgroup=None, job_dir=f"{containment.INSIDE_JOBS}/{self.workdir.name}")
        try:
            proc = client.spawn(req, fds)
        except (OSError, ValueError):
            return None
        self.isolation.notes.append("forked from the zygote")
        return proc

    def _popen(self, env: dict[str, str], log: Any, fds: tuple[int, ...], netns: bool) -> subprocess.Popen:
        argv = [sys.executable, "-m", "sandbox.worker", self.role]
        if not self.contained:
            return subprocess.Popen(
                argv,
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=fds,
                preexec_fn=hardening(self.limits, self._kill_uid, netns, self.cgroup.path),
            )
        filt = containment.seccomp_fd()
        try:
            args = (
                containment.bwrap_args(
                    [(str(self.workdir), containment.INSIDE_WORK)], gpu=self.gpu, seccomp_fd=filt, limits=self.limits
                )
                + argv
            )
            plan = containment.reachable_view(containment.sources_of(args), self.uid) if self.uid is not None else []
            return subprocess.Popen(
                args,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(*fds, filt),
                preexec_fn=containment.preexec(self.uid, plan, hardening(self.limits, None, False, self.cgroup.path)),
            )
        finally:
            os.close(filt)

    def inside(self, host_path: str | Path) -> str:
        """A path under the child's folder as the child sees it."""
        return str(self.inside_root / Path(host_path).relative_to(self.workdir))

    def to_host(self, inside_path: str | Path) -> Path:
        """A path the child reported, under its folder, as this process sees it, resolved. The
        child chose it and this process may be root: `..` or a link that leads out of the
        folder raises ValueError (sandbox.hostfs), never a host path."""
        rel = Path(inside_path).relative_to(self.inside_root)
        if ".." in rel.parts:
            raise ValueError(f"{inside_path} leaves the child's folder")
        real = Path(os.path.realpath(self.workdir / rel))
        if not hostfs.is_within(real, self.workdir):
            raise ValueError(f"{inside_path} resolves outside the child's folder")
        return real

    def write_files(self, files: dict[str, str], subdir: str = "cand") -> Path:
        """Put the candidate's workspace into the child's folder, owned by the child's uid. The
        child already runs: names are plain relative paths and nothing is written through a link
        (sandbox.hostfs); a bad name raises hostfs.Unsafe, text that is not UTF-8 ValueError."""
        base = self.workdir / subdir
        for name, text in files.items():
            hostfs.write_beneath(self.workdir, name if subdir == "." else f"{subdir}/{name}", text.encode())
        self.give_ownership(base)
        return base

    def copy_in(self, src: str, name: str) -> str:
        """Copy a file into the child's folder; returns its path as the child sees it."""
        dest = self.workdir / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        self.give_ownership(dest.parent)
        return self.inside(dest)

    def give_ownership(self, path: Path) -> None:
        if self.uid is None:
            return
        for root, _dirs, files in os.walk(path):
            os.chown(root, self.uid, self.uid)
            for name in files:
                os.chown(os.path.join(root, name), self.uid, self.uid)

    def restart_clock(self, seconds: float | None = None) -> None:
        """A new phase gets the full wall-time limit (the child may have waited on the other)."""
        self.deadline = time.monotonic() + (seconds if seconds is not None else self.limits.wall_s)

    def send(self, obj: Any) -> None:
        """A message to the child; `shared.Handle`s received from the other child are passed on
        as descriptors, large tensors go by sealed memfd (sandbox.channel). The device lock is
        taken for the child first, as the message needs it (devlock.ChildHold), waiting at most
        until the child's deadline: past it the message is not sent, and `recv` times out."""
        try:
            self.device_hold.before_send(obj, self.deadline)
        except devlock.LockTimeout:
            return
        finally:
            if self._start_hold is not None:  # the first message: its own hold (if any) is taken
                self._start_hold.end()
                self._start_hold = None
        try:
            channel.send(self._sock, obj, self.traffic)
        except (BrokenPipeError, OSError) as exc:
            raise channel.ChannelClosed() from exc

    def recv(self, timeout: float | None = None, max_bytes: int = 1 << 33) -> Any:
        """The child's next message; its large tensors stay in the child's sealed memfds and
        arrive as `shared.Handle`s, which the parent forwards without mapping."""
        left = self.deadline - time.monotonic()
        timeout = left if timeout is None else min(timeout, left)
        try:
            if timeout <= 0:
                raise channel.ChannelTimeout()
            reply = channel.recv(self._sock, timeout, max_bytes, traffic=self.traffic, serve_alloc=True)
        except (channel.ChannelTimeout, channel.ChannelClosed, ConnectionResetError) as exc:
            self.device_hold.drop()  # no answer in time, or none to come: the device is not held for it
            if isinstance(exc, ConnectionResetError):
                raise channel.ChannelClosed() from exc
            raise
        self.device_hold.after_reply()
        return reply

    def exit_description(self, wait_s: float = 5.0) -> str:
        """How the child ended, in words (signal names, the file-size limit, ...). Never raises:
        it is called on the error paths of an evaluation, which must end in a result."""
        try:
            return self._exit_description(wait_s)
        except Exception as exc:  # (e.g. a zygote gone since; sandbox.zygote's own paths do not raise)
            return f"ended, but how could not be learned ({type(exc).__name__}: {exc})"

    def _exit_description(self, wait_s: float) -> str:
        try:
            rc = self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = self.proc.wait(timeout=max(wait_s, 30.0))
        lost = getattr(self.proc, "lost", None)
        if lost:  # forked by the zygote, which is gone or unreachable: the child went with it
            return f"ended with the zygote that forked it: {lost}"
        if rc is None:
            return "still running"
        if rc < 0:
            sig = signal.Signals(-rc)
            if sig == signal.SIGXFSZ:
                return f"killed by {sig.name}: wrote more than the {self.limits.fsize_mb} MB output/file limit"
            if sig == signal.SIGXCPU:
                return f"killed by {sig.name}: CPU time limit exceeded"
            if sig == signal.SIGSEGV:
                return f"crashed with {sig.name} (segmentation fault)"
            return f"killed by signal {sig.name}"
        return f"exited with code {rc}"

    def log_tail(self, limit: int = 4000) -> str:
        try:
            size = self.log_path.stat().st_size
            with open(self.log_path, "rb") as f:
                f.seek(max(0, size - limit))
                text = f.read().decode(errors="replace")
            return ("...[output trimmed]...\n" if size > limit else "") + text
        except OSError:
            return ""

    def pause(self, stop: bool = True) -> bool:
        """SIGSTOP (or SIGCONT) every process of this child. The candidate is stopped while the
        reference times the baselines, so nothing it started (a native thread launching
        kernels, say) can slow the baseline it is compared with. False where the signal could
        not be sent (a zygote child whose zygote is gone): a paired window must not go on."""
        sig = signal.SIGSTOP if stop else signal.SIGCONT
        if hasattr(self.proc, "signal_tree"):  # forked by the zygote: it signals what it forked
            return bool(self.proc.signal_tree(sig))
        try:
            os.killpg(self.proc.pid, sig)
        except OSError:
            pass
        pids = set(self.cgroup.pids()) | set(
            _processes_of(self._kill_uid, None if self._kill_uid is not None else self.proc.pid)
        )
        for pid in pids - {os.getpid()}:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        return True

    def kill(self) -> None:
        try:
            if hasattr(self.proc, "signal_tree"):
                self.proc.signal_tree(signal.SIGKILL)
            else:
                kill_all(self.proc.pid, self._kill_uid, self.cgroup)
        except Exception:
            pass
        self._end_holds()

    def close(self) -> None:
        """Always called: kills whatever is left and removes the folders."""
        self._sock.close()
        self.kill()
        self._end_holds(close=True)
        try:
            self.proc.wait(timeout=5)
        except (subprocess.TimeoutExpired, OSError):
            pass
        if self.cgroup.path is not None:
            self.cgroup.remove()
        if os.environ.get("KW_TRACE"):  # the child's phase timestamps, for `python -m sandbox bench --trace`
            for line in self.log_tail(20000).splitlines():
                if line.startswith("[trace"):
                    print(f"{self.role:>9} {line}", file=sys.stderr)
        shutil.rmtree(self.workdir, ignore_errors=True)
        shutil.rmtree(self._private, ignore_errors=True)


def run_command(
    argv: list[str],
    cwd: Path,
    limits: Limits,
    options: Any,
    env_extra: dict[str, str] | None = None,
    with_agent: bool = False,
) -> tuple[int, str, bool]:
    """Run a build command (g++, nvcc) in a sandbox of its own: a crafted #include cannot read
    the evaluator's secrets, and a compiler bomb is cut off. Returns (rc, log, timed_out).
    `cwd` (bound writable at the same path) is handed to the build's uid for the duration.
    with_agent: the `agent` package is visible too (the built-in policy's analysis of a task).
    KW_LOCK_DIR in env_extra (the analysis's eager profile runs on the device): this parent holds
    the device lock shared for the whole run (sandbox.devlock), the command is never told of it."""
    env_extra = dict(env_extra or {})
    lock_folder = env_extra.pop("KW_LOCK_DIR", None)
    gpu = options.resolved_backend() == "cuda"
    hold = devlock.ChildHold(devlock.host_lock_name("cuda" if gpu else "cpu") if lock_folder else None, lock_folder)
    try:
        hold.before_send({}, time.monotonic() + limits.wall_s)
    except devlock.LockTimeout:
        return -9, f"the device stayed busy for {limits.wall_s:.0f} s (another process held its lock)", True
    try:
        return _run_command(argv, cwd, limits, options, env_extra, with_agent)
    finally:
        hold.close()


def _run_command(
    argv: list[str], cwd: Path, limits: Limits, options: Any, env_extra: dict[str, str], with_agent: bool
) -> tuple[int, str, bool]:
    contained = not containment.opted_out()
    gpu = options.resolved_backend() == "cuda"
    if contained:
        containment.require(gpu)
        uid = containment.host_uid_for_sandbox()
    else:
        uid = new_uid() if options.drop_privileges and uid_drop_available() else None
    tmp = Path(tempfile.mkdtemp(prefix="kw-build-tmp-"))

    def chown_tree(path: Path, owner: int, group: int) -> None:
        for root, _dirs, files in os.walk(path):
            os.chown(root, owner, group)
            for name in files:
                os.chown(os.path.join(root, name), owner, group)

    if uid is not None:
        chown_tree(cwd, uid, uid)
        chown_tree(tmp, uid, uid)
    env = scrubbed_env({"HOME": str(tmp), "TMPDIR": str(tmp), **(env_extra or {})})
    netns = not contained and bool(options.network_namespace) and netns_available()
    log_dir = Path(tempfile.mkdtemp(prefix="kw-cmd-log-"))
    cg = Cgroup(limits.nproc)
    log_path = log_dir / "output.log"
    filt = containment.seccomp_fd() if contained else None
    fds: tuple[int, ...]
    try:
        if contained:
            full = (
                containment.bwrap_args(
                    [(str(cwd), str(cwd)), (str(tmp), str(tmp))],
                    gpu=gpu,
                    seccomp_fd=filt,
                    chdir=str(cwd),
                    with_agent=with_agent,
                    limits=limits,
                )
                + argv
            )
            plan = containment.reachable_view(containment.sources_of(full), uid) if uid is not None else []
            assert filt is not None
            pre, fds = containment.preexec(uid, plan, hardening(limits, None, False, cg.path)), (filt,)
        else:
            full, pre, fds = argv, hardening(limits, uid, netns, cg.path), ()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                full,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=fds,
                preexec_fn=pre,
            )
        if filt is not None:
            os.close(filt)
            filt = None
        timed_out = False
        try:
            rc = proc.wait(timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            rc = -9
        kill_all(proc.pid, uid, cg)
        proc.wait()
        with open(log_path, "rb") as f:
            text = f.read(1 << 20).decode(errors="replace")
        if uid is not None:
            chown_tree(cwd, os.geteuid(), os.getegid())
        return rc, text, timed_out
    finally:
        if filt is not None:
            os.close(filt)
        cg.remove()
        shutil.rmtree(log_dir, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


class _StartHold:
    """The device held shared for a CUDA child while it creates its context (Child.START_HOLD_S):
    taken before the child starts (waiting, at most `wait_s`, for another evaluation's timed
    loop to end), released by the first message to the child, a timer, or its end."""

    def __init__(self, name: str, folder: str | None, wait_s: float, hold_s: float):
        self.lock = devlock.DeviceLock(name, folder)
        self.hold_s = hold_s
        self._mutex = threading.Lock()
        self._timer: threading.Timer | None = None
        try:
            self.lock.acquire(deadline_s=wait_s)
        except devlock.LockTimeout:
            pass

    def started(self) -> None:
        with self._mutex:
            if self.lock._held is not None and self._timer is None:
                self._timer = threading.Timer(self.hold_s, self.end)
                self._timer.daemon = True
                self._timer.start()

    def end(self) -> None:
        with self._mutex:
            if self._timer is not None:
                self._timer.cancel()
            self.lock.close()


class Spares:
    """One started child per role, waiting for the next evaluation (cuda backend only).

    A CUDA child spends its first 0.3-0.7 s creating its CUDA context; a spare did that while
    the previous evaluation ran, so it is off the critical path. A spare has run no user code
    and holds nothing of any evaluation: it is a blank worker (its own uid and folder) that
    serves exactly one evaluation, like a child started on demand. It is used only if it was
    started with the same limits, environment and isolation options, is still alive and has
    not idled longer than MAX_IDLE_S (it holds a CUDA context's memory meanwhile)."""

    MAX_IDLE_S = 120.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spare: dict[str, tuple[Any, Child, float]] = {}
        atexit.register(self.clear)

    @staticmethod
    def _key(role: str, limits: Limits, options: Any, env: dict[str, str]) -> Any:
        return (
            role,
            repr(limits),
            tuple(sorted(env.items())),
            bool(options.drop_privileges),
            bool(options.network_namespace),
            bool(getattr(options, "zygote", True)),
            os.environ.get("CUDA_VISIBLE_DEVICES"),
        )

    def take(self, role: str, limits: Limits, options: Any, env: dict[str, str]) -> Child:
        """A spare when one fits, else a new child; then a spare is started for the next one."""
        key = self._key(role, limits, options, env)
        with self._lock:
            entry = self._spare.pop(role, None)
        child = None
        if entry is not None:
            old_key, spare, born = entry
            if old_key == key and time.monotonic() - born < self.MAX_IDLE_S and spare.proc.poll() is None:
                child = spare
                child.isolation.notes.append("started ahead as a spare")
                child.restart_clock()
            else:
                spare.close()
        if child is None:
            child = Child(role, limits, options, env)
        new = Child(role, limits, options, env)
        with self._lock:
            replaced = self._spare.get(role)
            self._spare[role] = (key, new, time.monotonic())
        if replaced is not None:
            replaced[1].close()
        return child

    def clear(self) -> None:
        with self._lock:
            entries, self._spare = list(self._spare.values()), {}
        for _, child, _ in entries:
            try:
                child.close()
            except Exception:  # at interpreter exit the zygote may be gone already
                pass


SPARES = Spares()


def start_child(role: str, limits: Limits, options: Any, env: dict[str, str]) -> Child:
    """The evaluation's children: spares on the cuda backend, a child started now otherwise
    (KERNELWRIGHT_SPARES=0 or 1 turns spares off or on for every backend)."""
    wanted = os.environ.get("KERNELWRIGHT_SPARES", "1" if env.get("KW_BACKEND") == "cuda" else "0")
    if wanted == "1":
        return SPARES.take(role, limits, options, env)
    return Child(role, limits, options, env)
