"""ptrace, process_vm_readv/writev, bpf, keyctl/add_key, chroot, unshare (each namespace), mount
and setns (every namespace of PID 1 and the parent), called through ctypes syscall(): all fail.
The report maps each call to [return value, errno name]."""

from __future__ import annotations

import pytest

from tests.sandbox.test_isolation import assert_next_evaluation_works

from .support import SIDES, evaluate_hostile

NAMES = {
    "tr": "ptrace(PTRACE_SEIZE)",
    "vr": "process_vm_readv",
    "vw": "process_vm_writev",
    "bp": "bpf(BPF_MAP_CREATE)",
    "kc": "keyctl(KEYCTL_GET_KEYRING_ID)",
    "ak": "add_key",
    "cr": "chroot",
    "us": "unshare",
    "sn": "setns",
    "mount": "mount",
}


def _succeeded(rep: dict) -> dict[str, list]:
    return {k: v for k, v in rep.items() if isinstance(v, list) and len(v) == 2 and v[0] != -1}


def _named(calls: dict) -> list[str]:
    return [f"{NAMES.get(k.split(':')[0], k)} {k}: {v}" for k, v in calls.items()]


@pytest.mark.parametrize("side", SIDES)
def test_privileged_syscalls_fail(quick, cfg, side):
    res, rep = evaluate_hostile(quick, side, "syscalls", cfg)
    for key in ("bp", "kc", "ak", "vr:self", "us:user", "us:mnt", "mount:mn"):
        assert key in rep, f"the battery did not get to {key}: {rep}"
    ok = _succeeded(rep)
    assert not ok, f"these calls succeeded in the {side}: " + "; ".join(_named(ok))
    assert_next_evaluation_works(quick)
