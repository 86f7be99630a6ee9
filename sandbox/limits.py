"""A child's resource limits and the hardening applied in it before it runs anything: one home
for both, used by the evaluator's children (sandbox.isolation) and the zygote's (sandbox.zygote)."""

from __future__ import annotations

import os
import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import containment


@dataclass
class Limits:
    wall_s: float = 300.0
    cpu_s: int | None = None
    fsize_mb: int = 64
    nproc: int = 4096
    address_space_mb: int | None = None
    nofile: int = 4096


def hardening(limits: Limits, uid: int | None, netns: bool, cgroup: Path | None = None) -> Callable[[], None]:
    """The hardening run in a new child between fork and exec (or in a zygote's forked child):
    its own session and cgroup, a network namespace where probed available, the rlimits, and a
    throwaway uid when one is given."""

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

    return setup
