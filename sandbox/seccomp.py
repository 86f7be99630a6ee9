"""The seccomp filter of every sandboxed process: a classic-BPF denylist of the system calls that
reach other processes, the kernel's key store, namespaces and mounts.

Why written here rather than through libseccomp: the filter is about forty instructions, the
Python bindings of libseccomp are not on PyPI (Debian ships them for its own Python only), and
bubblewrap takes a compiled program on a file descriptor (`--seccomp FD`), which is exactly
what `program()` returns. The rules are data (`DENIED`, `NAMESPACE_FLAGS`), checked by
tests/sandbox/test_containment.py on the running kernel.

A second, smaller filter (`scheduling_program`) is stacked on a child that the evaluation confines
to some CPUs (sandbox.limits.Limits.cpus): it refuses the calls that would move the child's
threads elsewhere or change their scheduling (`SCHEDULING`, EPERM, so a library that tries only
loses the request). It is installed after the child's CPUs are set, and the harness's own pinning
of its timed thread needs no call there (sandbox.timing.pinned: the child is on that CPU already).

What the profiler needs keeps working: torch.profiler's CUDA path is CUPTI, which talks to the
driver through ioctl on /dev/nvidia*, never through ptrace, perf_event_open or bpf.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

# seccomp_data offsets: nr (u32), arch (u32), instruction_pointer (u64), args[6] (u64 each)
_NR, _ARCH, _ARG0 = 0, 4, 16

_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000

# clone() flags that create namespaces; clone3 is refused outright (ENOSYS makes glibc fall back
# to clone, whose flags a classic filter can read; clone3 passes them in memory it cannot).
NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

# Denied with EPERM. Names, so the list reads as a policy; numbers per architecture below.
DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    "process_madvise",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "open_by_handle_at",
    "name_to_handle_at",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "syslog",
    "quotactl",
    "sethostname",
    "setdomainname",
    "vhangup",
    "lookup_dcookie",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
)
# Denied (EPERM) by the scheduling filter: moving threads to other CPUs, changing policy or priority.
SCHEDULING = ("sched_setaffinity", "sched_setscheduler", "sched_setattr", "sched_setparam")
# A process that must still create the per-child namespaces (the zygote) is filtered without these.
NAMESPACE_CALLS = ("unshare", "setns", "mount", "umount2", "pivot_root")

_ARCHES = {
    # AUDIT_ARCH_X86_64, the x32 bit, and the numbers of arch/x86/entry/syscalls/syscall_64.tbl
    "x86_64": (
        0xC000003E,
        0x40000000,
        {
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "pidfd_getfd": 438,
            "kcmp": 312,
            "process_madvise": 440,
            "bpf": 321,
            "perf_event_open": 298,
            "userfaultfd": 323,
            "keyctl": 250,
            "add_key": 248,
            "request_key": 249,
            "unshare": 272,
            "setns": 308,
            "mount": 165,
            "umount2": 166,
            "pivot_root": 155,
            "chroot": 161,
            "open_tree": 428,
            "move_mount": 429,
            "fsopen": 430,
            "fsconfig": 431,
            "fsmount": 432,
            "fspick": 433,
            "mount_setattr": 442,
            "open_by_handle_at": 304,
            "name_to_handle_at": 303,
            "kexec_load": 246,
            "kexec_file_load": 320,
            "init_module": 175,
            "finit_module": 313,
            "delete_module": 176,
            "swapon": 167,
            "swapoff": 168,
            "reboot": 169,
            "acct": 163,
            "syslog": 103,
            "quotactl": 179,
            "sethostname": 170,
            "setdomainname": 171,
            "vhangup": 153,
            "lookup_dcookie": 212,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "clone": 56,
            "clone3": 435,
            "sched_setaffinity": 203,
            "sched_setscheduler": 144,
            "sched_setattr": 314,
            "sched_setparam": 142,
        },
    ),
    # AUDIT_ARCH_AARCH64 and the generic table (include/uapi/asm-generic/unistd.h)
    "aarch64": (
        0xC00000B7,
        None,
        {
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "pidfd_getfd": 438,
            "kcmp": 272,
            "process_madvise": 440,
            "bpf": 280,
            "perf_event_open": 241,
            "userfaultfd": 282,
            "keyctl": 219,
            "add_key": 217,
            "request_key": 218,
            "unshare": 97,
            "setns": 268,
            "mount": 40,
            "umount2": 39,
            "pivot_root": 41,
            "chroot": 51,
            "open_tree": 428,
            "move_mount": 429,
            "fsopen": 430,
            "fsconfig": 431,
            "fsmount": 432,
            "fspick": 433,
            "mount_setattr": 442,
            "open_by_handle_at": 265,
            "name_to_handle_at": 264,
            "kexec_load": 104,
            "kexec_file_load": 294,
            "init_module": 105,
            "finit_module": 273,
            "delete_module": 106,
            "swapon": 224,
            "swapoff": 225,
            "reboot": 142,
            "acct": 89,
            "syslog": 116,
            "quotactl": 60,
            "sethostname": 161,
            "setdomainname": 162,
            "vhangup": 58,
            "lookup_dcookie": 18,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "clone": 220,
            "clone3": 435,
            "sched_setaffinity": 122,
            "sched_setscheduler": 119,
            "sched_setattr": 274,
            "sched_setparam": 118,
        },
    ),
}


def supported() -> bool:
    return platform.machine() in _ARCHES


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def _prologue(arch: int, x32_bit: int | None, deny: bytes) -> list[bytes]:
    """Another ABI (i386 through int 0x80) or x32 numbers: refused; else the number loaded."""
    body = [_ins(_LD_W_ABS, _ARCH), _ins(_JEQ_K, arch, jt=1, jf=0), deny, _ins(_LD_W_ABS, _NR)]
    if x32_bit is not None:
        body += [_ins(_JGE_K, x32_bit, jt=0, jf=1), deny]
    return body


def scheduling_program() -> bytes:
    """The filter stacked on a child confined to its CPUs: `SCHEDULING` refused with EPERM."""
    arch, x32_bit, numbers = _ARCHES[platform.machine()]
    deny = _ins(_RET_K, RET_ERRNO | errno.EPERM)
    body = _prologue(arch, x32_bit, deny)
    for name in SCHEDULING:
        body += [_ins(_JEQ_K, numbers[name], jt=0, jf=1), deny]
    body.append(_ins(_RET_K, RET_ALLOW))
    return b"".join(body)


def program(allow_namespaces: bool = False) -> bytes:
    """The filter as raw `struct sock_filter` entries (what bwrap --seccomp and prctl take).
    allow_namespaces: the zygote's filter, which must still unshare and mount for its children."""
    arch, x32_bit, numbers = _ARCHES[platform.machine()]
    denied = [n for n in DENIED if not (allow_namespaces and n in NAMESPACE_CALLS)]
    deny = _ins(_RET_K, RET_ERRNO | errno.EPERM)
    body = _prologue(arch, x32_bit, deny)
    for name in denied:
        body += [_ins(_JEQ_K, numbers[name], jt=0, jf=1), deny]
    if not allow_namespaces:
        body += [_ins(_JEQ_K, numbers["clone3"], jt=0, jf=1), _ins(_RET_K, RET_ERRNO | errno.ENOSYS)]
        body += [
            _ins(_JEQ_K, numbers["clone"], jt=0, jf=3),
            _ins(_LD_W_ABS, _ARG0),  # low 32 bits of the flags (little endian)
            _ins(_JSET_K, NAMESPACE_FLAGS, jt=0, jf=1),
            deny,
        ]
    body.append(_ins(_RET_K, RET_ALLOW))
    return b"".join(body)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


def install(allow_namespaces: bool = False, prog: bytes | None = None) -> None:
    """Filter the calling thread (and everything it starts) from now on with `prog` (default: the
    full filter); raises OSError if the kernel refuses. no_new_privs first: required for an
    unprivileged filter, and it stops setuid binaries from regaining anything."""
    libc = ctypes.CDLL(None, use_errno=True)
    prog = program(allow_namespaces) if prog is None else prog
    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = _SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")
