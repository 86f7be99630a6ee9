"""A child's resource limits and the hardening applied in it before it runs anything: one home
for both, used by the evaluator's children (sandbox.isolation) and the zygote's (sandbox.zygote).

What the host shares and what bounds each (docs/security.md, "Resources"):
- CPU time and processes: RLIMIT_CPU, RLIMIT_NPROC (a pids cgroup where one is available);
- memory: RLIMIT_AS on the cpu backend, and the private tmpfs of /tmp and /dev/shm, whose pages
  RLIMIT_AS does not count, sized (`tmpfs_mb` each; sandbox.containment);
- disk: RLIMIT_FSIZE per file, and the child's own folder in total (`work_mb`, `work_entries`;
  sandbox.workguard);
- CPUs: `cpus`, where the evaluation fixes which ones the child may use (`cpus_for`): the whole
  child is confined to them before any user code runs and may not move off them.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import containment


def _env_mb(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        mb = int(value)
    except ValueError:
        raise ValueError(f"{name} must be a whole number of MB, got {value!r}") from None
    if mb < 1:
        raise ValueError(f"{name} must be at least 1 MB, got {mb}")
    return mb


def default_tmpfs_mb() -> int:
    """Each private tmpfs of a sandbox (/tmp, /dev/shm): 256 MB, or KERNELWRIGHT_TMPFS_MB. The
    children's temporary files go to their own folder (TMPDIR), so /tmp and /dev/shm hold little."""
    return _env_mb("KERNELWRIGHT_TMPFS_MB", 256)


def default_work_mb() -> int:
    """A sandbox's own folder, in total: 1024 MB, or KERNELWRIGHT_WORK_MB. It holds the candidate's
    files and built library, torch.compile's and triton's caches, a load_inline build."""
    return _env_mb("KERNELWRIGHT_WORK_MB", 1024)


@dataclass
class Limits:
    wall_s: float = 300.0
    cpu_s: int | None = None
    fsize_mb: int = 64
    nproc: int = 4096
    address_space_mb: int | None = None
    nofile: int = 4096
    tmpfs_mb: int = field(default_factory=default_tmpfs_mb)  # each of /tmp and /dev/shm
    work_mb: int = field(default_factory=default_work_mb)  # the child's own folder, in total
    work_entries: int = 20000  # names in the child's own folder
    cpus: list[int] | None = None  # the only CPUs the child may run on (None: the evaluator's)


def cpus_for(options: Any, backend: str) -> list[int] | None:
    """The CPUs an evaluation child gets on the cpu backend: as many as the evaluation's thread
    count, so a candidate that starts more threads (or moves them) than the baseline had gets no
    more CPUs than the baseline. With one thread, the CPU the timed loops are pinned to
    (protocol._window_cpu: the timing CPU, else this process's last CPU), so the child is
    confined exactly where the harness pins and the pin needs no call (timing.pinned). Else the
    last `threads` CPUs of this process. None on cuda, and with a timing CPU and more than one
    thread: there the harness narrows its timed thread itself, which a confined child could not."""
    if backend != "cpu":
        return None
    allowed = sorted(os.sched_getaffinity(0))
    threads = options.threads()
    timing_cpu = getattr(options, "timing_cpu", None)
    if timing_cpu is not None:
        return [timing_cpu] if threads == 1 else None
    return allowed[-threads:] if threads < len(allowed) else allowed


def confine(cpus: list[int]) -> None:
    """This process (single-threaded: every thread and child it starts inherits it) on `cpus`
    only, then the scheduling calls refused (seccomp.scheduling_program), so nothing it runs can
    move back off them."""
    from . import seccomp

    os.sched_setaffinity(0, cpus)
    seccomp.install(prog=seccomp.scheduling_program())


def hardening(limits: Limits, uid: int | None, netns: bool, cgroup: Path | None = None) -> Callable[[], None]:
    """The hardening run in a new child between fork and exec (or in a zygote's forked child):
    its own session and cgroup, a network namespace where probed available, the rlimits, a
    throwaway uid when one is given, and last its CPUs (`confine`)."""

    def setup() -> None:
        os.setsid()
        if cgroup is not None:
            with open(cgroup / "cgroup.procs", "w") as f:
                f.write(str(os.getpid()))
        if netns:
            flags = (
                containment.CLONE_NEWNET
                if os.geteuid() == 0
                else (containment.CLONE_NEWUSER | containment.CLONE_NEWNET)
            )
            containment._libc.unshare(flags)  # probed beforehand; a failure here leaves the host network
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        fsize = limits.fsize_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.nofile, limits.nofile))
        if limits.cpu_s:
            resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 5))
        if limits.address_space_mb:
            size = limits.address_space_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (size, size))
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.nproc, limits.nproc))
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        if limits.cpus:
            confine(limits.cpus)

    return setup
